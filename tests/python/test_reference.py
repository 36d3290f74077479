"""seqmix.reference's plain-PyTorch ops (seqmix/_torch_ops.py) against the extension's
registered ops on every case of the op-case registry (src/mixers/*/op_cases.cpp): the same
outputs and gradients in float64, and their own gradients against finite differences."""
import pytest
import torch

import seqmix.nn  # noqa: F401  (loads the extension: torch.ops.seqmix.*)
from seqmix import _C, _mixer, _torch_ops

CASES = _C.op_cases()  # (name, op, gradcheck-sized)
# Every registered mixer's plain-PyTorch ops by name.
TORCH = {fn.__name__: fn for entry in _mixer.mixers() for fn in entry.torch_ops}


def leaves(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


@pytest.mark.parametrize("name,op", [(n, o) for n, o, _ in CASES], ids=[c[0] for c in CASES])
def test_plain_pytorch_op_equals_the_registered_op(name, op):
    args = _C.op_case_args(name, "float64", 7)
    expected = getattr(torch.ops.seqmix, op)(*args)
    got = TORCH[op](*args)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    grad = torch.randn_like(expected)
    xs = leaves(args)
    want = torch.autograd.grad(expected, xs, grad, allow_unused=True)
    have = torch.autograd.grad(got, xs, grad, allow_unused=True)
    for i, (x, w, h) in enumerate(zip(xs, want, have)):
        # An input that does not reach the output (w at L = 1) has no gradient or zeros.
        w = torch.zeros_like(x) if w is None else w
        h = torch.zeros_like(x) if h is None else h
        torch.testing.assert_close(h, w, rtol=1e-8, atol=1e-8, msg=f"gradient {i}")


GRADCHECK = [(n, o) for n, o, small in CASES if small and "L4096" not in n and "L1000" not in n
             and "L300" not in n and "L130" not in n and "L128" not in n][::3]


@pytest.mark.parametrize("name,op", GRADCHECK, ids=[c[0] for c in GRADCHECK])
def test_plain_pytorch_op_against_finite_differences(name, op):
    args = list(_C.op_case_args(name, "float64", 9))
    idx = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]

    def f(*xs):
        full = list(args)
        for i, x in zip(idx, xs):
            full[i] = x
        return TORCH[op](*full)

    assert torch.autograd.gradcheck(f, tuple(args[i] for i in idx), eps=1e-6, atol=1e-5)


def test_bfloat16_is_computed_in_float32_and_rounded_once():
    a, v = torch.randn(2, 33, 8).bfloat16(), torch.randn(2, 33, 8).bfloat16()
    w = torch.randn(6, 8)
    got = _torch_ops.aib_scan(a, v, w)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, _torch_ops.aib_scan(a.float(), v.float(), w).bfloat16(),
                               rtol=0, atol=0)
