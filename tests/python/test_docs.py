"""docs/CLAIMS.md against its own rules and against the records it is drawn from.

Every claim row has the eight columns, a verdict from the fixed list, and no ordering
("reproduces", "contradicts", "tie") from one seed or against a cell at chance; the summary
counts are those of the rows; every command tag names a command block of the file; the
three-seed LRA cells are those of docs/lra-seeds.jsonl, and their verdicts follow from the
records by `seqmix compare`'s rule.
"""
import json
import math
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLAIMS = os.path.join(ROOT, "docs", "CLAIMS.md")
SEEDS = os.path.join(ROOT, "docs", "lra-seeds.jsonl")
VERDICTS = ["reproduces", "contradicts", "tie", "undecided", "not comparable", "not run"]
MACHINES = {"A", "B", "C", "D", "E", "unrecorded", "-"}
ROW = re.compile(r"^\| ([MAWXE]\d+[a-z]?) \|")


def text():
    with open(CLAIMS, encoding="utf-8") as f:
        return f.read()


def claim_rows():
    """(paper section, id, [8 cells]) for every claim row, in file order."""
    rows, paper = [], None
    for line in text().splitlines():
        if line.startswith("## "):
            paper = line[3:].split(" (")[0]
        if ROW.match(line):
            rows.append((paper, ROW.match(line).group(1),
                         [c.strip() for c in line.strip().strip("|").split("|")]))
    return rows


def records():
    with open(SEEDS, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def test_every_row_has_a_verdict_from_the_list_and_no_ordering_from_one_seed():
    rows = claim_rows()
    assert len(rows) > 100
    ids = [i for _, i, _ in rows]
    assert len(ids) == len(set(ids)), "claim ids are unique"
    for paper, i, cells in rows:
        assert len(cells) == 8, (i, cells)
        _, _, _, ours, seeds, verdict, machine, cmd = cells
        assert verdict in VERDICTS, (i, verdict)
        for m in machine.split(", "):
            assert m in MACHINES, (i, machine)
        if verdict in ("reproduces", "contradicts", "tie"):
            # An ordering (or a tie) needs a seed-to-seed spread, or is no training run.
            assert seeds == "-" or seeds.startswith("- (") or int(seeds) >= 2, (i, seeds)
            assert "(c)" not in ours, f"{i}: an ordering against a cell at chance"
        assert "(c) (c)" not in ours, f"{i}: a chance mark written twice"


def test_summary_counts_are_the_rows():
    rows = claim_rows()
    summary = {}
    for line in text().splitlines():
        m = re.match(r"^\| (\*\*all\*\*|[A-Za-z][A-Za-z -]+) \| (\**\d+\**(?: \| \**\d+\**){6}) \|$",
                     line)
        if m:
            summary[m.group(1).strip("*")] = [int(x.strip("* ")) for x in m.group(2).split("|")]
    papers = sorted({p for p, _, _ in rows})
    assert sorted(k for k in summary if k != "all") == papers
    for paper in papers + ["all"]:
        counted = [sum(1 for p, _, c in rows if c[5] == v and paper in (p, "all"))
                   for v in VERDICTS]
        assert summary[paper][:6] == counted, paper
        assert summary[paper][6] == sum(counted), paper


def test_every_command_tag_has_its_block():
    doc = text()
    tags = set(re.findall(r"^# \[([a-z0-9-]+)\]", doc, flags=re.M))
    for _, i, cells in claim_rows():
        for tag in cells[7].split(", ") if cells[7] != "-" else []:
            assert tag in tags, f"{i}: no '# [{tag}]' command block"


def at_chance(r):
    """compare's chance_bound: majority + 5 binomial standard errors of the test split."""
    p, n = r["test_majority"], r["test_examples"]
    return r["test_accuracy_mean"] <= p + 5 * math.sqrt(p * (1 - p) / n)


def test_seed_records_are_whole_and_their_verdicts_follow_the_rule():
    recs = records()
    assert recs, "docs/lra-seeds.jsonl holds the three-seed cells"
    by = {(r["task"], r["name"]): r for r in recs}
    for r in recs:
        vals = r["seed_values"]
        assert r["seeds"] == len(vals) == len(r["seed_ids"]) >= 3, r["name"]
        mean = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        assert abs(mean - r["test_accuracy_mean"]) < 1e-9 and abs(sd - r["test_accuracy_sd"]) < 1e-9
        assert r["at_chance"] == at_chance(r), r["name"]
        assert set(r["machine"].split(", ")) <= MACHINES and r["command"].startswith("./build/seqmix compare")
        for other, v in r["verdicts"].items():
            o = by.get((r["task"], other))
            if o is None:
                continue
            if r["at_chance"] or o["at_chance"]:
                assert v == "not comparable", (r["name"], other)
                continue
            se = math.sqrt(r["test_accuracy_sd"] ** 2 / r["seeds"] +
                           o["test_accuracy_sd"] ** 2 / o["seeds"])
            gap = r["test_accuracy_mean"] - o["test_accuracy_mean"]
            want = "tie" if abs(gap) < 3 * se or gap == 0 else "better" if gap > 0 else "worse"
            assert v == want, (r["task"], r["name"], other, v, want)


def test_lra_table_shows_the_records():
    doc = text()
    table = doc[doc.index("## LRA-style tasks"):doc.index("## Moss")]
    header = next(l for l in table.splitlines() if l.startswith("| model |"))
    tasks = [c.strip() for c in header.strip().strip("|").split("|")][1:]
    cells = {}
    for line in table.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(parts) == len(tasks) + 1 and parts[0] != "model":
            for t, c in zip(tasks, parts[1:]):
                cells[(t, parts[0])] = c
    for r in records():
        want = f"{100 * r['test_accuracy_mean']:.2f} ± {100 * r['test_accuracy_sd']:.2f}"
        got = cells.get((r["task"], r["name"]), "")
        assert got.startswith(want), (r["task"], r["name"], got, want)
        assert ("(c)" in got) == r["at_chance"], (r["task"], r["name"], got)


def test_no_file_points_to_the_old_results_file():
    hits = []
    for top in ("README.md", "docs", "scripts", "src", "include", "python", "tests", "apps"):
        path = os.path.join(ROOT, top)
        walk = [(ROOT, [], [top])] if os.path.isfile(path) else os.walk(path)
        for folder, _, files in walk:
            for name in files:
                if name.endswith((".md", ".py", ".sh", ".cpp", ".h", ".cu", ".txt", ".toml")):
                    p = os.path.join(folder, name)
                    if p == os.path.abspath(__file__):
                        continue
                    with open(p, encoding="utf-8", errors="replace") as f:
                        if "RESULTS.md" in f.read():
                            hits.append(os.path.relpath(p, ROOT))
    assert not hits, hits
    assert not os.path.exists(os.path.join(ROOT, "docs", "RESULTS.md"))


def run_claims(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "claims.py"), *args],
                          capture_output=True, text=True)


def test_claims_md_is_what_its_template_and_records_give():
    r = run_claims("--check")
    assert r.returncode == 0, r.stderr


def test_claims_script_refuses_bad_inputs_and_writes_nothing(tmp_path):
    import shutil
    for name in ("CLAIMS.md.in", "lra-cpu.jsonl", "lra-seeds.jsonl"):
        shutil.copy(os.path.join(ROOT, "docs", name), tmp_path / name)
    r = run_claims("--docs", str(tmp_path))
    assert r.returncode == 0, r.stderr
    good = (tmp_path / "CLAIMS.md").read_text()
    cases = {
        "CLAIMS.md.in": [("@@F:listops:weird-net-a@@", "@@Q:listops:weird-net-a@@",
                          "unknown placeholder @@Q:listops:weird-net-a@@"),
                         ("| not run | - | - |", "| maybe | - | - |", "verdict 'maybe'"),
                         ("@@P:pathfinder:weird-net-a@@", "@@P:pathfinder:nope@@",
                          "no several-seed record for pathfinder nope")],
        "lra-seeds.jsonl": [('"test_examples"', '"test_examplez"', "lra-seeds.jsonl, line 1"),
                            ('"seed_ids":[1337,1338,1339]', '"seed_ids":[1337,1338]',
                             "lra-seeds.jsonl, line 1"),
                            ('"seed_values":[', '"seed_values":[0.5,', "lra-seeds.jsonl, line 1"),
                            ("{", "[", "lra-seeds.jsonl, line 1")],
        "lra-cpu.jsonl": [('"machine"', '"machina"', "lra-cpu.jsonl, line 1")],
    }
    for name, edits in cases.items():
        original = (tmp_path / name).read_text()
        for old, new, message in edits:
            assert old in original, (name, old)
            (tmp_path / name).write_text(original.replace(old, new, 1))
            r = run_claims("--docs", str(tmp_path))
            assert r.returncode == 1 and message in r.stderr, (name, old, r.stderr)
            assert r.stderr.count("\n") == 1, r.stderr  # one message, no traceback
            assert (tmp_path / "CLAIMS.md").read_text() == good, "no partial file"
            r = run_claims("--docs", str(tmp_path), "--check")
            assert r.returncode == 1, (name, old)
        (tmp_path / name).write_text(original)
    (tmp_path / "lra-seeds.jsonl").unlink()
    r = run_claims("--docs", str(tmp_path))
    assert r.returncode == 1 and "lra-seeds.jsonl: No such file" in r.stderr, r.stderr


def test_cells_from_separate_compare_runs_are_judged_by_compares_rule(tmp_path):
    """Two three-seed cells with no pair verdict between them (made by separate compare
    runs, e.g. on two machines) get compare's verdict from their means and sds."""
    def cell(name, values, machine):
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        return {"task": "text", "name": name, "test_accuracy_mean": mean,
                "test_accuracy_sd": sd, "seeds": 3, "test_majority": 0.5,
                "seed_ids": [1337, 1338, 1339], "seed_values": values, "test_examples": 578,
                "verdicts": {}, "machine": machine}
    (tmp_path / "lra-cpu.jsonl").write_text("")
    template = ("@@V:text:a:b@@ @@VR:text:a:b@@ @@V:text:a:c@@ @@V:text:c:d@@ "
                "@@M:text:a:b@@\n")
    (tmp_path / "CLAIMS.md.in").write_text(template)
    cells = [cell("a", [0.90, 0.91, 0.92], "D"), cell("b", [0.80, 0.81, 0.82], "E"),
             cell("c", [0.85, 0.95, 0.90], "E"), cell("d", [0.50, 0.51, 0.50], "E")]
    (tmp_path / "lra-seeds.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    r = run_claims("--docs", str(tmp_path))
    assert r.returncode == 0, r.stderr
    # a - b = 10 points, se 0.8: a above b reproduces, "a below b" contradicts; a vs c is
    # 0.5 points with se 2.9: tie; d is at chance (bound 60.4%): not comparable.
    assert (tmp_path / "CLAIMS.md").read_text() == (
        "reproduces contradicts tie not comparable D, E\n")


def test_test_train_placeholder_gives_both_means_and_checks_its_values(tmp_path):
    """@@TT@@ sets a cell's training-sample accuracy beside its test accuracy (overfitting,
    e.g. AIB-Net T.VI); a record whose train_seed_values do not match its seeds is refused."""
    cell = {"task": "image", "name": "a", "test_accuracy_mean": 0.81, "test_accuracy_sd": 0.01,
            "seeds": 3, "test_majority": 0.1, "seed_ids": [1337, 1338, 1339],
            "seed_values": [0.80, 0.81, 0.82], "train_seed_values": [0.90, 0.92, 0.94],
            "test_examples": 10000, "verdicts": {}, "machine": "D"}
    (tmp_path / "lra-cpu.jsonl").write_text("")
    (tmp_path / "CLAIMS.md.in").write_text("@@TT:image:a@@\n")
    (tmp_path / "lra-seeds.jsonl").write_text(json.dumps(cell) + "\n")
    r = run_claims("--docs", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "CLAIMS.md").read_text() == "81.00 ± 1.00 / 92.00 ± 2.00\n"
    (tmp_path / "CLAIMS.md").unlink()
    for values, message in (([0.9, 0.92], "2 training values for seeds=3"),
                            (None, "image a has no train_seed_values")):
        if values is None:
            del cell["train_seed_values"]
        else:
            cell["train_seed_values"] = values
        (tmp_path / "lra-seeds.jsonl").write_text(json.dumps(cell) + "\n")
        r = run_claims("--docs", str(tmp_path))
        assert r.returncode == 1 and message in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
        assert not (tmp_path / "CLAIMS.md").exists(), "no partial file"


def test_overfitting_placeholders_compare_training_minus_test(tmp_path):
    """@@VO:t:a:b@@ judges "a overfits less than b" by compare's rule on the per-seed
    training-minus-test gaps; @@GO@@ prints them. A cell without training figures leaves the
    row undecided."""
    def cell(name, test, train):
        c = {"task": "image", "name": name, "test_accuracy_mean": sum(test) / 3,
             "test_accuracy_sd": 0.01, "seeds": 3, "test_majority": 0.1,
             "seed_ids": [1337, 1338, 1339], "seed_values": test, "test_examples": 10000,
             "verdicts": {}, "machine": "D"}
        if train:
            c["train_seed_values"] = train
        return c
    cells = [cell("a", [0.80, 0.81, 0.82], [0.90, 0.92, 0.94]),
             cell("b", [0.80, 0.81, 0.82], [0.81, 0.82, 0.83]),
             cell("c", [0.80, 0.81, 0.82], [0.815, 0.825, 0.825]),
             cell("d", [0.80, 0.81, 0.82], None)]
    (tmp_path / "lra-cpu.jsonl").write_text("")
    (tmp_path / "lra-seeds.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    (tmp_path / "CLAIMS.md.in").write_text(
        "@@VO:image:b:a@@ @@VO:image:a:b@@ @@VO:image:b:c@@ @@VO:image:b:d@@\n"
        "@@GO:image:b:a@@ @@GO:image:b:d@@\n")
    r = run_claims("--docs", str(tmp_path))
    assert r.returncode == 0, r.stderr
    # a: 10, 11, 12 points; b: 1, 1, 1; c: 1.5, 1.5, 0.5 (gap to b 0.17, se 0.33: a tie).
    assert (tmp_path / "CLAIMS.md").read_text() == (
        "reproduces contradicts tie undecided\n"
        "1.00 ± 0.00 vs 11.00 ± 1.00 points (gap -10.00, 17.3 SE) -\n")
