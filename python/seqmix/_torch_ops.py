"""seqmix's sequence-mixing ops in plain PyTorch: the papers' algorithms written with torch
functions only, as mamba's ``selective_scan_ref`` and flash-linear-attention's ``naive.py``
are. ``seqmix.reference`` runs its layers on these, so a seqmix model runs wherever PyTorch
runs, without the C++ extension; the extension's ops (``torch.ops.seqmix.*``) compute the
same functions and are tested against them (tests/python/test_reference.py).

Every function takes bfloat16 activations with float32 parameters (CPU autocast) by
computing in float32 and rounding the result once, as the C++ ops do. ``impl`` is accepted
for the layers' sake and ignored: there is one implementation here.
"""
import math

import torch
import torch.nn.functional as F


def _float32():
    """Autocast off: a widened bfloat16 computation stays in float32 (under CPU autocast a
    matmul would otherwise cast back to bfloat16), as the C++ ops' AutocastOff guard."""
    return torch.autocast("cpu", enabled=False)


def _widen(t):
    return t.float() if t is not None and t.dtype == torch.bfloat16 else t


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


def ces_scan(x, mu, c, mask=None, direction="causal", impl=None):
    """Complex exponential smoothing, ETSMLP eq. 10 (eq. 14 bidirectional), as the authors'
    code computes it: a convolution with the Vandermonde kernel K[n] = Re(c mu^n) by FFT.
    x [B, L, H]; mu, c [C, 2] (C = H, or 2H: forward rows then backward rows) -> [B, L, H].
    The FFT's rounding error is absolute (about eps log2(L) max|x| sum|K| per batch and
    channel) and reaches every position, the causal form's earlier ones too: outputs far
    below that bound are not exact, and a huge later input moves earlier outputs by its
    rounding (the extension's recurrence, ``torch.ops.seqmix.ces_scan``, is exact position
    by position and causal exactly)."""
    if x.dtype == torch.bfloat16:
        with _float32():
            return ces_scan(_widen(x), _widen(mu), _widen(c), mask, direction).to(x.dtype)
    B, L, H = x.shape
    if L == 0 or H == 0 or B == 0:
        return torch.zeros_like(x)
    if mask is not None:
        x = x.masked_fill(mask.logical_not().unsqueeze(-1), 0)
    n = torch.arange(L, dtype=x.dtype, device=x.device).unsqueeze(0)
    mag = torch.sqrt(mu[:, 0] ** 2 + mu[:, 1] ** 2).unsqueeze(1)
    angle = torch.atan2(mu[:, 1], mu[:, 0]).unsqueeze(1)
    decay = torch.pow(mag, n)
    kernel = c[:, 0:1] * decay * torch.cos(n * angle) - c[:, 1:2] * decay * torch.sin(n * angle)
    if direction == "causal":
        k2l = F.pad(kernel, (0, L))
    else:
        # [K_fwd(0 .. L-1), flip(K_bwd(0 .. L-1))]: position 2L - m holds the backward
        # kernel's lag m (coefficient m - 1), m = 1 .. L.
        k2l = torch.cat([kernel[:H], kernel[H:].flip(1)], 1)
    xf = torch.fft.rfft(x.transpose(1, 2), 2 * L, -1)
    kf = torch.fft.rfft(k2l, 2 * L, -1)
    y = torch.fft.irfft(xf * kf, 2 * L, -1)[..., :L].transpose(1, 2)
    if mask is not None:
        y = y.masked_fill(mask.logical_not().unsqueeze(-1), 0)
    return y.contiguous()


def attention_reference(q, k, v, key_mask=None, direction="causal", dropout=0.0):
    """Softmax attention, Vaswani et al. eq. 1, literally: q, k, v [B, H, L, d_head];
    key_mask [B, L] bool (True = valid key). A query that sees no key outputs 0."""
    if q.dtype == torch.bfloat16:
        with _float32():
            return attention_reference(_widen(q), _widen(k), _widen(v), key_mask, direction,
                                       dropout).to(q.dtype)
    L, S = q.shape[2], k.shape[2]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if direction == "causal":
        allowed = torch.tril(allowed)
    allowed = allowed.view(1, 1, L, S)
    if key_mask is not None:
        allowed = allowed & key_mask.view(key_mask.shape[0], 1, 1, S)
    scores = scores.masked_fill(allowed.logical_not(), -math.inf)
    any_key = allowed.any(-1, keepdim=True)
    p = torch.softmax(torch.where(any_key, scores, torch.zeros_like(scores)), -1)
    p = torch.where(any_key & allowed, p, torch.zeros_like(p))
    if dropout > 0:
        p = F.dropout(p, dropout, True)
    return torch.matmul(p, v)


def attention(q, k, v, key_mask=None, direction="causal", impl=None):
    """``attention_reference`` without dropout."""
    return attention_reference(q, k, v, key_mask, direction, 0.0)


def extractor_conv(x, w, impl=None):
    """The Extractor's extraction (The Extractor eq. 18): ext[i] = sum_{k<=i} x[i-k] W[k],
    a causal convolution with one D x D matrix per lag, by FFT over the sequence.
    x [B, t, D], w [l, D, D] (l >= t) -> [B, t, D]."""
    if x.dtype == torch.bfloat16:
        with _float32():
            return extractor_conv(_widen(x), _widen(w)).to(x.dtype)
    t = x.shape[1]
    if t > w.shape[0]:
        raise ValueError(f"extractor_conv: {w.shape[0]} lag matrices cover sequences up to "
                         f"{w.shape[0]}, got t = {t}")
    n = 2 * t
    # Transforms over the last, contiguous dimension (torch.compile's inductor asserts the
    # CPU FFT's output strides, which differ from its fake kernel's for an inner one).
    xf = torch.fft.rfft(x.transpose(1, 2).contiguous(), n, -1)              # [B, D, F]
    wf = torch.fft.rfft(w[:t].permute(1, 2, 0).contiguous(), n, -1)        # [D, E, F]
    y = torch.einsum("bdf,def->bef", xf, wf)                                # [B, E, F]
    return torch.fft.irfft(y, n, -1)[..., :t].transpose(1, 2).contiguous()


def causal_mean(x, window, mask=None, impl=None):
    """The mean of the last ``window`` valid positions (0 at padded ones): x [B, L, D]."""
    if x.dtype == torch.bfloat16:
        with _float32():
            return causal_mean(_widen(x), window, mask).to(x.dtype)
    valid = (mask.to(x.dtype) if mask is not None
             else torch.ones(x.shape[:2], dtype=x.dtype, device=x.device))

    def window_sum(t):
        pad = [0, 0] * (t.dim() - 2) + [window - 1, 0]
        return F.pad(t, pad).unfold(1, window, 1).sum(-1)

    count = window_sum(valid)
    inv = torch.where(valid > 0, 1 / count.clamp_min(1), torch.zeros_like(count))
    return window_sum(x * valid.unsqueeze(-1)) * inv.unsqueeze(-1)
