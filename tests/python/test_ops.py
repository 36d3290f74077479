"""seqmix.ops: autograd through the C++ kernels, checked against the references and by
finite differences (torch.autograd.gradcheck, float64), and their errors."""
import pytest
import torch

import seqmix.ops as so

from conftest import run_python


def _aib_inputs(B=2, L=11, D=4, dtype=torch.float64, masked=False):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(B, L, D, dtype=dtype, generator=g).requires_grad_()
    v = torch.randn(B, L, D, dtype=dtype, generator=g).requires_grad_()
    w = (0.5 * torch.randn(so.aib_num_levels(L), D, dtype=dtype, generator=g)).requires_grad_()
    mask = None
    if masked:
        mask = torch.ones(B, L, dtype=torch.bool)
        mask[0, -3:] = False
        mask[1, :2] = False
    return a, v, w, mask


@pytest.mark.parametrize("impl", ["kernel", "reference"])
@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
@pytest.mark.parametrize("weights", ["prefix_exp", "exp"])
@pytest.mark.parametrize("masked", [False, True])
def test_aib_scan_gradcheck(impl, direction, weights, masked):
    a, v, w, mask = _aib_inputs(masked=masked)
    f = lambda a, v, w: so.aib_scan(a, v, w, mask, direction=direction, weights=weights,
                                    impl=impl)
    assert torch.autograd.gradcheck(f, (a, v, w), eps=1e-6, atol=1e-7)


def test_aib_scan_kernel_matches_reference_float32():
    a, v, w, mask = _aib_inputs(B=3, L=100, D=16, dtype=torch.float32, masked=True)
    out = so.aib_scan(a, v, w, mask)
    ref = so.aib_scan(a, v, w, mask, impl="reference")
    assert out.shape == (3, 100, 16) and out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(out)
    ga = torch.autograd.grad(out, (a, v, w), g)
    gr = torch.autograd.grad(ref, (a, v, w), g)
    for x, y in zip(ga, gr):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)
    # Padded outputs are zero.
    assert out[~mask].abs().max() == 0


def test_aib_scan_ones_needs_no_w():
    a, v, _, _ = _aib_inputs(dtype=torch.float32)
    o1 = so.aib_scan(a, v, None, weights="ones")
    o2 = so.aib_scan(a, v, None, weights="ones", impl="reference")
    torch.testing.assert_close(o1, o2)


def _ces_params(C, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    log_lambda = (torch.randn(C, 2, dtype=dtype, generator=g) * 0.3 - 1.0).requires_grad_()
    log_alpha = torch.full((C, 2), -2.0, dtype=dtype).requires_grad_()
    log_beta = (0.2 * torch.randn(C, 2, dtype=dtype, generator=g)).requires_grad_()
    return log_lambda, log_alpha, log_beta


@pytest.mark.parametrize("impl", ["kernel", "reference"])
@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
@pytest.mark.parametrize("normalize", [False, True])
def test_ces_gradcheck(impl, direction, normalize):
    H, L = 3, 9
    C = H if direction == "causal" else 2 * H
    params = _ces_params(C)
    x = torch.randn(2, L, H, dtype=torch.float64).requires_grad_()
    mask = torch.ones(2, L, dtype=torch.bool)
    mask[1, -2:] = False

    def f(x, ll, la, lb):
        coef = so.ces_coefficients(ll, la, lb, max_lambda=0.9999, normalize=normalize)
        return so.ces_scan(x, coef, mask, direction=direction, impl=impl)

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-7)


def test_ces_kernel_matches_reference():
    H, L = 8, 64
    coef = so.ces_coefficients(*_ces_params(H, torch.float32))
    assert isinstance(coef, so.CESCoefficients) and coef.mu.shape == (H, 2)
    x = torch.randn(2, L, H)
    torch.testing.assert_close(so.ces_scan(x, coef), so.ces_scan(x, coef, impl="reference"),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", ["kernel", "reference"])
@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
def test_attention_gradcheck(impl, direction):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 2, 7, 4, dtype=torch.float64, generator=g).requires_grad_()
               for _ in range(3))
    key_mask = torch.ones(2, 7, dtype=torch.bool)
    key_mask[0, -2:] = False
    f = lambda q, k, v: so.attention(q, k, v, key_mask, direction=direction, impl=impl)
    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-7)


def test_attention_matches_plain_pytorch():
    q, k, v = (torch.randn(2, 4, 50, 16) for _ in range(3))
    scores = q @ k.transpose(-1, -2) / 4.0
    scores = scores.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    expected = scores.softmax(-1) @ v
    torch.testing.assert_close(so.attention(q, k, v), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["kernel", "reference"])
def test_extractor_conv_gradcheck(impl):
    x = torch.randn(2, 6, 3, dtype=torch.float64).requires_grad_()
    w = (0.3 * torch.randn(8, 3, 3, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: so.extractor_conv(x, w, impl=impl), (x, w),
                                    eps=1e-6, atol=1e-7)


def test_extractor_conv_is_eq18():
    x, w = torch.randn(2, 5, 3), torch.randn(5, 3, 3)
    expected = torch.stack([sum(x[:, i - k] @ w[k] for k in range(i + 1)) for i in range(5)], 1)
    torch.testing.assert_close(so.extractor_conv(x, w), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call, error, words", [
    (lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(2, 5, 3), torch.randn(3, 4)),
     RuntimeError, "V must match A"),
    (lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(2, 5, 4).double(), torch.randn(3, 4)),
     RuntimeError, "dtype"),
    (lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(1, 4)),
     RuntimeError, "level"),
    (lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(3, 4),
                         direction="forward"), ValueError, "direction"),
    (lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(3, 4),
                         impl="fast"), ValueError, "impl"),
    (lambda: so.aib_scan([1.0], torch.randn(2, 5, 4), torch.randn(3, 4)), TypeError,
     "a: expected a tensor"),
    (lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(3, 4),
                         torch.ones(2, 5)), ValueError, "mask"),
    (lambda: so.aib_scan(torch.randint(5, (2, 5, 4)), torch.randint(5, (2, 5, 4)),
                         torch.randn(3, 4)), RuntimeError, "float"),
    (lambda: so.ces_scan(torch.randn(2, 5, 4), (torch.randn(3, 2),) * 3), RuntimeError, "mu must"),
    (lambda: so.ces_scan(torch.randn(2, 5, 4), torch.randn(3)), TypeError, "coef"),
    (lambda: so.attention(torch.randn(2, 2, 5, 4), torch.randn(2, 2, 6, 4),
                          torch.randn(2, 2, 5, 4)), RuntimeError, "k is [2, 2, 6, 4]"),
    (lambda: so.extractor_conv(torch.randn(2, 9, 3), torch.randn(4, 3, 3)), ValueError,
     "sequence length t = 9 exceeds the number of lag matrices l = 4"),
    (lambda: so.aib_num_levels(0), ValueError, "max_len"),
    (lambda: so.aib_num_levels(2 ** 63 - 1), ValueError, "max_len"),  # a loop that must end
])
def test_bad_input_raises(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
    assert "Exception raised from" not in str(info.value)  # no C++ backtrace


def test_bad_input_never_aborts_the_interpreter():
    # The same calls in a fresh interpreter that must reach its last line.
    code = """
import torch, seqmix.ops as so
bad = [
    lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(5, 4), torch.randn(3, 4)),
    lambda: so.aib_scan(torch.randn(0, 5, 4), torch.randn(0, 5, 4), torch.randn(3, 4)),
    lambda: so.aib_scan(torch.randn(2, 5, 3), torch.randn(2, 5, 3), torch.randn(3, 3),
                        direction="bidirectional"),
    lambda: so.ces_scan(torch.randn(2, 5, 4), so.CESCoefficients(*(torch.randn(4, 3),) * 3)),
    lambda: so.attention(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)),
    lambda: so.extractor_conv(torch.randn(2, 5, 3), torch.randn(5, 3, 4)),
    lambda: so.aib_scan(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(3, 4),
                        torch.ones(3, 5, dtype=torch.bool)),
]
for f in bad:
    try:
        f()
    except (RuntimeError, ValueError, TypeError):
        pass
print("survived")
"""
    p = run_python(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("survived")


def test_ops_take_bfloat16_under_autocast():
    """torch.autocast's bfloat16 activations with float32 parameters: every op returns
    bfloat16 close to its float32 result, and the parameters' gradients stay float32."""
    a, v, w, mask = _aib_inputs(L=40, D=8, dtype=torch.float32, masked=True)
    o32 = so.aib_scan(a, v, w, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ab, vb = (torch.nn.functional.linear(t, torch.eye(8)) for t in (a, v))
        assert ab.dtype == torch.bfloat16
        o = so.aib_scan(ab, vb, w, mask)
    assert o.dtype == torch.bfloat16
    assert (o.float() - o32).abs().max() < 0.05 * o32.abs().max()
    o.float().sum().backward()
    assert w.grad.dtype == torch.float32 and torch.isfinite(w.grad).all()
    q = torch.randn(2, 2, 16, 8).bfloat16()
    out = so.attention(q, q, q)
    assert out.dtype == torch.bfloat16
    ref = so.attention(q.float(), q.float(), q.float())
    assert (out.float() - ref).abs().max() < 0.05 * ref.abs().max()
    x = torch.randn(2, 16, 8).bfloat16()
    wx = 0.3 * torch.randn(16, 8, 8)
    assert so.extractor_conv(x, wx).dtype == torch.bfloat16
    with pytest.raises((RuntimeError, ValueError), match="bfloat16|dtype"):
        so.aib_scan(a.half(), v.half(), w, mask)
