"""seqmix.nn: the C++ layers as torch.nn.Modules -- names, initialisation, outputs equal to
the layer written out with seqmix.ops on the same weights, and the Module contract
(optimisers, state_dict, dtype, train/eval)."""
import math

import pytest
import torch
import torch.nn.functional as F

import seqmix.nn as snn
import seqmix.ops as so


def test_aib_attention_parameters_and_init():
    torch.manual_seed(0)
    D, L = 64, 256
    m = snn.AIBAttention(D, L, n_layers=4)
    names = dict(m.named_parameters())
    assert sorted(names) == ["w", "w_a.weight", "w_o.bias", "w_o.weight", "w_v.weight"]
    assert names["w"].shape == (8, D)
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in m.parameters())
    # Weird-Net Sec. III.G: W_A ~ N(0, 1/D), w ~ N(0, 1), W_O ~ N(0, (1 - 2/D) / (2 N D)).
    assert abs(names["w_a.weight"].std().item() - D ** -0.5) < 0.1 * D ** -0.5
    assert abs(names["w"].std().item() - 1.0) < 0.15
    assert abs(names["w_o.weight"].std().item() - math.sqrt((1 - 2 / D) / (8 * D))) \
        < 0.1 * math.sqrt((1 - 2 / D) / (8 * D))
    assert names["w_o.bias"].abs().max() == 0
    torch.manual_seed(0)
    again = snn.AIBAttention(D, L, n_layers=4)
    for (n1, p1), (n2, p2) in zip(m.named_parameters(), again.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2)  # torch.manual_seed makes init repeatable


@pytest.mark.parametrize("causal", [True, False])
def test_aib_attention_is_the_papers_layer(causal):
    torch.manual_seed(1)
    m = snn.AIBAttention(16, 32, causal=causal, bias_av=True)
    with torch.no_grad():
        m.w_a.bias.normal_()
    x = torch.randn(3, 20, 16)
    mask = torch.ones(3, 20, dtype=torch.bool)
    mask[2, 15:] = False
    p = dict(m.named_parameters())
    a = F.linear(x, p["w_a.weight"], p["w_a.bias"])
    v = F.linear(x, p["w_v.weight"], p["w_v.bias"])
    o = so.aib_scan(a, v, p["w"], mask, direction="causal" if causal else "bidirectional",
                    impl="reference")
    expected = F.linear(o, p["w_o.weight"], p["w_o.bias"])
    y = m(x, mask)
    torch.testing.assert_close(y[mask], expected[mask], rtol=1e-4, atol=1e-5)


def test_self_attention_is_the_papers_layer():
    torch.manual_seed(2)
    m = snn.SelfAttention(32, 4)
    assert sorted(n for n, _ in m.named_parameters()) == \
        ["out.bias", "out.weight", "qkv.bias", "qkv.weight"]
    x = torch.randn(2, 10, 32)
    p = dict(m.named_parameters())
    q, k, v = F.linear(x, p["qkv.weight"], p["qkv.bias"]).chunk(3, -1)
    heads = lambda t: t.view(2, 10, 4, 8).transpose(1, 2)
    o = so.attention(heads(q), heads(k), heads(v), impl="reference")
    expected = F.linear(o.transpose(1, 2).reshape(2, 10, 32), p["out.weight"], p["out.bias"])
    torch.testing.assert_close(m(x), expected, rtol=1e-4, atol=1e-5)


def test_ces_module_is_scan_plus_shortcut():
    torch.manual_seed(3)
    m = snn.CES(8)
    p = dict(m.named_parameters())
    assert sorted(p) == ["log_alpha", "log_beta", "log_lambda", "omega"]
    x = torch.randn(2, 30, 8)
    coef = so.ces_coefficients(p["log_lambda"], p["log_alpha"], p["log_beta"])
    expected = so.ces_scan(x, coef, impl="reference") + p["omega"] * x
    torch.testing.assert_close(m(x), expected, rtol=1e-4, atol=1e-5)


def test_extractor_and_esmlp_run_and_train():
    torch.manual_seed(4)
    for m in (snn.Extractor(16, 32), snn.ESMLP(16, 24, gate=True),
              snn.ESMLP(16, 24, causal=False)):
        x = torch.randn(2, 12, 16, requires_grad=True)
        y = m(x)
        assert y.shape == x.shape
        y.square().sum().backward()
        assert all(p.grad is not None for p in m.parameters())
        assert x.grad.abs().sum() > 0


def test_module_contract_optimizer_state_dict_dtype_train_eval():
    torch.manual_seed(5)
    block = snn.Block(snn.AIBAttention(16, 64), d_ff=32, dropout=0.5)
    names = [n for n, _ in block.named_parameters()]
    assert "mixer.w" in names and "ffn.w_1.weight" in names and "norm_1.weight" in names
    x = torch.randn(2, 9, 16)
    # An optimiser step on the Python parameters changes what the C++ forward computes.
    block.eval()
    before = block(x).detach()
    opt = torch.optim.AdamW(block.parameters(), lr=1e-2)
    block.train()
    block(x).square().mean().backward()
    opt.step()
    block.eval()
    after = block(x).detach()
    assert not torch.allclose(before, after)
    # state_dict into a freshly built block gives the same outputs.
    other = snn.Block(snn.AIBAttention(16, 64), d_ff=32, dropout=0.5)
    other.load_state_dict(block.state_dict())
    other.eval()
    torch.testing.assert_close(other(x), after)
    # eval() turns dropout off (repeatable), train() on (two calls differ).
    assert torch.equal(block(x), block(x))
    block.train()
    assert not torch.equal(block(x), block(x))
    assert block.training and block.mixer.training
    # .double() converts the C++ module's own tensors.
    block.eval()
    block.double()
    assert all(p.dtype == torch.float64 for p in block.parameters())
    y64 = block(x.double())
    assert y64.dtype == torch.float64
    torch.testing.assert_close(y64.float(), after, rtol=1e-4, atol=1e-5)


def test_drop_into_a_pytorch_model():
    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 16)
            self.mix = snn.AIBAttention(16, 32, causal=False)
            self.out = torch.nn.Linear(16, 3)

        def forward(self, t):
            return self.out(self.mix(self.emb(t)))

    torch.manual_seed(6)
    model = Tagger()
    assert {n.split(".")[0] for n, _ in model.named_parameters()} == {"emb", "mix", "out"}
    t = torch.randint(20, (8, 16))
    target = t % 3
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(30):
        loss = F.cross_entropy(model(t).flatten(0, 1), target.flatten())
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first


@pytest.mark.parametrize("make, error, words", [
    (lambda: snn.AIBAttention(0, 16), ValueError, "d_model"),
    (lambda: snn.AIBAttention(16, 16, weights="cube"), ValueError, "weights"),
    (lambda: snn.AIBAttention(16, 16, causal="yes"), TypeError, "causal"),
    (lambda: snn.SelfAttention(30, 4), ValueError, "n_heads"),
    (lambda: snn.CES(8, shortcut="tanh"), ValueError, "shortcut"),
    (lambda: snn.Block(torch.nn.Linear(4, 4)), TypeError, "mixer"),
])
def test_bad_construction_raises(make, error, words):
    with pytest.raises(error) as info:
        make()
    assert words in str(info.value)


def test_bad_forward_raises():
    m = snn.AIBAttention(8, 16)
    with pytest.raises(ValueError, match="length 17 exceeds max_len 16"):
        m(torch.randn(1, 17, 8))
    with pytest.raises(ValueError, match=r"x must be \[B, L, 8\], got \[1, 4, 9\]"):
        m(torch.randn(1, 4, 9))
    with pytest.raises(TypeError, match="x must be a tensor"):
        m([[1.0] * 8])


def test_batch_norm_buffers_follow_dtype_and_state_dict():
    torch.manual_seed(7)
    block = snn.Block(snn.ESMLP(8, 12), with_ffn=False, norm_type="batch")
    buffers = dict(block.named_buffers())
    assert "bn_1.running_mean" in buffers
    block.train()
    block(torch.randn(4, 6, 8) + 3.0)
    assert buffers["bn_1.running_mean"].abs().sum() > 0  # updated by the C++ forward
    other = snn.Block(snn.ESMLP(8, 12), with_ffn=False, norm_type="batch")
    other.load_state_dict(block.state_dict())
    torch.testing.assert_close(dict(other.named_buffers())["bn_1.running_mean"],
                               buffers["bn_1.running_mean"])
    block.double()
    assert dict(block.named_buffers())["bn_1.running_mean"].dtype == torch.float64
    block.eval()
    assert block(torch.randn(2, 5, 8, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.parametrize("make", [lambda: snn.SelfAttention(8, 2, dropout=1.5),
                                  lambda: snn.SelfAttention(8, 2, dropout=-0.1),
                                  lambda: snn.Block(snn.AIBAttention(8, 8), dropout=1.0)])
def test_dropout_must_be_a_probability(make):
    with pytest.raises(ValueError, match="dropout"):
        make()


def test_huge_max_len_is_refused_not_hung():
    with pytest.raises(ValueError, match="max_len"):
        snn.AIBAttention(4, 2 ** 62 + 1)
