"""AIB attention (alias Weird attention) of Moss, AIB-Net and Weird-Net: the layer
``AIBAttention``, its helpers, and ``aib_scan`` in plain PyTorch (the C++ op:
src/mixers/aib/). Registered as mixer "aib", section [model.aib].
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._mixer import (DecodingState, Mixer, MixerEntry, _IMPLS, _check_length, _check_step,
                      _check_x, _choice, _flag, _linear_init, _out_std, _positive,
                      register_mixer, valid_mask, float32_compute as _float32,
                      widen as _widen)

_AIB_WEIGHTS = ("prefix_exp", "exp", "ones")


# ---- the scan in plain PyTorch (seqmix.reference) -----------------------------------------

def _levels(L):
    return max(1, (L - 1).bit_length())


def _level_weights(w, weights, like):
    if weights == "prefix_exp":
        return torch.exp(torch.cumsum(w, 0))
    if weights == "exp":
        return torch.exp(w)
    if w is None:
        return torch.ones(_levels(like.shape[1]), like.shape[2], dtype=like.dtype,
                          device=like.device)
    return torch.ones_like(w)


def _shift(x, s, suffix):
    # x[:, s:] gets x[:, :-s] (prefix) or x[:, :-s] gets x[:, s:] (suffix), zeros elsewhere.
    return _shift_fill(x, s, suffix, 0.0)


def _shift_fill(x, s, suffix, fill):
    L = x.shape[1]
    if s >= L:
        return torch.full_like(x, fill)
    if suffix:
        return F.pad(x[:, s:], (0, 0, 0, s), value=fill)
    return F.pad(x[:, :L - s], (0, 0, s, 0), value=fill)


def _log_level_weights(w, weights, like):
    # log W straight from w: W = exp(cumsum(w)) itself overflows or underflows for large w.
    if weights == "prefix_exp":
        return torch.cumsum(w, 0)
    if weights == "exp":
        return w
    return torch.zeros(_levels(like.shape[1]), like.shape[2], dtype=like.dtype,
                       device=like.device)


def aib_scan(a, v, w, mask=None, direction="causal", weights="prefix_exp", impl=None):
    """AIB (Weird) attention, Weird-Net Algorithms 1 and 2 (eqs. 29-38): with E = exp(A),
    H = E V, U = E, for j < ceil(log2 L): H[2^j:] += W_j H[:-2^j] (and U alike); O = H / U,
    0 where U = 0 or the position is padded. Bidirectional: channels [0, D/2) scan forward,
    [D/2, D) backward. a, v [B, L, D]; w [K, D]; mask [B, L] bool (True = valid) ->
    O [B, L, D].

    Each level carries a maximum per position, (m, H e^-m, U e^-m), and rescales the two
    terms it adds to their larger maximum, so the result is exact for any finite a and w
    (``aib_scan_literal``'s one maximum per sequence underflows every earlier window once a
    later a is ~100 larger in float32) and causal even through rounding. A (batch, channel)
    whose |v| reaches 2^64 (float32) or 2^960 (float64) is computed on v * 2^-64 and scaled
    back (O is linear in v), so H never overflows where O is finite."""
    if a.dtype == torch.bfloat16:
        with _float32():
            return aib_scan(_widen(a), _widen(v), _widen(w), mask, direction,
                            weights).to(a.dtype)
    B, L, D = a.shape
    valid = None
    u = torch.ones_like(a)
    if mask is not None:
        valid = mask.unsqueeze(-1)
        a = a.masked_fill(valid.logical_not(), -math.inf)
        v = v.masked_fill(valid.logical_not(), 0)
        u = u.masked_fill(valid.logical_not(), 0)
    limit = 2.0 ** 960 if a.dtype == torch.float64 else 2.0 ** 64
    top = (v.detach().abs().amax(1, keepdim=True) if L > 0
           else torch.zeros(B, 1, D, dtype=a.dtype, device=a.device))
    scale = torch.where(top >= limit, torch.full_like(top, 2.0 ** -64), torch.ones_like(top))
    m, h = a, v * scale

    def level(m, h, u, lw, s, suffix):
        m2 = _shift_fill(m, s, suffix, -math.inf) + lw
        top = torch.maximum(m, m2)
        safe = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
        e1, e2 = torch.exp(m - safe), torch.exp(m2 - safe)
        return top, h * e1 + _shift(h, s, suffix) * e2, u * e1 + _shift(u, s, suffix) * e2

    if L > 1:
        lw = _log_level_weights(w, weights, a)
        half = D // 2
        for j in range(_levels(L)):
            s = 2 ** j
            if direction == "causal":
                m, h, u = level(m, h, u, lw[j], s, False)
            else:
                mf, hf, uf = level(m[..., :half], h[..., :half], u[..., :half], lw[j, :half],
                                   s, False)
                mb, hb, ub = level(m[..., half:], h[..., half:], u[..., half:], lw[j, half:],
                                   s, True)
                m, h, u = (torch.cat([mf, mb], -1), torch.cat([hf, hb], -1),
                           torch.cat([uf, ub], -1))
    empty = u == 0
    o = torch.where(empty, torch.zeros_like(h), h / torch.where(empty, torch.ones_like(u), u))
    o = o / scale
    return o if valid is None else o.masked_fill(valid.logical_not(), 0)


def aib_scan_literal(a, v, w, mask=None, direction="causal", weights="prefix_exp", impl=None):
    """Weird-Net Algorithms 1 and 2 as a PyTorch user writes them from the paper: E =
    exp(A - max) with one maximum per (batch, channel) over the whole sequence, then the
    shift-and-add levels on H = E V and U = E. Same arguments as ``aib_scan``, and the same
    result while A's spread within a sequence (plus the log distance weights) stays under
    ~80 in float32 (~700 in float64); beyond, exp(A - max) underflows and earlier windows
    read 0, which also lets a later input change an earlier causal output. The GPU
    benchmark's "user's PyTorch" side (tests/gpu/models.py) runs this, the papers' cost."""
    if a.dtype == torch.bfloat16:
        with _float32():
            return aib_scan_literal(_widen(a), _widen(v), _widen(w), mask, direction,
                                    weights).to(a.dtype)
    B, L, D = a.shape
    valid = None
    if mask is not None:
        valid = mask.unsqueeze(-1)
        a = a.masked_fill(valid.logical_not(), -math.inf)
        v = v.masked_fill(valid.logical_not(), 0)
    m = torch.nan_to_num(a, -math.inf, math.inf, -math.inf).amax(1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(a - m)
    h, u = e * v, e
    if L > 1:
        W = _level_weights(w, weights, a)
        half = D // 2
        for j in range(_levels(L)):
            s = 2 ** j
            if direction == "causal":
                h = h + _shift(h, s, False) * W[j]
                u = u + _shift(u, s, False) * W[j]
            else:
                hf, hb, uf, ub = h[..., :half], h[..., half:], u[..., :half], u[..., half:]
                h = torch.cat([hf + _shift(hf, s, False) * W[j, :half],
                               hb + _shift(hb, s, True) * W[j, half:]], -1)
                u = torch.cat([uf + _shift(uf, s, False) * W[j, :half],
                               ub + _shift(ub, s, True) * W[j, half:]], -1)
    empty = u == 0
    o = torch.where(empty, torch.zeros_like(h), h / torch.where(empty, torch.ones_like(u), u))
    return o if valid is None else o.masked_fill(valid.logical_not(), 0)


# ---- the layer --------------------------------------------------------------------------------

def aib_num_levels(max_len: int) -> int:
    """Number K of distance levels covering sequences up to ``max_len``:
    ceil(log2 max_len), at least 1."""
    # The C++ library's bound (ops::aib_num_levels): 2**K stays an int64.
    if not isinstance(max_len, int) or isinstance(max_len, bool) or not 1 <= max_len <= 2**62:
        raise ValueError(f"max_len: expected a positive int of at most 2**62, got {max_len!r}")
    return max(1, (max_len - 1).bit_length())


def aib_level_weights(w: torch.Tensor, weights: str = "prefix_exp") -> torch.Tensor:
    """Per-level distance weights W [K, D] from w [K, D] (Weird-Net eq. 34): exp(cumsum(w))
    for 'prefix_exp', exp(w) for 'exp', ones for 'ones'; W_j multiplies distance 2**j."""
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w: expected a tensor [K, D], got {type(w).__name__}")
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


def _build(family, model, s, f):
    return family["AIBAttention"](
        model["d_model"], model["max_len"], causal=model["causal"],
        weights=s.get("weights", "prefix_exp"), bias_av=s.get("bias", False),
        impl=s.get("impl", "kernel"), n_layers=model["n_layers"], **f), True


register_mixer(MixerEntry(
    name="aib", section="aib", keys=frozenset({"weights", "bias", "impl"}), build=_build,
    classes=(AIBAttention,),
    functions=(aib_num_levels, aib_level_weights, aib_lag_weights),
    ops=("aib_scan",), torch_ops=(aib_scan, aib_scan_literal)))
