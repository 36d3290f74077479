"""seqmix's layers as torch.nn.Modules to drop into a PyTorch model.

Each class builds the C++ layer of libseqmix (include/seqmix/nn/*.h) and exposes its
parameters -- the very tensors the C++ forward reads -- under the C++ names, so
``parameters()``, ``state_dict()``, ``torch.optim``, ``.to(torch.float64)``, ``train()`` and
``eval()`` behave as for any torch.nn.Module, and the outputs, names and initialisation are
those of the C++ modules (the same code). Initialisation draws from torch's default CPU
generator: ``torch.manual_seed`` makes it repeatable.

Legend: B batch, L sequence length, D = d_model. Inputs are CPU float32/float64 tensors
[B, L, D] and an optional mask [B, L] bool (True = valid position); outputs [B, L, D].
A module cannot be deep-copied or pickled whole (its tensors belong to the C++ module):
save and load its ``state_dict()``.
"""
import math

import torch

from . import _C
from ._module import CppModule
from .ops import _choice, _mask, _tensor, _DIRECTIONS, _IMPLS, _AIB_WEIGHTS

__all__ = ["AIBAttention", "SelfAttention", "CES", "ESMLP", "Extractor", "Block"]


def _positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def _flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def _probability(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name}: expected a probability in [0, 1), got {value!r}")
    return float(value)


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


class _Mixer(CppModule):
    """A sequence mixer: x [B, L, D], mask [B, L] bool or None -> [B, L, D]."""

    def forward(self, x, mask=None):
        return _C.mixer_forward(self._cpp, _tensor("x", x), _mask("mask", mask))


class AIBAttention(_Mixer):
    """AIB attention (alias Weird attention): Moss Sec. III, Weird-Net Sec. III.B,
    Algorithms 1 (causal) and 2 (bidirectional)::

        A = X W_A (+ b_A),  V = X W_V (+ b_V),  O = aib_scan(A, V, w),  Y = O W_O + b_O

    Parameters: ``w_a.weight``, ``w_v.weight`` [D, D] (+ ``.bias`` with ``bias_av``), ``w``
    [K, D] with K = ceil(log2 max_len), ``w_o.weight`` [D, D], ``w_o.bias`` [D].
    Init (Weird-Net Sec. III.G): W_A, W_V ~ N(0, 1/D); w ~ N(0, 1);
    W_O ~ N(0, (1 - 2/D) / (2 n_layers D)); biases 0.

    Args:
        d_model: D. max_len: the longest L accepted.
        causal: decoder (True) or encoder (False, D even).
        weights: 'prefix_exp' (default), 'exp' or 'ones' (see seqmix.ops.aib_scan).
        bias_av: biases on A and V (Moss). impl: 'kernel' or 'reference'.
        n_layers: depth N of the stack (W_O's init only).

    Raises:
        ValueError / TypeError naming the argument; RuntimeError from forward when L >
        max_len or the last dimension is not d_model.
    """

    def __init__(self, d_model, max_len, *, causal=True, weights="prefix_exp", bias_av=False,
                 impl="kernel", n_layers=1):
        self.d_model = _positive("d_model", d_model)
        super().__init__(_C.aib_attention(
            d_model, _positive("max_len", max_len), _flag("causal", causal),
            _choice("weights", weights, _AIB_WEIGHTS), _flag("bias_av", bias_av),
            _choice("impl", impl, _IMPLS), _positive("n_layers", n_layers)))


class SelfAttention(_Mixer):
    """Multi-head softmax self-attention (Vaswani et al. 2017), the Transformer's and
    Weird-Net's Structure B layers. Parameters ``qkv`` (Linear D -> 3D), ``out`` (Linear
    D -> D). The fused kernel never stores the [L, L] scores (flash-attention on the CPU).

    Args:
        d_model: D, divisible by n_heads. n_heads: H. causal: decoder or encoder.
        dropout: on the attention probabilities in training (then the reference path runs).
        bias: biases on the projections. impl: 'kernel' or 'reference'.
        n_layers: depth N of the stack (the output projection's init only).
    """

    def __init__(self, d_model, n_heads, *, causal=True, dropout=0.0, bias=True,
                 impl="kernel", n_layers=1):
        self.d_model = _positive("d_model", d_model)
        super().__init__(_C.self_attention(
            d_model, _positive("n_heads", n_heads), _flag("causal", causal),
            _probability("dropout", dropout), _flag("bias", bias), _choice("impl", impl, _IMPLS),
            _positive("n_layers", n_layers)))


def _ces_args(r_min, r_max, max_phase, dt_min, dt_max, max_lambda, shortcut, normalize, impl):
    return (_number("r_min", r_min), _number("r_max", r_max), _number("max_phase", max_phase),
            _number("dt_min", dt_min), _number("dt_max", dt_max),
            _number("max_lambda", max_lambda),
            _choice("shortcut", shortcut, ("omega", "sigmoid", "none")),
            _flag("normalize", normalize), _choice("impl", impl, _IMPLS))


class CES(CppModule):
    """Complex exponential smoothing with its shortcut: ETSMLP Sec. 3.1, eqs. 10-14 (the
    authors' class CETS): y = ces_scan(x) + omega * x (or sigmoid(omega) * x, eq. 13).

    Parameters (C = channels, or 2 channels when bidirectional): ``log_lambda``,
    ``log_alpha``, ``log_beta`` [C, 2]; ``omega`` [channels] (unless shortcut 'none').
    Init: |lambda| uniform on the ring [r_min, r_max] with phase in [0, max_phase],
    log_alpha = log dt (dt log-uniform in [dt_min, dt_max]), log_beta ~ N(0, 0.2^2),
    omega ~ N(0, 1).

    forward(x [B, L, channels], mask=None) -> [B, L, channels].
    """

    def __init__(self, channels, *, bidirectional=False, r_min=0.1, r_max=0.9,
                 max_phase=2 * math.pi, dt_min=1e-3, dt_max=0.1, max_lambda=0.9999,
                 shortcut="omega", normalize=False, impl="kernel"):
        super().__init__(_C.ces(_positive("channels", channels),
                                _flag("bidirectional", bidirectional),
                                *_ces_args(r_min, r_max, max_phase, dt_min, dt_max, max_lambda,
                                           shortcut, normalize, impl)))

    def forward(self, x, mask=None):
        return _C.ces_forward(self._cpp, _tensor("x", x), _mask("mask", mask))


class ESMLP(_Mixer):
    """The ETSMLP block's mixer (ETSMLP Fig. 2): in_proj (D -> H), CES over H channels,
    out_proj (H -> D), optionally gated by sigmoid(W_g X) (ETSMLP-Gate).

    Parameters: ``in_proj``, ``ces.*`` (see CES), ``out_proj``, ``gate_proj`` if gated.
    Init: Xavier-uniform weights, zero biases (the authors' reset).

    Args:
        d_model: D. d_hidden: H, the CES channels. causal: language modelling (True) or the
        paper's bidirectional encoder. gate: ETSMLP-Gate. The CES options as in CES.
    """

    def __init__(self, d_model, d_hidden, *, causal=True, gate=False, r_min=0.1, r_max=0.9,
                 max_phase=2 * math.pi, dt_min=1e-3, dt_max=0.1, max_lambda=0.9999,
                 shortcut="omega", normalize=False, impl="kernel"):
        self.d_model = _positive("d_model", d_model)
        super().__init__(_C.esmlp(d_model, _positive("d_hidden", d_hidden),
                                  _flag("causal", causal), _flag("gate", gate),
                                  *_ces_args(r_min, r_max, max_phase, dt_min, dt_max,
                                             max_lambda, shortcut, normalize, impl)))


class Extractor(_Mixer):
    """The Extractor (The Extractor, Sec. 5, eqs. 18-20): a causal convolution with one
    learned D x D matrix per lag (``w_ext`` [max_len, D, D]), times an element-wise
    adjustment (``w_adj``), optionally followed by an output projection (``w_opt``).

    Args:
        d_model: D. max_len: l, the number of lag matrices (the longest sequence).
        adjust: the element-wise adjustment. out_proj: the output projection W_opt.
        impl: 'kernel' (FFT) or 'reference' (the per-lag sum). n_layers: init only.
    """

    def __init__(self, d_model, max_len, *, adjust=True, out_proj=True, impl="kernel",
                 n_layers=1):
        self.d_model = _positive("d_model", d_model)
        super().__init__(_C.extractor(d_model, _positive("max_len", max_len),
                                      _flag("adjust", adjust), _flag("out_proj", out_proj),
                                      _choice("impl", impl, _IMPLS),
                                      _positive("n_layers", n_layers)))


class Block(CppModule):
    """One layer of a seqmix stack (Weird-Net Sec. III.E, Fig. 4): norm -> mixer -> residual,
    norm -> FFN -> residual (pre-norm, GPT-2's arrangement; ``pre_norm=False``: post-norm).
    Without an FFN (``with_ffn=False``) the block is norm -> mixer -> residual: the ETSMLP
    block, whose ESMLP mixer is itself the MLP.

    Parameters: ``mixer.*`` (the given mixer's, shared with it), ``ffn.*`` (``fc1``, ``fc2``),
    ``norm_1``, ``norm_2`` (LayerNorm) or ``bn_1``, ``bn_2`` (BatchNorm, ``norm_type='batch'``).

    Args:
        mixer: a seqmix.nn mixer (AIBAttention, SelfAttention, ESMLP, Extractor).
        d_ff: FFN width (default 4 D). activation: 'gelu', 'relu' or 'leaky_relu'.
        ffn_bias: biases in the FFN. pre_norm, dropout (residual and FFN), norm (False: no
        norms, the Extractor paper's stack), with_ffn, norm_type ('layer' or 'batch'),
        n_layers (FFN init only).
    """

    def __init__(self, mixer, *, d_ff=None, activation="gelu", ffn_bias=True, pre_norm=True,
                 dropout=0.0, norm=True, with_ffn=True, norm_type="layer", n_layers=1):
        if not isinstance(mixer, _Mixer):
            raise TypeError("mixer: expected a seqmix.nn mixer (AIBAttention, SelfAttention, "
                            f"ESMLP, Extractor), got {type(mixer).__name__}")
        d_model = mixer.d_model
        d_ff = 4 * d_model if d_ff is None else _positive("d_ff", d_ff)
        self.d_model = d_model
        super().__init__(_C.block(mixer._cpp, d_model, d_ff,
                                  _choice("activation", activation,
                                          ("gelu", "relu", "leaky_relu")),
                                  _flag("ffn_bias", ffn_bias), _flag("pre_norm", pre_norm),
                                  _probability("dropout", dropout), _flag("norm", norm),
                                  _flag("with_ffn", with_ffn),
                                  _choice("norm_type", norm_type, ("layer", "batch")),
                                  _positive("n_layers", n_layers)))

    def forward(self, x, mask=None):
        return _C.block_forward(self._cpp, _tensor("x", x), _mask("mask", mask))
