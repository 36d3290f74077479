"""Hostile input through the Python package, by class of fault: parsing bounds, gradients,
hangs, non-finite weights, import round trips, races, messages. Each case once crashed the
interpreter, hung, or gave a silently wrong result (tests/cli/test_hostile.cpp holds the
command line's cases)."""
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import seqmix
import seqmix.nn as N
import seqmix.ops as O
from conftest import registry_layers



# --- parsing bounds -------------------------------------------------------------------------

def test_deep_toml_config_raises_instead_of_killing_the_interpreter(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("[" + "a." * 50000 + "a]\n")
    with pytest.raises((ValueError, RuntimeError), match="nests at most 32"):
        seqmix.build(config=deep)
    nested = ["aib"]
    for _ in range(200):
        nested = [nested]
    with pytest.raises((ValueError, RuntimeError), match="nests at most 32"):
        seqmix.build("weird-net", "tiny", **{"model.mixers": nested})


# --- gradients -------------------------------------------------------------------------------

def _aib_inputs(direction):
    torch.manual_seed(0)
    B, L, D = 2, 5, 4
    a = torch.randn(B, L, D, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, L, D, dtype=torch.float64, requires_grad=True)
    w = (0.1 * torch.randn(O.aib_num_levels(L), D, dtype=torch.float64)).requires_grad_()
    return a, v, w


@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
@pytest.mark.parametrize("masked", [False, True])
def test_kernels_have_second_derivatives(direction, masked):
    # Under create_graph=True a kernel's gradient must itself be differentiable: it once came
    # back as a constant, so gradient penalties and Hessian-vector products got 0, silently.
    mask = None
    if masked:
        mask = torch.ones(2, 5, dtype=torch.bool)
        mask[1, 3:] = False
    a, v, w = _aib_inputs(direction)
    f = lambda a, v, w: O.aib_scan(a, v, w, mask, direction=direction)
    assert gradcheck(f, (a, v, w)) and gradgradcheck(f, (a, v, w))
    q, k, vv = (torch.randn(2, 2, 5, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    f = lambda q, k, v: O.attention(q, k, v, mask, direction=direction)
    assert gradgradcheck(f, (q, k, vv))
    H = 3
    ll = torch.randn(2 * H if direction == "bidirectional" else H, 2, dtype=torch.float64,
                     requires_grad=True)
    la = torch.full_like(ll, -2.0).requires_grad_()
    lb = (0.2 * torch.randn_like(ll)).requires_grad_()
    x = torch.randn(2, 5, H, dtype=torch.float64, requires_grad=True)
    f = lambda x, ll, la, lb: O.ces_scan(x, O.ces_coefficients(ll, la, lb), mask,
                                         direction=direction)
    assert gradgradcheck(f, (x, ll, la, lb))
    # The Hessian-vector product of the kernel equals the reference's. The vector is random:
    # along all-ones (ga.sum()) it is 0 exactly, O being invariant to a shift of A.
    a, v, w = _aib_inputs(direction)
    r = torch.randn(a.shape, dtype=a.dtype, generator=torch.Generator().manual_seed(9))
    hvp = []
    for impl in ("kernel", "reference"):
        out = O.aib_scan(a, v, w, mask, direction=direction, impl=impl)
        (ga,) = torch.autograd.grad(out.square().sum(), a, create_graph=True)
        (h,) = torch.autograd.grad((ga * r).sum(), a)
        hvp.append(h)
    assert hvp[0].abs().sum() > 0
    torch.testing.assert_close(hvp[0], hvp[1])


@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
def test_attention_nan_query_gives_nan_as_the_reference(direction):
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    q[0, 1, 2, 3] = float("nan")
    q[0, 0, 4, 0] = float("inf")
    for mask in (None, torch.tensor([[True, True, False, True, True, True]])):
        ref = O.attention(q, k, v, mask, direction=direction, impl="reference")
        ker = O.attention(q, k, v, mask, direction=direction, impl="kernel")
        assert torch.equal(ref.isnan(), ker.isnan())
        assert ker.isnan().any()
        torch.testing.assert_close(ker.nan_to_num(), ref.nan_to_num())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aib_kernel_is_exact_beyond_its_exponent_range(dtype):
    # |A| past the kernel's 2^20 exponent clamp once gave an equal-weight average (0.5 here
    # instead of exp(-100)); such inputs now take the reference, and NaN stays NaN.
    a = torch.tensor([[[1e6 - 100.0], [1e6]]], dtype=dtype)
    v = torch.tensor([[[1.0], [0.0]]], dtype=dtype)
    w = torch.zeros(1, 1, dtype=dtype)
    out = O.aib_scan(a, v, w)
    torch.testing.assert_close(out, O.aib_scan(a, v, w, impl="reference"))
    assert out[0, 1, 0] < 1e-40
    a[0, 0, 0] = float("nan")
    assert O.aib_scan(a, v, w).isnan().any()


@pytest.mark.parametrize("direction", ["causal", "bidirectional"])
def test_aib_scan_is_shift_invariant_far_beyond_the_kernel_range(direction):
    # O = H / U does not change when a constant is added to A (per channel): A + 1e6 takes
    # the stable fallback, A itself the kernel; both must agree, masked or not, with the
    # gradients too.
    torch.manual_seed(2)
    B, L, D = 2, 37, 6
    a = 3 * torch.randn(B, L, D, dtype=torch.float64)
    v = torch.randn(B, L, D, dtype=torch.float64)
    w = 0.3 * torch.randn(O.aib_num_levels(L), D, dtype=torch.float64)
    mask = torch.rand(B, L) > 0.3
    for m in (None, mask):
        near = a.clone().requires_grad_()
        far = (a + 1e6).requires_grad_()
        o_near = O.aib_scan(near, v, w, m, direction=direction)
        o_far = O.aib_scan(far, v, w, m, direction=direction)
        torch.testing.assert_close(o_far, o_near)
        g = torch.randn_like(o_near)
        (gn,) = torch.autograd.grad(o_near, near, g)
        (gf,) = torch.autograd.grad(o_far, far, g)
        torch.testing.assert_close(gf, gn)
    small = [t[:, :6].clone().requires_grad_() if t.dim() == 3 else t[:3].clone().requires_grad_()
             for t in (a, v, w)]
    assert gradgradcheck(lambda a, v, w: O.aib_scan(a + 1e6, v, w, mask[:, :6],
                                                    direction=direction), small)


def test_attention_scores_that_overflow_give_nan_as_the_reference():
    torch.manual_seed(0)
    q, k = (torch.randn(1, 1, 8, 4) * 1e20 for _ in range(2))
    v = torch.randn(1, 1, 8, 4)
    ref = O.attention(q, k, v, impl="reference")
    assert torch.equal(O.attention(q, k, v).isnan(), ref.isnan()) and ref.isnan().any()


# --- hangs -----------------------------------------------------------------------------------

def test_generate_is_capped_and_ctrl_c_stops_it():
    m = seqmix.build("weird-net", "tiny", max_len=16, seed=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        m.generate("a", 10 ** 12)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            m.generate("a", 10 ** 8)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 30


def test_load_of_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # In a child: a regression would block forever, which the timeout turns into a failure.
    code = f"import seqmix\ntry:\n    seqmix.load({str(fifo)!r})\nexcept ValueError as e:\n" \
           "    print('refused:', e)\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ))
    assert "refused:" in p.stdout and "FIFO" in p.stdout, p.stdout + p.stderr


# --- races and resume ------------------------------------------------------------------------

def test_two_trainers_on_one_new_folder_one_wins_and_keeps_its_run(corpus, tmp_path):
    for trial in range(4):
        out = tmp_path / f"run{trial}"
        results = []

        def go():
            try:
                seqmix.train(out, "weird-net", "tiny", **{
                    "data.source": str(corpus), "train.max_steps": 2, "model.max_len": 32,
                    "train.batch_size": 2, "train.threads": 1})
                results.append("ok")
            except (RuntimeError, ValueError) as e:
                results.append(str(e))

        threads = [threading.Thread(target=go) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.count("ok") == 1, results
        assert (out / "checkpoint.pt").is_file(), results


def test_resume_on_changed_data_needs_allow_data_change(tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 300)
    kw = {"data.source": str(text), "model.max_len": 32, "train.batch_size": 2,
          "train.threads": 1}
    seqmix.train(tmp_path / "r", "weird-net", "tiny", **kw, **{"train.max_steps": 2})
    with text.open("a") as f:
        f.write("more text\n")
    with pytest.raises(RuntimeError, match="the data differs"):
        seqmix.train(tmp_path / "r", resume=True, **{"train.max_steps": 3})
    with pytest.raises(ValueError, match="allow_data_change"):
        seqmix.train(tmp_path / "r2", "weird-net", "tiny", allow_data_change=True, **kw)
    r = seqmix.train(tmp_path / "r", resume=True, allow_data_change=True,
                     **{"train.max_steps": 3})
    assert r["steps"] == 3


# --- messages --------------------------------------------------------------------------------

def test_a_prompt_longer_than_max_len_warns():
    m = seqmix.build("weird-net", "tiny", max_len=16, seed=0)
    with pytest.warns(UserWarning, match="longer than the model's max_len"):
        m.generate("a" * 40, 2)
    with pytest.warns(UserWarning, match="longer than the model's max_len"):
        m.generate([1] * 40, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.generate("abc", 2)


def test_generate_checks_token_ids_and_seeds_as_the_cli_does():
    m = seqmix.build("weird-net", "tiny", max_len=16, seed=0)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        m.generate([2 ** 70], 2)
    with pytest.raises(ValueError, match="seed"):
        m.generate("a", 2, seed=2 ** 63)
    with pytest.raises(ValueError, match="temperature"):
        m.generate("a", 2, temperature=float("inf"))
    with pytest.raises(TypeError, match="max_lambda"):
        O.ces_coefficients(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2),
                           max_lambda="0.5")


def test_a_zero_step_run_reports_no_training_loss(tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 300)
    r = seqmix.train(tmp_path / "r", "weird-net", "tiny", **{
        "data.source": str(text), "model.max_len": 32, "train.max_steps": 0,
        "train.batch_size": 2, "train.threads": 1})
    assert r["steps"] == 0 and r["train_loss"] is None


# --- empty inputs and messages ----------------------------------------------------------------

@pytest.mark.parametrize("make", [m for _, m in registry_layers()] + [
    lambda: N.CES(channels=8)],
    ids=[i for i, _ in registry_layers()] + ["CES"])
@pytest.mark.parametrize("shape", [(0, 5, 8), (2, 0, 8)])
def test_every_layer_maps_an_empty_batch_or_sequence_to_an_empty_result(make, shape):
    layer = make()
    x = torch.randn(*shape, requires_grad=True)
    y = layer(x)
    assert y.shape == shape
    y.sum().backward()
    assert x.grad.shape == shape
    for p in layer.parameters():
        assert p.grad is None or bool((p.grad == 0).all())


def test_a_message_quoting_bytes_that_are_not_utf8_reaches_python_whole(tmp_path):
    m = seqmix.build("weird-net", "tiny", seed=1)
    m.save_pretrained(tmp_path / "ok")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_bytes((tmp_path / "ok" / "config.json").read_bytes())
    # An 8-byte header length, then a header of 0xff bytes: the reader quotes it.
    (bad / "model.safetensors").write_bytes((16).to_bytes(8, "little") + b"\xff" * 16)
    with pytest.raises(ValueError) as error:
        seqmix.from_pretrained(bad)
    message = str(error.value)
    assert "model.safetensors" in message and "\\xff" in message, message


def test_paths_and_prompts_of_the_wrong_kind_name_the_argument():
    for call, name in ((lambda: seqmix.load(None), "path"), (lambda: seqmix.load(123), "path"),
                       (lambda: seqmix.build("weird-net", "tiny", config=123), "config"),
                       (lambda: seqmix.train(None, "weird-net", "tiny"), "out")):
        with pytest.raises(TypeError, match=f"^{name}: expected a path"):
            call()
    m = seqmix.build("weird-net", "tiny", seed=1)
    with pytest.raises(ValueError, match="^prompt: not encodable as UTF-8"):
        m.generate("a\ud800b", 4)


def test_tensors_of_the_wrong_kind_or_device_name_the_argument(tmp_path):
    m = seqmix.build("weird-net", "tiny", seed=1, max_len=16)
    # Layers take embeddings: token ids name the layer, not a matmul's dtypes.
    layer = seqmix.nn.AIBAttention(8, max_len=16)
    with pytest.raises(TypeError, match="^AIBAttention: x must be a floating-point tensor"):
        layer(torch.zeros(1, 4, 8, dtype=torch.int64))
    # Tokens on another device than the model.
    with pytest.raises(ValueError, match=r"^tokens: on meta, but the model is on cpu"):
        m(torch.zeros(1, 8, dtype=torch.long, device="meta"))
    # A model and tokens both on the meta device give the shape.
    meta = seqmix.build("weird-net", "tiny", seed=1, max_len=16).to("meta")
    out = meta(torch.zeros(2, 8, dtype=torch.long, device="meta"))
    assert out.is_meta and tuple(out.shape) == (2, 8, 256)
    # A state dict holding a meta tensor has no values to load.
    sd = m.state_dict()
    name = sorted(sd)[0]
    sd[name] = sd[name].to("meta")
    torch.save(sd, tmp_path / "sd.pt")
    with pytest.raises(ValueError, match=f"tensor {name} is on the meta device"):
        seqmix.load(tmp_path / "sd.pt", preset="weird-net", size="tiny", max_len=16)
    with pytest.raises(ValueError,
                       match=r"^max_len: expected a positive int of at most 2\*\*62"):
        O.aib_num_levels(2**70)
    assert O.aib_num_levels(2**62) == 62
