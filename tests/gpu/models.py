"""What the GPU check's scripts share: the ops (from the operators-only library or the
installed package), seqmix's models bound to them or written in plain PyTorch, their
configurations, their decoding states built from one forward pass (prefill), the same models
in Hugging Face transformers, and a byte-level text corpus from the repository itself.

The [model] sections are those ``seqmix.build(preset, size=...)`` resolves (the CLI's
presets, src/models/presets.cpp): tests/python/test_gpu_scripts.py checks that they still
are. They are written out here because the GPU machine builds the operators alone, not the
C++ library that holds the presets.
"""
import glob
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# Last: a seqmix on the path already (installed, or PYTHONPATH) comes first; the source
# tree's python/ serves where there is none (the GPU machine, with --lib).
sys.path.append(os.path.join(ROOT, "python"))

_MINI = {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 512, "max_len": 256}

# preset -> mixers of the [model] section (Weird-Net: Structure B; Weird-Net-A: Structure A;
# the Transformer: self-attention in every layer): the models the benchmark trains.
MIXERS = {"weird-net": ["aib", "attention"], "weird-net-a": ["aib"],
          "transformer": ["attention"]}

# Every causal language model the benchmark generates from: preset -> what its [model]
# section sets besides the sizes (the ETSMLP LM: the ESMLP mixer, which is its own MLP, ReLU;
# the Extractor's stack: no norms, no biases, ReLU, an untied head).
PRESETS = {name: {"mixers": mixers} for name, mixers in MIXERS.items()}
PRESETS["etsmlp-lm"] = {"mixers": ["etsmlp"], "activation": "relu"}
PRESETS["extractor-transformer"] = {"mixers": ["extractor"], "norm": False, "bias": False,
                                    "activation": "relu", "tie_embeddings": False}

# Where the ops came from: "lib" (torch.ops.load_library, the GPU machine) or "package"
# (seqmix.nn, which loads the extension seqmix._C).
_OPS_FROM = None


def model_config(preset, max_len=None, d_model=None, n_layers=None, n_heads=None,
                 d_ff=None):
    """The [model] section of `preset` (a key of PRESETS) at size mini, with byte-level
    vocabulary (256)."""
    c = dict(_MINI)
    for key, value in (("max_len", max_len), ("d_model", d_model), ("n_layers", n_layers),
                       ("n_heads", n_heads), ("d_ff", d_ff)):
        if value is not None:
            c[key] = value
    extra = PRESETS[preset]
    c.update(vocab_size=256, causal=True, **{k: list(v) if isinstance(v, list) else v
                                             for k, v in extra.items()})
    return c


def load_ops(lib):
    """Registers torch.ops.seqmix.*: from `lib` (libseqmix_ops.so) or the installed package."""
    global _OPS_FROM
    if lib:
        torch.ops.load_library(lib)
        _OPS_FROM = "lib"
    else:
        import seqmix.nn  # noqa: F401
        _OPS_FROM = "package"


def seqmix_classes():
    """seqmix's layers and models on the dispatcher's ops (the fused kernels)."""
    from seqmix import _layers
    from seqmix._dispatcher import DispatcherOps
    return _layers.bind(DispatcherOps, "seqmix_gpu_check")


def user_ops():
    """What a PyTorch user writes for the same models: the papers' algorithms in plain
    PyTorch (every registered mixer's plain ops, seqmix._torch_ops), with Algorithm 1's
    shift-and-add levels with one maximum per sequence (aib_scan_literal) for AIB, and
    attention through F.scaled_dot_product_attention where there is no mask."""
    from seqmix import _torch_ops
    from seqmix._mixer import mixers
    ops = types.SimpleNamespace(**{fn.__name__: fn for e in mixers() for fn in e.torch_ops})
    ops.aib_scan = _torch_ops.aib_scan_literal

    def attention(q, k, v, mask, direction, impl):
        if mask is None:
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=direction == "causal")
        return _torch_ops.attention(q, k, v, mask, direction)

    ops.attention = attention
    return ops


def pytorch_classes():
    """The same models on user_ops()."""
    from seqmix import _layers
    return _layers.bind(user_ops(), "seqmix_gpu_check_user")


def prefill(model, tokens):
    """Decoding states after `tokens` [B, T] (int64) and the logits [B, V] of their last
    position, from one forward pass of `model` (a SequenceModel) over them: each mixer's
    state is built from the input its forward received. Equal, up to rounding, to what T
    calls of ``model.step`` from ``model.init_state(B)`` leave (tests/python/
    test_gpu_scripts.py checks it), which in Python would take minutes at T = 16K.
    Runs under the caller's grad mode and autocast."""
    inputs = []
    hooks = [block.mixer.register_forward_pre_hook(lambda m, args: inputs.append(args[0]))
             for block in model.blocks]
    try:
        h = model.hidden(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    states = [_mixer_state(block.mixer, x) for block, x in zip(model.blocks, inputs)]
    return states, model.logits(h[:, -1])


def _mixer_state(mixer, x):
    """`mixer`'s DecodingState after its inputs x [B, T, D]: the tensors its step keeps,
    computed at once (the layers' docstrings in seqmix._layers say what each holds)."""
    B, T, _ = x.shape
    state = mixer.init_state(B)
    kind, t = state.kind, state.tensors
    if kind == "AIBAttention":
        # E V and E relative to the running maximum of A, which after T steps is the
        # maximum over all T.
        _, e_cache, lag, _ = t
        a, v = mixer.w_a(x).to(e_cache.dtype), mixer.w_v(x).to(e_cache.dtype)
        m = a.amax(1, keepdim=True)
        e = torch.exp(a - m)
        state.tensors = [e * v, e, lag, m]
    elif kind == "SelfAttention":
        H, dh = mixer.n_heads, mixer.d_model // mixer.n_heads
        k, v = mixer.qkv(x).view(B, T, 3, H, dh)[:, :, 1:].permute(2, 0, 3, 1, 4)
        state.tensors = [k.to(t[0].dtype).contiguous(), v.to(t[1].dtype).contiguous()]
    elif kind == "ESMLP":
        # CES: s_T = sum_j mu^(T-1-j) u_j, u = in_proj(x), powers of the complex mu taken
        # in float64 (|mu|^k underflows to 0 long before 16K for most channels; none
        # grows: |mu| <= max_lambda <= 1).
        ces = t[0]
        _, mu, _ = mixer.ces.coefficients()
        mu = mu.detach().double()
        log_mu = torch.complex(0.5 * torch.log(mu[:, 0] ** 2 + mu[:, 1] ** 2),
                               torch.atan2(mu[:, 1], mu[:, 0]))
        k = torch.arange(T - 1, -1, -1, dtype=torch.float64, device=x.device)
        powers = torch.exp(k.unsqueeze(1) * log_mu.unsqueeze(0))  # [T, C]
        u = mixer.in_proj(x).double()
        s = torch.stack([torch.einsum("btc,tc->bc", u, powers.real),
                         torch.einsum("btc,tc->bc", u, powers.imag)], 2)
        ces.tensors = [s.to(ces.tensors[0].dtype)]
        ces.pos = T
    elif kind == "Extractor":
        state.tensors = [x.to(t[0].dtype)]
    elif kind == "CausalMean":
        state.tensors = [mixer.w_v(x)[:, -mixer.window:].to(t[0].dtype)]
    else:
        raise ValueError(f"prefill: no state builder for {kind}")
    state.pos = T
    return state


def _nn_on_dispatcher():
    """A stand-in for seqmix.nn where the ops come from --lib: the same classes bound to the
    dispatcher's ops (what seqmix.nn holds), without loading the extension seqmix._C, which
    the GPU machine does not build (and which would register the ops a second time)."""
    import seqmix
    from seqmix import _layers
    from seqmix._dispatcher import DispatcherOps
    module = types.ModuleType("seqmix.nn", "seqmix.nn's classes on the dispatcher's ops "
                              "(tests/gpu/models.py, for the operators-only library)")
    from seqmix._mixer import DecodingState, mixers
    module.__dict__.update(_layers.bind(DispatcherOps, "seqmix.nn"))
    module.DecodingState = DecodingState
    for fn in (fn for e in mixers() for fn in e.functions):
        setattr(module, fn.__name__, fn)
    sys.modules["seqmix.nn"] = module
    seqmix.nn = module


def hf_module():
    """(seqmix.hf, None), or (None, why not): transformers' SeqmixForCausalLM and
    SeqmixConfig, on the ops load_ops registered."""
    try:
        import transformers
    except ImportError as e:
        return None, f"transformers is not installed ({e})"
    transformers.logging.set_verbosity_error()
    if _OPS_FROM == "lib" and "seqmix.nn" not in sys.modules:
        _nn_on_dispatcher()
    try:
        import seqmix.hf
    except ImportError as e:
        return None, f"seqmix.hf does not import ({e})"
    return seqmix.hf, None


def hf_causal_lm(hf, config, state_dict):
    """The model of `config` ([model] section) as transformers' SeqmixForCausalLM (what
    ``Model.save_pretrained`` writes and AutoModelForCausalLM loads), with `state_dict`."""
    hf_config = hf.SeqmixConfig(
        seqmix={"config": {"model": dict(config)}}, vocab_size=config["vocab_size"],
        hidden_size=config["d_model"], num_hidden_layers=config["n_layers"],
        num_attention_heads=config["n_heads"], max_position_embeddings=config["max_len"])
    model = hf.SeqmixForCausalLM(hf_config)
    model.load_state_dict(state_dict, strict=True)
    return model


def hf_gpt2(config):
    """transformers' GPT-2 (its own decoding with a KV cache) at the sizes of `config`:
    learned positions, pre-norm, tied head, GELU, as seqmix's Transformer (random weights:
    it is timed, not compared)."""
    import transformers
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=config["vocab_size"], n_positions=config["max_len"],
        n_embd=config["d_model"], n_layer=config["n_layers"], n_head=config["n_heads"],
        n_inner=config["d_ff"], activation_function="gelu", bos_token_id=None,
        eos_token_id=None))


def corpus():
    """The repository's own prose (README.md, CHANGELOG.md, docs/*.md) as bytes: real text
    that travels with the working tree."""
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
    paths += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    data = b"".join(open(p, "rb").read() for p in paths if os.path.exists(p))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batch(data, step, batch_size, length, seed):
    """Batch `step`: a function of the seed and the step alone (as the trainer's batches)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, data.numel() - length - 1, (batch_size,), generator=g)
    rows = torch.stack([data[s:s + length + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]
