"""The Hugging Face folder layout of a seqmix model (internal), shared with ``seqmix export
--format hf`` (include/seqmix/train/serialization/) and read without the extension:

* ``config.json``: {"model_type": "seqmix", "architectures": [...], "vocab_size",
  "hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings",
  "tie_word_embeddings": false, "seqmix": {"format": 1, "version", "tokenizer": "bytes" |
  "sentencepiece", "config": {"model": ..., "data": ..., "train": ...}}};
* ``model.safetensors``: the state dict, names as ``state_dict()`` gives them, metadata
  {"format": "pt"} (what transformers requires);
* ``tokenizer.model``: the SentencePiece model, for SentencePiece runs only.

The safetensors package (Hugging Face's reader and writer) does the tensor file.
"""
import json
import os
import shutil
import tempfile

import torch

FORMAT = 1
_RUN_FILES = ("checkpoint.pt", "config.toml", "metrics.jsonl")
# What a saved model folder holds (generation_config.json: what transformers may add).
_MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.model", "generation_config.json")


def _safetensors():
    try:
        import safetensors.torch
    except ImportError:
        raise ImportError("reading and writing model.safetensors needs the safetensors "
                          "package: pip install safetensors") from None
    return safetensors.torch


def hf_config(config, tokenizer_kind, version):
    """config.json's content for a resolved configuration (a dict of sections)."""
    m = config["model"]
    return {
        "model_type": "seqmix",
        "architectures": ["SeqmixForSequenceClassification" if m.get("n_classes", 0) > 0
                          else "SeqmixForCausalLM"],
        "vocab_size": m["vocab_size"],
        "hidden_size": m["d_model"],
        "num_hidden_layers": m["n_layers"],
        "num_attention_heads": m["n_heads"],
        "max_position_embeddings": m["max_len"],
        # seqmix ties the LM head inside its own model; Hugging Face must not re-tie.
        "tie_word_embeddings": False,
        "seqmix": {"format": FORMAT, "version": version, "tokenizer": tokenizer_kind,
                   "config": config},
    }


def write_pretrained(path, config, state_dict, *, tokenizer_model=None, version="",
                     overwrite=False):
    """Writes the folder whole or not at all: into a temporary sibling, then renamed over
    ``path``. Refuses an existing non-empty folder unless ``overwrite``, and never replaces
    a seqmix run folder, a file or a symbolic link; with ``overwrite`` the files it does not
    write (a model card) are kept. Refuses non-finite weights before writing anything."""
    path = os.fspath(path)
    # "dir/" and "dir" are one folder; without the separator islink sees a link to a folder.
    stripped = path.rstrip(os.sep)
    path = stripped if stripped else path
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
        raise ValueError(f"{path}: exists and is not a folder; save_pretrained writes a "
                         "folder")
    if os.path.isdir(path) and os.listdir(path):
        if any(os.path.exists(os.path.join(path, f)) for f in _RUN_FILES):
            raise ValueError(f"{path}: holds a seqmix training run; save_pretrained never "
                             "writes into one")
        if not overwrite:
            raise ValueError(f"{path}: exists and is not empty; pass overwrite=True to "
                             "replace it")
        # overwrite replaces a model folder, nothing else: a mistyped path (a home folder)
        # keeps its files. A model folder's other files (a README.md model card) are the
        # user's: carried into the new folder, as `seqmix export --format hf` does.
        names = os.listdir(path)
        if not any(n in _MODEL_FILES for n in names):
            raise ValueError(f"{path}: holds no saved model ({', '.join(sorted(names)[:3])}); "
                             "overwrite=True replaces only a folder that holds one of " +
                             ", ".join(_MODEL_FILES))
        odd = sorted(n for n in names if not os.path.isfile(os.path.join(path, n)) or
                     os.path.islink(os.path.join(path, n)))
        if odd:
            raise ValueError(f"{path}: holds {', '.join(odd[:3])}, not a regular file; "
                             "overwrite=True replaces only a folder of files")
    for name, t in state_dict.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{path}: tensor {name} holds non-finite values (NaN or inf); "
                             "nothing was written (every seqmix reader refuses such weights)")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    try:
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
        _safetensors().save_file(tensors, os.path.join(tmp, "model.safetensors"),
                                 metadata={"format": "pt"})
        kind = "bytes" if tokenizer_model is None else "sentencepiece"
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(hf_config(config, kind, version), f, indent=2, sort_keys=True)
            f.write("\n")
        if tokenizer_model is not None:
            with open(os.path.join(tmp, "tokenizer.model"), "wb") as f:
                f.write(tokenizer_model)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), 0o644)  # safetensors writes its file 0600
            with open(os.path.join(tmp, name), "rb") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o755)
        if os.path.isdir(path):
            for name in os.listdir(path):
                if name in _MODEL_FILES:
                    continue
                try:
                    os.link(os.path.join(path, name), os.path.join(tmp, name))
                except OSError:
                    shutil.copy2(os.path.join(path, name), os.path.join(tmp, name))
        if os.path.isdir(path):
            old = tempfile.mkdtemp(prefix=".old-", dir=parent)
            kept = os.path.join(old, "x")
            os.rename(path, kept)
            try:
                os.rename(tmp, path)
            except BaseException:
                os.rename(kept, path)  # the user's folder goes back where it was
                os.rmdir(old)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_pretrained(path):
    """(configuration dict of sections, state dict) from a folder in this layout. Raises
    FileNotFoundError or ValueError naming the file and what is wrong."""
    path = os.fspath(path)
    cfg_file = os.path.join(path, "config.json")
    weights = os.path.join(path, "model.safetensors")
    for f in (cfg_file, weights):
        if not os.path.isfile(f):
            raise FileNotFoundError(f"{f}: not found; a seqmix Hugging Face folder holds "
                                    "config.json and model.safetensors")
    try:
        with open(cfg_file, encoding="utf-8") as f:
            hf = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{cfg_file}: not a JSON file ({e})") from None
    if not isinstance(hf, dict) or hf.get("model_type") != "seqmix" or \
            not isinstance(hf.get("seqmix"), dict):
        raise ValueError(f"{cfg_file}: not a seqmix model (expected model_type 'seqmix' and "
                         "a 'seqmix' section)")
    meta = hf["seqmix"]
    if type(meta.get("format")) is not int or meta["format"] != FORMAT:
        raise ValueError(f"{cfg_file}: seqmix format {meta.get('format')!r}; this seqmix "
                         f"reads format {FORMAT}")
    config = meta.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        raise ValueError(f"{cfg_file}: seqmix.config must hold the configuration's sections "
                         "(model, data, train)")
    kind = meta.get("tokenizer")
    if kind not in ("bytes", "sentencepiece"):
        raise ValueError(f"{cfg_file}: seqmix.tokenizer must be 'bytes' or 'sentencepiece', got "
                         f"{kind!r}")
    has_model = os.path.isfile(os.path.join(path, "tokenizer.model"))
    if (kind == "sentencepiece") != has_model:
        raise ValueError(f"{path}: config.json names a {kind} tokenizer but the folder "
                         f"{'holds no' if not has_model else 'also holds a'} tokenizer.model")
    try:
        state = _safetensors().load_file(weights)
    except Exception as e:  # the reader raises its own kinds on a damaged file
        raise ValueError(f"{weights}: not a readable safetensors file "
                         f"({type(e).__name__}: {e})") from None
    for name, t in state.items():
        if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{weights}: tensor {name} is {t.dtype}; seqmix stores float32 "
                             "(or float64) weights")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{weights}: tensor {name} holds non-finite values")
    return config, state


def tokenizer_file(path):
    """The folder's tokenizer.model, or None for a byte-level model."""
    f = os.path.join(os.fspath(path), "tokenizer.model")
    return f if os.path.isfile(f) else None
