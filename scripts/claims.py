#!/usr/bin/python3
"""Writes docs/CLAIMS.md from docs/CLAIMS.md.in and the LRA-style records.

The template holds the claim rows as text; the rows drawn from LRA-style cells carry
placeholders that this script fills from the records, so a new seed or task appended to
docs/lra-seeds.jsonl changes every row, verdict and count that depends on it:

  @@F:task:name@@        the cell's figure: "mean ± sd" (three seeds) or "x (1)"; "(c)" at chance,
                         "(k of n c)" when the mean is above chance but k seeds are not
  @@P:task:name@@        the cell's figure per seed, "a / b / c" in the order of its seeds
  @@L:task:name@@        in how many seeds the cell is above chance: "none", "one", ... "all three"
  @@TT:task:name@@       "test / train": test and training-sample accuracy, mean ± sd over seeds
  @@GO:task:a:b@@        overfitting (training-sample minus test accuracy) of a vs b, with the gap
  @@VO:task:a:b@@        the verdict on "a overfits less than b" ("undecided" without training
                         figures over several seeds for both)
  @@S:task:name...@@     how many seeds            @@M:task:name...@@   the machine(s)
  @@C:task:name...@@     the command block(s): "lra" (three-seed cells), "lra-1" (single runs)
  @@G:task:a:b@@         "a vs b", with the gap and its standard errors over seeds
  @@V:task:a:b@@         the verdict on "a above b"; @@VR:...@@ on "a below b"
  @@T2:task:a:b@@, @@T3:task:a:b:c@@   the figures of two or three cells, "a / b / c"
  @@V2:task:a:b:c@@      the verdict on "a above b and above c" (the weakest of the two)
  @@LRATABLE@@, @@CHANCE@@, @@SUMMARY@@   the LRA table, the chance bounds, the counts
  @@SEEDTABLE@@          every several-seed cell, seed by seed

Records: docs/lra-seeds.jsonl (lines of scripts/lra.sh's results.jsonl with the machine
added: several seeds, compare's verdicts) take precedence over docs/lra-cpu.jsonl (single
runs). Verdicts follow `seqmix compare` (src/train/reporting/compare.cpp): a cell at chance
(mean test accuracy <= majority class + 5 binomial standard errors) makes a comparison "not
comparable"; one seed is "undecided"; else compare's pair verdict ("tie" under 3 standard
errors of the difference).

  scripts/claims.py            # writes docs/CLAIMS.md
  scripts/claims.py --check    # exit 1 if docs/CLAIMS.md is not what the inputs give

Exits with status 1 and one message on a missing or malformed input, an unknown
placeholder, or a row whose verdict is not one of the six.
"""
import argparse
import math
import os
import re
import sys

from jsonl_records import RecordError, read_json_lines

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
VERDICTS = ["reproduces", "contradicts", "tie", "undecided", "not comparable", "not run"]
# The weakest first: a claim over two comparisons is as decided as its least decided one.
STRENGTH = ["not run", "not comparable", "undecided", "contradicts", "tie", "reproduces"]
# Seeds behind each cell of the LRA table (train.seed 1337, 1338, 1339).
SEEDS = 3
TASKS = ["listops", "text", "retrieval", "image", "pathfinder", "pathx"]
# Test split sizes at the CPU size (docs/TASKS.md), for records that do not carry theirs.
TEST_EXAMPLES = {"listops": 2000, "text": 578, "retrieval": 1000, "image": 10000,
                 "pathfinder": 2000, "pathx": 1000}
TABLE_MODELS = ["weird-net-a", "weird-net", "transformer", "etsmlp", "etsmlp-gate", "extractor",
                "aib-exp-w", "ps-attention", "structure-b"]


def fail(message):
    sys.exit(f"claims: {message}")


def read_lines(path):
    try:
        return read_json_lines(path)
    except RecordError as e:
        fail(str(e))


def load_cells(single, several):
    """({(task, name): cell} of single runs, {(task, name): cell} of several seeds)."""
    one, many = {}, {}
    for number, r in read_lines(single):
        try:
            one[r["task"], r["name"]] = {
                "n": 1, "mean": float(r["test_accuracy"]), "sd": 0.0,
                "p": float(r["test_majority"]), "machine": r["machine"], "verdicts": {},
                "test_examples": TEST_EXAMPLES[r["task"]]}
        except (KeyError, TypeError, ValueError) as e:
            fail(f"{single}, line {number}: expected task, name, test_accuracy, "
                 f"test_majority and machine ({e!r})")
    for number, r in read_lines(several):
        try:
            c = many[r["task"], r["name"]] = {
                "n": int(r["seeds"]), "mean": float(r["test_accuracy_mean"]),
                "sd": float(r["test_accuracy_sd"]), "p": float(r["test_majority"]),
                "machine": r["machine"], "verdicts": dict(r["verdicts"]),
                "test_examples": int(r["test_examples"]),
                "per_seed": list(zip((int(i) for i in r["seed_ids"]),
                                     (float(v) for v in r["seed_values"]), strict=True))}
            if len(c["per_seed"]) != c["n"]:
                raise ValueError(f"{len(c['per_seed'])} seed values for seeds={c['n']}")
            if "train_seed_values" in r:
                c["train"] = [float(v) for v in r["train_seed_values"]]
                if len(c["train"]) != c["n"]:
                    raise ValueError(f"{len(c['train'])} training values for seeds={c['n']}")
        except (KeyError, TypeError, ValueError) as e:
            fail(f"{several}, line {number}: expected task, name, seeds, test_accuracy_mean, "
                 f"test_accuracy_sd, test_majority, test_examples, machine, verdicts, "
                 f"one seed_ids / seed_values pair per seed and, if train_seed_values, "
                 f"one of those per seed ({e!r})")
    return one, many


def chance_bound(c):
    p, n = c["p"], c["test_examples"]
    return p + 5 * math.sqrt(p * (1 - p) / n)


def at_chance(c):
    return c["mean"] <= chance_bound(c)


def seeds_at_chance(c):
    """How many of a several-seed cell's seeds are at chance (0 for a single run)."""
    return sum(v <= chance_bound(c) for _, v in c.get("per_seed", []))


def figure(c, seed_count_mark=True):
    text = f"{100 * c['mean']:.2f}" + (f" ± {100 * c['sd']:.2f}" if c["n"] > 1 else "")
    # The LRA table's cells are three seeds each; say so where one has fewer.
    if c["n"] < SEEDS and seed_count_mark:
        text += f" ({c['n']})"
    if at_chance(c):
        return text + " (c)"
    # compare's chance test is on the mean: say when some seeds learned nothing.
    k = seeds_at_chance(c)
    return text + (f" ({k} of {c['n']} c)" if k else "")


def per_seed(c):
    return " / ".join(f"{100 * v:.2f}" for _, v in c["per_seed"])


def mean_sd(values):
    """Mean and sample standard deviation (0 for one value), as compare computes them."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_train(c):
    """ "test / train" accuracy, mean ± sd over the seeds (train: the training sample)."""
    mean, sd = mean_sd(c["train"])
    return f"{figure(c, False)} / {100 * mean:.2f} ± {100 * sd:.2f}"


def overfitting(c):
    """The cell's training-sample accuracy minus its test accuracy, seed by seed, as a cell
    of its own (mean, sd, n): what AIB-Net T.VI and Moss T.V set against each other."""
    gaps = [train - test for train, (_, test) in zip(c["train"], c["per_seed"])]
    mean, sd = mean_sd(gaps)
    return {"n": len(gaps), "mean": mean, "sd": sd}


def gap_and_se(ca, cb):
    """a's mean minus b's, and the standard error of that difference over seeds."""
    return (ca["mean"] - cb["mean"],
            math.sqrt(ca["sd"] ** 2 / ca["n"] + cb["sd"] ** 2 / cb["n"]))


def gap_text(ca, cb):
    """ "(gap +x.xx, y.y SE)": a's mean minus b's in points, in standard errors."""
    g, se = (100 * x for x in gap_and_se(ca, cb))
    return f"(gap {g:+.2f}" + (f", {abs(g) / se:.1f} SE)" if se > 0 else ")")


def seed_verdict(ca, cb):
    """compare.cpp's seed_verdict for a above b, from a's side: "better" / "worse" / "tie"
    (a gap under 3 standard errors of the difference, or exactly zero)."""
    gap, se = gap_and_se(ca, cb)
    if abs(gap) < 3 * se or gap == 0:
        return "tie"
    return "better" if gap > 0 else "worse"


COUNT_WORDS = ["none", "one", "two", "three", "four", "five"]


def seeds_above_chance(c):
    k = c["n"] - seeds_at_chance(c)
    word = COUNT_WORDS[k] if k < len(COUNT_WORDS) else str(k)
    return f"all {word}" if k == c["n"] > 1 else word


class Filler:
    """Fills the placeholders. A comparison takes each cell's several-seed record where
    there is one and its single run otherwise, when all of them score the same test split
    (as far as the records tell: majority class and size; seqmix 0.1.0's ListOps trees are
    another split); else the single runs of all; else it is "not run"."""

    def __init__(self, one, many):
        self.one, self.many = one, many

    def cell(self, task, name):
        return self.many.get((task, name)) or self.one.get((task, name))

    def group(self, task, names):
        cells = [self.cell(task, n) for n in names]
        if None not in cells and len({(c["p"], c["test_examples"]) for c in cells}) == 1:
            return cells
        if all((task, n) in self.one for n in names):
            return [self.one[task, n] for n in names]
        return None

    def verdict(self, task, a, b, above=True):
        g = self.group(task, [a, b])
        if g is None:
            return "not run"
        ca, cb = g
        if at_chance(ca) or at_chance(cb):
            return "not comparable"
        if ca["n"] < 2 or cb["n"] < 2:
            return "undecided"
        # Cells from separate compare runs (another machine, a later piece of the sweep) have
        # no pair verdict between them: compare's rule, on the records' means and sds.
        v = ca["verdicts"].get(b) or seed_verdict(ca, cb)
        if v == "undecided":
            return "undecided"
        if v in ("tie", "not comparable"):
            return v
        return "reproduces" if (v == "better") == above else "contradicts"

    def overfitting_pair(self, task, a, b, kind):
        """Both cells' overfitting (several seeds each, with training figures), or a row's text
        when there is none to compare: "-" for a gap, a verdict for a verdict."""
        ca, cb = self.many.get((task, a)), self.many.get((task, b))
        if ca is None or cb is None or "train" not in ca or "train" not in cb:
            return None, "-" if kind == "GO" else "undecided"
        if at_chance(ca) or at_chance(cb):
            return None, "-" if kind == "GO" else "not comparable"
        if ca["n"] < 2 or cb["n"] < 2:
            return None, "-" if kind == "GO" else "undecided"
        return (overfitting(ca), overfitting(cb)), None

    def gap(self, task, a, b):
        g = self.group(task, [a, b])
        if g is None:
            return "-"
        ca, cb = g
        text = f"{figure(ca, False)} vs {figure(cb, False)}"
        if ca["n"] > 1 and cb["n"] > 1:
            text += " " + gap_text(ca, cb)
        return text

    def __call__(self, match):
        kind, task, *names = match.group(1).split(":")
        if kind == "F":
            c = self.cell(task, names[0])
            return "-" if c is None else figure(c, False)
        if kind in ("P", "L", "TT"):
            c = self.many.get((task, names[0]))
            if c is None:
                fail(f"@@{match.group(1)}@@: no several-seed record for {task} {names[0]}")
            if kind == "TT":
                if "train" not in c:
                    fail(f"@@{match.group(1)}@@: {task} {names[0]} has no train_seed_values")
                return test_train(c)
            return per_seed(c) if kind == "P" else seeds_above_chance(c)
        if kind in ("S", "M", "C"):
            # One cell's, or a comparison's (the cells it reads).
            g = [self.cell(task, names[0])] if len(names) == 1 else self.group(task, names)
            if g is None or g[0] is None:
                return "-"
            if kind == "S":
                return str(min(c["n"] for c in g))
            if kind == "C":
                several = {c["n"] > 1 for c in g}
                return ", ".join(tag for s, tag in ((True, "lra"), (False, "lra-1"))
                                 if s in several)
            # A record's machine may list several ("E, B": seeds on different machines).
            return ", ".join(sorted({m for c in g for m in c["machine"].split(", ")}))
        if kind == "G":
            return self.gap(task, *names)
        if kind in ("V", "VR"):
            return self.verdict(task, *names, above=kind == "V")
        if kind in ("GO", "VO"):
            pair, text = self.overfitting_pair(task, *names, kind)
            if pair is None:
                return text
            oa, ob = pair
            if kind == "VO":  # the claim: a overfits less than b
                v = seed_verdict(oa, ob)
                return v if v == "tie" else "reproduces" if v == "worse" else "contradicts"
            return (f"{100 * oa['mean']:.2f} ± {100 * oa['sd']:.2f} vs "
                    f"{100 * ob['mean']:.2f} ± {100 * ob['sd']:.2f} points {gap_text(oa, ob)}")
        if kind in ("T2", "T3"):
            g = self.group(task, names)
            if g is None:
                return " / ".join("-" if self.cell(task, n) is None else
                                  figure(self.cell(task, n), False) for n in names)
            return " / ".join(figure(c, False) for c in g)
        if kind == "V2":
            return min((self.verdict(task, names[0], b) for b in names[1:]),
                       key=STRENGTH.index)
        fail(f"unknown placeholder @@{match.group(1)}@@")


def lra_table(one, many):
    rows = ["| model | " + " | ".join(TASKS) + " |", "|---|" + "---:|" * len(TASKS)]
    for name in TABLE_MODELS:
        row = [name]
        for t in TASKS:
            c = many.get((t, name)) or one.get((t, name))
            row.append("-" if c is None else figure(c))
        rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows)


def seed_table(many):
    ids = sorted({i for c in many.values() for i, _ in c["per_seed"]})
    rows = ["| task | model | " + " | ".join(map(str, ids)) +
            " | mean ± sd | seeds at chance | machine |",
            "|---|---|" + "---:|" * (len(ids) + 2) + "---|"]
    def place(item):
        (task, name), _ = item
        return (TASKS.index(task) if task in TASKS else len(TASKS),
                TABLE_MODELS.index(name) if name in TABLE_MODELS else len(TABLE_MODELS), name)

    for (task, name), c in sorted(many.items(), key=place):
        bound, values = chance_bound(c), dict(c["per_seed"])
        cells = ["-" if i not in values else
                 f"{100 * values[i]:.2f}" + (" (c)" if values[i] <= bound else "") for i in ids]
        mean = f"{100 * c['mean']:.2f} ± {100 * c['sd']:.2f}"
        rows.append(f"| {task} | {name} | " + " | ".join(cells) +
                    f" | {mean} | {seeds_at_chance(c)} of {c['n']} | {c['machine']} |")
    return "\n".join(rows)


def chance_lines(one, many):
    out = []
    for t in TASKS:
        # The several-seed records' split when there is one (today's generators).
        found = [c for (task, _), c in many.items() if task == t] or \
            [c for (task, _), c in one.items() if task == t]
        if not found:
            continue
        c = found[0]
        out.append(f"{t} {100 * chance_bound(c):.1f} ({c['test_examples']:,}; "
                   f"{100 * c['p']:.1f})")
    return ";\n".join(out) + "."


def summary(text):
    counts, paper = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            paper = line[3:].split(" (")[0]
        m = re.match(r"^\| ([MAWXE]\d+[a-z]?) \|", line)
        if not m:
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) != 8:
            fail(f"row {m.group(1)}: {len(cols)} columns, expected 8")
        if cols[5] not in VERDICTS:
            fail(f"row {m.group(1)}: verdict '{cols[5]}' is not one of {VERDICTS}")
        counts.setdefault(paper, dict.fromkeys(VERDICTS, 0))[cols[5]] += 1
    rows = ["| paper | " + " | ".join(VERDICTS) + " | rows |",
            "|---|" + "---:|" * (len(VERDICTS) + 1)]
    total = dict.fromkeys(VERDICTS, 0)
    for p, c in counts.items():
        rows.append(f"| {p} | " + " | ".join(str(c[v]) for v in VERDICTS) +
                    f" | {sum(c.values())} |")
        for v in VERDICTS:
            total[v] += c[v]
    rows.append("| **all** | " + " | ".join(f"**{total[v]}**" for v in VERDICTS) +
                f" | **{sum(total.values())}** |")
    return "\n".join(rows)


def render(template, one, many):
    text = re.sub(r"@@([A-Z0-9]+:[^@\s]+)@@", Filler(one, many), template)
    text = text.replace("@@LRATABLE@@", lra_table(one, many))
    text = text.replace("@@CHANCE@@", chance_lines(one, many))
    text = text.replace("@@SEEDTABLE@@", seed_table(many))
    text = text.replace("@@SUMMARY@@", summary(text))
    left = re.findall(r"@@[^@\s]*@@", text)
    if left:
        fail(f"placeholders left unfilled: {sorted(set(left))}")
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with docs/CLAIMS.md instead of writing it")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs"),
                    help="folder with CLAIMS.md.in, lra-cpu.jsonl, lra-seeds.jsonl")
    a = ap.parse_args()
    template_path = os.path.join(a.docs, "CLAIMS.md.in")
    try:
        with open(template_path, encoding="utf-8") as f:
            template = f.read()
    except OSError as e:
        fail(f"{template_path}: {e.strerror}")
    one, many = load_cells(os.path.join(a.docs, "lra-cpu.jsonl"),
                           os.path.join(a.docs, "lra-seeds.jsonl"))
    text = render(template, one, many)
    out = os.path.join(a.docs, "CLAIMS.md")
    if a.check:
        try:
            with open(out, encoding="utf-8") as f:
                current = f.read()
        except OSError as e:
            fail(f"{out}: {e.strerror}")
        if current != text:
            fail(f"{out} is not what {template_path} and the records give: run "
                 "scripts/claims.py")
        return
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
