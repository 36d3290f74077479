"""The seqmix layers and models as ordinary ``torch.nn.Module``s, written once for two sets of
ops (internal; users import ``seqmix.nn`` or ``seqmix.reference``).

Each class here owns its parameters (``nn.Linear``, ``nn.Parameter``) with the names and the
initialisation of its C++ twin (include/seqmix/nn/*.h, models/sequence_model.h), so a state
dict loads into either, and the same seed draws the same weights in the same order. The
sequence mixing itself is one call to ``self._ops`` (a class attribute):

* ``seqmix.nn`` binds the ops PyTorch's dispatcher holds (``torch.ops.seqmix.*``, the fused
  CPU kernels or the ATen references, chosen by ``impl``), which need the extension;
* ``seqmix.reference`` binds plain-PyTorch versions of the papers' algorithms
  (seqmix/_torch_ops.py), which need nothing but torch.

Nothing else differs, so everything PyTorch does with modules (deepcopy, pickling,
``torch.save(model)``, parametrizations, ``functional_call``, ``apply``, hooks, ``.to()``,
``torch.compile``, ``torch.export``) works on both as on modules built from ``nn.Linear``.

Masks: every forward takes ``mask`` [B, L] bool, True = valid position (seqmix's
convention), or ``key_padding_mask`` [B, L] bool, True = padding (``nn.MultiheadAttention``'s
convention) -- never both. Padded positions contribute nothing to any mixer's output (a
BatchNorm block in training still counts them in its batch statistics, as the C++ one does).
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

_IMPLS = ("kernel", "reference")
_AIB_WEIGHTS = ("prefix_exp", "exp", "ones")
_SHORTCUTS = ("omega", "sigmoid", "none")


# ---- argument checks ------------------------------------------------------------------------

def _positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def _flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def _probability(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name}: expected a probability in [0, 1), got {value!r}")
    return float(value)


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def valid_mask(x: torch.Tensor, mask: Optional[torch.Tensor],
               key_padding_mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The padding mask as seqmix's ops take it: [B, L] bool, True = valid, or None.

    ``mask`` is seqmix's (True = valid), ``key_padding_mask`` PyTorch's (True = pad);
    ``x`` is [B, L, ...]. Raises ValueError for both at once, a non-bool dtype (a float
    mask would be ambiguous) or a shape other than [B, L]; TypeError for a non-tensor."""
    if mask is not None and key_padding_mask is not None:
        raise ValueError("mask (True = valid) and key_padding_mask (True = padding) are the "
                         "same information in opposite conventions; pass one of them")
    name, value = ("mask", mask) if mask is not None else ("key_padding_mask", key_padding_mask)
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a bool tensor [B, L] or None, got "
                        f"{type(value).__name__}")
    meaning = "True = valid position" if name == "mask" else "True = padding"
    if value.dtype != torch.bool:
        raise ValueError(f"{name}: expected a bool tensor [B, L] ({meaning}), got dtype "
                         f"{value.dtype}")
    if value.dim() != 2 or tuple(value.shape) != tuple(x.shape[:2]):
        raise ValueError(f"{name}: expected shape [B, L] = {list(x.shape[:2])} ({meaning}), "
                         f"got {list(value.shape)}")
    return value if name == "mask" else value.logical_not()


def _check_x(layer, x, d_model):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{layer}: x must be a tensor [B, L, {d_model}], got "
                        f"{type(x).__name__}")
    if x.dim() != 3 or x.shape[2] != d_model:
        raise ValueError(f"{layer}: x must be [B, L, {d_model}], got {list(x.shape)}")
    if not x.is_floating_point():
        # Layers take embeddings, not token ids: an integer x would reach a matmul's dtype
        # error, which names neither the layer nor the argument.
        raise TypeError(f"{layer}: x must be a floating-point tensor (embeddings), got "
                        f"{x.dtype}")


def _check_length(layer, x, max_len, what=""):
    # Learned per-position parameters (AIB levels, the Extractor's lag matrices) end there.
    if x.shape[1] > max_len:
        raise ValueError(f"{layer}: sequence length {x.shape[1]} exceeds max_len "
                         f"{max_len}{what}")


def _check_step(layer, x_t, d_model, state, kind):
    if not isinstance(x_t, torch.Tensor) or x_t.dim() != 2 or x_t.shape[1] != d_model:
        shape = list(x_t.shape) if isinstance(x_t, torch.Tensor) else type(x_t).__name__
        raise ValueError(f"{layer}.step: x_t must be [B, {d_model}], got {shape}")
    if not x_t.is_floating_point():
        raise TypeError(f"{layer}.step: x_t must be a floating-point tensor, got {x_t.dtype}")
    if not isinstance(state, DecodingState) or state.kind != kind:
        raise ValueError(f"{layer}.step: state was not made by this layer's init_state")
    if state.batch != x_t.shape[0]:
        raise ValueError(f"{layer}.step: state is for batch {state.batch}, x_t has "
                         f"{x_t.shape[0]} rows")


class DecodingState:
    """One mixer's decoding state: ``pos`` (tokens consumed so far), ``batch`` and the
    mixer's caches in ``tensors`` (each layer documents its own). Made by ``init_state``,
    advanced by ``step``. It holds activations, and values derived from the weights when
    ``init_state`` ran (AIB attention's distance weights): change the weights, make a new
    state."""

    def __init__(self, kind: str, batch: int, tensors: List[torch.Tensor]):
        self.kind = kind
        self.batch = batch
        self.tensors = tensors
        self.pos = 0

    def __repr__(self):
        shapes = ", ".join(repr(t) if isinstance(t, DecodingState) else str(list(t.shape))
                           for t in self.tensors)
        return f"DecodingState({self.kind}, pos={self.pos}, tensors=[{shapes}])"


def _linear_init(weight, std):
    nn.init.normal_(weight, 0.0, std)


def _out_std(d_model, n_layers):
    # Weird-Net Sec. III.G's output-projection rule (as the C++ layers): a stack of N layers
    # adds 2N residual branches.
    return math.sqrt(max(1.0 - 2.0 / d_model, 1e-3) / (2.0 * n_layers * d_model))


def aib_num_levels(max_len: int) -> int:
    """Number K of distance levels covering sequences up to ``max_len``:
    ceil(log2 max_len), at least 1."""
    _positive("max_len", max_len)
    return max(1, (max_len - 1).bit_length())


def aib_level_weights(w: torch.Tensor, weights: str = "prefix_exp") -> torch.Tensor:
    """Per-level distance weights W [K, D] from w [K, D] (Weird-Net eq. 34): exp(cumsum(w))
    for 'prefix_exp', exp(w) for 'exp', ones for 'ones'; W_j multiplies distance 2**j."""
    _choice("weights", weights, _AIB_WEIGHTS)
    if weights == "prefix_exp":
        return torch.exp(torch.cumsum(w, 0))
    if weights == "exp":
        return torch.exp(w)
    return torch.ones_like(w)


def aib_lag_weights(level_weights: torch.Tensor, n: int) -> torch.Tensor:
    """The prior a_d = prod over the set bits k of d of W_k for d = 0 .. n-1: [n, D].
    Multiplied from the highest bit down, in the order of the C++ layer's step."""
    K = level_weights.shape[0]
    if n > 2 ** K:
        raise ValueError(f"aib_lag_weights: {K} levels cover distances below {2 ** K}, "
                         f"asked for {n}")
    d = torch.arange(n, device=level_weights.device)
    a = torch.ones(n, level_weights.shape[1], dtype=level_weights.dtype,
                   device=level_weights.device)
    for k in reversed(range(K)):
        bit = ((d >> k) & 1).bool().unsqueeze(1)
        a = torch.where(bit, a * level_weights[k], a)
    return a


# ---- mixers ---------------------------------------------------------------------------------

class Mixer(nn.Module):
    """A sequence mixer: x [B, L, D] -> [B, L, D]; causal ones also decode step by step."""

    _ops = None  # bound by seqmix.nn / seqmix.reference

    def init_state(self, batch: int) -> DecodingState:
        """An empty decoding state for ``batch`` sequences (``DecodingState``).
        Raises RuntimeError for a bidirectional (encoder) layer."""
        _positive("batch", batch)
        if not self.causal:
            raise RuntimeError(f"{type(self).__name__}: a bidirectional (encoder) layer cannot "
                               "decode step by step")
        return self._init_state(batch)


class AIBAttention(Mixer):
    """AIB attention (alias Weird attention): Moss Sec. III, Weird-Net Sec. III.B,
    Algorithms 1 (causal) and 2 (bidirectional)::

        A = X W_A (+ b_A),  V = X W_V (+ b_V),  O = aib_scan(A, V, w),  Y = O W_O + b_O

    where aib_scan is the log-depth weighted prefix sum O = H / U over E = exp(A) with
    per-distance weights W = exp(cumsum(w)) (``seqmix.ops.aib_scan``).

    Parameters: ``w`` [K, D] (K = ceil(log2 max_len)), ``w_a.weight``, ``w_v.weight`` [D, D]
    (+ ``.bias`` with ``bias_av``), ``w_o.weight`` [D, D], ``w_o.bias`` [D].
    Init (Weird-Net Sec. III.G): W_A, W_V ~ N(0, 1/D); w ~ N(0, 1);
    W_O ~ N(0, (1 - 2/D) / (2 n_layers D)); biases 0.

    Args:
        d_model: D. max_len: the longest L accepted.
        causal: decoder (True) or encoder (False; D even: half the channels look forward).
        weights: 'prefix_exp' (default), 'exp' or 'ones' (PS attention; w is then fixed).
        bias_av: biases on A and V (Moss). impl: 'kernel' or 'reference' (seqmix.nn only).
        n_layers: depth N of the stack (W_O's init only). device, dtype: of the parameters.

    forward(x [B, L, D], mask=None, *, key_padding_mask=None) -> [B, L, D], dtype of x
    (float32, float64, or bfloat16 under autocast). Decoding state: E V and E caches
    [B, t, D], the lag weights [max_len, D] and the running maximum of A [B, 1, D].

    Raises:
        ValueError / TypeError naming the argument; ValueError from forward when L > max_len
        or x is not [B, L, D]; TypeError when x is not floating point.
    """

    def __init__(self, d_model: int, max_len: int, *, causal: bool = True,
                 weights: str = "prefix_exp", bias_av: bool = False, impl: str = "kernel",
                 n_layers: int = 1, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.max_len = _positive("max_len", max_len)
        if max_len > 2 ** 62:
            raise ValueError(f"max_len: at most 2^62 (62 distance levels), got {max_len}")
        self.causal = _flag("causal", causal)
        if not causal and d_model % 2:
            raise ValueError(f"d_model: the bidirectional form needs it even, got {d_model}")
        self.weights = _choice("weights", weights, _AIB_WEIGHTS)
        self.bias_av = _flag("bias_av", bias_av)
        self.impl = _choice("impl", impl, _IMPLS)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.w_a = nn.Linear(d_model, d_model, bias=bias_av, **f)
        self.w_v = nn.Linear(d_model, d_model, bias=bias_av, **f)
        self.w_o = nn.Linear(d_model, d_model, **f)
        self.w = nn.Parameter(torch.empty(aib_num_levels(max_len), d_model, **f),
                              requires_grad=weights != "ones")
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            _linear_init(self.w_a.weight, 1 / math.sqrt(self.d_model))
            _linear_init(self.w_v.weight, 1 / math.sqrt(self.d_model))
            if self.bias_av:
                self.w_a.bias.zero_()
                self.w_v.bias.zero_()
            nn.init.normal_(self.w, 0.0, 1.0)
            _linear_init(self.w_o.weight, _out_std(self.d_model, self.n_layers))
            self.w_o.bias.zero_()

    def extra_repr(self):
        return (f"d_model={self.d_model}, max_len={self.max_len}, causal={self.causal}, "
                f"weights={self.weights!r}, impl={self.impl!r}")

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("AIBAttention", x, self.d_model)
        _check_length("AIBAttention", x, self.max_len)
        mask = valid_mask(x, mask, key_padding_mask)
        o = self._ops.aib_scan(self.w_a(x), self.w_v(x), self.w, mask,
                               "causal" if self.causal else "bidirectional", self.weights,
                               self.impl)
        return self.w_o(o)

    def _init_state(self, batch):
        with torch.no_grad():
            # Every distance's weight a_d, reversed (row j: distance max_len - 1 - j), so that
            # a step's rows, distances t-1 .. 0, are the last t rows.
            lag = aib_lag_weights(aib_level_weights(self.w, self.weights),
                                  self.max_len).flip(0).contiguous()
        f = {"dtype": self.w.dtype, "device": self.w.device}
        empty = torch.empty(batch, 0, self.d_model, **f)
        m = torch.full((batch, 1, self.d_model), -math.inf, **f)
        return DecodingState("AIBAttention", batch, [empty, empty.clone(), lag, m])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token per sequence: x_t [B, D] -> y_t [B, D], row ``state.pos`` of forward
        on the whole prefix. O(t D) per step (every earlier token's distance weight
        changes with each new token, as a KV cache's scores do)."""
        _check_step("AIBAttention", x_t, self.d_model, state, "AIBAttention")
        if state.pos >= self.max_len:
            raise ValueError(f"AIBAttention.step: position {state.pos} reaches max_len "
                             f"{self.max_len}")
        ev, e_cache, lag_rev, m = state.tensors
        a = self.w_a(x_t).unsqueeze(1).to(e_cache.dtype)
        v = self.w_v(x_t).unsqueeze(1).to(e_cache.dtype)
        # Exponentials relative to the running maximum: the cache is rescaled only when a
        # channel's maximum grows, by exp(m_old - m_new) <= 1, so nothing overflows.
        m_new = torch.maximum(m, a)
        if state.pos > 0 and bool((m_new > m).any()):
            scale = torch.exp(m - m_new)
            ev = ev * scale
            e_cache = e_cache * scale
        e = torch.exp(a - m_new)
        ev = torch.cat([ev, e * v], 1)
        e_cache = torch.cat([e_cache, e], 1)
        t = e_cache.shape[1]
        lag = lag_rev[lag_rev.shape[0] - t:]  # row j: distance t-1-j
        h, u = (ev * lag).sum(1), (e_cache * lag).sum(1)
        state.tensors = [ev, e_cache, lag_rev, m_new]
        state.pos += 1
        return self.w_o(h / u)


class SelfAttention(Mixer):
    """Multi-head softmax self-attention (Vaswani et al. 2017, eq. 1; GPT-2's layout), the
    baseline of every paper and Weird-Net Structure B's even layers::

        Q, K, V = X W_qkv + b;  head_h = softmax(Q_h K_h^T / sqrt(d_head) + M) V_h
        Y = concat(heads) W_out + b_out

    Without a padding mask it runs PyTorch's ``scaled_dot_product_attention``; with one,
    ``seqmix.ops.attention`` (padded rows output exactly 0, where SDPA gives NaN).

    Parameters: ``qkv`` (Linear D -> 3D), ``out`` (Linear D -> D). Init: qkv ~ N(0, 1/D),
    out ~ N(0, (1 - 2/D) / (2 N D)), biases 0. Decoding state: K and V caches
    [B, H, t, d_head].

    Args:
        d_model: D, divisible by n_heads. n_heads: H. causal: decoder or encoder.
        dropout: on the attention probabilities in training. bias: projection biases.
        impl: 'kernel' or 'reference'. n_layers: init only. device, dtype: of the parameters.
    """

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = True,
                 dropout: float = 0.0, bias: bool = True, impl: str = "kernel",
                 n_layers: int = 1, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.n_heads = _positive("n_heads", n_heads)
        if d_model % n_heads:
            raise ValueError(f"n_heads: must divide d_model ({d_model}), got {n_heads}")
        self.causal = _flag("causal", causal)
        self.dropout = _probability("dropout", dropout)
        self.bias = _flag("bias", bias)
        self.impl = _choice("impl", impl, _IMPLS)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias, **f)
        self.out = nn.Linear(d_model, d_model, bias=bias, **f)
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            _linear_init(self.qkv.weight, 1 / math.sqrt(self.d_model))
            _linear_init(self.out.weight, _out_std(self.d_model, self.n_layers))
            if self.bias:
                self.qkv.bias.zero_()
                self.out.bias.zero_()

    def extra_repr(self):
        return f"d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}"

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("SelfAttention", x, self.d_model)
        mask = valid_mask(x, mask, key_padding_mask)
        B, L, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(x).view(B, L, 3, H, D // H).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        direction = "causal" if self.causal else "bidirectional"
        if mask is None and self.impl == "kernel" and p == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        elif self.impl == "kernel" and p == 0:
            y = self._ops.attention(q, k, v, mask, direction, "kernel")
        else:
            y = self._ops.attention_reference(q, k, v, mask, direction, p)
        y = self.out(y.transpose(1, 2).reshape(B, L, D))
        if mask is not None:
            y = y.masked_fill(mask.logical_not().unsqueeze(-1), 0)
        return y

    def _init_state(self, batch):
        f = {"dtype": self.qkv.weight.dtype, "device": self.qkv.weight.device}
        empty = torch.empty(batch, self.n_heads, 0, self.d_model // self.n_heads, **f)
        return DecodingState("SelfAttention", batch, [empty, empty.clone()])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token per sequence: x_t [B, D] -> y_t [B, D] (a KV cache)."""
        _check_step("SelfAttention", x_t, self.d_model, state, "SelfAttention")
        B, H, dh = x_t.shape[0], self.n_heads, self.d_model // self.n_heads
        parts = self.qkv(x_t).view(B, 3, H, 1, dh)
        k_cache, v_cache = state.tensors
        k_cache = torch.cat([k_cache, parts[:, 1].to(k_cache.dtype)], 2)
        v_cache = torch.cat([v_cache, parts[:, 2].to(v_cache.dtype)], 2)
        scores = torch.matmul(parts[:, 0], k_cache.transpose(-2, -1)) / math.sqrt(dh)
        y = torch.matmul(torch.softmax(scores, -1), v_cache)
        state.tensors = [k_cache, v_cache]
        state.pos += 1
        return self.out(y.reshape(B, self.d_model))


def ces_coefficients(log_lambda: torch.Tensor, log_alpha: torch.Tensor,
                     log_beta: torch.Tensor, max_lambda: float = 0.9999,
                     normalize: bool = False):
    """Complex exponential smoothing coefficients: ETSMLP Sec. 3.1, eqs. 10-12 (the authors'
    class CETS), complex numbers as [..., 2] (real, imaginary)::

        q = exp(log_lambda) * alpha,  alpha = e^{a0} + i e^{a1},  mu = exp(q)
        if |mu| > max_lambda: Re q = log(max_lambda)      (no gradient through the bound)
        c = exp(log_beta) (1 - mu)  [* sqrt(1 - |mu|^2) if normalize]

    Args: log_lambda, log_alpha, log_beta [C, 2]; max_lambda in (0, 1]; normalize.
    Returns: (q, mu, c), each [C, 2]."""
    mag_w = torch.exp(log_lambda[:, 0])
    wr, wi = mag_w * torch.cos(log_lambda[:, 1]), mag_w * torch.sin(log_lambda[:, 1])
    ar, ai = torch.exp(log_alpha[:, 0]), torch.exp(log_alpha[:, 1])
    qr = wr * ar - wi * ai
    qi = wr * ai + wi * ar
    log_max = math.log(max_lambda)
    over = (qr > log_max).to(qr.dtype)
    qr = qr + over * (log_max - qr)
    mag = torch.exp(qr)
    mur, mui = mag * torch.cos(qi), mag * torch.sin(qi)
    mag_b = torch.exp(log_beta[:, 0])
    br, bi = mag_b * torch.cos(log_beta[:, 1]), mag_b * torch.sin(log_beta[:, 1])
    cr = br * (1 - mur) + bi * mui
    ci = bi * (1 - mur) - br * mui
    if normalize:
        f = torch.sqrt(1 - mag * mag)
        cr, ci = cr * f, ci * f
    return torch.stack([qr, qi], 1), torch.stack([mur, mui], 1), torch.stack([cr, ci], 1)


class CES(nn.Module):
    """Complex exponential smoothing with its shortcut: ETSMLP Sec. 3.1, eqs. 10-14 (the
    authors' class CETS): y = ces_scan(x) + omega * x (``shortcut='sigmoid'``: sigmoid(omega)
    * x, eq. 13), s_t = mu s_{t-1} + x_t, y_t = Re(c s_t).

    Parameters (C = channels, 2 channels when bidirectional; P = 2, or 1 with ``real``):
    ``log_lambda`` [C, P], ``log_alpha`` [C, P] (unless ``alpha=False``), ``log_beta``
    [C, P] (unless ``beta=False``), ``omega`` [channels] (unless shortcut 'none').
    Init: |lambda| on the ring [r_min, r_max] (|lambda|^2 uniform) with phase uniform in
    [0, max_phase], log_alpha = log dt (dt log-uniform in [dt_min, dt_max]),
    log_beta ~ N(0, 0.2^2), omega ~ N(0, 1).

    forward(x [B, L, channels], mask=None, *, key_padding_mask=None) -> [B, L, channels].
    Decoding state: s [B, channels, 2] (complex).
    """

    _ops = None

    def __init__(self, channels: int, *, bidirectional: bool = False, r_min: float = 0.1,
                 r_max: float = 0.9, max_phase: float = 2 * math.pi, dt_min: float = 1e-3,
                 dt_max: float = 0.1, max_lambda: float = 0.9999, shortcut: str = "omega",
                 normalize: bool = False, impl: str = "kernel", alpha: bool = True,
                 beta: bool = True, real: bool = False, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.channels = _positive("channels", channels)
        self.bidirectional = _flag("bidirectional", bidirectional)
        self.r_min, self.r_max = _number("r_min", r_min), _number("r_max", r_max)
        if not 0 < r_min <= r_max < 1:
            raise ValueError(f"r_min, r_max: need 0 < r_min <= r_max < 1, got {r_min}, {r_max}")
        self.max_phase = _number("max_phase", max_phase)
        if max_phase < 0:
            raise ValueError(f"max_phase: must be a finite number >= 0 (radians), got {max_phase}")
        self.dt_min, self.dt_max = _number("dt_min", dt_min), _number("dt_max", dt_max)
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"dt_min, dt_max: need 0 < dt_min <= dt_max, got {dt_min}, "
                             f"{dt_max}")
        self.max_lambda = _number("max_lambda", max_lambda)
        self.normalize = _flag("normalize", normalize)
        if not 0 < max_lambda <= 1 or (normalize and max_lambda >= 1):
            raise ValueError("max_lambda: must be in (0, 1] (below 1 with normalize), got "
                             f"{max_lambda}")
        self.shortcut = _choice("shortcut", shortcut, _SHORTCUTS)
        self.impl = _choice("impl", impl, _IMPLS)
        self.alpha, self.beta, self.real = (_flag("alpha", alpha), _flag("beta", beta),
                                            _flag("real", real))
        C, P = (2 if bidirectional else 1) * channels, 1 if real else 2
        f = {"device": device, "dtype": dtype}
        self.log_lambda = nn.Parameter(torch.empty(C, P, **f))
        self.log_alpha = nn.Parameter(torch.empty(C, P, **f)) if alpha else None
        self.log_beta = nn.Parameter(torch.empty(C, P, **f)) if beta else None
        self.omega = nn.Parameter(torch.empty(channels, **f)) if shortcut != "none" else None
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            C = self.log_lambda.shape[0]
            u1 = torch.rand(C, dtype=torch.float64)
            u2 = torch.rand(C, dtype=torch.float64)
            nu = -0.5 * torch.log(u1 * (self.r_max ** 2 - self.r_min ** 2) + self.r_min ** 2)
            theta = torch.zeros_like(u2) if self.real else self.max_phase * u2
            self.log_lambda[:, 0].copy_(0.5 * torch.log(nu * nu + theta * theta))
            if not self.real:
                self.log_lambda[:, 1].copy_(torch.atan2(theta, -nu))
            # Drawn even when unused: the other parameters get the same values with and
            # without an ablation.
            log_dt = math.log(self.dt_min) + torch.rand(C, dtype=torch.float64) * (
                math.log(self.dt_max) - math.log(self.dt_min))
            if self.log_alpha is not None:
                self.log_alpha.copy_(log_dt.unsqueeze(1).expand_as(self.log_alpha))
            if self.log_beta is not None:
                nn.init.normal_(self.log_beta, 0.0, 0.2)
            if self.omega is not None:
                nn.init.normal_(self.omega, 0.0, 1.0)

    def extra_repr(self):
        return (f"channels={self.channels}, bidirectional={self.bidirectional}, "
                f"shortcut={self.shortcut!r}, normalize={self.normalize}")

    def coefficients(self):
        """(q, mu, c), each [C, 2], from the parameters (the ablations' fixed parts filled
        in: a real lambda has argument pi, an absent alpha or beta is 1)."""
        ll = self.log_lambda

        def complete(p, imaginary):
            return torch.cat([p, torch.full_like(p, imaginary)], 1) if self.real else p

        C = ll.shape[0]
        one = torch.tensor([0.0, -math.inf], dtype=ll.dtype, device=ll.device).expand(C, 2)
        la = complete(self.log_alpha, -math.inf) if self.log_alpha is not None else one
        lb = (complete(self.log_beta, 0.0) if self.log_beta is not None
              else torch.zeros(C, 2, dtype=ll.dtype, device=ll.device))
        return ces_coefficients(complete(ll, math.pi), la, lb, self.max_lambda, self.normalize)

    def _shortcut(self, x):
        if self.shortcut == "omega":
            return x * self.omega
        if self.shortcut == "sigmoid":
            return x * torch.sigmoid(self.omega)
        return None

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("CES", x, self.channels)
        mask = valid_mask(x, mask, key_padding_mask)
        _, mu, c = self.coefficients()
        y = self._ops.ces_scan(x, mu, c, mask,
                               "bidirectional" if self.bidirectional else "causal", self.impl)
        s = self._shortcut(x)
        return y if s is None else y + s

    def init_state(self, batch):
        """Decoding state s = 0 [batch, channels, 2]. RuntimeError if bidirectional."""
        _positive("batch", batch)
        if self.bidirectional:
            raise RuntimeError("CES: a bidirectional CES cannot decode step by step")
        s = torch.zeros(batch, self.channels, 2, dtype=self.log_lambda.dtype,
                        device=self.log_lambda.device)
        return DecodingState("CES", batch, [s])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """s <- mu s + x_t, y_t = Re(c s) (+ the shortcut): x_t [B, channels] -> [B, channels]."""
        if self.bidirectional:
            raise RuntimeError("CES: a bidirectional CES cannot decode step by step")
        _check_step("CES", x_t, self.channels, state, "CES")
        _, mu, c = self.coefficients()
        s = state.tensors[0]
        sr, si = s[..., 0], s[..., 1]
        nr = mu[:, 0] * sr - mu[:, 1] * si + x_t
        ni = mu[:, 0] * si + mu[:, 1] * sr
        state.tensors = [torch.stack([nr, ni], 2)]
        state.pos += 1
        y = c[:, 0] * nr - c[:, 1] * ni
        sc = self._shortcut(x_t)
        return y if sc is None else y + sc


class ESMLP(Mixer):
    """The ETSMLP block's mixer (ETSMLP Sec. 3.2, Fig. 2): in_proj (D -> H), CES over the H
    channels, ReLU, out_proj (H -> D), optionally gated by sigmoid(W_g X) (ETSMLP-Gate).

    Parameters: ``in_proj``, ``ces.*`` (see CES), ``out_proj``, ``gate_proj`` if gated.
    Init: Xavier-uniform weights, zero biases (the authors' reset).

    Args:
        d_model: D. d_hidden: H, the CES channels. causal: language modelling (True) or the
        paper's bidirectional encoder. gate: ETSMLP-Gate. The rest: CES's options.
    """

    def __init__(self, d_model: int, d_hidden: int, *, causal: bool = True,
                 gate: bool = False, r_min: float = 0.1, r_max: float = 0.9,
                 max_phase: float = 2 * math.pi, dt_min: float = 1e-3, dt_max: float = 0.1,
                 max_lambda: float = 0.9999, shortcut: str = "omega", normalize: bool = False,
                 impl: str = "kernel", alpha: bool = True, beta: bool = True,
                 real: bool = False, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.d_hidden = _positive("d_hidden", d_hidden)
        self.causal = _flag("causal", causal)
        self.gate = _flag("gate", gate)
        f = {"device": device, "dtype": dtype}
        self.in_proj = nn.Linear(d_model, d_hidden, **f)
        self.ces = self._ces_class(d_hidden, bidirectional=not causal, r_min=r_min,
                                   r_max=r_max, max_phase=max_phase, dt_min=dt_min,
                                   dt_max=dt_max, max_lambda=max_lambda, shortcut=shortcut,
                                   normalize=normalize, impl=impl, alpha=alpha, beta=beta,
                                   real=real, **f)
        self.out_proj = nn.Linear(d_hidden, d_model, **f)
        self.gate_proj = nn.Linear(d_model, d_model, **f) if gate else None
        self.reset_parameters()

    _ces_class = CES

    def reset_parameters(self):
        with torch.no_grad():
            for lin in (self.in_proj, self.out_proj, self.gate_proj):
                if lin is not None:
                    nn.init.xavier_uniform_(lin.weight)
                    lin.bias.zero_()

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("ESMLP", x, self.d_model)
        mask = valid_mask(x, mask, key_padding_mask)
        h = self.in_proj(x)
        if mask is not None:
            h = h.masked_fill(mask.logical_not().unsqueeze(-1), 0)
        z = self.out_proj(torch.relu(self.ces(h, mask)))
        return z if self.gate_proj is None else z * torch.sigmoid(self.gate_proj(x))

    def _init_state(self, batch):
        return DecodingState("ESMLP", batch, [self.ces.init_state(batch)])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token: x_t [B, D] -> [B, D] (CES's recurrence, O(H) per step)."""
        _check_step("ESMLP", x_t, self.d_model, state, "ESMLP")
        z = self.out_proj(torch.relu(self.ces.step(self.in_proj(x_t), state.tensors[0])))
        state.pos += 1
        return z if self.gate_proj is None else z * torch.sigmoid(self.gate_proj(x_t))


class Extractor(Mixer):
    """The Extractor (The Extractor, Sec. 5, eqs. 18-20): a causal convolution with one
    learned D x D matrix per lag, times an element-wise adjustment, then an output
    projection::

        ext[i] = sum_{k=0..i} x[i-k] @ W_ext[k];  y = W_opt((x W_adj) * ext)

    Parameters: ``w_ext`` [max_len, D, D] ~ N(0, 1/(max_len D)), ``w_adj.weight`` [D, D]
    ~ N(0, 1/D) (with ``adjust``), ``w_opt.weight`` [D, D] ~ N(0, 1/(2 N D)) (with
    ``out_proj``); no biases. Decoding state: the inputs so far [B, t, D].

    Args:
        d_model: D. max_len: the number of lag matrices (the longest sequence).
        adjust, out_proj: the two ablations of the paper. impl: 'kernel' (FFT) or
        'reference' (the literal per-lag sum). n_layers: init only.
    """

    causal = True

    def __init__(self, d_model: int, max_len: int, *, adjust: bool = True,
                 out_proj: bool = True, impl: str = "kernel", n_layers: int = 1, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.max_len = _positive("max_len", max_len)
        self.adjust, self.out_proj = _flag("adjust", adjust), _flag("out_proj", out_proj)
        self.impl = _choice("impl", impl, _IMPLS)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.w_ext = nn.Parameter(torch.empty(max_len, d_model, d_model, **f))
        self.w_adj = nn.Linear(d_model, d_model, bias=False, **f) if adjust else None
        self.w_opt = nn.Linear(d_model, d_model, bias=False, **f) if out_proj else None
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            D, n = self.d_model, self.n_layers
            nn.init.normal_(self.w_ext, 0.0, 1 / math.sqrt(self.max_len * D))
            if self.w_adj is not None:
                nn.init.normal_(self.w_adj.weight, 0.0, 1 / math.sqrt(D))
            if self.w_opt is not None:
                nn.init.normal_(self.w_opt.weight, 0.0, 1 / math.sqrt(2.0 * n * D))

    def _finish(self, x, ext):
        y = self.w_adj(x) * ext if self.w_adj is not None else ext
        return self.w_opt(y) if self.w_opt is not None else y

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("Extractor", x, self.d_model)
        _check_length("Extractor", x, self.max_len, " (the number of lag matrices)")
        mask = valid_mask(x, mask, key_padding_mask)
        if mask is None:
            return self._finish(x, self._ops.extractor_conv(x, self.w_ext, self.impl))
        # Padded inputs zeroed (they feed nothing forward), padded outputs zeroed.
        keep = mask.unsqueeze(-1).to(x.dtype)
        xin = x * keep
        return self._finish(xin, self._ops.extractor_conv(xin, self.w_ext, self.impl)) * keep

    def _init_state(self, batch):
        empty = torch.empty(batch, 0, self.d_model, dtype=self.w_ext.dtype,
                            device=self.w_ext.device)
        return DecodingState("Extractor", batch, [empty])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token: x_t [B, D] -> [B, D]; O(t D^2) per step (every lag is a product)."""
        _check_step("Extractor", x_t, self.d_model, state, "Extractor")
        if state.pos >= self.max_len:
            raise ValueError(f"Extractor.step: position {state.pos} reaches max_len "
                             f"{self.max_len} (the number of lag matrices)")
        history = torch.cat([state.tensors[0], x_t.unsqueeze(1).to(state.tensors[0].dtype)], 1)
        B, t, D = history.shape
        # sum_k x[t-1-k] W[k]: the flipped history against the first t lag matrices, in the
        # history's dtype with autocast off, as the op's own forward computes.
        with torch.autocast(history.device.type, enabled=False):
            ext = torch.matmul(history.flip(1).reshape(B, t * D),
                               self.w_ext[:t].reshape(t * D, D).to(history.dtype))
        state.tensors = [history]
        state.pos += 1
        return self._finish(x_t, ext.to(x_t.dtype))


class CausalMean(Mixer):
    """The causal-mean mixer (seqmix's example of a mixer added in one folder,
    src/mixers/mean): Y = W_o causal_mean(W_v X) (``torch.ops.seqmix.causal_mean``: the
    mean of the last ``window`` valid positions). Parameters ``w_v`` (no bias), ``w_o``;
    W_v ~ N(0, 1/D), W_o ~ N(0, 1/(2 N D)), bias 0."""

    causal = True

    def __init__(self, d_model: int, window: int = 4, *, impl: str = "kernel",
                 n_layers: int = 1, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.window = _positive("window", window)
        self.impl = _choice("impl", impl, _IMPLS)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.w_v = nn.Linear(d_model, d_model, bias=False, **f)
        self.w_o = nn.Linear(d_model, d_model, **f)
        with torch.no_grad():
            nn.init.normal_(self.w_v.weight, 0.0, 1 / math.sqrt(d_model))
            nn.init.normal_(self.w_o.weight, 0.0, 1 / math.sqrt(2.0 * n_layers * d_model))
            self.w_o.bias.zero_()

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("CausalMean", x, self.d_model)
        mask = valid_mask(x, mask, key_padding_mask)
        y = self.w_o(self._ops.causal_mean(self.w_v(x), self.window, mask, self.impl))
        return y if mask is None else y * mask.unsqueeze(-1).to(y.dtype)

    def _init_state(self, batch):
        empty = torch.empty(batch, 0, self.d_model, dtype=self.w_v.weight.dtype,
                            device=self.w_v.weight.device)
        return DecodingState("CausalMean", batch, [empty])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        _check_step("CausalMean", x_t, self.d_model, state, "CausalMean")
        last = torch.cat([state.tensors[0], self.w_v(x_t).unsqueeze(1).to(
            state.tensors[0].dtype)], 1)[:, -self.window:]
        state.tensors = [last]
        state.pos += 1
        return self.w_o(last.mean(1))


# ---- blocks and models ----------------------------------------------------------------------

_ACTIVATIONS = ("gelu", "relu", "leaky_relu")


class FeedForward(nn.Module):
    """The block's MLP: w_2(act(w_1 x)), act GELU (GPT-2), ReLU or Leaky-ReLU (slope 0.01,
    Moss). Init: W_1 ~ N(0, 1/D), W_2 ~ N(0, 1.7047^2 (1 - 2/D) / (2 N F)), biases 0."""

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "gelu",
                 dropout: float = 0.0, bias: bool = True, n_layers: int = 1, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model, self.d_ff = _positive("d_model", d_model), _positive("d_ff", d_ff)
        self.activation = _choice("activation", activation, _ACTIVATIONS)
        self.dropout = _probability("dropout", dropout)
        self.bias = _flag("bias", bias)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias, **f)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias, **f)
        with torch.no_grad():
            nn.init.normal_(self.w_1.weight, 0.0, 1 / math.sqrt(d_model))
            std = 1.7047 * math.sqrt(max(1.0 - 2.0 / d_model, 1e-3) / (2.0 * n_layers * d_ff))
            nn.init.normal_(self.w_2.weight, 0.0, std)
            if bias:
                self.w_1.bias.zero_()
                self.w_2.bias.zero_()

    def forward(self, x):
        h = self.w_1(x)
        if self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "relu":
            h = F.relu(h)
        else:
            h = F.leaky_relu(h, 0.01)
        if self.dropout > 0 and self.training:
            h = F.dropout(h, self.dropout, True)
        return self.w_2(h)


class Block(nn.Module):
    """One layer of a seqmix stack (Weird-Net Sec. III.E, Fig. 4): norm -> mixer -> residual,
    norm -> FFN -> residual (pre-norm, GPT-2's arrangement; ``pre_norm=False``: post-norm).
    Without an FFN (``with_ffn=False``) it is norm -> mixer -> residual: the ETSMLP block,
    whose ESMLP mixer is itself the MLP.

    Parameters: ``mixer.*`` (the given mixer's own), ``ffn.w_1``, ``ffn.w_2``, and
    ``norm_1``, ``norm_2`` (LayerNorm) or ``bn_1``, ``bn_2`` (BatchNorm over batch and
    positions, ``norm_type='batch'``).

    Args:
        mixer: a seqmix mixer module (AIBAttention, SelfAttention, ESMLP, Extractor, ...).
        d_ff: FFN width (default 4 D). activation: 'gelu', 'relu' or 'leaky_relu'.
        ffn_bias, pre_norm, dropout (residual and FFN), norm (False: no norms, the
        Extractor paper's stack), with_ffn, norm_type ('layer' or 'batch'), n_layers.

    forward(x [B, L, D], mask=None, *, key_padding_mask=None) -> [B, L, D];
    step(x_t [B, D], state) with the mixer's ``init_state``.
    """

    def __init__(self, mixer: Mixer, *, d_ff: Optional[int] = None, activation: str = "gelu",
                 ffn_bias: bool = True, pre_norm: bool = True, dropout: float = 0.0,
                 norm: bool = True, with_ffn: bool = True, norm_type: str = "layer",
                 n_layers: int = 1, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        if not isinstance(mixer, Mixer):
            raise TypeError("mixer: expected a seqmix mixer (AIBAttention, SelfAttention, "
                            f"ESMLP, Extractor, CausalMean), got {type(mixer).__name__}")
        D = mixer.d_model
        self.d_model = D
        self.pre_norm = _flag("pre_norm", pre_norm)
        self.dropout = _probability("dropout", dropout)
        _flag("norm", norm)
        _flag("with_ffn", with_ffn)
        _choice("norm_type", norm_type, ("layer", "batch"))
        f = {"device": device, "dtype": dtype}
        self.mixer = mixer
        self.ffn = FeedForward(D, 4 * D if d_ff is None else _positive("d_ff", d_ff),
                               activation=activation, dropout=dropout, bias=ffn_bias,
                               n_layers=n_layers, **f) if with_ffn else None
        self.norm_1 = self.norm_2 = self.bn_1 = self.bn_2 = None
        if norm and norm_type == "layer":
            self.norm_1 = nn.LayerNorm(D, **f)
            self.norm_2 = nn.LayerNorm(D, **f) if with_ffn else None
        elif norm:
            self.bn_1 = nn.BatchNorm1d(D, **f)
            self.bn_2 = nn.BatchNorm1d(D, **f) if with_ffn else None

    @staticmethod
    def _norm(ln, bn, x):
        if ln is not None:
            return ln(x)
        if bn is None:
            return x
        return bn(x.transpose(1, 2)).transpose(1, 2) if x.dim() == 3 else bn(x)

    def _drop(self, x):
        return F.dropout(x, self.dropout, True) if self.dropout > 0 and self.training else x

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        mask = valid_mask(x, mask, key_padding_mask)
        n1 = lambda t: self._norm(self.norm_1, self.bn_1, t)  # noqa: E731
        n2 = lambda t: self._norm(self.norm_2, self.bn_2, t)  # noqa: E731
        if self.pre_norm:
            h = x + self._drop(self.mixer(n1(x), mask))
            return h if self.ffn is None else h + self._drop(self.ffn(n2(h)))
        h = n1(x + self._drop(self.mixer(x, mask)))
        return h if self.ffn is None else n2(h + self._drop(self.ffn(h)))

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token: x_t [B, D] -> [B, D], with a state from ``self.mixer.init_state``."""
        n1 = lambda t: self._norm(self.norm_1, self.bn_1, t)  # noqa: E731
        n2 = lambda t: self._norm(self.norm_2, self.bn_2, t)  # noqa: E731
        if self.pre_norm:
            h = x_t + self.mixer.step(n1(x_t), state)
            return h if self.ffn is None else h + self.ffn(n2(h))
        h = n1(x_t + self.mixer.step(x_t, state))
        return h if self.ffn is None else n2(h + self.ffn(h))


# Each mixer section's keys (the C++ registry rows' fields): an unknown key is an error, as
# it is for the library's configuration reader.
_SECTION_KEYS = {
    "aib": {"weights", "bias", "impl"},
    "attention": {"impl"},
    "ces": {"gate", "shortcut", "normalize", "r_min", "r_max", "max_phase", "max_lambda",
            "impl", "alpha", "beta", "real"},
    "extractor": {"adjust", "out_proj", "impl"},
    "mean": {"window", "impl"},
}
_CAUSAL_ONLY = {"extractor", "causal-mean"}


def _section(model, name):
    section = model.get(name, {})
    if not isinstance(section, dict):
        raise ValueError(f"model.{name}: expected a table of options, got {section!r}")
    unknown = sorted(set(section) - _SECTION_KEYS[name])
    if unknown:
        raise ValueError(f"model.{name}.{unknown[0]}: unknown key (expected one of "
                         f"{', '.join(sorted(_SECTION_KEYS[name]))})")
    return section


def _build_mixer(classes, name, model, f):
    """Layer ``name`` of the mixer registry (models/mixer_registry.h) from the [model]
    configuration, as the C++ registry row builds it; (mixer, has_ffn)."""
    D, L, N, causal = model["d_model"], model["max_len"], model["n_layers"], model["causal"]
    if name == "aib":
        s = _section(model, "aib")
        return classes["AIBAttention"](D, L, causal=causal, weights=s.get("weights", "prefix_exp"),
                                       bias_av=s.get("bias", False), impl=s.get("impl", "kernel"),
                                       n_layers=N, **f), True
    if name == "attention":
        s = _section(model, "attention")
        return classes["SelfAttention"](D, model["n_heads"], causal=causal,
                                        dropout=model.get("dropout", 0.0),
                                        bias=model.get("bias", True),
                                        impl=s.get("impl", "kernel"), n_layers=N, **f), True
    if name == "etsmlp":
        s = dict(_section(model, "ces"))
        gate = s.pop("gate", False)
        return classes["ESMLP"](D, model["d_ff"], causal=causal, gate=gate, **s, **f), False
    if name == "extractor":
        s = _section(model, "extractor")
        return classes["Extractor"](D, L, adjust=s.get("adjust", True),
                                    out_proj=s.get("out_proj", True),
                                    impl=s.get("impl", "kernel"), n_layers=N, **f), True
    if name == "causal-mean":
        s = _section(model, "mean")
        return classes["CausalMean"](D, s.get("window", 4), impl=s.get("impl", "kernel"),
                                     n_layers=N, **f), True
    raise ValueError(f"model.mixers: unknown mixer {name!r} (expected aib, attention, etsmlp, "
                     "extractor or causal-mean)")


_MODEL_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len", "mixers",
               "causal")


class SequenceModel(nn.Module):
    """The stack every seqmix model shares (Weird-Net Sec. III.E, Fig. 4; GPT-2 for the
    Transformer): token embedding + learned position embedding, ``n_layers`` blocks whose
    mixers ``model.mixers`` names (layer i: mixers[i % len(mixers)]), a final LayerNorm,
    and the language-model head (tied to the token embedding unless
    ``tie_embeddings = false``); classifiers add ``cls_head`` (and ``cls_pair_proj``).

    Built from the [model] section of a resolved seqmix configuration (a dict, as
    ``config.toml`` of a run holds it, or ``seqmix.build(...).config["model"]``). Parameter
    names, shapes and initialisation are those of the C++ model (models/sequence_model.h),
    so state dicts load both ways.

    Legend: B batch, L sequence length (<= max_len), D = d_model, V = vocab_size.
    ``forward(tokens [B, L] int64, mask=None, *, key_padding_mask=None)`` -> logits
    [B, L, V] in the parameters' dtype (bfloat16 under CPU autocast).
    Raises ValueError for L > max_len or a mask of the wrong shape or dtype, IndexError
    for a token id outside [0, V).
    """

    _classes = None  # the layer classes of seqmix.nn or seqmix.reference

    def __init__(self, model_config: dict, *, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        if not isinstance(model_config, dict):
            raise TypeError("model_config: expected the [model] section as a dict, got "
                            f"{type(model_config).__name__}")
        missing = [k for k in _MODEL_KEYS if k not in model_config]
        if missing:
            raise ValueError(f"model_config: missing model.{', model.'.join(missing)}")
        c = model_config
        self.model_config = dict(c)
        D = _positive("model.d_model", c["d_model"])
        self.vocab_size = _positive("model.vocab_size", c["vocab_size"])
        self.max_len = _positive("model.max_len", c["max_len"])
        self.causal = _flag("model.causal", c["causal"])
        self.tie_embeddings = _flag("model.tie_embeddings", c.get("tie_embeddings", True))
        n_layers = _positive("model.n_layers", c["n_layers"])
        mixers = c["mixers"]
        if not isinstance(mixers, (list, tuple)) or not mixers:
            raise ValueError(f"model.mixers: expected a non-empty list of names, got {mixers!r}")
        if not self.causal and _CAUSAL_ONLY & set(mixers):
            raise ValueError(f"model.mixers: {sorted(_CAUSAL_ONLY & set(mixers))[0]} is causal "
                             "only; an encoder (model.causal = false) cannot use it")
        n_classes = c.get("n_classes", 0)
        if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 0:
            raise ValueError(f"model.n_classes: expected an int >= 0, got {n_classes!r}")
        cls_pair = _flag("model.cls_pair", c.get("cls_pair", False))
        if cls_pair and n_classes == 0:
            raise ValueError("model.cls_pair: a pair classifier needs model.n_classes > 0")
        f = {"device": device, "dtype": dtype}
        self.tok_emb = nn.Embedding(self.vocab_size, D, **f)
        self.pos_emb = nn.Parameter(torch.empty(self.max_len, D, **f))
        self.blocks = nn.ModuleList()
        norm = c.get("norm", True)
        for i in range(n_layers):
            # The mixer first, then its block: the order the C++ model draws its weights in.
            mixer, has_ffn = _build_mixer(self._classes, mixers[i % len(mixers)], c, f)
            self.blocks.append(self._classes["Block"](
                mixer, d_ff=c["d_ff"], activation=c.get("activation", "gelu"),
                ffn_bias=c.get("bias", True), pre_norm=c.get("pre_norm", True),
                dropout=c.get("dropout", 0.0), norm=norm, with_ffn=has_ffn,
                norm_type=c.get("norm_type", "layer"), n_layers=n_layers, **f))
        self.dropout = _probability("model.dropout", c.get("dropout", 0.0))
        self.norm_f = nn.LayerNorm(D, **f) if norm else None
        self.head = None if self.tie_embeddings else nn.Linear(D, self.vocab_size, bias=False,
                                                               **f)
        self.cls_head = nn.Linear(D, n_classes, **f) if n_classes > 0 else None
        self.cls_pair_proj = nn.Linear(4 * D, D, **f) if cls_pair else None
        with torch.no_grad():
            std = 1 / math.sqrt(D)
            nn.init.normal_(self.tok_emb.weight, 0.0, std)
            nn.init.normal_(self.pos_emb, 0.0, std)
            if self.head is not None:
                nn.init.normal_(self.head.weight, 0.0, std)
            if self.cls_head is not None:
                nn.init.normal_(self.cls_head.weight, 0.0, std)
                self.cls_head.bias.zero_()
            if self.cls_pair_proj is not None:
                nn.init.normal_(self.cls_pair_proj.weight, 0.0, 1 / math.sqrt(4.0 * D))
                self.cls_pair_proj.bias.zero_()

    def _check_tokens(self, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or \
                tokens.dtype != torch.int64:
            what = (f"{tokens.dtype} {list(tokens.shape)}" if isinstance(tokens, torch.Tensor)
                    else type(tokens).__name__)
            raise ValueError(f"tokens: expected an int64 tensor [B, L], got {what}")
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens: sequence length {tokens.shape[1]} exceeds max_len "
                             f"{self.max_len} (model.max_len)")
        where = self.tok_emb.weight.device
        if tokens.device != where:
            raise ValueError(f"tokens: on {tokens.device}, but the model is on {where} "
                             "(move one with .to())")
        # A value check reads the data: skipped while torch.compile / export traces, and on
        # the meta device (shapes only, no values).
        if tokens.numel() and not tokens.is_meta and not torch.compiler.is_compiling() and \
                not torch.jit.is_tracing():
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < 0 or hi >= self.vocab_size:
                raise IndexError(f"tokens: ids must be in [0, {self.vocab_size}) "
                                 f"(model.vocab_size), got {lo} .. {hi}")

    def hidden(self, tokens, mask=None, *, key_padding_mask=None):
        """Hidden states after the final norm: tokens [B, L] -> [B, L, D]."""
        self._check_tokens(tokens)
        mask = valid_mask(tokens, mask, key_padding_mask)
        L = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb[:L]
        if self.dropout > 0 and self.training:
            x = F.dropout(x, self.dropout, True)
        for block in self.blocks:
            x = block(x, mask)
        return x if self.norm_f is None else self.norm_f(x)

    def logits(self, h):
        """Next-token logits from hidden states: [..., D] -> [..., V]."""
        return torch.matmul(h, self.tok_emb.weight.t()) if self.head is None else self.head(h)

    def forward(self, tokens: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Next-token logits: tokens [B, L] -> [B, L, V]."""
        return self.logits(self.hidden(tokens, mask, key_padding_mask=key_padding_mask))

    def pooled(self, tokens, mask=None, *, key_padding_mask=None):
        """One vector per sequence: the mean over valid positions (encoders) or the last
        valid position (decoders): tokens [B, L] -> [B, D]."""
        h = self.hidden(tokens, mask, key_padding_mask=key_padding_mask)
        valid = valid_mask(tokens, mask, key_padding_mask)
        B, L = tokens.shape
        if valid is None:
            valid = torch.ones(B, L, dtype=torch.bool, device=tokens.device)
        if not torch.compiler.is_compiling() and (L == 0 or not bool(valid.any(1).all())):
            raise ValueError("pooled: every sequence needs at least one valid position")
        if not self.causal:
            w = valid.unsqueeze(-1).to(h.dtype)
            return (h * w).sum(1) / w.sum(1)
        last = (L - 1) - valid.flip(1).to(torch.float32).argmax(1)
        return h[torch.arange(B, device=h.device), last]

    def classify(self, tokens, mask=None, *, key_padding_mask=None):
        """Class logits of a classifier: tokens [B, L] -> [B, n_classes]."""
        if self.cls_head is None:
            raise RuntimeError("classify: the model has no classification head (set "
                               "model.n_classes)")
        if self.cls_pair_proj is not None:
            raise RuntimeError("classify: a pair classifier (model.cls_pair) classifies two "
                               "sequences: use classify_pair")
        return self.cls_head(self.pooled(tokens, mask, key_padding_mask=key_padding_mask))

    def classify_pair(self, tokens_a, mask_a, tokens_b, mask_b):
        """Pair class logits (LRA Retrieval's two towers): [B, n_classes]."""
        if self.cls_pair_proj is None:
            raise RuntimeError("classify_pair: the model is not a pair classifier (set "
                               "model.cls_pair and model.n_classes)")
        u, v = self.pooled(tokens_a, mask_a), self.pooled(tokens_b, mask_b)
        return self.cls_head(torch.relu(self.cls_pair_proj(torch.cat([u, v, u * v, u - v], -1))))

    def init_state(self, batch: int) -> List[DecodingState]:
        """Decoding state: one ``DecodingState`` per block (a list). RuntimeError for an
        encoder or a mixer that does not decode step by step."""
        return [block.mixer.init_state(batch) for block in self.blocks]

    def step(self, token: torch.Tensor, states: List[DecodingState]) -> torch.Tensor:
        """Consumes token [B] (int64) at position states[0].pos: logits [B, V]. Equal to
        forward's row at that position on the whole prefix."""
        if not isinstance(states, list) or len(states) != len(self.blocks):
            raise ValueError(f"step: expected the list of {len(self.blocks)} states that "
                             "init_state returns")
        if not isinstance(token, torch.Tensor) or token.dim() != 1 or token.dtype != torch.int64:
            raise ValueError("step: token must be an int64 tensor [B]")
        pos = states[0].pos if states else 0
        if pos >= self.max_len:
            raise ValueError(f"step: position {pos} reaches max_len {self.max_len}")
        self._check_tokens(token.unsqueeze(1))
        x = self.tok_emb(token) + self.pos_emb[pos]
        for block, state in zip(self.blocks, states):
            x = block.step(x, state)
        return self.logits(x if self.norm_f is None else self.norm_f(x))


_CLASSES = ("AIBAttention", "SelfAttention", "CES", "ESMLP", "Extractor", "CausalMean",
            "FeedForward", "Block", "SequenceModel")


def bind(ops, module_name):
    """The layer and model classes bound to ``ops`` (an object with aib_scan, ces_scan,
    attention, attention_reference, extractor_conv, causal_mean), named as members of
    ``module_name`` (so pickles refer to them there): {class name: class}."""
    out = {}
    for name in _CLASSES:
        base = globals()[name]
        attrs = {"__module__": module_name, "__doc__": base.__doc__, "__qualname__": name}
        if name in ("AIBAttention", "SelfAttention", "CES", "ESMLP", "Extractor",
                    "CausalMean"):
            attrs["_ops"] = ops
        out[name] = type(name, (base,), attrs)
    out["ESMLP"]._ces_class = out["CES"]
    out["SequenceModel"]._classes = out
    return out
