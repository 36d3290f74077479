#!/usr/bin/python3
"""The LRA-style results as a Markdown table and a bar chart.

Reads JSON lines, one per task and model, in either of the two forms seqmix writes:
  - scripts/lra.sh's $OUT/results.jsonl: task, name, test_accuracy_mean, test_accuracy_sd,
    seeds, and optionally mark ("*" the task's best, "=" tied with it) and test_majority;
  - docs/lra-cpu.jsonl (one run per line, with its command): task, name, test_accuracy,
    and optionally test_majority (then one seed).
Accuracies are fractions in [0, 1]; the table and the picture show percent.

Prints the table (one row per model, one column per task, and a last row with each task's
majority class, the accuracy of always answering the most frequent test label) and, with
--png, draws it with gnuplot: one bar per model and task, the sd over seeds as an error bar,
the majority class as a dashed line. The picture is drawn in a private folder and renamed
into place, so a failed run leaves no partial file.

  scripts/lra-table.py runs/lra-cpu/results.jsonl --png runs/lra-cpu/lra.png
  scripts/lra-table.py docs/lra-cpu.jsonl --tasks "listops text" --png runs/lra-cpu.png

Tasks or models asked for (--tasks, --models) with no line yet print as "-" with a warning
on standard error. Exits with status 1 and one message, printing no table and leaving no
picture, on a missing, empty or malformed file (a field missing or out of range, two lines
for one cell, two majority levels for one task), a bad --png, or a gnuplot failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from jsonl_records import RecordError, read_json_lines


def fail(message):
    sys.exit(f"lra-table: {message}")


def read_cells(path):
    """{(task, name): (mean %, sd %, seeds, mark)}, {task: majority %}, names in file order."""
    try:
        raw = read_json_lines(path)
    except RecordError as e:
        fail(str(e))
    if not raw:
        fail(f"{path}: no result line (expected JSON lines with task, name, test_accuracy)")
    cells, chance, order = {}, {}, []
    for number, r in raw:
        where = f"{path}, line {number}"
        try:
            task, name = r["task"], r["name"]
            if "test_accuracy_mean" in r:
                mean, sd, seeds = r["test_accuracy_mean"], r["test_accuracy_sd"], r["seeds"]
            else:
                mean, sd, seeds = r["test_accuracy"], 0.0, 1
            mean, sd, seeds = float(mean), float(sd), int(seeds)
            majority = r.get("test_majority")
            majority = None if majority is None else float(majority)
            mark = r.get("mark", "")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            fail(f"{where}: expected a JSON object with task, name and test_accuracy or "
                 f"test_accuracy_mean/_sd/seeds, numbers as numbers ({e})")
        for key, value in (("task", task), ("name", name)):
            if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
                fail(f"{where}: {key} must be a non-empty name without spaces, got {value!r}")
        if not (0 <= mean <= 1 and 0 <= sd <= 1 and seeds >= 1):
            fail(f"{where}: accuracy {mean}, sd {sd} or seeds {seeds} out of range (fractions "
                 "in [0, 1], seeds >= 1)")
        if majority is not None and not 0 < majority <= 1:
            fail(f"{where}: test_majority {majority} out of range (a fraction in (0, 1])")
        if mark not in ("", "*", "="):
            fail(f"{where}: mark must be '', '*' or '=', got {mark!r}")
        if (task, name) in cells:
            fail(f"{where}: a second line for task '{task}' and model '{name}'")
        if majority is not None:
            if task in chance and abs(chance[task] - 100 * majority) > 1e-9:
                fail(f"{where}: test_majority {majority} differs from an earlier line's for "
                     f"task '{task}' ({chance[task] / 100}); the models of a task share one "
                     "test split")
            chance[task] = 100 * majority
        cells[task, name] = (100 * mean, 100 * sd, seeds, mark)
        if name not in order:
            order.append(name)
    return cells, chance, order


def gnuplot_string(text):
    """A single-quoted gnuplot string: quotes inside are doubled."""
    return "'" + text.replace("'", "''") + "'"


# Twelve distinguishable fills (gnuplot's default cycle repeats after eight).
PALETTE = ["#9400d3", "#009e73", "#56b4e9", "#e69f00", "#f0e442", "#0072b2", "#e51e10",
           "#7f7f00", "#a0a0a0", "#8b4513", "#ff69b4", "#2e8b57"]


def table(cells, chance, tasks, names):
    rows = ["| model | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
    for name in names:
        out = []
        for t in tasks:
            if (t, name) not in cells:
                out.append("-")
                continue
            mean, sd, seeds, mark = cells[t, name]
            out.append(f"{mean:.2f} ± {sd:.2f}{mark}" if seeds > 1 else f"{mean:.2f} (1 seed)")
        rows.append(f"| {name} | " + " | ".join(out) + " |")
    rows.append("| majority class | " +
                " | ".join(f"{chance[t]:.2f}" if t in chance else "-" for t in tasks) + " |")
    return "\n".join(rows)


def plot(cells, chance, tasks, names, png, title):
    # gnuplot draws no histogram column without a number: leave out models with no cell.
    names = [m for m in names if any((t, m) in cells for t in tasks)]
    if not names:
        fail("--png: no cell to draw yet")
    n, gap = len(names), 1
    half = n / (2.0 * (n + gap))  # half a cluster's width, in units of the task spacing
    data = ["# task " + " ".join(f"{m}_mean {m}_sd" for m in names)]
    for t in tasks:
        row = [t]
        for m in names:
            mean, sd = cells[t, m][:2] if (t, m) in cells else (float("nan"), float("nan"))
            row += [f"{mean:.4f}", f"{sd:.4f}"]
        data.append(" ".join(row))
    gp = [f"set terminal pngcairo noenhanced size {max(900, 150 * len(tasks) + 320)},600 "
          "font 'sans,11'",
          "set output 'lra.png'",
          "set title " + gnuplot_string(title),
          "set ylabel 'test accuracy, %'", "set yrange [0:100]", "set grid ytics",
          "set style data histogram", f"set style histogram errorbars gap {gap} lw 1",
          "set style fill solid 0.8 border -1", "set boxwidth 0.9",
          "set key outside right top vertical", "set xtics nomirror"]
    for i, t in enumerate(tasks):
        if t in chance:
            gp.append(f"set arrow from {i - half},{chance[t]} to {i + half},{chance[t]} "
                      "nohead dt 2 lw 2 lc rgb 'black' front")
    gp.append("plot " + ", ".join(
        f"'lra.dat' using {2 + 2 * k}:{3 + 2 * k}" + (":xtic(1)" if k == 0 else "") +
        f" title {gnuplot_string(m)} lc rgb '{PALETTE[k % len(PALETTE)]}'"
        for k, m in enumerate(names)))
    folder = os.path.dirname(os.path.abspath(png))
    try:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            with open(os.path.join(tmp, "lra.dat"), "w") as f:
                f.write("\n".join(data) + "\n")
            try:
                r = subprocess.run(["gnuplot"], input="\n".join(gp) + "\n", text=True,
                                   cwd=tmp, capture_output=True)
            except OSError as e:
                fail(f"cannot run gnuplot ({e.strerror}); scripts/setup.sh installs it")
            if r.returncode != 0 or not os.path.exists(os.path.join(tmp, "lra.png")):
                fail(f"gnuplot failed: {r.stderr.strip()}")
            os.replace(os.path.join(tmp, "lra.png"), png)
    except OSError as e:
        fail(f"--png {png}: {e.strerror}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", help="JSON lines: lra.sh's results.jsonl or docs/lra-cpu.jsonl")
    p.add_argument("--tasks", help="columns, space-separated (default: every task, in file order)")
    p.add_argument("--models", help="rows, space-separated names (default: every name)")
    p.add_argument("--png", help="also draw the table as this .png file")
    p.add_argument("--title", default="Test accuracy, % (error bars: sd over seeds); dashed: "
                   "the majority class")
    a = p.parse_args()
    if a.png is not None and os.path.isdir(a.png):
        fail(f"--png: '{a.png}' is a folder; expected a file name ending in .png")
    if a.png is not None and not a.png.endswith(".png"):
        fail(f"--png: expected a file name ending in .png, got '{a.png}'")
    if a.png is not None and not os.path.isdir(os.path.dirname(os.path.abspath(a.png))):
        fail(f"--png: folder '{os.path.dirname(a.png)}' does not exist")
    cells, chance, order = read_cells(a.results)
    known_tasks = []
    for t, _ in cells:
        if t not in known_tasks:
            known_tasks.append(t)
    tasks = a.tasks.split() if a.tasks else known_tasks
    names = a.models.split() if a.models else order
    # A partial sweep has tasks or models with no line yet: their cells print as "-".
    for t in tasks:
        if t not in known_tasks:
            print(f"lra-table: no line of {a.results} has task '{t}' yet", file=sys.stderr)
    for m in names:
        if m not in order:
            print(f"lra-table: no line of {a.results} has model '{m}' yet", file=sys.stderr)
    # The picture first: a failure then prints no table, so no caller keeps half a result.
    if a.png:
        plot(cells, chance, tasks, names, a.png, a.title)
    print(table(cells, chance, tasks, names))


if __name__ == "__main__":
    main()
