"""scripts/lra-table.py and the table step of scripts/lra.sh: the LRA-style results table,
its majority-class row and its bar chart, from hand-written result lines whose every number
is known."""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TABLE = os.path.join(ROOT, "scripts", "lra-table.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def write_lines(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def run_table(*args):
    return subprocess.run([PYTHON, TABLE, *map(str, args)], capture_output=True, text=True)


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_table_from_both_line_forms(tmp_path):
    results = tmp_path / "results.jsonl"
    write_lines(results, [
        # lra.sh's form: several seeds, the best marked
        {"task": "listops", "name": "aib", "test_accuracy_mean": 0.3585,
         "test_accuracy_sd": 0.0042, "seeds": 3, "mark": "*", "test_majority": 0.158},
        {"task": "listops", "name": "ets", "test_accuracy_mean": 0.1655,
         "test_accuracy_sd": 0.001, "seeds": 3, "mark": "", "test_majority": 0.158},
        # docs/lra-cpu.jsonl's form: one seed
        {"task": "text", "name": "aib", "test_accuracy": 0.9533, "test_majority": 0.699},
    ])
    png = tmp_path / "lra.png"
    r = run_table(results, "--tasks", "listops text", "--models", "aib ets", "--png", png)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()
    assert rows[0] == "| model | listops | text |"
    assert rows[2] == "| aib | 35.85 ± 0.42* | 95.33 (1 seed) |"
    assert rows[3] == "| ets | 16.55 ± 0.10 | - |"
    assert rows[4] == "| majority class | 15.80 | 69.90 |"
    assert is_png(png)
    assert sorted(os.listdir(tmp_path)) == ["lra.png", "results.jsonl"]  # no leftovers


def test_missing_cells_warn_and_bad_input_fails_cleanly(tmp_path):
    results = tmp_path / "results.jsonl"
    write_lines(results, [{"task": "image", "name": "aib", "test_accuracy": 0.83}])
    r = run_table(results, "--tasks", "image pathx", "--models", "aib tf")
    assert r.returncode == 0, r.stderr
    assert "| majority class | - | - |" in r.stdout
    assert "| tf | - | - |" in r.stdout
    assert "task 'pathx'" in r.stderr and "model 'tf'" in r.stderr

    # Each bad file: exit 1, one message naming the file and line, no table, no picture.
    bad = tmp_path / "bad.jsonl"
    png = tmp_path / "bad.png"
    cases = [
        ('{"task": "image", "name": "aib"}', "test_accuracy"),
        ('{"task": "image", "name": "aib", "test_accuracy": 83.0}', "out of range"),
        ('{"task": "image", "name": "aib", "test_accuracy": "x"}', "numbers"),
        ('{"task": ["image"], "name": "aib", "test_accuracy": 0.8}', "task must be"),
        ('{"task": "image", "name": null, "test_accuracy": 0.8}', "name must be"),
        ('{"task": "image", "name": "aib", "test_accuracy": 0.8, "test_majority": 70}',
         "test_majority"),
        ('{"task": "image", "name": "aib", "test_accuracy": 0.8, "mark": "!"}', "mark"),
        ('{"task": "image", "name": "aib", "test_accuracy": 0.8}\n'
         '{"task": "image", "name": "aib", "test_accuracy": 0.7}', "second line"),
        ('{"task": "image", "name": "a", "test_accuracy": 0.8, "test_majority": 0.1}\n'
         '{"task": "image", "name": "b", "test_accuracy": 0.7, "test_majority": 0.2}',
         "differs"),
        ("[1, 2]", "JSON object"),
    ]
    for text, expected in cases:
        bad.write_text(text + "\n")
        r = run_table(bad, "--png", png)
        assert r.returncode == 1, text
        assert "bad.jsonl, line" in r.stderr and expected in r.stderr, (text, r.stderr)
        assert "Traceback" not in r.stderr and r.stdout == "" and not png.exists(), text
    bad.write_bytes(b"\xff\xfe\n")
    r = run_table(bad)
    assert r.returncode == 1 and "UTF-8" in r.stderr
    bad.write_text("\n")
    r = run_table(bad)
    assert r.returncode == 1 and "no result line" in r.stderr

    r = run_table(results, "--png", tmp_path / "table.svg")
    assert r.returncode == 1 and "--png" in r.stderr
    r = run_table(results, "--png", tmp_path)
    assert r.returncode == 1 and "folder" in r.stderr
    r = run_table(tmp_path / "absent.jsonl")
    assert r.returncode == 1 and "absent.jsonl" in r.stderr


def test_no_gnuplot_means_no_picture_and_no_table(tmp_path):
    results = tmp_path / "results.jsonl"
    write_lines(results, [{"task": "image", "name": "it's", "test_accuracy": 0.83}])
    png = tmp_path / "lra.png"
    env = dict(os.environ, PATH=str(tmp_path))  # no gnuplot on this PATH
    r = subprocess.run([PYTHON, TABLE, str(results), "--png", str(png)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1 and "gnuplot" in r.stderr and r.stdout == ""
    assert not png.exists() and sorted(os.listdir(tmp_path)) == ["results.jsonl"]
    # With gnuplot, a quote in a model name is drawn, not a gnuplot syntax error.
    r = run_table(results, "--png", png)
    assert r.returncode == 0, r.stderr
    assert is_png(png)


def test_lra_sh_table_step_reads_compare_folders(tmp_path):
    # The folders `seqmix compare --seeds` leaves: the top summary over seeds, pairs with
    # verdicts, and the per-seed rows that carry the test split's majority class.
    out = tmp_path / "lra [1]"  # glob characters and a space in the folder name
    (out / "listops" / "seed-1337").mkdir(parents=True)
    write_lines(out / "listops" / "summary.jsonl", [
        {"name": "a", "metric": "test_accuracy", "values": [0.34, 0.35, 0.36], "mean": 0.35,
         "sd": 0.01},
        {"name": "b", "metric": "test_accuracy", "values": [0.345, 0.35, 0.355], "mean": 0.35 - 1e-4,
         "sd": 0.005},
        {"name": "c", "metric": "test_accuracy", "values": [0.16, 0.17, 0.18], "mean": 0.17,
         "sd": 0.01, "seeds": [1337, 1338, 1339], "chance": 0.158, "chance_bound": 0.2,
         "at_chance": True}])
    write_lines(out / "listops" / "pairs.jsonl", [
        {"a": "a", "b": "b", "verdict": "tie"}, {"a": "a", "b": "c", "verdict": "not comparable"},
        {"a": "b", "b": "c", "verdict": "not comparable"}])
    (out / "listops.command").write_text("./build/seqmix compare --task listops --seeds 3\n")
    # Training-sample accuracy goes into a cell when every one of its seeds has it: c's
    # three seeds do; a's seeds are not named in its summary line.
    for seed, train in zip([1337, 1338, 1339], [0.21, 0.22, 0.23]):
        (out / "listops" / f"seed-{seed}").mkdir(exist_ok=True)
        write_lines(out / "listops" / f"seed-{seed}" / "summary.jsonl", [
            {"name": "a", "test_accuracy": 0.34, "test_majority": 0.158, "train_accuracy": 0.9},
            {"name": "c", "test_accuracy": 0.17, "test_majority": 0.158, "seed": seed,
             "train_accuracy": train}])
    env = dict(os.environ, OUT=str(out), SEEDS="3", TASKS="listops", MODELS="a=x b=y c=z",
               TABLE_ONLY="1", PYTHON=PYTHON,
               SEQMIX=os.environ.get("SEQMIX_BIN", os.path.join(ROOT, "build", "seqmix")))
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "lra.sh")], env=env,
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "| a | 35.00 ± 1.00* |" in r.stdout
    assert "| b | 34.99 ± 0.50= |" in r.stdout
    assert "| c | 17.00 ± 1.00 |" in r.stdout
    assert "| majority class | 15.80 |" in r.stdout
    assert is_png(out / "lra.png")
    cells = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert [(c["name"], c["mark"], c["seeds"]) for c in cells] == \
        [("a", "*", 3), ("b", "=", 3), ("c", "", 3)]
    # Each cell keeps its seeds' figures, compare's chance bound, its verdict against every
    # other model (from its own side) and the command.
    a, c = cells[0], cells[2]
    assert a["seed_values"] == [0.34, 0.35, 0.36]
    assert a["verdicts"] == {"b": "tie", "c": "not comparable"}
    assert c["seed_ids"] == [1337, 1338, 1339] and c["at_chance"] is True
    assert c["chance_bound"] == 0.2 and "at_chance" not in a
    assert c["train_seed_values"] == [0.21, 0.22, 0.23] and "train_seed_values" not in a
    assert a["command"] == "./build/seqmix compare --task listops --seeds 3"


def ablation_cells():
    """scripts/etsmlp-ablations.txt as (name, [(key, value text), ...]) in file order."""
    cells = []
    with open(os.path.join(ROOT, "scripts", "etsmlp-ablations.txt")) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if words:
                cells.append((words[0], [tuple(w.split("=", 1)) for w in words[1:]]))
    return cells


def compare_runs(script, tmp_path, **env):
    """The --run values a script hands to `seqmix compare`, caught by a stand-in binary."""
    argv = tmp_path / "argv"
    fake = tmp_path / "fake-seqmix"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{argv}"\n')
    fake.chmod(0o755)
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", script)], capture_output=True,
                       text=True, cwd=ROOT, env=dict(os.environ, SEQMIX=str(fake),
                                                     OUT=str(tmp_path / "out"), **env))
    assert r.returncode == 0, r.stderr
    args = argv.read_text().splitlines()
    return [args[i + 1] for i, a in enumerate(args) if a == "--run"]


def test_etsmlp_ablations_reach_both_scripts_and_both_presets(tmp_path):
    import seqmix  # the package built with the tests (PYTHONPATH set by CTest)

    cells = ablation_cells()
    assert len(cells) == 10 and cells[0] == ("etsmlp", [])
    lm = compare_runs("etsmlp-lm.sh", tmp_path, MODELS="ablations")
    assert lm == [f"{n}=etsmlp-lm" + "".join(f" {k}={v}" for k, v in sets) for n, sets in cells]
    # lra.sh turns each line into a cell `name=etsmlp,key=value,...` and back into --run.
    lra = compare_runs("lra.sh", tmp_path, MODELS="etsmlp-ablations", TASKS="listops",
                       SEEDS="1", PYTHON=PYTHON)
    assert lra == [r.replace("=etsmlp-lm", "=etsmlp", 1) for r in lm]

    # Every variant is a real key of both presets, and the built model carries its value.
    def parsed(text):  # as TOML reads the command line's value
        if text in ("true", "false"):
            return text == "true"
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return text
    for name, sets in cells:
        for preset, kwargs in (("etsmlp", {"task": "listops", "size": "cpu"}),
                               ("etsmlp-lm", {"size": "tiny"})):
            overrides = {k: parsed(v) for k, v in sets}
            model = seqmix.build(preset, **kwargs, **overrides)
            ces = model.config["model"]["ces"]
            for key, value in overrides.items():
                assert ces[key.split(".")[-1]] == value, (name, preset, key, ces)


def test_lra_ablations_leave_structure_b_out_of_the_one_layer_path_x(tmp_path):
    # Path-X at the CPU size has one layer: a two-mixer pattern there is an invalid
    # configuration, and compare would refuse the whole task. The other tasks keep it.
    pathx = compare_runs("lra.sh", tmp_path, MODELS="ablations", TASKS="pathx", SEEDS="1",
                         PYTHON=PYTHON)
    assert [r.split("=", 1)[0] for r in pathx] == ["weird-net-a", "aib-exp-w", "ps-attention"]
    listops = compare_runs("lra.sh", tmp_path, MODELS="ablations", TASKS="listops", SEEDS="1",
                           PYTHON=PYTHON)
    assert listops[-1] == "structure-b=weird-net-a model.mixers=['aib','attention']"
