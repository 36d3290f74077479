"""Whole models: seqmix.build / seqmix.load, checkpoints both ways between Python and the
command line, plain-PyTorch export, generation."""
import math
import os

import pytest
import torch
import torch.nn.functional as F

import seqmix

from conftest import cli, last_json, run_python


def _held_out(corpus):
    # A folder of ten files holds out its last file (data/byte_corpus.h).
    return list((corpus / "part09.txt").read_bytes())


def _windowed_loss(model, tokens, max_len):
    """`seqmix eval`'s objective written out: non-overlapping windows of max_len inputs,
    every token after the first predicted, mean negative log-likelihood in nats."""
    total, count = 0.0, 0
    t = torch.tensor(tokens, dtype=torch.int64)
    for s in range(0, len(tokens) - 1, max_len):
        x = t[s:s + max_len]
        y = t[s + 1:s + 1 + max_len]
        x = x[:len(y)]
        logits = model(x[None])[0].double()
        total += F.cross_entropy(logits, y, reduction="sum").item()
        count += len(y)
    return total / count


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


def test_load_equals_cli_eval(cli_run, corpus):
    model = seqmix.load(cli_run)
    assert not model.training
    _, out, _ = cli("eval", cli_run, "--threads", "1")
    ev = last_json(out)
    ours = _windowed_loss(model, _held_out(corpus), model.config["model"]["max_len"])
    assert abs(ours - ev["loss"]) < 1e-5 * max(1.0, ev["loss"]), (ours, ev)
    mine = model.evaluate()
    # The same C++ evaluation; only the thread count may differ (the CLI runs on one, this
    # process on its own count), and with it the order in which MKL and the kernels round
    # their sums.
    assert abs(mine["loss"] - ev["loss"]) < 1e-6 * max(1.0, ev["loss"]), (mine, ev)
    assert mine["tokens"] == ev["tokens"]


def test_generate_matches_cli(cli_run):
    model = seqmix.load(cli_run)
    text = model.generate("the quick", 20, temperature=0.7, top_k=50, top_p=0.9, seed=3)
    _, out, _ = cli("generate", cli_run, "--prompt", "the quick", "--max-new-tokens", "20",
                    "--temperature", "0.7", "--top-k", "50", "--top-p", "0.9", "--seed", "3",
                    "--threads", "1")
    assert out.rstrip("\n") == "the quick" + text
    ids = model.generate(list(b"the quick"), 5, temperature=0.0)
    assert len(ids) == 5 and all(0 <= t < 256 for t in ids)
    with pytest.raises(ValueError, match="top_p|top-p"):
        model.generate("x", 3, top_p=1.5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate("x", -1)
    for kwargs, word in ((dict(temperature="a"), "temperature"), (dict(top_k=2 ** 64), "top_k"),
                         (dict(seed=-1), "seed"), (dict(temperature=-1.0), "temperature")):
        with pytest.raises(ValueError, match=word):
            model.generate("x", 3, **kwargs)
    # The layers of the stack index like a torch.nn.ModuleList.
    assert len(model.blocks) == model.config["model"]["n_layers"]
    assert model.blocks[0].mixer is not None and list(model.blocks)[-1] is model.blocks[-1]


def test_python_training_then_cli(tmp_path, corpus):
    torch.manual_seed(0)
    model = seqmix.build("weird-net", "tiny", max_len=32, **{"data.source": str(corpus)},
                         seed=0)
    data = torch.tensor(list(b"".join(sorted(p.read_bytes() for p in corpus.iterdir()))))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for step in range(40):
        i = torch.randint(len(data) - 33, (8,), generator=g)
        batch = torch.stack([data[j:j + 33] for j in i.tolist()])
        loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])
    run = tmp_path / "py-run"
    model.save(run, step=40)
    # The command line evaluates it as the same model ...
    _, out, _ = cli("eval", run, "--threads", "1")
    model.eval()
    assert abs(last_json(out)["loss"] - _windowed_loss(model, _held_out(corpus), 32)) < 1e-5
    # ... generates from it ...
    cli("generate", run, "--prompt", "the ", "--max-new-tokens", "8", "--threads", "1")
    # ... and trains it further.
    _, out, err = cli("train", "--out", run, "--resume", "--max-steps", "43", "--threads", "1")
    assert last_json(out)["steps"] == 43
    # A run folder is never overwritten by mistake.
    with pytest.raises(RuntimeError, match="already holds a run.*overwrite=True"):
        model.save(run)
    with pytest.raises(TypeError, match="overwrite"):
        model.save(run, overwrite="no")
    # Saving leaves the caller's random stream as it was (it builds a model internally).
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    model.save(run, overwrite=True)
    assert torch.equal(torch.rand(3), expected)
    # A run or an export brings its own configuration.
    with pytest.raises(ValueError, match="own configuration.*size"):
        seqmix.load(run, size="tiny")


def test_export_opens_with_plain_torch(cli_run, tmp_path):
    f = tmp_path / "wn.pt"
    cli("export", cli_run, "--out", f)
    model = seqmix.load(cli_run)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    code = f"""
import sys
sys.modules["seqmix"] = None          # importing seqmix would fail here
import torch, json
d = torch.load({str(f)!r})
assert d["format"] == "seqmix.export", d.keys()
sd = d["state_dict"]
json.dumps(d["config"])               # JSON-able
print(json.dumps({{k: list(v.shape) for k, v in sd.items()}}))
print(d["config"]["model"]["preset"])
"""
    p = run_python(code)
    assert p.returncode == 0, p.stderr
    shapes, preset = p.stdout.strip().splitlines()[-2:]
    import json
    assert json.loads(shapes) == {k: list(s) for k, s in expected.items()}
    assert preset == "weird-net"
    # Back: the export loads as the same model, and imports into a run the CLI evaluates.
    again = seqmix.load(f)
    tokens = torch.randint(256, (2, 16))
    torch.testing.assert_close(again(tokens), model(tokens), rtol=0, atol=0)
    # seqmix.export is the same command, from Python; an existing file is kept.
    seqmix.export(cli_run, tmp_path / "again.pt")
    with pytest.raises(RuntimeError, match="again.pt"):
        seqmix.export(cli_run, tmp_path / "again.pt")
    assert seqmix.load(tmp_path / "again.pt").state_dict().keys() == model.state_dict().keys()
    with pytest.raises(ValueError, match="own configuration.*size"):
        seqmix.load(f, size="tiny")
    cli("import", f, "--out", tmp_path / "imported")
    _, a, _ = cli("eval", tmp_path / "imported", "--threads", "1")
    _, b, _ = cli("eval", cli_run, "--threads", "1")
    assert last_json(a)["loss"] == last_json(b)["loss"]


def test_bare_state_dict_round_trip(cli_run, tmp_path):
    model = seqmix.load(cli_run)
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


def test_precision_of_a_run(cli_run):
    """Model.precision is the run's train.precision; evaluate and generate take another."""
    model = seqmix.load(cli_run)
    assert model.precision == "fp32"
    fp32 = model.evaluate()
    bf16 = model.evaluate(precision="bf16")
    assert bf16["tokens"] == fp32["tokens"]
    assert bf16["loss"] != fp32["loss"]  # the products really ran in bfloat16
    assert abs(bf16["loss"] - fp32["loss"]) < 0.02 * fp32["loss"], (bf16, fp32)
    assert len(model.generate("the", 5, seed=1, precision="bf16")) >= 3
    with pytest.raises(ValueError, match="precision"):
        model.evaluate(precision="fp16")
