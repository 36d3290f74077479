"""seqmix's whole-model API (``seqmix.build``, ``load``, ``train``, ``from_pretrained``,
``Model``); ``import seqmix`` exposes it. Internal module: it needs the extension."""
from __future__ import annotations

import collections.abc
import json
import math
import os
import tomllib
import warnings

import torch

from typing import Any, Dict, List, Optional, Union

from . import nn as _nn
from ._ext import _C
from ._pretrained import read_pretrained, tokenizer_file, write_pretrained

Tokenizer = _C.Tokenizer
Tokenizer.__doc__ = """A seqmix tokenizer: bytes (vocabulary 256) or a SentencePiece model.
encode(str) -> list[int]; decode(list[int]) -> str; vocab_size; name; is_bytes."""


_INT64_MAX = 2 ** 63 - 1


def _int(name, value, low=0, high=_INT64_MAX):
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name}: expected an int in [{low}, {high}], got {value!r}")
    return value


def _float(name, value, low, high, low_open=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        (low < value if low_open else low <= value) and value <= high
    if not ok:
        interval = ("(" if low_open else "[") + f"{low}, {high}]"
        raise ValueError(f"{name}: expected a number in {interval}, got {value!r}")
    return float(value)


def _path(name, value):
    """os.fspath(value), or TypeError naming the argument (os.fspath's own message does not)."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name}: expected a path (str or os.PathLike), got "
                        f"{type(value).__name__}")
    return os.fspath(value)


def _bool(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def _autocast(precision):
    """torch.autocast for a run's precision: bfloat16 CPU autocast for "bf16" (the recipe of
    train.precision, include/seqmix/nn/precision.h), nothing for "fp32"."""
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision: expected 'fp32' or 'bf16', got {precision!r}")
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


# The library names its parameters in backquotes (`resume`, `out_dir`); these are the
# names and values the Python calls take instead. Configuration keys (train.lr) are named
# alike everywhere.
_PYTHON_WORDS = {"`resume`": "resume=True", "`overwrite`": "overwrite=True",
                 "`allow_data_change`": "allow_data_change=True", "`out_dir`": "out",
                 "`out_file`": "file", "`config_path`": "config"}


# util/device.h words it the same way.
_NO_CUDA_KERNELS = ("this seqmix was built without its CUDA kernels (CMake SEQMIX_CUDA=off, or "
                    "no nvcc or no CUDA PyTorch when it was built: docs/CUDA.md)")


def _device(device, name="device"):
    """``device`` (a str or torch.device) as train.device names it: 'cpu', 'cuda' or
    'cuda:N'. ValueError for anything else; RuntimeError for a CUDA device this machine
    lacks, as the command line words it."""
    if isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError:
            dev = None
    elif isinstance(device, torch.device):
        dev = device
    else:
        raise TypeError(f"{name}: expected a str or torch.device, got {type(device).__name__}")
    if dev is None or dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index):
        raise ValueError(f"{name}: must be 'cpu', 'cuda' or 'cuda:N' (N a GPU index), "
                         f"got {str(device)!r}")
    if dev.type == "cpu":
        return "cpu"
    text = "cuda" if dev.index is None else f"cuda:{dev.index}"
    if not torch.cuda.is_available():
        raise RuntimeError(f"{name} = {text!r} but no CUDA device is available "
                           "(torch.cuda.is_available() is false); use 'cpu'")
    count = torch.cuda.device_count()
    if (dev.index or 0) >= count:
        raise RuntimeError(f"{name} = {text!r} but this machine has {count} CUDA "
                           f"device{'' if count == 1 else 's'}")
    from ._ext import _C
    if not _C.CUDA_KERNELS:
        raise RuntimeError(f"{name} = {text!r} but {_NO_CUDA_KERNELS}")
    return text


def _python_words(message):
    for library, python in _PYTHON_WORDS.items():
        message = message.replace(library, python)
    return message


def _toml_string(text):
    # A TOML basic string: JSON's string syntax is TOML's, escapes included.
    return json.dumps(text, ensure_ascii=False)


def _override(key, value):
    """One ``section.key=value`` override as the command line's --set spells it. Strings are
    quoted, so that a string that looks like a number or a bool ("123", "true") stays one."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = _toml_string(value)
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_override("x", v).split("=", 1)[1] for v in value) + "]"
    else:
        raise TypeError(f"{key}: expected a bool, number, string or list, "
                        f"got {type(value).__name__}")
    return f"{key}={text}"


def _overrides(overrides):
    # model keys by their bare names (d_model=128), a mixer section as a dict
    # (aib={"weights": "exp"}), anything else by its dotted name (**{"train.lr": 1e-3}).
    out = []
    for key, value in overrides.items():
        if "." in key:
            dotted = key if key.split(".", 1)[0] in ("model", "data", "train") else "model." + key
            out.append(_override(dotted, value))
        elif isinstance(value, dict):
            for k, v in value.items():
                out.append(_override(f"model.{key}.{k}", v))
        else:
            out.append(_override("model." + key, value))
    return out


def _cpp_state(handle, prefix=""):
    """A C++ module's parameters and buffers at every depth, named as state_dict() names
    them."""
    out = {}
    for name, t in handle.named_parameters():
        out[prefix + name] = t
    for name, t in handle.named_buffers():
        out[prefix + name] = t
    for name, child in handle.named_children():
        out.update(_cpp_state(child, f"{prefix}{name}."))
    return out


def _sample_next(logits, temperature, top_k, top_p, generator):
    """The next token of each row of logits [B, V]: generate/sampler.cpp's sample_next, op
    for op, so that the same seed draws the same tokens as ``seqmix generate``."""
    logits = logits.float()
    if not bool(torch.isfinite(logits).all()):
        raise RuntimeError("generate: the model's logits are not finite; the weights produce "
                           "NaN or inf")
    if temperature == 0:
        return logits.argmax(-1)
    scaled = logits / temperature
    if not bool(torch.isfinite(scaled).all()):  # a temperature so small it is greedy
        return logits.argmax(-1)
    logits = scaled
    V = logits.shape[-1]
    if 0 < top_k < V:
        kth = logits.topk(top_k, -1).values[..., top_k - 1:top_k]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits, -1)
    if top_p < 1:
        sorted_probs, idx = probs.sort(-1, descending=True)
        # Drop a token once the tokens ranked above it reach top_p; the first always stays.
        drop = (sorted_probs.cumsum(-1) - sorted_probs) >= top_p
        drop[..., 0] = False
        sorted_probs = sorted_probs.masked_fill(drop, 0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_probs)
    return torch.multinomial(probs, 1, False, generator=generator).squeeze(-1)


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"configuration value {value!r} is not finite")
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"configuration value {value!r}: expected a bool, number, string or list")


def _to_toml(config, prefix=""):
    """A configuration dict of sections as TOML text (what RunConfig.from_toml reads)."""
    lines, tables = [], []
    for key, value in config.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in tables:
        lines.append(f"[{prefix}{key}]")
        lines.append(_to_toml(value, f"{prefix}{key}."))
    return "\n".join(lines)


class Model(_nn.SequenceModel):
    """A seqmix model (models/sequence_model.h) with its run's configuration and tokenizer:
    a ``seqmix.nn.SequenceModel`` (an ordinary nn.Module owning its parameters, names and
    initialisation as in C++) plus what the command line needs to evaluate, generate from,
    save and continue it.

    Attributes:
        config: the resolved configuration as a dict of sections (``model``, ``data``,
            ``train``), as ``config.toml`` of a run holds it.
        tokenizer: the run's Tokenizer (bytes or SentencePiece).

    forward(tokens [B, L] int64, mask=None, *, key_padding_mask=None) -> logits
    [B, L, vocab_size]; ``mask`` True = valid, ``key_padding_mask`` True = padding.
    Raises ValueError for L > max_len or a bad mask, IndexError naming model.vocab_size
    for a token out of range.
    """

    def __init__(self, run_config, tokenizer):
        config = tomllib.loads(run_config.to_toml())
        super().__init__(config["model"])
        self._run_config = run_config
        self.tokenizer = tokenizer

    @property
    def config(self):
        return tomllib.loads(self._run_config.to_toml())

    # Pickling, deepcopy and torch.save(model): the C++ configuration and tokenizer travel
    # as their text and bytes.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_run_config"] = self._run_config.to_toml()
        tok = state.pop("tokenizer")
        state["_tokenizer_proto"] = None if tok.is_bytes else tok.serialized()
        return state

    def __setstate__(self, state):
        state = dict(state)
        state["_run_config"] = _C.RunConfig.from_toml(state["_run_config"], "pickled model")
        proto = state.pop("_tokenizer_proto")
        state["tokenizer"] = (_C.Tokenizer.bytes() if proto is None else
                              _C.Tokenizer.from_serialized(proto, "pickled model"))
        self.__dict__.update(state)

    def _cpp_twin(self, what="model"):
        """The C++ model of this configuration holding a copy of this model's weights, for
        the library's evaluation and run folders (checked as ``seqmix import`` checks)."""
        with torch.random.fork_rng(devices=[]):
            cpp = _C.model_from_config(self._run_config)
        state = [(k, v.detach().to("cpu")) for k, v in self.state_dict().items()]
        _C.load_state_dict(cpp, state, what)
        cpp.train(self.training)
        return cpp

    @property
    def precision(self):
        """The run's train.precision, "fp32" or "bf16": what generate() and evaluate() use
        unless told otherwise. For your own forward passes in bf16, wrap them in
        ``torch.autocast("cpu", dtype=torch.bfloat16)``."""
        return self.config["train"].get("precision", "fp32")

    @torch.no_grad()
    def generate(self, prompt: Union[str, List[int], torch.Tensor], max_new_tokens: int = 256,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 precision: Optional[str] = None) -> Union[str, List[int]]:
        """Samples a continuation with incremental decoding: ``init_state`` and ``step``
        of every mixer, in eval mode; the sampler of ``seqmix generate`` (temperature, then
        top-k, then nucleus), drawing from ``torch.Generator().manual_seed(seed)``, so the
        same weights and seed give the same text as the command line.

        Args:
            prompt: text (str, encoded with the model's tokenizer; "" is a line break) or
                token ids (a list of int or a 1-D int tensor).
            max_new_tokens: tokens to generate (>= 0).
            temperature: 0 = greedy; top_k: keep the k most likely (0 = all); top_p: nucleus
                sampling threshold in (0, 1]; seed: the sampler's seed (0 .. 2^63 - 1).
            precision: "fp32" or "bf16" (default: the run's train.precision).

        Returns:
            str for a text prompt (invalid UTF-8 at a byte-level model's cut is replaced by
            U+FFFD), else the list of new token ids.

        Raises:
            ValueError naming the argument, or for an encoder or classifier; TypeError for
            a prompt that is neither text nor token ids.
        """
        _int("max_new_tokens", max_new_tokens, 0, _C.MAX_NEW_TOKENS)
        _int("seed", seed, 0, 2 ** 63 - 1)  # as the CLI's --seed (a 64-bit integer)
        _int("top_k", top_k)
        _float("temperature", temperature, 0.0, 1.7976931348623157e308)  # finite
        _float("top_p", top_p, 0.0, 1.0, low_open=True)
        autocast = _autocast(self.precision if precision is None else precision)
        model = self.config["model"]
        if not model["causal"]:
            raise ValueError("generate: the model is an encoder (model.causal = false); "
                             "it cannot decode step by step")
        if model.get("n_classes", 0) > 0:
            raise ValueError(f"generate: the model is a classifier (model.n_classes = "
                               f"{model['n_classes']}); generation needs a language model")
        text = isinstance(prompt, str)
        if text:
            try:
                prompt.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"prompt: not encodable as UTF-8 text ({e.reason} at "
                                 f"character {e.start}: a lone surrogate)") from None
            ids = self.tokenizer.encode(prompt if prompt else "\n")
            unit = "bytes" if self.tokenizer.is_bytes else "tokens"
        else:
            if isinstance(prompt, torch.Tensor):
                if prompt.dim() != 1 or prompt.dtype.is_floating_point:
                    raise ValueError("prompt: expected a 1-D integer tensor of token ids, got "
                                     f"shape {list(prompt.shape)} dtype {prompt.dtype}")
                prompt = prompt.tolist()
            if not isinstance(prompt, (list, tuple)) or not all(
                    isinstance(t, int) and not isinstance(t, bool) for t in prompt):
                raise TypeError("prompt: expected a str or a list of token ids")
            if not prompt:
                raise ValueError("prompt: holds no tokens")
            for t in prompt:
                if not 0 <= t < self.vocab_size:
                    raise ValueError(f"prompt: token id {t} is outside the model's vocabulary "
                                     f"[0, {self.vocab_size})")
            ids, unit = list(prompt), "tokens"
        if len(ids) > self.max_len:
            warnings.warn(f"the prompt is {len(ids)} {unit}, longer than the model's max_len "
                          f"({self.max_len}): the model sees its last {self.max_len} only",
                          stacklevel=2)
        out = self._decode(ids, max_new_tokens, float(temperature), top_k, float(top_p),
                           seed, autocast)
        return self.tokenizer.decode(out) if text else out

    def _decode(self, ids, max_new_tokens, temperature, top_k, top_p, seed, autocast):
        # generate/sampler.cpp's loop: prime with the context's tail that fits, then one
        # step per token; at max_len restart from the last half window.
        generator = torch.Generator().manual_seed(seed)
        was_training = self.training
        self.eval()
        device = self.tok_emb.weight.device
        try:
            with autocast:
                context = ids[-self.max_len:]
                states = self.init_state(1)

                def feed(tokens):
                    logits = None
                    for t in tokens:
                        logits = self.step(torch.tensor([t], device=device), states)
                    return logits

                logits = feed(context)
                out = []
                for _ in range(max_new_tokens):
                    token = int(_sample_next(logits.cpu(), temperature, top_k, top_p,
                                             generator))
                    out.append(token)
                    context.append(token)
                    if states[0].pos >= self.max_len:
                        context = context[-max(1, self.max_len // 2):]
                        states = self.init_state(1)
                        logits = feed(context)
                    else:
                        logits = feed(context[-1:])
                return out
        finally:
            self.train(was_training)

    @torch.no_grad()
    def evaluate(self, data: Optional[Union[str, os.PathLike]] = None, *,
                 split: Optional[str] = None, batch_size: Optional[int] = None,
                 precision: Optional[str] = None) -> Dict[str, Any]:
        """``seqmix eval`` on this model: the held-out split of the configuration's corpus
        (or ``data``, a corpus name or text file, ``split`` 'valid' or 'test'), scored with the
        training objective over non-overlapping windows of max_len, in ``precision`` ("fp32"
        or "bf16"; default: the run's train.precision), by the library's evaluator on a
        copy of the weights, on the model's device.

        Returns:
            dict with split, loss (nats per token), perplexity, bpc (bits per byte of text),
            tokens, bytes, seconds.
        """
        if batch_size is None:
            batch_size = self.config["train"]["batch_size"]
        _int("batch_size", batch_size, 1)
        if data is not None and not isinstance(data, (str, os.PathLike)):
            raise TypeError(f"data: expected a corpus name or path, got {type(data).__name__}")
        if split is not None and split not in ("valid", "test"):
            raise ValueError(f"split: expected 'valid' or 'test', got {split!r}")
        autocast = _autocast(self.precision if precision is None else precision)
        cpp = self._cpp_twin()
        cpp.train(False)
        with autocast:
            return _C.evaluate(cpp, self._run_config, self.tokenizer,
                               os.fspath(data) if data is not None else "", split or "",
                               batch_size, str(self.tok_emb.weight.device))

    def save(self, run_dir: Union[str, os.PathLike], *, step: int = 0,
             overwrite: bool = False) -> None:
        """Writes a run folder (checkpoint.pt and config.toml) that the command line reads:
        ``seqmix eval RUN``, ``seqmix generate RUN``, and ``seqmix train --out RUN --resume
        --max-steps N`` (which continues from ``step`` with a fresh AdamW state: an optimiser's
        moments from Python are not carried over).

        A folder that already holds a run is refused unless ``overwrite``; the checkpoint is
        written atomically. Runs train in float32: float64 weights are stored rounded to
        float32. Raises RuntimeError / ValueError naming the folder or tensor on failure.
        """
        _int("step", step)
        _bool("overwrite", overwrite)
        try:
            _C.save_run(os.fspath(run_dir), self._cpp_twin(), self._run_config, self.tokenizer,
                        step, overwrite)
        except (RuntimeError, ValueError) as e:
            raise type(e)(_python_words(str(e))) from None

    def save_pretrained(self, save_directory: Union[str, os.PathLike], *,
                        overwrite: bool = False) -> None:
        """Writes the Hugging Face layout: ``config.json`` (model_type "seqmix", the
        resolved configuration under "seqmix"), ``model.safetensors`` (the state dict) and,
        for SentencePiece models, ``tokenizer.model``; read back by
        ``seqmix.from_pretrained``, ``seqmix.reference.from_pretrained``,
        ``seqmix import DIR`` and, with ``import seqmix.hf``, transformers'
        ``AutoModelForCausalLM.from_pretrained``. The folder is written whole or not at all;
        an existing non-empty folder is replaced only with ``overwrite``, a run folder never.
        """
        _bool("overwrite", overwrite)
        tok = None if self.tokenizer.is_bytes else self.tokenizer.serialized()
        # Stored as a run stores them: float32 (float64 kept, exact), so that every reader,
        # `seqmix import` included, takes the folder; bfloat16 / float16 weights widen.
        state = {k: v.float() if v.is_floating_point() and v.dtype != torch.float64 else v
                 for k, v in self.state_dict().items()}
        write_pretrained(save_directory, self.config, state, tokenizer_model=tok,
                         version=_C.__version__, overwrite=overwrite)


def build(preset: str = "weird-net", size: Optional[str] = None, *, task: Optional[str] = None,
          config: Optional[Union[str, os.PathLike]] = None,
          tokenizer: Optional[Union[str, os.PathLike]] = None, seed: Optional[int] = None,
          device: Optional[Union[str, torch.device]] = None, **overrides: Any) -> Model:
    """A new, randomly initialised model, configured as ``seqmix train`` would configure it:
    the preset, then ``size``, then a TOML file (``config``), then the tokenizer, then the
    overrides.

    Args:
        preset: a model preset (``seqmix info`` lists them): 'weird-net', 'weird-net-a',
            'moss', 'transformer', 'extractor-transformer', 'transformer-plain',
            'etsmlp-lm', 'etsmlp-gate-lm', 'etsmlp', 'etsmlp-gate', ...
        size: 'tiny', 'mini', 'base', 'small', 'medium', 'large', 'table1' or None (the
            preset's default); with a task, 'cpu' or 'paper'.
        task: a classification task ('listops', 'text', 'retrieval', 'image', 'pathfinder',
            'pathx'; docs/TASKS.md) or None for language modelling: the model gets the task's
            vocabulary, length and classification head, as ``seqmix train --task`` does.
        config: path of a TOML configuration file, or None.
        tokenizer: 'bytes' (default) or a SentencePiece model file; sets vocab_size.
        seed: seeds torch's generator before the weights are drawn and sets ``train.seed``
            (as ``seqmix train --seed`` does); None draws from the generator's current state.
        device: 'cpu', 'cuda', 'cuda:N' or a torch.device: the weights are drawn on the CPU
            (the same for a seed on any device), then moved there; sets ``train.device``.
            None: the CPU (or the configuration's train.device when it names one).
        overrides: model keys by name (``d_model=128, n_layers=2, max_len=512``), a mixer
            section as a dict (``aib={"weights": "exp"}``), or any dotted key
            (``**{"train.lr": 1e-3}``).

    Returns:
        Model, in training mode.

    Raises:
        ValueError / RuntimeError naming the key, value or file that is wrong (an unknown
        preset or key, a value out of range, an unreadable tokenizer); ValueError for a
        device that is not 'cpu', 'cuda' or 'cuda:N', RuntimeError for a GPU this machine
        lacks.
    """
    if device is not None:
        device = _device(device)
    if not isinstance(preset, str):
        raise TypeError(f"preset: expected a str, got {type(preset).__name__}")
    request = [f"model.preset={preset}"]
    if size is not None:
        if not isinstance(size, str):
            raise TypeError(f"size: expected a str, got {type(size).__name__}")
        request.append(f"model.size={size}")
    if task is not None:
        if not isinstance(task, str):
            raise TypeError(f"task: expected a str, got {type(task).__name__}")
        request.append(f"data.task={task}")
    if seed is not None:
        # Recorded as train.seed too, so that a saved run resumes with the seed it was built with.
        request.append(f"train.seed={_int('seed', seed)}")
    request += _overrides(overrides)
    if device is not None:
        request.append(_override("train.device", device))
    # The library resolves the configuration (and validates it); its C++ model is dropped
    # without touching torch's generator, and the Python model draws the weights, in the
    # C++ model's order and distributions.
    with torch.random.fork_rng(devices=[]):
        _, run_config, tok = _C.build_run(_path("config", config) if config is not None else "",
                                          os.fspath(tokenizer) if tokenizer is not None else "",
                                          request)
    if seed is not None:
        torch.manual_seed(seed)
    model = Model(run_config, tok)
    stored = model.config["train"].get("device", "cpu")
    if device is None and stored != "cpu":
        device = _device(stored, "train.device")
    return model.to(device) if device is not None else model


def train(out: Union[str, os.PathLike], preset: Optional[str] = None,
          size: Optional[str] = None, *, task: Optional[str] = None,
          config: Optional[Union[str, os.PathLike]] = None,
          tokenizer: Optional[Union[str, os.PathLike]] = None, resume: bool = False,
          overwrite: bool = False, dist_timeout: float = 60.0, allow_data_change: bool = False,
          device: Optional[Union[str, torch.device]] = None,
          **overrides: Any) -> Dict[str, Any]:
    """Trains a run into the folder ``out`` in this process, exactly as ``seqmix train``
    (the library's trainer: AdamW, schedule, clipping, evaluations, atomic checkpoints,
    metrics.jsonl; train/trainer.h), and returns its final figures.

    Data-parallel: started by ``torchrun`` (or anything that sets RANK, WORLD_SIZE,
    LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT), every process calls this with
    the same arguments and they train one run together on c10d Gloo, as ``seqmix train
    --nproc-per-node`` does (README, "Training on several processes and machines"); rank 0
    writes the folder. ``dist_timeout`` (seconds) bounds the wait for a lost worker.

    Args:
        out: the run folder (refused if it holds a run, unless ``resume`` or ``overwrite``).
        preset, size, task, config, tokenizer, overrides: as for ``build`` (e.g.
            ``**{"data.source": "sotu", "train.max_steps": 200}``). With ``resume`` the
            configuration comes from the checkpoint and only overrides apply.
        allow_data_change: with ``resume``, go on although the training or held-out data
            differ from those the checkpoint recorded (refused otherwise, naming the sizes).
        device: 'cpu', 'cuda', 'cuda:N' or a torch.device: ``train.device`` (None: the
            configuration's, 'cpu' unless set; resuming, the checkpoint's). Checked before
            the run folder is touched.

    Returns:
        dict with steps, train_loss, loss, perplexity, bpc (held-out), seconds, rank,
        world_size; classifiers also valid_accuracy, test_accuracy, test_loss,
        train_accuracy and test_majority (the test split's majority-class share, the
        accuracy of always answering its most frequent label).

    Raises:
        ValueError / RuntimeError naming what is wrong (as the command line would);
        KeyboardInterrupt after Ctrl-C / SIGTERM, once the step in progress is checkpointed
        (the message says how to resume).
    """
    _bool("resume", resume)
    _bool("overwrite", overwrite)
    _bool("allow_data_change", allow_data_change)
    if allow_data_change and not resume:
        raise ValueError("allow_data_change: applies to resume=True only")
    _float("dist_timeout", dist_timeout, 1.0, 86400.0)
    if device is not None:
        device = _device(device)
    request = []
    for name, value in (("preset", preset), ("size", size), ("task", task)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
        key = {"preset": "model.preset", "size": "model.size", "task": "data.task"}[name]
        request.append(_override(key, value))
    request += _overrides(overrides)
    if device is not None:
        request.append(_override("train.device", device))
    try:
        out_json = _C.train_run(_path("out", out), _path("config", config) if config is not None else "",
                                os.fspath(tokenizer) if tokenizer is not None else "", request,
                                resume, overwrite, float(dist_timeout), allow_data_change)
    except (RuntimeError, ValueError) as e:
        raise type(e)(_python_words(str(e))) from None
    return json.loads(out_json)


def load(path: Union[str, os.PathLike], *, preset: Optional[str] = None,
         size: Optional[str] = None, task: Optional[str] = None,
         config: Optional[Union[str, os.PathLike]] = None,
         tokenizer: Optional[Union[str, os.PathLike]] = None,
         device: Optional[Union[str, torch.device]] = None, **overrides: Any) -> Model:
    """A trained model from a run folder, a checkpoint file, a ``seqmix export`` file or
    folder (``from_pretrained``), or a bare state dict saved from Python
    (``torch.save(model.state_dict(), f)``, a dict or an OrderedDict); in eval mode, with the
    run's tokenizer.

    The configuration comes from the run or export file; for a bare state dict give it as
    ``build`` takes it (``preset``, ``size``, ``task``, ``config``, ``tokenizer``,
    overrides), and the state dict must fit that model exactly (names, shapes, float32 or
    float64 values, all finite).

    The weights are read onto the CPU (files hold CPU tensors, whatever device trained them)
    and moved to ``device`` ('cpu', 'cuda', 'cuda:N' or a torch.device; None: the CPU).

    Raises:
        FileNotFoundError for a path that does not exist; ValueError for configuration
        arguments given with a run or export (which bring their own) or missing for a bare
        state dict, and for non-finite or non-float values; RuntimeError naming the path and
        what is wrong: corrupt, or a parameter whose name or shape the model does not have.
    """
    target = _device(device) if device is not None else None
    model = _load(_path("path", path), preset, size, task, config, tokenizer, overrides)
    return model.to(target) if target not in (None, "cpu") else model


def _load(path, preset, size, task, config, tokenizer, overrides):
    kind = _C.model_file_kind(path)  # the CLI's judgement; never opens a FIFO or device
    if kind == "missing":
        raise FileNotFoundError(f"{path}: no such run folder or file")
    if kind == "special":
        raise ValueError(f"{path}: not a regular file or folder (a FIFO, device or socket); "
                         "seqmix.load reads run folders and files")
    given = [name for name, value in (("preset", preset), ("size", size), ("task", task),
                                      ("config", config), ("tokenizer", tokenizer))
             if value is not None] + sorted(overrides)
    if kind == "folder" and os.path.isfile(os.path.join(path, "config.json")) and \
            os.path.isfile(os.path.join(path, "model.safetensors")):
        kind = "pretrained"  # a Hugging Face-layout folder
    if kind in ("run", "folder", "checkpoint", "export", "pretrained"):
        if given:
            raise ValueError(f"{path}: a seqmix {'export' if kind == 'export' else 'run'} brings "
                             f"its own configuration; {', '.join(given)} apply only to a bare "
                             "state dict")
        if kind == "pretrained":
            return from_pretrained(path)
        cpp, run_config, tok = _C.load_export(path) if kind == "export" else _C.load_run(path)
        return _from_cpp(cpp, run_config, tok)
    # A state dict from torch.save: read with torch's restricted unpickler, then loaded
    # strictly into the model the arguments describe.
    if not given:
        raise ValueError(f"{path} holds no configuration (a bare state dict): give it as to "
                         "seqmix.build, e.g. seqmix.load(path, preset='weird-net', "
                         "size='mini', d_model=...)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # the unpickler raises many kinds on a file that is no pickle
        raise RuntimeError(f"{path}: neither a seqmix run, checkpoint or export nor a state "
                           f"dict that torch.load can read ({type(e).__name__}: {e})") from None
    if not isinstance(state, collections.abc.Mapping) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise RuntimeError(f"{path}: expected a state dict (parameter name -> tensor), "
                           f"got {type(state).__name__}")
    meta = sorted(k for k, v in state.items() if v.is_meta)
    if meta:
        raise ValueError(f"{path}: tensor {meta[0]} is on the meta device (a shape without "
                         "values); save the state dict of a model that holds its weights")
    model = build(preset or "weird-net", size, task=task, config=config, tokenizer=tokenizer,
                  **overrides)
    # The checks of `seqmix import` (names, shapes, dtypes, finite in the model's dtype), on
    # the C++ twin; then its float32 copy goes into the Python model.
    with torch.random.fork_rng(devices=[]):
        cpp = _C.model_from_config(model._run_config)
    try:
        _C.load_state_dict(cpp, list(state.items()), f"state dict '{path}'")
    except RuntimeError as e:
        msg = str(e)
        if "non-finite" in msg or "beyond the range" in msg or " values; seqmix reads" in msg:
            raise ValueError(msg) from None
        raise
    model.load_state_dict(_cpp_state(cpp))
    return model.eval()


def _from_cpp(cpp, run_config, tok):
    # A Python model with the C++ model's weights; its own initial draw is not kept, so it
    # must not advance the caller's generator either.
    with torch.random.fork_rng(devices=[]):
        model = Model(run_config, tok)
    model.load_state_dict(_cpp_state(cpp))
    return model.eval()


def from_pretrained(path: Union[str, os.PathLike]) -> Model:
    """A model from a Hugging Face-layout folder (config.json, model.safetensors,
    tokenizer.model for SentencePiece models) that ``Model.save_pretrained`` or ``seqmix
    export --format hf`` wrote; in eval mode. Read by the library's reader, with the checks
    of ``seqmix import DIR``: the format, the configuration (validated as a run's, and
    against the machine's memory), the tokenizer the configuration names, every tensor's
    name, shape, dtype and finiteness.

    Raises:
        FileNotFoundError for a missing folder; ValueError naming the file, key or tensor
        that is wrong.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such folder (a saved model is a folder holding "
                                "config.json and model.safetensors)")
    for name in ("config.json", "model.safetensors"):
        if not os.path.isfile(os.path.join(path, name)):
            raise FileNotFoundError(f"{os.path.join(path, name)}: not found; a seqmix "
                                    "Hugging Face folder holds config.json and "
                                    "model.safetensors")
    try:
        cpp, run_config, tok = _C.load_export(path)
    except RuntimeError as e:
        raise ValueError(_python_words(str(e))) from None
    return _from_cpp(cpp, run_config, tok)


def export(run: Union[str, os.PathLike], file: Union[str, os.PathLike], *,
           overwrite: bool = False) -> None:
    """``seqmix export RUN --out FILE``: the run's state dict (names as ``state_dict()``
    gives them) and resolved configuration (a dict) in a file that plain ``torch.load``
    opens without seqmix. Refuses an existing file unless ``overwrite``."""
    _bool("overwrite", overwrite)
    try:
        _C.export_run(os.fspath(run), os.fspath(file), overwrite)
    except (RuntimeError, ValueError) as e:
        raise type(e)(_python_words(str(e))) from None
