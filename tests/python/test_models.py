"""Whole models: seqmix.build / seqmix.load, checkpoints, exports, generation, from Python
(the same runs through the command line: tests/cli/test_python_interop.py)."""

import pytest
import torch

import seqmix

from conftest import run_python


def test_build_overrides_and_config():
    m = seqmix.build("weird-net", "tiny", max_len=64, aib={"weights": "exp"},
                     **{"train.lr": 2e-3}, seed=1)
    cfg = m.config
    assert cfg["model"]["preset"] == "weird-net" and cfg["model"]["max_len"] == 64
    assert cfg["model"]["aib"]["weights"] == "exp"
    assert cfg["train"]["lr"] == 2e-3 and cfg["train"]["seed"] == 1
    assert m.tokenizer.vocab_size == 256
    tokens = torch.randint(256, (2, 10))
    assert m(tokens).shape == (2, 10, 256)
    assert m.hidden(tokens).shape == (2, 10, cfg["model"]["d_model"])
    again = seqmix.build("weird-net", "tiny", max_len=64, aib={"weights": "exp"}, seed=1)
    for p, q in zip(m.parameters(), again.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(preset="no-such-model"), (ValueError, RuntimeError), "no-such-model"),
    (dict(preset="weird-net", size="huge"), (ValueError, RuntimeError), "huge"),
    (dict(preset="weird-net", d_modle=3), (ValueError, RuntimeError), "d_modle"),
    (dict(preset="weird-net", d_model=-3), (ValueError, RuntimeError), "d_model"),
    (dict(preset="weird-net", aib={"weights": "cube"}), (ValueError, RuntimeError), "cube"),
    (dict(preset="weird-net", tokenizer="/no/such.model"), (ValueError, RuntimeError),
     "such.model"),
    (dict(preset="weird-net", d_model=object()), TypeError, "d_model"),
])
def test_build_bad_input(kwargs, error, words):
    with pytest.raises(error) as info:
        seqmix.build(**kwargs)
    assert words in str(info.value)


def test_build_overrides_keep_their_types():
    # A string that looks like a number or a bool stays a string; lists of strings are quoted.
    m = seqmix.build("weird-net", "tiny", **{"data.source": "123"})
    assert m.config["data"]["source"] == "123"
    m = seqmix.build("weird-net", "tiny", **{"data.source": 'a "quoted" true'})
    assert m.config["data"]["source"] == 'a "quoted" true'


def test_bare_state_dict_round_trip(trained_run, tmp_path):
    model = seqmix.load(trained_run)
    f = tmp_path / "sd.pt"
    torch.save(dict(model.state_dict()), f)
    torch.save(model.state_dict(), tmp_path / "od.pt")
    cfg = model.config["model"]
    again = seqmix.load(f, preset="weird-net", size="tiny", max_len=cfg["max_len"])
    tokens = torch.randint(256, (1, 12))
    torch.testing.assert_close(again(tokens), model(tokens), rtol=0, atol=0)
    # Without a configuration, or with the wrong one, the error names what is wrong.
    with pytest.raises(ValueError, match="no configuration.*seqmix.build"):
        seqmix.load(f)
    with pytest.raises(ValueError, match="no configuration.*seqmix.build"):
        seqmix.load(tmp_path / "od.pt")  # an OrderedDict, as torch.save(m.state_dict()) writes
    with pytest.raises(RuntimeError, match="pos_emb"):
        seqmix.load(f, preset="weird-net", size="tiny", max_len=2 * cfg["max_len"])
    # torch.save(model.state_dict()) (an OrderedDict) loads as well.
    od = seqmix.load(tmp_path / "od.pt", preset="weird-net", size="tiny", max_len=cfg["max_len"])
    torch.testing.assert_close(od(tokens), model(tokens), rtol=0, atol=0)
    sd = dict(model.state_dict())
    sd["blocks.0.mixer.w"] = sd["blocks.0.mixer.w"].clone()
    sd["blocks.0.mixer.w"][0, 0] = float("nan")
    torch.save(sd, tmp_path / "nan.pt")
    with pytest.raises(ValueError, match="blocks.0.mixer.w"):
        seqmix.load(tmp_path / "nan.pt", preset="weird-net", size="tiny", max_len=cfg["max_len"])
    sd = dict(model.state_dict())
    sd.pop("pos_emb")
    torch.save(sd, tmp_path / "missing.pt")
    with pytest.raises(RuntimeError, match="pos_emb"):
        seqmix.load(tmp_path / "missing.pt", preset="weird-net", size="tiny",
                    max_len=cfg["max_len"])
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(RuntimeError, match="junk.pt"):
        seqmix.load(tmp_path / "junk.pt", preset="weird-net")
    with pytest.raises(FileNotFoundError):
        seqmix.load(tmp_path / "nothing-here")


def test_classifier_encoder():
    m = seqmix.build("weird-net-a", "cpu", task="listops", max_len=16, seed=0)
    assert m.config["model"]["n_classes"] == 10 and m.config["data"]["task"] == "listops"
    tokens = torch.randint(16, (4, 16))
    mask = torch.ones(4, 16, dtype=torch.bool)
    mask[1, 10:] = False
    logits = m.classify(tokens, mask)
    assert logits.shape == (4, 10)
    # Mean pooling over valid positions: padding does not change a sequence's class logits.
    tokens2 = tokens.clone()
    tokens2[1, 10:] = 7
    torch.testing.assert_close(m.classify(tokens2, mask)[1], logits[1])
    with pytest.raises(RuntimeError):
        seqmix.build("weird-net", "tiny").classify(tokens)
    with pytest.raises(RuntimeError, match="task"):
        seqmix.build("weird-net-a", "cpu", task="sudoku")
    with pytest.raises(ValueError, match="encoder"):
        m.generate("abc", 3)  # an encoder cannot decode step by step


def test_hostile_model_input_never_aborts(tmp_path):
    # Each call must raise a Python exception; the interpreter must reach its last line.
    code = f"""
import torch, seqmix
m = seqmix.build("weird-net", "tiny", max_len=16, seed=0)
enc = seqmix.build("weird-net-a", "cpu", task="listops", max_len=16, seed=0)
bad = [
    lambda: m(torch.tensor([[1, 2, 300]])),               # token >= vocab_size
    lambda: m(torch.tensor([[1, -2, 3]])),                # negative token
    lambda: m(torch.randn(1, 4)),                         # float tokens
    lambda: m(torch.randint(256, (1, 17))),               # L > max_len
    lambda: m(torch.randint(256, (4,))),                  # 1-D
    lambda: m(torch.randint(256, (2, 4)), torch.ones(3, 4, dtype=torch.bool)),
    lambda: enc.classify(torch.randint(16, (2, 4)), torch.zeros(2, 4, dtype=torch.bool)),
    lambda: m.generate([1, 999], 3),
    lambda: m.generate("x", 3, temperature=-1.0),
    lambda: m.generate("x", 3, top_k=-5),
    lambda: m.generate(3.5, 3),
    lambda: m.save("/proc/no-such-place/run"),
    lambda: seqmix.load({str(tmp_path)!r}),
    lambda: seqmix.build("weird-net", "tiny", max_len=0),
    lambda: seqmix.build("weird-net", "tiny", **{{"train.lr": float("nan")}}),
]
for i, f in enumerate(bad):
    try:
        f()
        print("no error from call", i)
    except (RuntimeError, ValueError, TypeError, IndexError, OSError):
        pass
print("survived")
"""
    p = run_python(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "survived", p.stdout
    assert "no error" not in p.stdout, p.stdout


def test_precision_of_a_run(trained_run):
    """Model.precision is the run's train.precision; evaluate and generate take another."""
    model = seqmix.load(trained_run)
    assert model.precision == "fp32"
    fp32 = model.evaluate()
    bf16 = model.evaluate(precision="bf16")
    assert bf16["tokens"] == fp32["tokens"]
    assert bf16["loss"] != fp32["loss"]  # the products really ran in bfloat16
    assert abs(bf16["loss"] - fp32["loss"]) < 0.02 * fp32["loss"], (bf16, fp32)
    assert len(model.generate("the", 5, seed=1, precision="bf16")) >= 3
    with pytest.raises(ValueError, match="precision"):
        model.evaluate(precision="fp16")
