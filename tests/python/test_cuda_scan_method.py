"""The methods of the CUDA scan kernels, written out in float64 PyTorch and checked against
the references and autograd on the CPU (the kernels themselves run on a GPU machine:
tests/gpu/check_ops.py), with tiles and chunks small enough to give many of them:

- aib_scan (src/mixers/aib/cuda/aib_scan_cuda.cu): the split of the levels at m into a tile
  pass (with a halo of T positions before the tile) and a column pass over the [R, T] view,
  and the backward's per-level recomputation of the weight gradients, with the T positions
  after the tile for the transposed low levels;
- ces_scan (src/mixers/ces/cuda/ces_scan_cuda.cu): chunk summaries, incoming states carried
  with ds/dmu, the swapped parts for the input gradient, and the parameter gradients' sums.
"""
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


# ---- The CUDA CES scan (src/mixers/ces/cuda/ces_scan_cuda.cu) ----

def cmul(a, b):
    return torch.stack([a[..., 0] * b[..., 0] - a[..., 1] * b[..., 1],
                        a[..., 0] * b[..., 1] + a[..., 1] * b[..., 0]], -1)


def cpow(mu, n):
    r = torch.zeros_like(mu)
    r[..., 0] = 1
    for _ in range(n):
        r = cmul(r, mu)
    return r


def ces_parts(H, swapped):
    """The kernels' parts: (parameter row offset, from the right, at lag 1)."""
    return [(0, swapped, False), (H, not swapped, True)]


def ces_chunked(inp, mu, c, mask, bidirectional, swapped, chunk, g=None):
    """The three launches of one scan: chunk summaries from a zero state, incoming states
    walked over the chunks (with ds carried as the kernels do), each chunk again. Returns
    the values (g None), or per-row sums (g s, g ds) for the parameter gradients."""
    B, L, H = inp.shape
    x = inp if mask is None else inp * mask.unsqueeze(-1)
    gv = None if g is None else (g if mask is None else g * mask.unsqueeze(-1))
    chunks = -(-L // chunk)
    parts = ces_parts(H, swapped)[:2 if bidirectional else 1]
    out = torch.zeros(B, L, H, dtype=inp.dtype)
    sums = torch.zeros(len(parts) * H, 4, dtype=inp.dtype)
    for p, (row, reverse, exclusive) in enumerate(parts):
        m = mu[row:row + H]
        cc = c[row:row + H]

        def order(k):
            lo, hi = k * chunk, min(L, (k + 1) * chunk)
            return list(range(hi - 1, lo - 1, -1)) if reverse else list(range(lo, hi))

        summary = []
        for k in range(chunks):  # (1)
            st = torch.zeros(B, H, 2, dtype=inp.dtype)
            dst = torch.zeros_like(st)
            for t in order(k):
                dst = cmul(m, dst) + st
                st = cmul(m, st) + torch.stack([x[:, t], torch.zeros_like(x[:, t])], -1)
            summary.append((st, dst))
        incoming = [None] * chunks
        st = torch.zeros(B, H, 2, dtype=inp.dtype)
        dst = torch.zeros_like(st)
        for i in range(chunks):  # (2)
            k = chunks - 1 - i if reverse else i
            incoming[k] = (st, dst)
            n = len(order(k))
            mun = cpow(m, n)
            dst = cmul(mun, dst) + n * cmul(cpow(m, n - 1), st) + summary[k][1]
            st = cmul(mun, st) + summary[k][0]
        for k in range(chunks):  # (3)
            st, dst = incoming[k]
            for t in order(k):
                before, dbefore = st, dst
                dst = cmul(m, dst) + st
                st = cmul(m, st) + torch.stack([x[:, t], torch.zeros_like(x[:, t])], -1)
                use, duse = (before, dbefore) if exclusive else (st, dst)
                if g is None:
                    out[:, t] += cmul(cc.expand_as(use), use)[..., 0]
                else:
                    w = gv[:, t].unsqueeze(-1)
                    sums[row:row + H, 0:2] += (w * use).sum(0)
                    sums[row:row + H, 2:4] += (w * duse).sum(0)
    if g is not None:
        return sums
    return out if mask is None else out * mask.unsqueeze(-1)


@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
@pytest.mark.parametrize("L,chunk", [(1, 4), (7, 4), (16, 4), (23, 5)])
@pytest.mark.parametrize("masked", [False, True])
def test_ces_chunked_scan_and_its_gradients(direction, L, chunk, masked):
    from seqmix import _layers, _torch_ops
    torch.manual_seed(L + chunk)
    B, H = 2, 3
    C = 2 * H if direction == "bidirectional" else H
    _, mu, c = _layers.ces_coefficients(torch.randn(C, 2, dtype=torch.float64),
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
    y = ces_chunked(x.detach(), mu.detach(), c.detach(), fmask, bidir, False, chunk)
    torch.testing.assert_close(y, ref.detach(), rtol=1e-10, atol=1e-10)
    # dL/dx: the swapped parts applied to g.
    gx = ces_chunked(g, mu.detach(), c.detach(), fmask, bidir, True, chunk)
    if fmask is not None:
        gx = gx * fmask.unsqueeze(-1)
    torch.testing.assert_close(gx, x.grad, rtol=1e-10, atol=1e-10)
    # dL/dc = (Re, -Im) sum g s;  dL/dmu = (Re, -Im) c sum g ds.
    sums = ces_chunked(x.detach(), mu.detach(), c.detach(), fmask, bidir, False, chunk, g)
    gc = torch.stack([sums[:, 0], -sums[:, 1]], 1)
    prod = cmul(c.detach(), sums[:, 2:4])
    gmu = torch.stack([prod[:, 0], -prod[:, 1]], 1)
    torch.testing.assert_close(gc, c.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(gmu, mu.grad, rtol=1e-9, atol=1e-9)
