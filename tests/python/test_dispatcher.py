"""The ops in PyTorch's dispatcher (torch.ops.seqmix.*): torch.library.opcheck on every op
case of the registry (src/ops/op_cases.cpp) -- schema, fake tensors (the Meta kernels),
autograd registration, and AOT dispatch with static and dynamic shapes -- and what builds on
registered ops: torch.compile without graph breaks, second derivatives, clear errors."""
import pytest
import torch

import seqmix._C as _C
import seqmix.ops as so

OPS = ("aib_scan", "attention", "ces_scan", "extractor_conv")
CASES = _C.op_cases()  # (name, op, gradcheck-sized)


def test_torch_ops_seqmix_lists_the_ops_and_their_references():
    names = set(torch.ops.seqmix)
    for op in OPS:
        assert op in names and op + "_reference" in names, sorted(names)


def test_every_op_has_cases():
    # The built-in ops, and every other op a mixer registers with its reference.
    with_cases = {op for _, op, _ in CASES}
    assert set(OPS) <= with_cases, with_cases
    for name in torch.ops.seqmix:
        if name.endswith("_reference"):
            assert name[:-len("_reference")] in with_cases, name


@pytest.mark.parametrize("name,op,small", CASES, ids=[c[0] for c in CASES])
def test_opcheck(name, op, small):
    # float64 where finite differences are affordable (the gradcheck-sized cases), float32
    # for the long ones: the same code paths, less time.
    args = _C.op_case_args(name, "float64" if small else "float32", 3)
    for impl in (op, op + "_reference"):
        torch.library.opcheck(getattr(torch.ops.seqmix, impl).default, args)


def test_plain_call_takes_the_schema_defaults():
    a, v = torch.randn(2, 9, 4), torch.randn(2, 9, 4)
    w = torch.randn(so.aib_num_levels(9), 4)
    torch.testing.assert_close(torch.ops.seqmix.aib_scan(a, v, w),
                               so.aib_scan(a, v, w, direction="causal", weights="prefix_exp"))
    q = torch.randn(1, 2, 5, 3)
    torch.testing.assert_close(torch.ops.seqmix.attention(q, q, q),
                               so.attention(q, q, q, direction="causal"))


@pytest.mark.parametrize("op", ["aib_scan", "ces_scan", "attention"])
def test_bad_direction_is_a_value_error_naming_the_op(op):
    x = torch.randn(1, 4, 2)
    args = {"aib_scan": (x, x, torch.zeros(2, 2)),
            "ces_scan": (x, torch.zeros(2, 2), torch.zeros(2, 2)),
            "attention": (x[None], x[None], x[None])}[op]
    with pytest.raises(ValueError, match=f"{op}: direction must be 'causal' or "
                                         "'bidirectional', got 'decoder'"):
        getattr(torch.ops.seqmix, op)(*args, None, "decoder")


def test_compile_fullgraph_matches_eager():
    # Every op in one function: torch.compile must treat each as one node (no graph break)
    # and give eager's values and gradients.
    g = torch.Generator().manual_seed(0)
    B, L, D = 2, 12, 8
    a = torch.randn(B, L, D, generator=g, requires_grad=True)
    v = torch.randn(B, L, D, generator=g, requires_grad=True)
    w = (0.3 * torch.randn(so.aib_num_levels(L), D, generator=g)).requires_grad_()
    mu = torch.tensor([[0.7, 0.2]] * D, requires_grad=True)
    cc = torch.tensor([[0.5, -0.1]] * D, requires_grad=True)
    wx = (0.2 * torch.randn(L, D, D, generator=g)).requires_grad_()
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, -3:] = False

    def f(a, v, w, mu, cc, wx):
        o = torch.ops.seqmix.aib_scan(a, v, w, mask)
        o = torch.ops.seqmix.ces_scan(o, mu, cc, mask)
        h = o.view(B, L, 2, D // 2).transpose(1, 2)
        o = torch.ops.seqmix.attention(h, h, h, mask).transpose(1, 2).reshape(B, L, D)
        return torch.ops.seqmix.extractor_conv(o, wx)

    inputs = (a, v, w, mu, cc, wx)
    eager = f(*inputs)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(*inputs)
    torch.testing.assert_close(compiled, eager)
    ge = torch.autograd.grad(eager.square().sum(), inputs)
    gc = torch.autograd.grad(compiled.square().sum(), inputs)
    for x, y in zip(gc, ge):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["aib_scan", "ces_scan", "attention"])
def test_second_derivatives_through_the_kernels(op):
    # The kernels' backward differentiates the reference under create_graph: gradgradcheck
    # passes, and no second derivative is silently None or zero.
    name = next(n for n, o, small in CASES
                if o == op and small and ("_L2_" in n if op == "ces_scan" else "L17" in n))
    args = _C.op_case_args(name, "float64", 5)
    tensors = [i for i, x in enumerate(args) if isinstance(x, torch.Tensor) and x.requires_grad]

    def f(*ts):
        full = list(args)
        for i, t in zip(tensors, ts):
            full[i] = t
        return getattr(torch.ops.seqmix, op)(*full)

    assert torch.autograd.gradgradcheck(f, tuple(args[i] for i in tensors), eps=1e-6,
                                        atol=1e-5)


def test_export_keeps_each_op_as_one_node_with_a_dynamic_length():
    class Mixer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(0.3 * torch.randn(4, 8))

        def forward(self, a, v):
            o = torch.ops.seqmix.aib_scan(a, v, self.w)
            h = o.unflatten(2, (2, 4)).transpose(1, 2)
            return torch.ops.seqmix.attention(h, h, h)

    m = Mixer()
    a, v = torch.randn(2, 16, 8), torch.randn(2, 16, 8)
    L = torch.export.Dim("L", min=2, max=16)
    ep = torch.export.export(m, (a, v), dynamic_shapes=({1: L}, {1: L}))
    calls = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "seqmix.aib_scan.default" in calls and "seqmix.attention.default" in calls, calls
    a2, v2 = torch.randn(2, 11, 8), torch.randn(2, 11, 8)
    torch.testing.assert_close(ep.module()(a2, v2), m(a2, v2))
