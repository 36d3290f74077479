"""The AIB scan's fast path at the papers' initialisation and its fallback counter
(seqmix.ops.aib_scan_fallbacks; include/seqmix/ops/aib_scan.h).

Weird-Net initialises the level parameters w ~ N(0, 1), so the largest distance weight of a
channel, exp of the sum of the positive cumulative log-weights over its K levels, passes
float32's range (e^88) in about 1 channel of 300 at K = 14 (L = 16K). The kernels keep one
power-of-two exponent per row of tiles and level for those levels, so such channels stay
on the fast path; only inputs spanning tens of nats within a tile, or NaN, leave it.
"""
import math
import warnings

import pytest
import torch

import seqmix
import seqmix.ops as so


def _largest_log_lag_weight(w):
    """Per channel: log of the largest distance weight, sum over levels of max(0, cumsum w)."""
    return torch.cumsum(w.double(), 0).clamp(min=0).sum(0)


def test_counter_is_an_int_and_reachable_as_an_op():
    n = so.aib_scan_fallbacks()
    assert isinstance(n, int) and n >= 0
    assert torch.ops.seqmix.aib_scan_fallbacks() >= n


def test_initial_weights_beyond_float_range_stay_on_the_fast_path():
    L, D = 16384, 768
    torch.manual_seed(3)
    w = torch.randn(so.aib_num_levels(L), D)
    # The draw does reach past float32's range (else this test would prove nothing).
    assert int((_largest_log_lag_weight(w) > math.log(torch.finfo(torch.float32).max)).sum()) >= 1
    a = torch.randn(1, L, D, requires_grad=True)
    v = torch.randn(1, L, D, requires_grad=True)
    w.requires_grad_()
    before = so.aib_scan_fallbacks()
    o = so.aib_scan(a, v, w)
    (o * torch.randn_like(o)).sum().backward()
    assert so.aib_scan_fallbacks() == before
    assert bool(torch.isfinite(o).all())
    for t in (a.grad, v.grad, w.grad):
        assert bool(torch.isfinite(t).all())
    # O is a convex combination of V along each window: a cheap exactness check at this size.
    assert bool((o <= v.detach().cummax(1).values + 1e-5).all())
    assert bool((o >= v.detach().cummin(1).values - 1e-5).all())


@pytest.mark.parametrize("autocast", [False, True])
def test_default_initialised_weird_net_a_at_16k_never_falls_back(autocast):
    # The GPU benchmark's model (d_model 256, 4 layers, d_ff 1024), one sequence of 16K.
    model = seqmix.build("weird-net-a", "mini", seed=11, n_layers=4, d_model=256, d_ff=1024,
                         max_len=16384, **{"train.batch_size": 1})
    ws = [p for name, p in model.named_parameters() if name.endswith("mixer.w")]
    assert len(ws) == 4
    # Some channel's distance weights pass float32's range at this initialisation.
    assert max(_largest_log_lag_weight(p.detach()).max().item() for p in ws) > 88.7
    tokens = torch.randint(0, 256, (1, 16384), generator=torch.Generator().manual_seed(0))
    before = so.aib_scan_fallbacks()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens.flatten())
    loss.backward()
    assert so.aib_scan_fallbacks() == before
    assert math.isfinite(loss.item())
    assert all(bool(torch.isfinite(p.grad).all()) for p in ws)


def test_a_fallback_is_counted_warned_once_and_exact(capfd):
    # A jumps by 120 nats mid-sequence: later positions' E underflows against the running
    # maximum, so their blocks take the exponent path.
    a = torch.zeros(1, 300, 16, dtype=torch.float32)
    a[0, 100] = 120.0
    v = torch.randn(1, 300, 16)
    w = torch.zeros(so.aib_num_levels(300), 16)
    before = so.aib_scan_fallbacks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o = so.aib_scan(a, v, w)
        so.aib_scan(a, v, w)
    assert so.aib_scan_fallbacks() > before
    # TORCH_WARN_ONCE: one warning per process, naming the counter, at the first fallback
    # (a Python warning where PyTorch converts it, else on stderr).
    texts = [str(c.message) for c in caught] + capfd.readouterr().err.splitlines()
    assert sum("aib_scan_fallbacks()" in t for t in texts) == (1 if before == 0 else 0)
    expect = so.aib_scan(a.double(), v.double(), w.double(), impl="reference")
    torch.testing.assert_close(o.double(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_high_level_weights_match_the_float64_reference(dtype):
    # Levels 7.. (rows of 128-position tiles) carry weights up to e^+-40 per level: products
    # over the levels past float32's range.
    L, D = 700, 8
    torch.manual_seed(5)
    K = so.aib_num_levels(L)
    w = torch.zeros(K, D, dtype=torch.float64)
    w[:7] = 0.5 * torch.randn(7, D, dtype=torch.float64)
    w[7] = torch.linspace(-40, 40, D, dtype=torch.float64)
    w[8] = w[7] * 0.9
    w[9] = w[7] * 0.8
    a = torch.randn(2, L, D, dtype=torch.float64)
    v = torch.randn(2, L, D, dtype=torch.float64)
    before = so.aib_scan_fallbacks()
    ref = so.aib_scan(a, v, w, weights="exp", impl="reference")  # float64, one maximum
    got = so.aib_scan(a.to(dtype), v.to(dtype), w.to(dtype), weights="exp")
    assert so.aib_scan_fallbacks() == before
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol)
