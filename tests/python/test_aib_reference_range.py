"""The AIB references (torch.ops.seqmix.aib_scan_reference and seqmix._torch_ops.aib_scan)
are exact over the whole input range the fused kernel claims: A spread far beyond exp's
range, distance weights beyond float's, V up to float's maximum; causal outputs never read
a later input. The fused kernel in float64 is the yardstick (C++ tests hold the closed form)."""
import pytest
import torch

import seqmix.nn  # noqa: F401  (loads the extension: torch.ops.seqmix.*)
from seqmix import _torch_ops

OPS = torch.ops.seqmix


def references():
    return {"C++ reference": lambda a, v, w, d="causal": OPS.aib_scan_reference(a, v, w, None, d),
            "_torch_ops": lambda a, v, w, d="causal": _torch_ops.aib_scan(a, v, w, None, d)}


@pytest.mark.parametrize("name", list(references()))
def test_a_later_spike_leaves_earlier_outputs_alone(name):
    ref = references()[name]
    for dtype, spike in ((torch.float32, 120.0), (torch.float64, 800.0)):
        a = torch.zeros(1, 8, 1, dtype=dtype)
        a[0, 3, 0] = spike
        v = torch.arange(1, 9, dtype=dtype).view(1, 8, 1)
        w = torch.zeros(3, 1, dtype=dtype)
        got = ref(a, v, w)
        # Equal distance weights: the first three outputs are running means of V.
        torch.testing.assert_close(got[0, :3, 0], torch.tensor([1.0, 1.5, 2.0], dtype=dtype))
        torch.testing.assert_close(got, OPS.aib_scan(a, v, w), rtol=1e-6, atol=1e-6)
        # Causal: no later input reaches an earlier output, not even through rounding.
        a2 = a.clone()
        a2[0, 6, 0] = -spike
        assert torch.equal(ref(a2, v, w)[0, :6], got[0, :6])


@pytest.mark.parametrize("name", list(references()))
@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
def test_wide_a_in_float32_matches_float64(name, direction):
    torch.manual_seed(0)
    a = torch.randn(2, 256, 16) * 50
    v = torch.randn(2, 256, 16)
    w = torch.randn(8, 16)
    expected = OPS.aib_scan(a.double(), v.double(), w.double(), None, direction)
    got = references()[name](a, v, w, direction)
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(references()))
def test_distance_weights_beyond_float_range(name):
    torch.manual_seed(1)
    a, v = torch.randn(1, 64, 4), torch.randn(1, 64, 4)
    w = torch.full((6, 4), 30.0)  # cumsum reaches 180: W_5 = e^180 > float's maximum
    w[:, 1] = -30.0
    expected = OPS.aib_scan(a.double(), v.double(), w.double())
    got = references()[name](a, v, w)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(references()))
def test_v_near_the_float_maximum_stays_finite(name):
    torch.manual_seed(2)
    a = torch.randn(2, 40, 4)
    v = torch.rand(2, 40, 4) * 3e38
    v[1] *= -1
    w = torch.randn(6, 4)
    expected = OPS.aib_scan(a.double(), v.double(), w.double())
    got = references()[name](a, v, w)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double() / 3e38, expected / 3e38, rtol=1e-5, atol=1e-6)
    # The same V, small, in a second channel keeps its full precision.
    v[:, :, 1] = torch.rand(2, 40) * 1e-3
    got = references()[name](a, v, w)
    expected = OPS.aib_scan(a.double(), v.double(), w.double())
    torch.testing.assert_close(got[:, :, 1].double(), expected[:, :, 1], rtol=1e-5, atol=0)


def test_the_kernel_holds_its_stated_v_bound():
    torch.manual_seed(3)
    a, w = torch.randn(2, 300, 16), torch.randn(9, 16)
    v = torch.randn(2, 300, 16) * 1e19  # below 2^64
    got = OPS.aib_scan(a, v, w)
    expected = OPS.aib_scan(a.double(), v.double(), w.double())
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double() / 1e19, expected / 1e19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(references()))
def test_gradients_at_a_wide_spread_against_finite_differences(name):
    torch.manual_seed(4)
    a = (torch.randn(1, 9, 2, dtype=torch.float64) * 400).requires_grad_()
    v = torch.randn(1, 9, 2, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    ref = references()[name]
    assert torch.autograd.gradcheck(lambda a, v, w: ref(a, v, w), (a, v, w), eps=1e-6,
                                    atol=1e-5)
    assert torch.autograd.gradcheck(lambda a, v, w: ref(a, v, w, "bidirectional"),
                                    (a, v, w), eps=1e-6, atol=1e-5)


def test_the_literal_form_is_the_papers_and_equal_in_range():
    torch.manual_seed(5)
    a, v, w = torch.randn(2, 50, 6), torch.randn(2, 50, 6), torch.randn(6, 6)
    mask = torch.rand(2, 50) > 0.2
    for d in ("causal", "bidirectional"):
        torch.testing.assert_close(_torch_ops.aib_scan_literal(a, v, w, mask, d),
                                   _torch_ops.aib_scan(a, v, w, mask, d), rtol=1e-5, atol=1e-6)
