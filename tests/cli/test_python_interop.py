"""The Python package and the command line on the same runs: a run the command line trains
loads, evaluates and generates alike in Python; a run Python trains or saves, the command line
evaluates, generates from and resumes; exports and imports go both ways.

Run by CTest with the package's tests (python/CMakeLists.txt): PYTHONPATH=<build>/python,
SEQMIX_BIN=<build>/seqmix.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import seqmix

# The package tests' fixtures (corpus; _threads, one intra-op thread as the command lines
# below use) and helpers.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from conftest import (_threads, corpus, run_python, train_losses,  # noqa: E402,F401
                      train_overrides)  # (_threads and corpus are fixtures)

SEQMIX_BIN = os.environ.get("SEQMIX_BIN", "seqmix")


def cli(*args, check=True):
    """Runs the seqmix command line; returns (exit code, stdout, stderr)."""
    p = subprocess.run([SEQMIX_BIN, *map(str, args)], capture_output=True, text=True,
                       errors="replace")  # a byte-level model may write invalid UTF-8
    if check and p.returncode != 0:
        raise AssertionError(f"seqmix {' '.join(map(str, args))} exited {p.returncode}:\n"
                             f"{p.stdout}\n{p.stderr}")
    return p.returncode, p.stdout, p.stderr


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def cli_run(tmp_path_factory, corpus):
    """A tiny Weird-Net run trained by the command line (6 steps)."""
    out = tmp_path_factory.mktemp("runs") / "wn"
    cli("train", "--model", "weird-net", "--size", "tiny", "--max-len", "32", "--batch-size", "4",
        "--max-steps", "6", "--threads", "1", "--seed", "3", "--data", corpus, "--out", out)
    return out


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


def test_train_matches_the_command_line(tmp_path, corpus):
    r = seqmix.train(tmp_path / "py", "weird-net", "tiny", **train_overrides(corpus))
    assert r["steps"] == 12 and r["world_size"] == 1
    cli("train", "--model", "weird-net", "--size", "tiny", "--data", corpus, "--max-len", "32",
        "--batch-size", "8", "--max-steps", "12", "--threads", "1", "--seed", "3",
        "--set", "model.dropout=0", "--set", "train.log_interval=1",
        "--set", "train.eval_interval=0", "--out", tmp_path / "cli")
    a, b = train_losses(tmp_path / "py"), train_losses(tmp_path / "cli")
    assert a.keys() == b.keys() and len(a) == 12
    for step in a:
        assert abs(a[step] - b[step]) <= 1e-6 * abs(b[step]), (step, a[step], b[step])
    _, out, _ = cli("eval", tmp_path / "py", "--threads", "1")
    assert abs(last_json(out)["loss"] - r["loss"]) <= 1e-5 * r["loss"]
    # The folder is a run now: a second call is refused, resume=True continues it.
    with pytest.raises(RuntimeError, match="overwrite=True"):
        seqmix.train(tmp_path / "py", "weird-net", "tiny", **train_overrides(corpus))
    r2 = seqmix.train(tmp_path / "py", resume=True, **{"train.max_steps": 14})
    assert r2["steps"] == 14


def test_float64_values_beyond_float32_are_refused_by_the_one_loader(cli_run, tmp_path):
    model = seqmix.load(cli_run)
    cfg = model.config["model"]
    sd = {k: v.double() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    sd["blocks.0.mixer.w"][0, 0] = 1e300  # finite in float64, inf in float32
    f = tmp_path / "big.pt"
    torch.save(sd, f)
    with pytest.raises(ValueError, match=r"blocks\.0\.mixer\.w.*beyond the range"):
        seqmix.load(f, preset="weird-net", size="tiny", max_len=cfg["max_len"])
    code, out, err = cli("import", f, "--out", tmp_path / "imp", "--size", "tiny",
                         "--max-len", cfg["max_len"], check=False)
    assert code == 1 and "big.pt" in err and "beyond the range" in err, err
    assert not (tmp_path / "imp").exists()


def test_a_file_pytorch_writes_for_an_export_imports(cli_run, tmp_path):
    cli("export", cli_run, "--out", tmp_path / "e.pt")
    # Python's pickler writes SETITEM / APPEND for one-entry dicts and lists, and PyTorch 2.x
    # adds .format_version and .storage_alignment records.
    torch.save(torch.load(tmp_path / "e.pt"), tmp_path / "again.pt")
    cli("import", tmp_path / "again.pt", "--out", tmp_path / "imp")
    args = ("--max-new-tokens", 20, "--seed", 4)
    assert cli("generate", tmp_path / "imp", *args)[1] == cli("generate", cli_run, *args)[1]


def test_names_from_a_crafted_file_are_escaped_and_cut(cli_run, tmp_path):
    model = seqmix.load(cli_run)
    sd = dict(model.state_dict())
    sd["\x1b[31mred\x07" + "x" * 100000] = torch.zeros(1)
    f = tmp_path / "crafted.pt"
    torch.save(sd, f)
    code, out, err = cli("import", f, "--out", tmp_path / "imp", "--size", "tiny",
                         "--max-len", model.config["model"]["max_len"], check=False)
    assert code == 1 and "\x1b" not in err and "\\x1b[31mred\\x07" in err, err[:300]
    assert len(err) < 5000
    with pytest.raises(RuntimeError) as e:
        seqmix.load(f, preset="weird-net", size="tiny", max_len=model.config["model"]["max_len"])
    assert "\x1b" not in str(e.value) and len(str(e.value)) < 5000


def test_transformers_generates_the_text_of_seqmix_generate(cli_run, tmp_path):
    # `seqmix export --format hf`, then transformers' Auto classes on the folder: greedy
    # decoding and seeded sampling write the bytes `seqmix generate` writes.
    pytest.importorskip("transformers")
    import seqmix.hf  # noqa: F401  (registers the Auto classes)
    from transformers import AutoModelForCausalLM
    folder = tmp_path / "hf"
    cli("export", cli_run, "--format", "hf", "--out", folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompt = b"the quick"
    ids = torch.tensor([list(prompt)])
    for flags, kwargs in ((["--temperature", "0"], dict(do_sample=False)),
                          (["--temperature", "0.8", "--top-k", "0", "--top-p", "1",
                            "--seed", "11"],
                           dict(do_sample=True, temperature=0.8, top_k=0))):
        torch.manual_seed(11)
        out = model.generate(ids, max_new_tokens=24, **kwargs)
        p = subprocess.run([SEQMIX_BIN, "generate", str(cli_run), "--prompt", "the quick",
                            "--max-new-tokens", "24", "--threads", "1", *flags],
                           capture_output=True, check=True)
        assert bytes(out[0].tolist()) == p.stdout.rstrip(b"\n"), flags
