"""seqmix's layers and models as ordinary nn.Modules: what PyTorch does with modules works on
them (each case below failed, several silently, when the layers were proxies to C++ modules),
their parameters and weights are the C++ layers', masks follow both conventions, and step
decoding equals forward."""
import copy
import io
import pickle

import pytest
import torch
from torch.func import functional_call
from torch.nn.utils import parametrize

import seqmix
import seqmix.nn as snn
import seqmix.reference as ref
from seqmix import _C
from seqmix._api import _cpp_state

from conftest import registry_layers

PRESETS = ["weird-net", "weird-net-a", "moss", "transformer", "etsmlp-lm", "etsmlp-gate-lm",
           "extractor-transformer", "transformer-plain"]


def tokens(B=2, L=24, V=256, seed=0):
    return torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("preset", PRESETS)
def test_same_weights_and_logits_as_the_cpp_model(preset):
    # The same seed draws the same weights in the same order as the C++ model, and the
    # Python forward gives the C++ forward's logits. Not always bit for bit: LibTorch's
    # linear computes x W^T + b as one fused GEMM for the Python layers and as a product
    # then an addition for the C++ ones on some machines (seen on an AVX512-BF16 machine,
    # 2e-6 apart once the biases are non-zero), so the logits agree to float32 rounding.
    m = seqmix.build(preset, "tiny", seed=11)
    torch.manual_seed(11)
    cpp = _C.model_from_config(m._run_config)
    cs, ps = _cpp_state(cpp), m.state_dict()
    assert list(cs) == list(ps)
    for name in cs:
        assert torch.equal(cs[name], ps[name]), name
    x = tokens()
    torch.testing.assert_close(m(x), _C.model_forward(cpp, x, None), rtol=1e-5, atol=1e-5)
    # State dicts load both ways.
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.01)
    _C.load_state_dict(cpp, list(m.state_dict().items()), "test")
    torch.testing.assert_close(m(x), _C.model_forward(cpp, x, None), rtol=1e-5, atol=1e-5)
    other = seqmix.build(preset, "tiny", seed=12)
    other.load_state_dict(_cpp_state(cpp))
    torch.testing.assert_close(other(x), m(x), rtol=0, atol=0)


@pytest.mark.parametrize("make,cpp", [
    (lambda: snn.AIBAttention(16, 40, n_layers=3),
     lambda: _C.aib_attention(16, 40, True, "prefix_exp", False, "kernel", 3)),
    (lambda: snn.SelfAttention(16, 4, causal=False),
     lambda: _C.self_attention(16, 4, False, 0.0, True, "kernel", 1)),
    (lambda: snn.CES(8, bidirectional=True, normalize=True),
     lambda: _C.ces(8, True, 0.1, 0.9, 6.283185307179586, 1e-3, 0.1, 0.9999, "omega", True,
                    "kernel")),
    (lambda: snn.ESMLP(16, 24, gate=True),
     lambda: _C.esmlp(16, 24, True, True, 0.1, 0.9, 6.283185307179586, 1e-3, 0.1, 0.9999,
                      "omega", False, "kernel")),
    (lambda: snn.Extractor(8, 20, n_layers=2),
     lambda: _C.extractor(8, 20, True, True, "kernel", 2)),
])
def test_layers_have_the_cpp_names_and_initialisation(make, cpp):
    torch.manual_seed(5)
    py = make()
    torch.manual_seed(5)
    c = _cpp_state(cpp())
    p = py.state_dict()
    assert list(p) == list(c)
    for name in p:
        assert torch.equal(p[name], c[name]), name


def every_mixer_model():
    # One model holding every seqmix layer: AIB, self-attention, ESMLP, the Extractor.
    return seqmix.build("weird-net", "tiny", seed=3, mixers=["aib", "attention", "etsmlp",
                                                             "extractor"], n_layers=4,
                        max_len=32)


def test_deepcopy_pickle_and_torch_save_of_a_model():
    m = every_mixer_model()
    x = tokens(L=20)
    y = m(x)
    twin = copy.deepcopy(m)
    torch.testing.assert_close(twin(x), y, rtol=0, atol=0)
    with torch.no_grad():
        twin.tok_emb.weight.zero_()
    torch.testing.assert_close(m(x), y, rtol=0, atol=0)  # the copy owns its tensors
    torch.testing.assert_close(pickle.loads(pickle.dumps(m))(x), y, rtol=0, atol=0)
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    torch.testing.assert_close(loaded(x), y, rtol=0, atol=0)
    assert loaded.config == m.config and loaded.tokenizer.vocab_size == 256
    # EMA of the weights, which deep-copies the model.
    ema = torch.optim.swa_utils.AveragedModel(
        m, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    ema.update_parameters(m)
    torch.testing.assert_close(ema.module(x), y)


def test_weight_norm_and_parametrize_reach_the_forward():
    torch.manual_seed(0)
    layer = snn.AIBAttention(8, 16)
    x = torch.randn(2, 10, 8)
    torch.nn.utils.parametrizations.weight_norm(layer.w_o)
    y = layer(x)
    with torch.no_grad():
        layer.w_o.parametrizations.weight.original0.mul_(2.0)  # the norm g
    torch.testing.assert_close(layer(x) - layer.w_o.bias, 2 * (y - layer.w_o.bias))
    layer(x).sum().backward()
    assert layer.w_o.parametrizations.weight.original0.grad.abs().sum() > 0  # W_O trains

    class Zero(torch.nn.Module):
        def forward(self, w):
            return torch.zeros_like(w)

    parametrize.register_parametrization(layer.w_v, "weight", Zero())
    assert layer(x).sub(layer.w_o.bias).abs().max() == 0  # V = 0: only W_O's bias is left


def test_functional_call_uses_the_given_parameters():
    torch.manual_seed(0)
    layer = snn.AIBAttention(8, 16)
    zeros = {k: torch.zeros_like(v) for k, v in layer.named_parameters()}
    out = functional_call(layer, zeros, (torch.randn(2, 6, 8),))
    assert out.abs().max() == 0
    m = every_mixer_model()
    zeros = {k: torch.zeros_like(v) for k, v in m.named_parameters()}
    assert functional_call(m, zeros, (tokens(L=10),)).abs().max() == 0


def test_apply_init_and_hooks_reach_every_sublayer():
    m = every_mixer_model()
    linears = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
    # w_a, w_v, w_o, qkv, out, in_proj, out_proj, w_adj, w_opt, and 4 FFNs (w_1, w_2)
    assert len(linears) == 3 + 2 + 2 + 2 + 2 * 3
    seen = []
    m.apply(lambda mod: seen.append(mod) if isinstance(mod, torch.nn.Linear) else None)
    assert len(seen) == len(linears)
    calls = []
    m.blocks[0].mixer.w_a.register_forward_hook(lambda mod, i, o: calls.append(o.shape))
    m.blocks[2].mixer.ces.register_forward_pre_hook(lambda mod, i: calls.append("ces"))
    m(tokens(L=12))
    assert calls == [torch.Size([2, 12, m.config["model"]["d_model"]]), "ces"]

    def zero_linears(mod):
        if isinstance(mod, torch.nn.Linear):
            torch.nn.init.zeros_(mod.weight)
    m.apply(zero_linears)
    assert all(lin.weight.abs().sum() == 0 for lin in linears)


def test_to_double_and_grads():
    m = every_mixer_model()
    x = tokens(L=16)
    y32 = m(x)
    m.double()
    assert all(p.dtype == torch.float64 for p in m.parameters())
    y64 = m(x)
    assert y64.dtype == torch.float64
    torch.testing.assert_close(y64.float(), y32, rtol=1e-4, atol=1e-4)
    y64.sum().backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


@pytest.mark.parametrize("make", [m for _, m in registry_layers()] + [
    lambda: snn.CES(8, bidirectional=True)], ids=[i for i, _ in registry_layers()] + ["CES"])
def test_key_padding_mask_is_pytorch_s_convention(make):
    torch.manual_seed(0)
    layer = make().eval()
    x = torch.randn(2, 12, 8)
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pad[1, 9:] = True  # PyTorch: True = padding
    y = layer(x, key_padding_mask=pad)
    torch.testing.assert_close(y, layer(x, mask=~pad), rtol=0, atol=0)
    # The valid positions see only valid ones: as if the sequence ended there.
    torch.testing.assert_close(y[1, :9], layer(x[1:, :9])[0], rtol=1e-5, atol=1e-5)
    # Padded outputs are 0, except where a shortcut or gate sees the padded input itself
    # (ETSMLP's omega x and its gate, as in the C++ layers).
    assert y[1, 9:].abs().max() == 0 or isinstance(layer, (snn.ESMLP, snn.CES))
    with pytest.raises(ValueError, match="pass one of them"):
        layer(x, mask=~pad, key_padding_mask=pad)
    with pytest.raises(ValueError, match="True = padding"):
        layer(x, key_padding_mask=pad.float())
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        layer(x, mask=~pad[:, :5])


def test_model_masks_and_classifier_pooling():
    m = seqmix.build("weird-net-a", "cpu", task="listops", seed=0).eval()
    x = tokens(L=30, V=m.vocab_size)
    pad = torch.zeros_like(x, dtype=torch.bool)
    pad[0, 20:] = True
    torch.testing.assert_close(m.classify(x, key_padding_mask=pad), m.classify(x, ~pad),
                               rtol=0, atol=0)
    torch.testing.assert_close(m.classify(x, key_padding_mask=pad)[0],
                               m.classify(x[:1, :20])[0], rtol=1e-5, atol=1e-5)


_CAUSAL = [(i, m) for i, m in registry_layers() if i.endswith("-causal")]


@pytest.mark.parametrize("make", [m for _, m in _CAUSAL] + [
    lambda: snn.AIBAttention(8, 32, weights="exp", bias_av=True),
    lambda: snn.ESMLP(8, 12, gate=True), lambda: snn.CES(8)],
    ids=[i for i, _ in _CAUSAL] + ["aib-exp-bias", "etsmlp-gate", "CES"])
def test_step_equals_forward_on_the_prefix(make):
    torch.manual_seed(1)
    layer = make().double().eval()
    x = torch.randn(3, 17, 8, dtype=torch.float64) * 3
    full = layer(x)
    state = layer.init_state(3)
    steps = torch.stack([layer.step(x[:, t], state) for t in range(17)], 1)
    assert state.pos == 17
    torch.testing.assert_close(steps, full, rtol=1e-10, atol=1e-10)


def test_encoders_refuse_to_decode_and_bad_states_are_errors():
    with pytest.raises(RuntimeError, match="bidirectional"):
        snn.AIBAttention(8, 16, causal=False).init_state(1)
    layer = snn.AIBAttention(8, 16)
    with pytest.raises(ValueError, match="init_state"):
        layer.step(torch.randn(1, 8), snn.SelfAttention(8, 2).init_state(1))
    with pytest.raises(ValueError, match="batch 1"):
        layer.step(torch.randn(2, 8), layer.init_state(1))


@pytest.mark.parametrize("preset", ["weird-net", "etsmlp-lm", "extractor-transformer"])
def test_model_step_equals_forward(preset):
    m = seqmix.build(preset, "tiny", seed=2).double().eval()
    x = tokens(B=2, L=20)
    full = m(x)
    states = m.init_state(2)
    steps = torch.stack([m.step(x[:, t], states) for t in range(20)], 1)
    torch.testing.assert_close(steps, full, rtol=1e-9, atol=1e-9)


def test_compile_fullgraph_matches_eager():
    m = every_mixer_model()
    x = tokens(L=24)
    compiled = torch.compile(m, fullgraph=True)
    y = compiled(x)
    torch.testing.assert_close(y, m(x), rtol=1e-4, atol=1e-4)
    y.square().mean().backward()
    grads = {k: p.grad.clone() for k, p in m.named_parameters()}
    m.zero_grad()
    m(x).square().mean().backward()
    for k, p in m.named_parameters():
        torch.testing.assert_close(grads[k], p.grad, rtol=1e-3, atol=1e-5, msg=k)


def test_export_of_a_weird_net():
    m = seqmix.build("weird-net", "tiny", seed=4).eval()
    x = tokens(L=32)
    program = torch.export.export(m, (x,))
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "seqmix.aib_scan.default" in ops
    torch.testing.assert_close(program.module()(tokens(L=32, seed=1)), m(tokens(L=32, seed=1)))


def test_jit_trace_is_right_on_new_inputs():
    m = seqmix.build("weird-net-a", "tiny", seed=4).eval()
    traced = torch.jit.trace(m, (tokens(L=16),), check_trace=False)
    other = tokens(L=16, seed=9)
    torch.testing.assert_close(traced(other), m(other), rtol=1e-5, atol=1e-5)
    assert "seqmix::aib_scan" in str(traced.inlined_graph)


@pytest.mark.parametrize("preset", PRESETS + ["etsmlp", "weird-net-a"])
def test_reference_models_give_the_same_logits(preset):
    task = {"etsmlp": "listops"}.get(preset)
    m = seqmix.build(preset, "tiny" if task is None else "cpu", task=task, seed=6).eval()
    r = ref.SequenceModel(m.config["model"]).eval()
    r.load_state_dict(m.state_dict())
    x = tokens(L=40, V=m.vocab_size)
    pad = torch.zeros_like(x, dtype=torch.bool)
    pad[1, 30:] = True
    torch.testing.assert_close(r(x, key_padding_mask=pad), m(x, key_padding_mask=pad),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r(x), m(x), rtol=1e-5, atol=1e-5)


def test_ops_take_either_mask_convention():
    import seqmix.ops as O
    torch.manual_seed(0)
    a, v, w = torch.randn(2, 9, 4), torch.randn(2, 9, 4), torch.randn(4, 4)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[0, 6:] = True
    torch.testing.assert_close(O.aib_scan(a, v, w, key_padding_mask=pad),
                               O.aib_scan(a, v, w, ~pad), rtol=0, atol=0)
    q = torch.randn(2, 3, 9, 8)
    torch.testing.assert_close(O.attention(q, q, q, key_padding_mask=pad),
                               O.attention(q, q, q, ~pad), rtol=0, atol=0)
    with pytest.raises(ValueError, match="pass one of them"):
        O.aib_scan(a, v, w, ~pad, key_padding_mask=pad)
    with pytest.raises(ValueError, match="True = padding"):
        O.attention(q, q, q, key_padding_mask=pad.long())


def test_bf16_generation_is_the_library_s_for_every_family():
    # Model.generate (Python steps) against the library's generator (C++ steps) under the
    # same bfloat16 autocast: the same tokens, greedy and sampled.
    for preset in ("extractor-transformer", "weird-net", "etsmlp-lm"):
        m = seqmix.build(preset, "tiny", seed=7, max_len=24).eval()
        cpp = m._cpp_twin()
        cpp.train(False)
        prompt = list(b"The quick brown ")
        for temperature in (0.0, 0.9):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                want = _C.generate_tokens(cpp, prompt, 30, temperature, 0, 1.0, 5)
            got = m.generate(prompt, 30, temperature=temperature, seed=5, precision="bf16")
            assert got == want, (preset, temperature)


def test_reference_ops_compute_bf16_in_float32_under_autocast():
    q = torch.randn(1, 2, 9, 8).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = ref.SelfAttention._ops.attention_reference(q, q, q, None, "causal", 0.0)
    outside = ref.SelfAttention._ops.attention_reference(q, q, q, None, "causal", 0.0)
    assert torch.equal(inside, outside)


def test_model_configurations_the_library_refuses_are_refused():
    good = seqmix.build("weird-net", "tiny").config["model"]
    for change, words in ((dict(aib={"wieghts": "exp"}), "model.aib.wieghts"),
                          (dict(causal=False, mixers=["extractor"]), "causal only"),
                          (dict(cls_pair=True, n_classes=0), "n_classes > 0"),
                          (dict(n_classes=2.5), "model.n_classes")):
        with pytest.raises(ValueError, match=words):
            ref.SequenceModel({**good, **change})
