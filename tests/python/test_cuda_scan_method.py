"""The methods of the CUDA scan kernels, written out in float64 PyTorch and checked against
the references and autograd on the CPU (the kernels themselves run on a GPU machine:
tests/gpu/check_ops.py), with tiles and chunks small enough to give many of them:

- aib_scan (src/mixers/aib/cuda/aib_scan_cuda.cu): the split of the levels at m into a tile
  pass (with a halo of T positions before the tile) and a column pass over the [R, T] view,
  and the backward's per-level recomputation of the weight gradients, with the T positions
  after the tile for the transposed low levels; then the kernels' scaled arithmetic in
  float32 itself (scaled_forward / scaled_backward: a scale per tile, power-of-two row
  exponents per high level, the next tile's adjoints brought to this tile's scale), held
  against a float64 log-space oracle where the distance weights' products are far beyond
  float32's range;
- ces_scan (src/mixers/ces/cuda/ces_scan_cuda.cu): one pass per part with a decoupled
  look-back (each chunk's incoming state folded from its predecessors' aggregates, whatever
  depth the look-back reaches), the carries pass of the bidirectional form's backward part,
  the backward as one scan of dy weighted by x (dx, sum x r, sum x dr/dmu), and the
  parameter gradients' sums.
"""
import math
import random

import pytest
import torch


def levels(x, lw, first, last, stride=1, transposed=False):
    """Levels first .. last - 1 of the scan along dim 1, level j shifting by
    s = 2^(j - first) * stride: x[i] += W_j x[i - s] (x[i + s] transposed), zeros past the
    ends."""
    for j in range(first, last):
        s = (1 << (j - first)) * stride
        if s >= x.shape[1]:
            continue
        w = torch.exp(lw[j])
        shifted = torch.zeros_like(x)
        if transposed:
            shifted[:, :-s] = x[:, s:]
        else:
            shifted[:, s:] = x[:, :-s]
        x = x + w * shifted
    return x


def direct(x, lw):
    return levels(x, lw, 0, lw.shape[0])


def forward(x, lw, tile_bits):
    """z per tile (low levels, halo of T before), then the high levels down the columns."""
    B, L, D = x.shape
    K = lw.shape[0]
    m = min(K, tile_bits)
    T = 1 << m
    R = -(-L // T)
    xp = torch.zeros(B, (R + 1) * T, D, dtype=x.dtype)
    xp[:, T:T + L] = x  # index T + p <-> position p
    z = torch.zeros(B, R * T, D, dtype=x.dtype)
    for r in range(R):
        buf = levels(xp[:, r * T:r * T + 2 * T], lw, 0, m)
        z[:, r * T:(r + 1) * T] = buf[:, T:]
    cols = z.view(B, R, T, D)
    out = torch.stack([levels(cols[:, :, t], lw[m:], 0, K - m) for t in range(T)], 2)
    return z, out.reshape(B, R * T, D)[:, :L], (m, T, R)


def backward(x, lw, y, tile_bits):
    """S^T y and the gradient of sum(y * S x) with respect to lw, the kernels' way."""
    B, L, D = x.shape
    K = lw.shape[0]
    z, _, (m, T, R) = forward(x, lw, tile_bits)
    grad = torch.zeros(K, D, dtype=x.dtype)
    # Column pass: transposed high levels, weight gradients from recomputed S_hi,<j z.
    yp = torch.zeros(B, R * T, D, dtype=x.dtype)
    yp[:, :L] = y
    ycols = yp.view(B, R, T, D).clone()
    zcols = z.view(B, R, T, D)
    for j in range(K - 1, m - 1, -1):
        s = 1 << (j - m)
        zw = torch.stack([levels(zcols[:, :, t], lw[m:], 0, j - m) for t in range(T)], 2)
        if s < R:
            grad[j] += torch.exp(lw[j]) * (ycols[:, s:] * zw[:, :-s]).sum((0, 1, 2))
        ycols = torch.stack([levels(ycols[:, :, t], lw[j:j + 1], 0, 1, s, transposed=True)
                             for t in range(T)], 2)
    Y = torch.zeros(B, (R + 1) * T, D, dtype=x.dtype)
    Y[:, :R * T] = ycols.reshape(B, R * T, D)  # index p <-> position p (T more zeros after)
    xp = torch.zeros(B, (R + 1) * T, D, dtype=x.dtype)
    xp[:, T:T + L] = x
    P = torch.zeros(B, R * T, D, dtype=x.dtype)
    for r in range(R):
        x0 = xp[:, r * T:r * T + 2 * T]        # positions rT - T .. rT + T
        ybuf = Y[:, r * T:r * T + 2 * T]       # positions rT .. rT + 2T
        for j in range(m - 1, -1, -1):
            s = 1 << j
            xw = levels(x0, lw, 0, j)
            grad[j] += torch.exp(lw[j]) * (ybuf[:, :T] * xw[:, T - s:2 * T - s]).sum((0, 1))
            ybuf = levels(ybuf, lw[j:j + 1], 0, 1, s, transposed=True)
        P[:, r * T:(r + 1) * T] = ybuf[:, :T]
    return P[:, :L], grad


@pytest.mark.parametrize("L,tile_bits", [(1, 2), (5, 2), (16, 2), (37, 2), (100, 3), (64, 8),
                                         (300, 3)])
def test_tile_and_column_passes_are_the_scan(L, tile_bits):
    torch.manual_seed(L)
    K = max(1, (L - 1).bit_length()) if L > 1 else 0
    x = torch.randn(2, L, 3, dtype=torch.float64)
    lw = 0.3 * torch.randn(K, 3, dtype=torch.float64)
    _, out, _ = forward(x, lw, tile_bits)
    torch.testing.assert_close(out, direct(x, lw), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("L,tile_bits", [(2, 2), (5, 2), (16, 2), (37, 2), (100, 3), (300, 3)])
def test_backward_gives_the_adjoint_and_the_weight_gradients(L, tile_bits):
    torch.manual_seed(100 + L)
    K = (L - 1).bit_length()
    x = torch.randn(2, L, 3, dtype=torch.float64)
    lw = (0.3 * torch.randn(K, 3, dtype=torch.float64)).requires_grad_()
    xg = x.clone().requires_grad_()
    y = torch.randn(2, L, 3, dtype=torch.float64)
    (direct(xg, lw) * y).sum().backward()
    P, grad = backward(x, lw.detach(), y, tile_bits)
    torch.testing.assert_close(P, xg.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, lw.grad, rtol=1e-10, atol=1e-10)


# ---- The CUDA AIB kernels' scaled arithmetic, step by step in the kernels' dtype ----

LOG2E = 1.4426950408889634


def _row_bits(dtype):
    """Mantissas are kept below 2^this (the kernels' kRowBits)."""
    return 500 if dtype == torch.float64 else 64


def _tiles(a, v, mask, T, R):
    """The padded inputs: index T + p <-> position p; A is -inf and V 0 where padded."""
    B, L, D = a.shape
    ap = torch.full((B, (R + 1) * T, D), float("-inf"), dtype=a.dtype)
    vp = torch.zeros(B, (R + 1) * T, D, dtype=a.dtype)
    am = a if mask is None else a.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    vm = v if mask is None else v.masked_fill(~mask.unsqueeze(-1), 0)
    ap[:, T:T + L] = am
    vp[:, T:T + L] = vm
    return ap, vp


def _tile_low(own, c):
    """log2 of the smallest E = exp(A - c) over a tile's own positions (below L): -inf where
    one is padded (A = -inf there) or the window is empty."""
    m = own.min(1).values.double()
    return torch.where((m == float("-inf")) | (c == float("-inf")), torch.full_like(m, float("-inf")),
                       (m - c.double()) * LOG2E)


def _window_x(wa, wv, c):
    """(E V, E) with E = exp(A - c); 0 where A is -inf or the window is empty (c = -inf)."""
    empty = (wa == float("-inf")) | (c == float("-inf")).unsqueeze(1)
    e = torch.where(empty, torch.zeros_like(wa), torch.exp(wa - c.unsqueeze(1)))
    return e * wv, e


def scaled_forward(a, v, lw, tile_bits, mask=None):
    """tile_forward, row_factors and column_forward in the dtype of a (float32 or float64)."""
    B, L, D = a.shape
    K = lw.shape[0]
    m = min(K, tile_bits)
    T, nh = 1 << m, K - m
    R = -(-L // T)
    ap, vp = _tiles(a, v, mask, T, R)
    shift, beta0, row_bits = _tile_bounds(lw[:m], T, a.dtype)
    zh = torch.zeros(B, R * T, D, dtype=a.dtype)
    zu = torch.zeros_like(zh)
    c = torch.empty(B, R, D, dtype=a.dtype)
    low = torch.empty(B, R, D, dtype=torch.float64)
    for r in range(R):
        wa, wv = ap[:, r * T:r * T + 2 * T], vp[:, r * T:r * T + 2 * T]
        top = wa.max(1).values
        cr = torch.where(top == float("-inf"), top, torch.ceil(top.double() + shift).to(a.dtype))
        c[:, r] = cr
        low[:, r] = _tile_low(wa[:, T:T + min(T, L - r * T)], cr)
        h, u = _window_x(wa, wv, cr)
        h, u = levels(h, lw, 0, m), levels(u, lw, 0, m)
        zh[:, r * T:(r + 1) * T], zu[:, r * T:(r + 1) * T] = h[:, T:], u[:, T:]
    fa, fb, lost = row_factors(c, lw[m:], beta0, row_bits, low)
    H, U = zh.view(B, R, T, D).clone(), zu.view(B, R, T, D).clone()
    for i in range(nh):
        H, U = row_level(H, fa[i], fb[i], 1 << i), row_level(U, fa[i], fb[i], 1 << i)
    H, U = H.reshape(B, R * T, D)[:, :L], U.reshape(B, R * T, D)[:, :L]
    valid = torch.ones(B, L, 1, dtype=torch.bool) if mask is None else mask.unsqueeze(-1)
    tiny = 2.0 ** (-900 if a.dtype == torch.float64 else -100)
    ok = not lost and bool(((U >= tiny) & torch.isfinite(H) & torch.isfinite(U) | ~valid).all())
    out = torch.where(valid, H / torch.where(valid, U, torch.ones_like(U)), torch.zeros_like(H))
    return out, ok


def row_factors(c, lw_hi, beta0, row_bits, low):
    """The row_factors kernel: fa, fb [nh, B, R, D] in the dtype of c, formed in float64.
    Row r's values are mantissas x 2^e_r x exp(c_r); each level keeps the integer e_r, or
    raises it when an upper bound on the row's mantissas (beta0: log2 of the tile pass's; an
    empty row, c = -inf, holds zeros and sets no bound) would pass 2^row_bits."""
    B, R, D = c.shape
    nh = lw_hi.shape[0]
    ninf = float("-inf")
    cs = torch.where(c == ninf, torch.zeros_like(c), c).double()
    e = torch.zeros(B, R, D, dtype=torch.int64)
    bound = torch.where(c == ninf, torch.full_like(cs, ninf), beta0.double().expand(B, R, D))
    lower = low.double().clone()  # log2 of each row's smallest value that counts
    fa = torch.ones(nh, B, R, D, dtype=torch.float64)
    fb = torch.zeros(nh, B, R, D, dtype=torch.float64)
    lost = False
    for i in range(nh):
        rs = 1 << i
        for r in range(R - 1, rs - 1, -1):
            t = ((lw_hi[i].double() + (cs[:, r - rs] - cs[:, r])) * LOG2E).clamp(-2**26, 2**26)
            k = torch.round(t)
            wm = torch.exp2(t - k)
            src = bound[:, r - rs] + k + torch.log2(wm)
            src_low = lower[:, r - rs] + k + torch.log2(wm)
            top = torch.maximum(bound[:, r], src)
            low = torch.minimum(bound[:, r], src)
            new = torch.where(top == ninf, top, top + torch.log2(1 + torch.exp2(low - top)))
            lift = torch.ceil(new.clamp(min=-2.0**30)).long() - row_bits
            en = torch.where(new - e[:, r] > row_bits, lift, e[:, r])
            eb = e[:, r - rs] + k.long()
            # A factor below the normal range would flush a row that still counts where the
            # other is 0: the kernels flag the group for the exact kernel.
            # (Harmless where all the flushed row could carry is below the smallest normal, or
            # below 2^-24 of the least the other row holds at every column.)
            min_exp = -1021 if c.dtype == torch.float64 else -125
            normal = -1022 if c.dtype == torch.float64 else -126
            lost |= bool((((e[:, r] - en) < min_exp) & (bound[:, r] - en > normal)
                          & (bound[:, r] > src_low - 24)).any())
            lost |= bool((((eb - en) < min_exp) & (src - en > normal)
                          & (src > lower[:, r] - 24)).any())
            a = torch.exp2((e[:, r] - en).clamp(min=-1100).double())
            b = wm * torch.exp2((eb - en).clamp(min=-1100).double())
            fa[i, :, r] = torch.where(bound[:, r] == ninf, torch.zeros_like(a), a)
            fb[i, :, r] = torch.where(bound[:, r - rs] == ninf, torch.zeros_like(b), b)
            e[:, r] = en
            bound[:, r] = new
            lower[:, r] = torch.maximum(lower[:, r], src_low)
    return fa.to(c.dtype), fb.to(c.dtype), lost


def _tile_bounds(lw_lo, T, dtype):
    """The tile scale's shift (nats) and log2 of the bound on the tile pass's mantissas."""
    row_bits = _row_bits(dtype)
    pos = lw_lo.double().clamp(min=0).sum(0)
    shift = (pos + math.log(2 * T) - row_bits * math.log(2)).clamp(min=0)
    beta0 = math.log2(2 * T) + (pos - shift) * LOG2E
    return shift, beta0, row_bits


def row_level(x, fa, fb, s, transposed=False):
    """x [B, R, T, D]: x'_r = fa_r x_r + fb_r x_{r-s}, or the transpose
    x'_r = fa_r x_r + fb_{r+s} x_{r+s}."""
    out = fa.unsqueeze(2) * x
    if s < x.shape[1]:
        if transposed:
            out[:, :-s] += fb[:, s:].unsqueeze(2) * x[:, s:]
        else:
            out[:, s:] += fb[:, s:].unsqueeze(2) * x[:, :-s]
    return out


def scaled_backward(a, v, lw, g, tile_bits, mask=None):
    """tile_forward, row_factors, column_backward and tile_backward: dA, dV, d lw."""
    B, L, D = a.shape
    K = lw.shape[0]
    m = min(K, tile_bits)
    T, nh = 1 << m, K - m
    R = -(-L // T)
    dt = a.dtype
    ap, vp = _tiles(a, v, mask, T, R)
    shift, beta0, row_bits = _tile_bounds(lw[:m], T, dt)
    z = torch.zeros(2, B, R * T, D, dtype=dt)
    c = torch.empty(B, R, D, dtype=dt)
    low = torch.empty(B, R, D, dtype=torch.float64)
    for r in range(R):
        wa, wv = ap[:, r * T:r * T + 2 * T], vp[:, r * T:r * T + 2 * T]
        top = wa.max(1).values
        c[:, r] = torch.where(top == float("-inf"), top, torch.ceil(top.double() + shift).to(dt))
        low[:, r] = _tile_low(wa[:, T:T + min(T, L - r * T)], c[:, r])
        h, u = _window_x(wa, wv, c[:, r])
        z[0, :, r * T:(r + 1) * T] = levels(h, lw, 0, m)[:, T:]
        z[1, :, r * T:(r + 1) * T] = levels(u, lw, 0, m)[:, T:]
    fa, fb, _ = row_factors(c, lw[m:], beta0, row_bits, low)
    grad = torch.zeros(K, D, dtype=torch.float64)
    z0 = z.view(2, B, R, T, D)
    snaps = [z0]
    for i in range(nh):
        snaps.append(torch.stack([row_level(snaps[-1][k], fa[i], fb[i], 1 << i) for k in (0, 1)]))
    H, U = snaps[-1][0].reshape(B, R * T, D), snaps[-1][1].reshape(B, R * T, D)
    valid = torch.zeros(B, R * T, 1, dtype=torch.bool)
    valid[:, :L] = True if mask is None else mask.unsqueeze(-1)
    gp = torch.zeros(B, R * T, D, dtype=dt)
    gp[:, :L] = g
    Us = torch.where(valid, U, torch.ones_like(U))
    yh = torch.where(valid, gp / Us, torch.zeros_like(U))
    yu = torch.where(valid, -yh * (H / Us), torch.zeros_like(U))
    y = torch.stack([yh, yu]).view(2, B, R, T, D)
    for i in range(nh - 1, -1, -1):
        s = 1 << i
        if s < R:
            terms = (y[:, :, s:] * snaps[i][:, :, :-s]).sum(0).double()
            grad[m + i] += (fb[i][:, s:].unsqueeze(2).double() * terms).sum((0, 1, 2))
        y = torch.stack([row_level(y[k], fa[i], fb[i], s, transposed=True) for k in (0, 1)])
    y = y.reshape(2, B, R * T, D)
    Y = torch.zeros(2, B, (R + 1) * T, D, dtype=dt)
    Y[:, :, :R * T] = y
    da = torch.zeros(B, R * T, D, dtype=dt)
    dv = torch.zeros_like(da)
    for r in range(R):
        cr = c[:, r]
        x0h, x0u = _window_x(ap[:, r * T:r * T + 2 * T], vp[:, r * T:r * T + 2 * T], cr)
        ybuf = Y[:, :, r * T:r * T + 2 * T].clone()
        if r + 1 < R:
            cn = c[:, r + 1]
            empty = (cn == float("-inf")) | (cr == float("-inf"))
            assert bool((empty | (cr.double() - cn.double() < 80)).all()), "gap: exact path"
            nxt = torch.where(empty, torch.zeros_like(cr), torch.exp(cr - torch.where(empty, cr, cn)))
            ybuf[:, :, T:] *= nxt.unsqueeze(1)
        for j in range(m - 1, -1, -1):
            s = 1 << j
            xwh, xwu = levels(x0h, lw, 0, j), levels(x0u, lw, 0, j)
            terms = ybuf[0, :, :T] * xwh[:, T - s:2 * T - s] + ybuf[1, :, :T] * xwu[:, T - s:2 * T - s]
            grad[j] += torch.exp(lw[j]).double() * terms.double().sum((0, 1))
            ybuf = torch.stack([levels(ybuf[k], lw[j:j + 1], 0, 1, s, transposed=True)
                                for k in (0, 1)])
        eh, eu = x0h[:, T:], x0u[:, T:]
        da[:, r * T:(r + 1) * T] = eh * ybuf[0, :, :T] + eu * ybuf[1, :, :T]
        dv[:, r * T:(r + 1) * T] = eu * ybuf[0, :, :T]
    return da[:, :L], dv[:, :L], grad


def log_space_scan(a, v, lw, mask=None):
    """O_i = sum_{j <= i} softmax_j(log a_{i-j} + A_j) V_j, with log a_d the sum of lw over the
    set bits of d: finite in float64 for any weights, differentiable by autograd."""
    B, L, D = a.shape
    log_lag = [torch.zeros(D, dtype=a.dtype)]
    for d in range(1, L):
        low = d & -d
        log_lag.append(log_lag[d - low] + lw[low.bit_length() - 1])
    ll = torch.stack(log_lag)
    idx = torch.arange(L)
    dist = idx.unsqueeze(1) - idx.unsqueeze(0)
    logits = ll[dist.clamp(min=0)].unsqueeze(0) + a.unsqueeze(1)  # [B, i, j, D]
    allowed = (dist >= 0).view(1, L, L, 1)
    if mask is not None:
        allowed = allowed & mask.view(B, 1, L, 1)
    logits = logits.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(logits, 2).nan_to_num(0.0)
    out = (p * v.unsqueeze(1)).sum(2)
    return out if mask is None else out * mask.unsqueeze(-1)


def _hard_inputs(L, D, seed, masked, top=None):
    """A ~ N(0, 3^2) plus a slow drift of +-15, and level weights whose products reach far past
    float32's range (each high level +-top nats, 30 by default; a level beyond ~e^+-40 can
    take the exact kernel): the default initialisation's tail and beyond."""
    top = 30 if top is None else top
    g = torch.Generator().manual_seed(seed)
    K = max(1, (L - 1).bit_length())
    a = 3 * torch.randn(2, L, D, generator=g, dtype=torch.float64)
    a += 15 * torch.sin(torch.arange(L, dtype=torch.float64) / 40).view(1, L, 1)
    v = torch.randn(2, L, D, generator=g, dtype=torch.float64)
    lw = torch.cumsum(torch.randn(K, D, generator=g, dtype=torch.float64), 0)
    lw[K // 2:] += torch.linspace(-top, top, D, dtype=torch.float64)  # the high levels
    mask = None
    if masked:
        mask = torch.rand(2, L, generator=g) > 0.2
        mask[1, : L // 3] = False
    return a, v, lw, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("L,tile_bits,masked", [(1, 2, False), (7, 2, False), (100, 3, True),
                                                (300, 4, False), (300, 3, True), (513, 5, True)])
def test_scaled_method_is_exact_where_the_weights_leave_float_range(dtype, L, tile_bits, masked):
    a, v, lw, mask = _hard_inputs(L, 6, L + tile_bits, masked)
    a, v = a.requires_grad_(), v.requires_grad_()
    lwg = lw.clone().requires_grad_()
    expect = log_space_scan(a, v, lwg, mask)
    g = torch.randn(expect.shape, dtype=torch.float64)
    (expect * g).sum().backward()
    out, ok = scaled_forward(a.detach().to(dtype), v.detach().to(dtype), lw.to(dtype), tile_bits,
                             mask)
    assert ok, "the fast path's checks failed: the kernels would take the exact path"
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(out.double(), expect.detach(), **tol)
    da, dv, dlw = scaled_backward(a.detach().to(dtype), v.detach().to(dtype), lw.to(dtype),
                                  g.to(dtype), tile_bits, mask)
    torch.testing.assert_close(da.double(), a.grad, **tol)
    torch.testing.assert_close(dv.double(), v.grad, **tol)
    want = lwg.grad if lwg.grad is not None else torch.zeros_like(lw)  # L = 1: no level used
    scale = want.abs().max().item() + 1
    torch.testing.assert_close(dlw / scale, want / scale, **tol)


@pytest.mark.parametrize("top", [60.0, 120.0, 200.0])
def test_a_row_factor_flushes_only_what_cannot_count(top):
    """A tile whose own level weight is e^64, then a level of e^top: the row's own sums need a
    factor below float32's normal range. Without padding each row's smallest value is known,
    so the flush is proven harmless and the fast path stays exact; with a padded position it
    cannot be, and the group goes to the exact kernel -- never a silent loss."""
    L, D = 256, 1
    lw = torch.zeros(8, D)
    lw[6], lw[7] = 64.0, top
    a = torch.zeros(1, L, D)
    v = torch.randn(1, L, D, generator=torch.Generator().manual_seed(1))
    for mask in (None, torch.arange(L).view(1, L) != 10):
        out, ok = scaled_forward(a, v, lw, 7, mask)
        expect = log_space_scan(a.double(), v.double(), lw.double(), mask)
        if mask is None:
            assert ok
        if ok:
            torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)
    _, ok = scaled_forward(a, v, lw, 7, torch.arange(L).view(1, L) != 10)
    assert ok == (top != 120.0)  # 200: all the flushed row could carry is below 2^-126


def test_the_unscaled_arithmetic_overflows_on_the_same_inputs():
    """The inputs above do need the scales: plain float32 E = exp(A) with W applied directly
    overflows or underflows."""
    a, v, lw, _ = _hard_inputs(300, 6, 1, False)
    x = torch.exp(a[:1].float()), torch.exp(a[:1].float()) * v[:1].float()
    u = direct(x[0], lw.float())
    assert not bool(torch.isfinite(u).all()) or bool((u[:, 1:] == 0).any())


# ---- The CUDA CES scan (src/mixers/ces/cuda/ces_scan_cuda.cu) ----
# The method of the kernels (a single pass with a decoupled look-back) in float64 PyTorch,
# with chunks small enough to give many of them.

def cmul(a, b):
    return torch.stack([a[..., 0] * b[..., 0] - a[..., 1] * b[..., 1],
                        a[..., 0] * b[..., 1] + a[..., 1] * b[..., 0]], -1)


def cstep(m, s, x):
    """mu s + x (x real [..], s complex [.., 2])."""
    return cmul(m, s) + torch.stack([x, torch.zeros_like(x)], -1)


def step_pow(m, n):
    """(mu^n, n mu^(n-1)) by squaring the dual number (mu, 1)."""
    one = torch.zeros_like(m)
    one[..., 0] = 1
    r, rd = one.clone(), torch.zeros_like(m)
    b, bd = m.clone(), one.clone()
    while n > 0:
        if n & 1:
            r, rd = cmul(r, b), cmul(rd, b) + cmul(r, bd)
        b, bd = cmul(b, b), 2 * cmul(b, bd)
        n >>= 1
    return r, rd


def fold(x, a, st):
    """A segment that left a = (e, e') following one that left x = (s, s')."""
    p, dp = st
    return (cmul(p, x[0]) + a[0], cmul(p, x[1]) + cmul(dp, x[0]) + a[1])


def ces_single_pass(inp, w, mu, c, mask, bidirectional, main_reverse, seg, warps, rng):
    """One call: [the carries pass of the backward part], then the pass. Chunks are
    T = warps seg positions [k T, k T + T); the main part (rows 0 .. H-1, inclusive) runs
    with main_reverse, the bidirectional backward part (rows H .. 2H-1, lag 1) the other way
    from the carries pass's incoming states. `rng` picks, per chunk, how far its look-back
    goes before it meets an inclusive value (the result must not depend on it). w None:
    returns the outputs; else (outputs, per-row sums u r, u q [C, 4])."""
    B, L, H = inp.shape
    T = warps * seg
    K = -(-L // T)
    v = torch.ones(B, L, dtype=inp.dtype) if mask is None else mask
    xin = inp * v.unsqueeze(-1)
    win = None if w is None else w * v.unsqueeze(-1)
    zero = torch.zeros(B, H, 2, dtype=inp.dtype)

    def positions(k, reverse):
        # scan order within chunk k; None past L (zero input, no output)
        idx = [k * T + (T - 1 - i if reverse else i) for i in range(T)]
        return [t if t < L else None for t in idx]

    def seg_results(m, pos):
        res = []
        for wi in range(warps):
            s, d = zero, zero
            for t in pos[wi * seg:(wi + 1) * seg]:
                x = xin[:, t] if t is not None else torch.zeros(B, H, dtype=inp.dtype)
                s, d = cstep(m, s, x), cmul(m, d) + s
            res.append((s, d))
        return res

    def look_back_pass(row, reverse):
        """Per chunk (in positions): its incoming state, through a decoupled look-back."""
        m = mu[row:row + H]
        sp, sT = step_pow(m, seg), step_pow(m, T)
        agg, incl, incoming = {}, {}, {}
        for kscan in range(K):  # tickets in order
            k = K - 1 - kscan if reverse else kscan
            res = seg_results(m, positions(k, reverse))
            total = res[0]
            for e in res[1:]:
                total = fold(total, e, sp)
            agg[kscan] = total
            excl = (zero, zero)
            if kscan > 0:
                j = rng.randint(0, kscan - 1)  # the nearest inclusive value it happened to see
                excl = incl[j]
                for i in range(j + 1, kscan):
                    excl = fold(excl, agg[i], sT)
            incl[kscan] = fold(excl, total, sT)
            incoming[k] = (excl, res)
        return incoming, sp

    out = torch.zeros(B, L, H, dtype=inp.dtype)
    sums = torch.zeros((2 if bidirectional else 1) * H, 4, dtype=inp.dtype)
    main, sp = look_back_pass(0, main_reverse)
    if bidirectional:
        sec, sp2 = look_back_pass(H, not main_reverse)
    for k in range(K):
        pos = positions(k, main_reverse)
        excl, res = main[k]
        # each segment's incoming state, in the main order
        ins, st = [], excl
        for e in res:
            ins.append(st)
            st = fold(st, e, sp)
        y2 = {}
        if bidirectional:  # the backward part at lag 1, against the main order
            m2, c2 = mu[H:], c[H:]
            res2 = seg_results(m2, list(reversed(pos)))  # its own order: warps reversed
            st = sec[k][0]
            ins2 = [None] * warps
            for wi in range(warps - 1, -1, -1):
                ins2[wi] = st
                st = fold(st, res2[warps - 1 - wi], sp2)
            for wi in range(warps):
                s, d = ins2[wi]
                for t in reversed(pos[wi * seg:(wi + 1) * seg]):
                    x = xin[:, t] if t is not None else torch.zeros(B, H, dtype=inp.dtype)
                    if t is not None:
                        y2[t] = cmul(c2.expand_as(s), s)[..., 0]
                        if w is not None:
                            u = win[:, t].unsqueeze(-1)
                            sums[H:, 0:2] += (u * s).sum(0)
                            sums[H:, 2:4] += (u * d).sum(0)
                    s, d = cstep(m2, s, x), cmul(m2, d) + s
        m, cc = mu[:H], c[:H]
        for wi in range(warps):
            s, d = ins[wi]
            for t in pos[wi * seg:(wi + 1) * seg]:
                x = xin[:, t] if t is not None else torch.zeros(B, H, dtype=inp.dtype)
                s, d = cstep(m, s, x), cmul(m, d) + s
                if t is None:
                    continue
                y = cmul(cc.expand_as(s), s)[..., 0] + y2.get(t, 0)
                out[:, t] = y * v[:, t].unsqueeze(-1)
                if w is not None:
                    u = win[:, t].unsqueeze(-1)
                    sums[:H, 0:2] += (u * s).sum(0)
                    sums[:H, 2:4] += (u * d).sum(0)
    return out if w is None else (out, sums)


@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
@pytest.mark.parametrize("L,seg,warps", [(1, 2, 2), (7, 2, 2), (16, 2, 2), (23, 2, 3),
                                         (29, 3, 2)])
@pytest.mark.parametrize("masked", [False, True])
def test_ces_single_pass_scan_and_its_gradients(direction, L, seg, warps, masked):
    from seqmix import _torch_ops
    from seqmix.mixers.ces import ces_coefficients
    torch.manual_seed(L + seg)
    B, H = 2, 3
    C = 2 * H if direction == "bidirectional" else H
    _, mu, c = ces_coefficients(torch.randn(C, 2, dtype=torch.float64),
                                        torch.full((C, 2), -1.0, dtype=torch.float64),
                                        0.3 * torch.randn(C, 2, dtype=torch.float64))
    mu, c = mu.detach().requires_grad_(), c.detach().requires_grad_()
    x = torch.randn(B, L, H, dtype=torch.float64, requires_grad=True)
    mask = (torch.rand(B, L) > 0.3) if masked else None
    g = torch.randn(B, L, H, dtype=torch.float64)
    ref = _torch_ops.ces_scan(x, mu, c, mask, direction)
    (ref * g).sum().backward()
    bidir = direction == "bidirectional"
    fmask = None if mask is None else mask.to(torch.float64)
    for seed in range(3):  # the look-back's depth must not matter
        rng = random.Random(seed)
        y = ces_single_pass(x.detach(), None, mu.detach(), c.detach(), fmask, bidir, False,
                            seg, warps, rng)
        torch.testing.assert_close(y, ref.detach(), rtol=1e-10, atol=1e-10)
        # The backward: (r, dr/dmu) over g against the forward's direction, weighted by x.
        gx, sums = ces_single_pass(g, x.detach(), mu.detach(), c.detach(), fmask, bidir, True,
                                   seg, warps, rng)
        torch.testing.assert_close(gx, x.grad, rtol=1e-10, atol=1e-10)
        # dL/dc = (Re, -Im) sum u r;  dL/dmu = (Re, -Im) c sum u q.
        gc = torch.stack([sums[:, 0], -sums[:, 1]], 1)
        prod = cmul(c.detach(), sums[:, 2:4])
        gmu = torch.stack([prod[:, 0], -prod[:, 1]], 1)
        torch.testing.assert_close(gc, c.grad, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(gmu, mu.grad, rtol=1e-9, atol=1e-9)
