"""The GPU benchmark of docs/CUDA.md ("The benchmark"): CUDA events, medians.

    python tests/gpu/bench.py --lib build-gpu/libseqmix_ops.so --out DIR [--budget 240]
    python tests/gpu/bench.py --dry-run --out DIR     # every section, tiny shapes, the CPU

Sections, in this order (a case that does not fit in --budget seconds is skipped and listed):

1. Device-to-device copy rate (bytes read + written per second): the bandwidth ceiling.
2. The scans, aib_scan and ces_scan, B = 4, D = 512, L = 4K, 16K, 64K, in float32 and in
   bfloat16 (activations bfloat16, parameters float32), forward and backward timed apart:
   forward = the op (torch.ops.seqmix.aib_scan / ces_scan, inputs requiring grad, as in
   training); backward = the registered backward op alone (torch.ops.seqmix._aib_scan_backward
   / _ces_scan_backward). Each pass against its bandwidth floor: the bytes it must move, each
   array once, in the element size of the activations' dtype, at the copy rate -- AIB
   forward 3 arrays (reads A, V; writes O), backward 5 (reads dO, A, V; writes dA, dV); CES
   forward 2 (reads X; writes Y), backward 3 (reads dY, X; writes dX). And against the
   papers' algorithms written in PyTorch (seqmix._torch_ops: Algorithm 1's shift-and-add
   levels; the CES authors' FFT form), eager and torch.compile'd, timed forward alone and
   forward + backward; their backward is the difference (fwd+bwd minus fwd). All
   implementations of one case run alternated, one run each in turn, after a warm-up.
   torch.ops.seqmix.aib_scan_fallbacks() (fallbacks to the exact slow path) is read before
   and after each case.
3. Checks: (a) one training step of a default-initialised Weird-Net-A (seqmix's modules,
   d_model 256, 4 layers, L = 16384, bf16 autocast) must not fall back; (b) one aib_scan
   forward + backward captured in a torch.cuda.CUDAGraph and replayed on new inputs must
   equal an eager call on them, bit for bit.
4. Whole-model training steps (forward, backward, AdamW; bf16 autocast; batch 4; d_model
   256, 4 layers, 4 heads, d_ff 1024) of Weird-Net, Weird-Net-A and the Transformer at
   L = 4K and 16K: tokens/s of seqmix's modules against the same models written by a user in
   PyTorch (tests/gpu/models.py's user_ops(): Algorithm 1, attention by SDPA), compiled, and the
   same eager. Each side alone: its model built, warmed up, then gc.collect,
   torch.cuda.empty_cache and reset_peak_memory_stats, then its timed steps, whose
   torch.cuda.max_memory_allocated is its peak (GiB; none on the CPU); then one step under
   torch.profiler: the CUDA kernels it launches (device events less memcpy / memset), and for
   the eager sides the kernels of each block's forward + backward (record_function ranges
   around the blocks, backward nodes matched by autograd sequence number). The dry run counts
   operators instead ("kernel_count_source" says which).
5. Generation: incremental greedy decoding, bf16 autocast, at contexts 1K, 4K, 16K, batch 1
   then 4 (d_model 256, 4 layers), of the Transformer, Weird-Net, Weird-Net-A, the ETSMLP LM
   and (context 1K only: its lag matrices grow as context x D x D) the Extractor's stack:
   tokens/s of all sequences over 64 new tokens, after a context whose decoding states one
   forward builds (models.prefill, not timed). seqmix: SequenceModel.step; against
   transformers' generate of the same model exported to Hugging Face (seqmix.hf's
   SeqmixForCausalLM, which keeps no cache and re-reads the sequence at each token), timed as
   generate(65) minus generate(1); and against the Transformer's KV caches: seqmix's own
   (SelfAttention.step, the Transformer row of the same context and batch) and transformers'
   GPT-2 of the same sizes. Where transformers is missing, its sides are recorded as not
   available, with the reason.

Writes DIR/bench.json (everything) and DIR/bench-gpu.jsonl (the records
scripts/bench_gpu_records.py merges into docs/bench-gpu.jsonl: "kind" "scan", one per op, L,
dtype and pass; "train", one per model and L; "generate", one per model, context and batch),
both rewritten after every case, and prints the tables (under 80 columns). Sections 4 and 5
run in the budget's order too: a case runs when the longest case of its section so far (or
the section's first-case estimate) fits, the training rows keeping generate_reserve_s for
the generation rows' first cases. --dry-run runs every section at tiny shapes on the CPU
through the same code (time.perf_counter instead of CUDA events, the CUDA graph replaced by
an eager call): the test of this script on machines without a GPU; its records say
"dry_run": true and are refused by the records script.

Exit status: 0 when every check passes or is not available in this build, 1 when a check
fails (its line starts "bench-check:" and says FAIL).
"""
import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

# Sizes of a real run and of the dry run (CPU, seconds in all).
SIZES = {
    "gpu": dict(B=4, D=512, scan_L=(4096, 16384, 65536), copy_elems=512 * 1024 * 1024,
                repeats=30, baseline_repeats=10, warmup=3,
                check_model=dict(B=4, L=16384, d_model=256, n_layers=4, n_heads=4, d_ff=1024),
                graph=dict(B=4, L=4096, D=512),
                train=dict(B=4, L=(4096, 16384), d_model=256, n_layers=4, n_heads=4, d_ff=1024,
                           repeats=10, eager_repeats=3),
                # Contexts and batches in the order they run (batch 1 first: the budget drops
                # the last); extractor-transformer only up to 1K: its lag matrices are
                # max_len x D x D (1 GiB a layer at 4K) and its HF forward FFTs them at every
                # token.
                generate=dict(contexts=(1024, 4096, 16384), batches=(1, 4), new_tokens=64,
                              repeats=3, d_model=256, n_layers=4, n_heads=4, d_ff=1024,
                              max_context={"extractor-transformer": 1024}),
                # seconds a section's first case is assumed to take, before one has been timed
                first_scan_s=30.0, first_train_s=40.0, checks_s=20.0, first_generate_s=15.0,
                # seconds the training rows leave for the generation rows' first cases
                generate_reserve_s=20.0),
    "dry": dict(B=2, D=8, scan_L=(32, 128), copy_elems=1024 * 1024,
                repeats=5, baseline_repeats=3, warmup=1,
                check_model=dict(B=2, L=64, d_model=32, n_layers=4, n_heads=2, d_ff=64),
                graph=dict(B=2, L=64, D=8),
                train=dict(B=2, L=(64,), d_model=32, n_layers=2, n_heads=2, d_ff=64, repeats=2,
                           eager_repeats=2),
                generate=dict(contexts=(16, 32), batches=(1, 2), new_tokens=4, repeats=1,
                              d_model=32, n_layers=2, n_heads=2, d_ff=64,
                              max_context={"extractor-transformer": 16}),
                first_scan_s=0.0, first_train_s=0.0, checks_s=0.0, first_generate_s=0.0,
                generate_reserve_s=0.0),
}

# The models of the generation rows, in the order they run within one (context, batch): the
# Transformer first, whose step decoding (a KV cache) the others' records quote.
GENERATE_PRESETS = ("transformer", "weird-net", "weird-net-a", "etsmlp-lm",
                    "extractor-transformer")


class Clock:
    """Milliseconds of a callable: CUDA events around it on a GPU (synchronised after each
    run, so one implementation's queue never overlaps the next one's), time.perf_counter on
    the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def once(self, fn):
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3

    def median(self, fn, repeats, warmup=3):
        for _ in range(warmup):
            fn()
        self.sync()
        return statistics.median(self.once(fn) for _ in range(repeats))

    def alternated(self, fns, warmup):
        """{name: median ms} of fns {name: (callable, repeats)}, warmed up, then run in
        rounds: round r runs every implementation that still has repeats once, in turn, so
        drifts of clock or temperature fall on all of them alike."""
        for fn, _ in fns.values():
            for _ in range(warmup):
                fn()
        self.sync()
        times = {name: [] for name in fns}
        for r in range(max(n for _, n in fns.values())):
            for name, (fn, n) in fns.items():
                if r < n:
                    times[name].append(self.once(fn))
        return {name: statistics.median(t) for name, t in times.items()}


class Budget:
    """Seconds left for the benchmark; a case that does not fit is listed as skipped."""

    def __init__(self, seconds):
        self.start = time.time()
        self.end = self.start + seconds
        self.skipped = []

    def left(self):
        return self.end - time.time()

    def fits(self, what, need, reserve=0.0):
        """True when `need` seconds remain besides `reserve` (kept for later sections)."""
        if self.left() - reserve >= need:
            return True
        self.skipped.append(what)
        print(f"bench: skipped (budget): {what} (needs ~{need:.0f} s, {self.left():.0f} s left, "
              f"{reserve:.0f} s kept for later sections)", flush=True)
        return False


def fallback_counter():
    """torch.ops.seqmix.aib_scan_fallbacks: the number of aib_scan calls answered by the
    exact slow path since the process started, CPU and CUDA (reading it synchronises); None
    where this build of the operators has no such op."""
    try:
        op = torch.ops.seqmix.aib_scan_fallbacks
    except (AttributeError, RuntimeError):
        return None
    return lambda: int(op())


def machine(device, dry_run):
    """The card (nvidia-smi's name), driver, PyTorch and CUDA versions, the date (UTC)."""
    card, driver = None, None
    if device.type == "cuda":
        try:
            line = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                                   "--format=csv,noheader"], capture_output=True, text=True,
                                  timeout=30).stdout.strip().splitlines()[0]
            card, driver = (s.strip() for s in line.split(",", 1))
        except (OSError, IndexError, ValueError, subprocess.SubprocessError):
            card, driver = torch.cuda.get_device_name(), "unknown"
    else:
        card = f"cpu {platform.machine()} (dry run)" if dry_run else f"cpu {platform.machine()}"
        driver = ""
    return {"card": card, "driver": driver, "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")}


def copy_rate(device, clock, n):
    """Bytes read + written per second of dst.copy_(src), n float32 each way."""
    src = torch.empty(n, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = clock.median(lambda: dst.copy_(src), 20)
    del src, dst
    return 2 * n * 4 / (ms / 1e3)


class ScanCase:
    """One scan at one shape: `inputs` (tensors, the differentiable ones first),
    `forward(*inputs)` (seqmix's op), `backward(grad, *inputs)` (its registered backward
    op), `algorithm(*inputs)` (the papers' algorithm in PyTorch) and the arrays of B L D
    elements each pass must move: (forward, backward)."""

    def __init__(self, op, inputs, forward, backward, algorithm, baseline, arrays):
        self.op, self.inputs, self.forward, self.backward = op, inputs, forward, backward
        self.algorithm, self.baseline, self.arrays = algorithm, baseline, arrays


def aib_case(B, L, D, dtype, device):
    from seqmix import _torch_ops
    ops = torch.ops.seqmix
    K = max(1, (L - 1).bit_length())
    a = torch.randn(B, L, D, device=device).to(dtype)
    v = torch.randn(B, L, D, device=device).to(dtype)
    w = -0.3 + 0.1 * torch.randn(K, D, device=device)
    return ScanCase(
        "aib_scan", (a, v, w),
        lambda a, v, w: ops.aib_scan(a, v, w, None, "causal", "prefix_exp"),
        lambda g, a, v, w: ops._aib_scan_backward(g, a, v, w, None, "causal", "prefix_exp"),
        _torch_ops.aib_scan, "Algorithm 1 in PyTorch (seqmix._torch_ops.aib_scan)", (3, 5))


def ces_case(B, L, D, dtype, device):
    from seqmix import _torch_ops
    from seqmix.mixers.ces import ces_coefficients
    ops = torch.ops.seqmix
    _, mu, c = ces_coefficients(torch.randn(D, 2, device=device),
                                        torch.full((D, 2), -3.0, device=device),
                                        0.2 * torch.randn(D, 2, device=device))
    x = torch.randn(B, L, D, device=device).to(dtype)
    return ScanCase(
        "ces_scan", (x, mu.detach(), c.detach()),
        lambda x, mu, c: ops.ces_scan(x, mu, c, None, "causal"),
        lambda g, x, mu, c: ops._ces_scan_backward(g, x, mu, c, None, "causal"),
        _torch_ops.ces_scan, "the FFT form in PyTorch (seqmix._torch_ops.ces_scan)", (2, 3))


def fwd_bwd(fn, inputs, grad):
    def run():
        torch.autograd.grad(fn(*inputs), inputs, grad)
    return run


def time_scan(case, compiled_fn, clock, size):
    """Medians (ms) of every implementation of `case`, and what failed."""
    inputs = [t.detach().requires_grad_() for t in case.inputs]
    plain = [t.detach() for t in case.inputs]
    grad = torch.randn_like(case.inputs[0])
    n, m = size["repeats"], size["baseline_repeats"]
    fns = {
        "seqmix_forward": (lambda: case.forward(*inputs), n),
        "seqmix_backward": (lambda: case.backward(grad, *plain), n),
        "seqmix_fwd_bwd": (fwd_bwd(case.forward, inputs, grad), n),
        "eager_forward": (lambda: case.algorithm(*inputs), m),
        "eager_fwd_bwd": (fwd_bwd(case.algorithm, inputs, grad), m),
        "compiled_forward": (lambda: compiled_fn(*inputs), m),
        "compiled_fwd_bwd": (fwd_bwd(compiled_fn, inputs, grad), m),
    }
    errors, compile_s = {}, 0.0
    # One call each first: compiles (the forward with grad-requiring inputs and its backward,
    # so that forward alone and fwd+bwd time one compiled graph) and drops an implementation
    # that fails (out of memory, a compile error) instead of the whole case.
    for name in list(fns):
        t = time.time()
        try:
            fns[name][0]()
            clock.sync()
        except Exception as e:  # noqa: BLE001 -- reported with the row
            errors[name] = f"{type(e).__name__}: {first_line(e)}"
            del fns[name]
            if clock.cuda:
                torch.cuda.empty_cache()
        if name.startswith("compiled_"):
            compile_s += time.time() - t
    ms = clock.alternated(fns, size["warmup"]) if fns else {}
    return ms, errors, compile_s


def first_line(e):
    text = str(e)
    return text.splitlines()[0] if text else ""


def scan_rows(device, clock, size, rate, budget, meta, state, compile_backend):
    from seqmix import _torch_ops
    ops_cases = (("aib_scan", aib_case), ("ces_scan", ces_case))
    compiled = {"aib_scan": torch.compile(_torch_ops.aib_scan, dynamic=False,
                                          backend=compile_backend),
                "ces_scan": torch.compile(_torch_ops.ces_scan, dynamic=False,
                                          backend=compile_backend)}
    counter = fallback_counter()
    B, D = size["B"], size["D"]
    say(f"scans: B={B} D={D}, forward and backward timed apart, medians of "
          f"{size['repeats']} runs ({size['baseline_repeats']} for the PyTorch baselines), "
          f"implementations alternated; floor = the bytes each pass must move at the copy "
          f"rate; the baselines' backward = their fwd+bwd minus their fwd; fallbacks = "
        f"torch.ops.seqmix.aib_scan_fallbacks() after minus before the case (fb)"
        + ("" if counter else " (not available in this build)"))
    print(header_line(), flush=True)
    took = {}
    for dtype in (torch.float32, torch.bfloat16):
        for L in size["scan_L"]:
            for op, make in ops_cases:
                dname = str(dtype).replace("torch.", "")
                need = max(took.get(op, [size["first_scan_s"]]))
                if not budget.fits(f"{op} {dname} L={L}", need, reserve=size["checks_s"]):
                    continue
                start = time.time()
                case = None
                try:
                    case = make(B, L, D, dtype, device)
                    before = counter() if counter else None
                    ms, errors, compile_s = time_scan(case, compiled[op], clock, size)
                    after = counter() if counter else None
                    baseline, arrays = case.baseline, case.arrays
                except Exception as e:  # noqa: BLE001 -- the case fails, the benchmark goes on
                    state["errors"].append(f"{op} {dname} L={L}: {type(e).__name__}: "
                                           f"{first_line(e)}")
                    print(f"bench: {op} {dname} L={L} failed: {type(e).__name__}: "
                          f"{first_line(e)}", flush=True)
                    continue
                finally:
                    del case
                    if clock.cuda:
                        torch.cuda.empty_cache()
                took.setdefault(op, []).append(time.time() - start)
                for rec in scan_records(op, baseline, arrays, L, B, D, dtype, rate, ms, errors,
                                        compile_s, before, after, meta, size):
                    state["records"].append(rec)
                    print(record_line(rec), flush=True)
                if before is not None:
                    print(f"  fallbacks: {before} before, {after} after", flush=True)
                for name, err in errors.items():
                    print(f"  {name} failed: {err}", flush=True)
                write_outputs(state)


def scan_records(op, baseline, arrays, L, B, D, dtype, rate, ms, errors, compile_s, before,
                 after, meta, size):
    """The two records (forward, backward) of one case, in the fields of bench-gpu.jsonl."""
    elem = torch.tensor([], dtype=dtype).element_size()
    out = []
    for i, pas in enumerate(("forward", "backward")):
        floor_ms = arrays[i] * B * L * D * elem / rate * 1e3
        seqmix_ms = ms.get(f"seqmix_{pas}")

        def baseline_ms(kind):
            fwd, both = ms.get(f"{kind}_forward"), ms.get(f"{kind}_fwd_bwd")
            if pas == "forward":
                return fwd
            return both - fwd if fwd is not None and both is not None else None

        rec = {"kind": "scan", "op": op, "L": L, "B": B, "D": D,
               "dtype": str(dtype).replace("torch.", ""),
               "pass": pas, "seqmix_ms": seqmix_ms, "floor_ms": floor_ms,
               "pct_of_floor": 100 * floor_ms / seqmix_ms if seqmix_ms else None,
               "compiled_ms": baseline_ms("compiled"), "eager_ms": baseline_ms("eager"),
               "fallbacks": after - before if before is not None else None,
               "fallbacks_before": before, "fallbacks_after": after,
               "floor_arrays": arrays[i], "copy_tb_per_s": rate / 1e12,
               "baseline": baseline, "repeats": size["repeats"],
               "baseline_repeats": size["baseline_repeats"]}
        if pas == "backward":
            rec.update(seqmix_fwd_bwd_ms=ms.get("seqmix_fwd_bwd"),
                       compiled_fwd_bwd_ms=ms.get("compiled_fwd_bwd"),
                       eager_fwd_bwd_ms=ms.get("eager_fwd_bwd"),
                       baseline_backward="fwd+bwd minus fwd",
                       compile_s=compile_s)
        if errors:
            rec["errors"] = errors
        rec.update(meta)
        out.append(rec)
    return out


def fmt(x, width, digits):
    return f"{x:{width}.{digits}f}" if x is not None else f"{'-':>{width}}"


SHORT = {"float32": "fp32", "bfloat16": "bf16", "forward": "fwd", "backward": "bwd"}


def header_line():
    return (f"{'op':8} {'type':4} {'L':>5} {'pas':3} {'seqmix ms':>9} {'floor ms':>8} "
            f"{'%floor':>6} {'compiled':>8} {'x comp':>6} {'eager':>8} {'fb':>3}")


def record_line(r):
    x = r["compiled_ms"] / r["seqmix_ms"] if r["compiled_ms"] and r["seqmix_ms"] else None
    fb = "-" if r["fallbacks"] is None else str(r["fallbacks"])
    return (f"{r['op']:8} {SHORT.get(r['dtype'], r['dtype']):4} {r['L']:5d} "
            f"{SHORT.get(r['pass'], r['pass']):3} {fmt(r['seqmix_ms'], 9, 3)} "
            f"{fmt(r['floor_ms'], 8, 3)} {fmt(r['pct_of_floor'], 6, 1)} "
            f"{fmt(r['compiled_ms'], 8, 2)} {fmt(x, 6, 1)} {fmt(r['eager_ms'], 8, 2)} {fb:>3}")


def say(text):
    """A line of prose, wrapped at 80 columns (the tables are narrower)."""
    print(textwrap.fill(text, 80, subsequent_indent="  "), flush=True)


def train_step_fn(model, opt, tokens, device):
    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def fallback_check(device, clock, size, state):
    """One training step of a default-initialised Weird-Net-A under bf16 autocast: the
    fallbacks it causes (must be 0)."""
    s = size["check_model"]
    what = (f"fallbacks in one Weird-Net-A training step (default init, d_model {s['d_model']}, "
            f"{s['n_layers']} layers, B={s['B']}, L={s['L']}, bf16 autocast)")
    counter = fallback_counter()
    if counter is None:
        return report_check(state, "fallbacks", what, None,
                            "not available (this build has no "
                            "torch.ops.seqmix.aib_scan_fallbacks)")
    try:
        config = models.model_config("weird-net-a", max_len=s["L"], d_model=s["d_model"],
                                     n_layers=s["n_layers"], n_heads=s["n_heads"],
                                     d_ff=s["d_ff"])
        torch.manual_seed(0)
        model = models.seqmix_classes()["SequenceModel"](config).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        tokens = torch.randint(0, 256, (s["B"], s["L"] + 1), device=device)
        before = counter()
        t = time.time()
        loss = train_step_fn(model, opt, tokens, device)()
        clock.sync()
        seconds = time.time() - t
        after = counter()
        del model, opt
        if clock.cuda:
            torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001
        return report_check(state, "fallbacks", what, False,
                            f"raised {type(e).__name__}: {first_line(e)}")
    delta = after - before
    return report_check(state, "fallbacks", what, delta == 0,
                        f"{before} before, {after} after: {delta} fallback(s) (must be 0); "
                        f"loss {loss.item():.4f}, step {seconds:.1f} s with its first calls",
                        before=before, after=after, delta=delta)


def graph_check(device, clock, size, state):
    """One aib_scan forward + backward captured in a CUDA graph, replayed on new inputs
    copied into the captured (static) tensors, against an eager call on those inputs: the
    outputs and every gradient must be equal bit for bit. On the CPU (dry run) the replay is
    an eager call into the same static tensors, so everything around the capture runs."""
    s = size["graph"]
    B, L, D = s["B"], s["L"], s["D"]
    K = max(1, (L - 1).bit_length())
    what = f"CUDA graph of aib_scan forward + backward (B={B}, L={L}, D={D}, float32)"
    ops = torch.ops.seqmix

    def draw():
        return (torch.randn(B, L, D, device=device), torch.randn(B, L, D, device=device),
                -0.3 + 0.1 * torch.randn(K, D, device=device), torch.randn(B, L, D, device=device))

    def run(a, v, w, g):
        out = ops.aib_scan(a, v, w, None, "causal", "prefix_exp")
        return (out, *torch.autograd.grad(out, (a, v, w), g))

    try:
        *leaves, g_static = draw()
        static = [t.requires_grad_() for t in leaves]
        if clock.cuda:
            # Warm-up on a side stream before capture, as torch.cuda.graphs asks.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    run(*static, g_static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                results = run(*static, g_static)
            replay = graph.replay
        else:
            results = [t.detach().clone() for t in run(*static, g_static)]

            def replay():
                for r, t in zip(results, run(*static, g_static)):
                    r.copy_(t)
        *new, g_new = draw()
        with torch.no_grad():
            for t, n in zip(static, new):
                t.copy_(n)
            g_static.copy_(g_new)
        replay()
        clock.sync()
        eager = run(*[n.clone().requires_grad_() for n in new], g_new)
        names = ("out", "grad a", "grad v", "grad w")
        differ = [n for n, r, e in zip(names, results, eager) if not torch.equal(r, e)]
    except Exception as e:  # noqa: BLE001
        # A failure inside the capture surfaces as capture_end's error; the first cause is
        # in the exception's context.
        causes = [e]
        while causes[-1].__context__ is not None and len(causes) < 4:
            causes.append(causes[-1].__context__)
        return report_check(state, "cuda_graph", what, False, "raised " + "; before it, ".join(
            f"{type(c).__name__}: {first_line(c)}" for c in causes))
    label = "replay" if clock.cuda else "cpu dry run: the replay is an eager call (no CUDA graph);"
    if differ:
        return report_check(state, "cuda_graph", what, False,
                            f"{label} differs from eager in {', '.join(differ)}")
    return report_check(state, "cuda_graph", what, True,
                        f"{label} equal to eager (out and every gradient, bit for bit)")


def report_check(state, name, what, ok, detail, **extra):
    verdict = {True: "ok", False: "FAIL", None: "not available"}[ok]
    print(f"bench-check: {what}: {detail} -- {verdict}", flush=True)
    state["checks"].append({"check": name, "what": what, "ok": ok, "detail": detail, **extra})
    write_outputs(state)
    return ok


def empty_device(clock):
    """Frees what earlier cases left (cycles, cached blocks) and starts a new peak: after it,
    torch.cuda.max_memory_allocated counts what is allocated now plus what comes after."""
    gc.collect()
    if clock.cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(clock):
    """GiB: the most allocated since empty_device; None on the CPU (no allocator peak)."""
    return torch.cuda.max_memory_allocated() / 2**30 if clock.cuda else None


KERNEL_SOURCES = {
    True: "CUDA kernels in torch.profiler (device events, memcpy and memset left out)",
    False: "cpu dry run: operators (aten:: and seqmix:: events not inside another one) in "
           "torch.profiler, not kernels",
}


def count_kernels(step, cuda, blocks=None):
    """(kernels in one call of step, [kernels of block i's forward + backward] or None):
    torch.profiler over one call (after the step's own warm-up and the profiler's).

    On CUDA the total is the profile's device events (FunctionEvent.device_type CUDA: the
    kernels, Triton's included) less memcpy and memset. A block's count: the kernels its
    forward launched (inside a record_function range the block's hooks open) and those of
    the backward nodes of that forward's operators (matched by autograd sequence number and
    thread, as torch.autograd.profiler_util links them), read from each CPU event's linked
    kernels. On the CPU (dry run) there are no kernels: the same counts are of operators
    (KERNEL_SOURCES). `blocks`: the model's blocks (eager modules only; None for a compiled
    model, whose graphs have no block boundaries)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    def kernel(name):
        return not name.startswith(("Memcpy", "Memset"))

    def own(e):
        """What one CPU event counts for itself."""
        if cuda:
            return sum(1 for k in e.kernels if kernel(k.name))
        parent = e.cpu_parent
        return int(e.name.startswith(("aten::", "seqmix::")) and not (
            parent is not None and parent.name.startswith(("aten::", "seqmix::"))))

    def below(e):
        return own(e) + sum(below(c) for c in e.cpu_children)

    hooks = []
    for i, block in enumerate(blocks or ()):
        def enter(module, args, i=i):
            module._bench_range = record_function(f"bench::block{i}")
            module._bench_range.__enter__()

        def leave(module, args, out):
            module._bench_range.__exit__(None, None, None)
        hooks += [block.register_forward_pre_hook(enter), block.register_forward_hook(leave)]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # Two calls, the first the profiler's warm-up (recorded, then dropped): kernels at the
    # very start of a session can go missing (pytorch/pytorch#192021). After the session
    # CUPTI is torn down (PyTorch keeps it only where inductor's CUDA graphs are on,
    # torch/profiler/profiler.py), so the timings after it do not pay for it.
    try:
        with warnings.catch_warnings():
            # "Profiler clears events at the end of each cycle": the warm-up's, as wanted.
            warnings.filterwarnings("ignore", message=".*clears events")
            with profile(activities=activities,
                         schedule=torch.profiler.schedule(wait=0, warmup=1, active=1,
                                                          repeat=1)) as prof:
                for _ in range(2):
                    step()
                    if cuda:
                        torch.cuda.synchronize()
                    prof.step()
    finally:
        for h in hooks:
            h.remove()
    events = prof.events()
    linked = sum(own(e) for e in events if e.device_type == DeviceType.CPU)
    if cuda:
        total = sum(1 for e in events if e.device_type == DeviceType.CUDA and kernel(e.name))
    else:
        total = linked
    if not total:
        return None, None  # no device events: CUPTI not available to the profiler
    if not blocks or not linked:
        return total, None  # no blocks, or no kernel linked to the operators launching it
    backward = [e for e in events if e.name.startswith("autograd::engine::evaluate_function")]
    per_block = []
    for i in range(len(blocks)):
        ranges = [e for e in events if e.name == f"bench::block{i}"]
        if not ranges:
            return total, None
        forward, stack = [], list(ranges)
        while stack:
            e = stack.pop()
            forward.append(e)
            stack.extend(e.cpu_children)
        seqs = {(e.sequence_nr, e.thread) for e in forward if e.sequence_nr >= 0}
        n = sum(own(e) for e in forward)
        n += sum(below(e) for e in backward if (e.sequence_nr, e.fwd_thread) in seqs)
        per_block.append(n)
    return total, per_block


TRAIN_SIDES = (
    # (record prefix, model classes, torch.compile'd, the sizes' key of its repeats); the
    # eager side is a reference point, timed over fewer steps (one warm-up) to spare the
    # budget.
    ("seqmix", "seqmix", False, "repeats"),
    ("pytorch", "user", True, "repeats"),
    ("pytorch_eager", "user", False, "eager_repeats"),
    # seqmix's modules under torch.compile: inductor fuses the norms, casts, residuals and
    # GELU around seqmix's ops (one graph, no break: the ops have fake kernels), which is
    # what a GPU user of seqmix would run. Fewer steps, as for the eager side.
    ("seqmix_compiled", "seqmix", True, "eager_repeats"),
)


def model_rows(device, clock, size, budget, meta, state, compile_backend, reserve):
    """Section 4: one record per (model, L), kind "train": tokens/s of seqmix's modules, of
    the user's plain-PyTorch model compiled and eager, each side's own peak memory and its
    kernels per step."""
    classes = {"seqmix": models.seqmix_classes(), "user": models.pytorch_classes()}
    t = size["train"]
    B = t["B"]
    took = []
    say(f"training: B={B}, d_model {t['d_model']}, {t['n_layers']} layers, bf16 autocast, "
        f"AdamW; medians of {t['repeats']} steps after {size['warmup']} of warm-up "
        f"({t['eager_repeats']} after 1 for the eager PyTorch side); peak GiB of each side "
        f"alone; {KERNEL_SOURCES[clock.cuda]}")
    print(train_header(), flush=True)
    for L in t["L"]:
        for preset in models.MIXERS:
            need = max(took) if took else size["first_train_s"]
            if not budget.fits(f"{preset} training at L={L}", need, reserve):
                continue
            start = time.time()
            config = models.model_config(preset, max_len=L, d_model=t["d_model"],
                                         n_layers=t["n_layers"], n_heads=t["n_heads"],
                                         d_ff=t["d_ff"])
            tokens = torch.randint(0, 256, (B, L + 1), device=device)
            rec = {"kind": "train", "model": preset, "L": L, "batch": B,
                   "d_model": t["d_model"], "n_layers": t["n_layers"], "n_heads": t["n_heads"],
                   "d_ff": t["d_ff"], "precision": "bf16",
                   "optimizer": "AdamW (fused)" if clock.cuda else "AdamW",
                   "repeats": t["repeats"], "eager_repeats": t["eager_repeats"],
                   "compile_backend": compile_backend,
                   "kernel_count_source": KERNEL_SOURCES[clock.cuda]}
            for name, which, compiled, repeats in TRAIN_SIDES:
                model = opt = fwd = step = None
                try:
                    torch.manual_seed(0)
                    model = classes[which]["SequenceModel"](config).to(device)
                    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=clock.cuda)
                    fwd = (torch.compile(model, dynamic=False, backend=compile_backend)
                           if compiled else model)
                    step = train_step_fn(fwd, opt, tokens, device)
                    # Compiles, and draws AdamW's state.
                    for _ in range(size["warmup"] if repeats == "repeats" else 1):
                        step()
                    clock.sync()
                    # The peak of this side alone: from here, over its measured steps.
                    empty_device(clock)
                    ms = clock.median(step, t[repeats], warmup=0)
                    rec[f"{name}_tokens_per_s"] = B * L / (ms / 1e3)
                    rec[f"{name}_peak_gib"] = peak_gib(clock)
                    total, blocks = count_kernels(step, clock.cuda,
                                                  None if compiled else list(model.blocks))
                    rec[f"{name}_kernels_per_step"] = total
                    rec[f"{name}_kernels_per_block"] = blocks
                except Exception as e:  # noqa: BLE001 -- out of memory included
                    for field in ("tokens_per_s", "peak_gib", "kernels_per_step",
                                  "kernels_per_block"):
                        rec.setdefault(f"{name}_{field}", None)
                    rec[f"{name}_error"] = f"{type(e).__name__}: {first_line(e)}"
                    print(f"bench: {preset} L={L} {name} failed: {rec[f'{name}_error']}",
                          flush=True)
                del model, opt, fwd, step
                empty_device(clock)
            s, p = rec["seqmix_tokens_per_s"], rec["pytorch_tokens_per_s"]
            rec["ratio"] = s / p if s and p else None
            sc = rec.get("seqmix_compiled_tokens_per_s")
            rec["ratio_compiled"] = sc / p if sc and p else None
            rec.update(meta)
            took.append(time.time() - start)
            state["training"].append(rec)
            print(train_line(rec), flush=True)
            write_outputs(state)


def decode(model, states, logits, n):
    """n greedy tokens per sequence through SequenceModel.step (each the argmax of the
    previous logits [B, V]): the logits after the last."""
    for _ in range(n):
        logits = model.step(logits.argmax(-1), states)
    return logits


def seqmix_decode_rate(model, context, n, repeats, clock):
    """Tokens/s (all sequences') of n greedy steps of seqmix's own decoding after `context`
    [B, T]: each run starts from models.prefill's states (one forward, not timed); the
    median of `repeats` runs after one of warm-up."""
    times = []
    for r in range(repeats + 1):
        states, logits = models.prefill(model, context)
        clock.sync()
        ms = clock.once(lambda: decode(model, states, logits, n))
        if r:
            times.append(ms)
        del states, logits
    return context.shape[0] * n / (statistics.median(times) / 1e3)


def hf_generate_rate(lm, context, n, repeats, clock, **kwargs):
    """Tokens/s (all sequences') of transformers' greedy ``generate`` of n tokens after
    `context` [B, T]: the time of generate(n + 1) minus that of generate(1), which holds
    the prompt's pass and generate's setup; medians of `repeats` runs each, alternated,
    after one generate(2) of warm-up. None when the difference is not positive (the dry
    run's tiny sizes)."""
    mask = torch.ones_like(context)

    def gen(k):
        return lambda: lm.generate(context, attention_mask=mask, max_new_tokens=k,
                                   min_new_tokens=k, do_sample=False, pad_token_id=0,
                                   **kwargs)
    gen(2)()
    ms = clock.alternated({"long": (gen(n + 1), repeats), "one": (gen(1), repeats)}, 0)
    seconds = (ms["long"] - ms["one"]) / 1e3
    return context.shape[0] * n / seconds if seconds > 0 else None


def generate_rows(device, clock, size, budget, meta, state):
    """Section 5: one record per (model, context, batch), kind "generate": tokens/s of
    incremental decoding, seqmix's init_state / step against transformers' generate of the
    same model (SeqmixForCausalLM), and the Transformer's KV caches (seqmix's and GPT-2's in
    transformers)."""
    g = size["generate"]
    ours = models.seqmix_classes()["SequenceModel"]
    hf, hf_why = models.hf_module()
    n = g["new_tokens"]
    say(f"generation: d_model {g['d_model']}, {g['n_layers']} layers, bf16 autocast, "
        f"greedy; {n} new tokens after a context prefilled by one forward (not timed); "
        f"tokens/s of all sequences, medians of {g['repeats']}; "
        f"extractor-transformer up to context {g['max_context']['extractor-transformer']}"
        + ("" if hf else f"; transformers side not available: {hf_why}"))
    print(generate_header(), flush=True)
    took = []
    for B in g["batches"]:
        for ctx in g["contexts"]:
            kv = {}  # the Transformer's rates at this (context, batch), quoted by the others
            for preset in GENERATE_PRESETS:
                if ctx > g["max_context"].get(preset, ctx):
                    continue
                need = max(took) if took else size["first_generate_s"]
                if not budget.fits(f"{preset} generation at context {ctx}, batch {B}", need):
                    continue
                start = time.time()
                rec = generate_case(preset, ctx, B, device, clock, g, ours, hf, hf_why, kv)
                rec.update(meta)
                took.append(time.time() - start)
                state["generation"].append(rec)
                print(generate_line(rec), flush=True)
                write_outputs(state)


def generate_case(preset, ctx, B, device, clock, g, ours, hf, hf_why, kv):
    """The generation record of one (model, context, batch); `kv` gets (the Transformer)
    or gives (the others) the KV-cache rates of this context and batch."""
    n = g["new_tokens"]
    config = models.model_config(preset, max_len=ctx + n + 1, d_model=g["d_model"],
                                 n_layers=g["n_layers"], n_heads=g["n_heads"], d_ff=g["d_ff"])
    rec = {"kind": "generate", "model": preset, "context": ctx, "batch": B, "new_tokens": n,
           "d_model": g["d_model"], "n_layers": g["n_layers"], "precision": "bf16",
           "repeats": g["repeats"], "seqmix_tokens_per_s": None, "hf_tokens_per_s": None}
    model = lm = None
    try:
        torch.manual_seed(0)
        model = ours(config).to(device).eval()
        context = torch.randint(0, 256, (B, ctx), device=device)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            try:
                rec["seqmix_tokens_per_s"] = seqmix_decode_rate(model, context, n,
                                                                g["repeats"], clock)
            except Exception as e:  # noqa: BLE001 -- out of memory included
                rec["seqmix_error"] = f"{type(e).__name__}: {first_line(e)}"
            if hf is None:
                rec["hf_error"] = f"not available: {hf_why}"
            else:
                try:
                    lm = models.hf_causal_lm(hf, config, model.state_dict()).to(device).eval()
                    rec["hf_tokens_per_s"] = hf_generate_rate(lm, context, n, g["repeats"],
                                                              clock)
                except Exception as e:  # noqa: BLE001
                    rec["hf_error"] = f"{type(e).__name__}: {first_line(e)}"
                del lm
                lm = None
            if preset == "transformer":
                kv["seqmix"] = rec["seqmix_tokens_per_s"]
                kv["gpt2"], kv["gpt2_error"] = None, f"not available: {hf_why}"
                if hf is not None:
                    try:
                        lm = models.hf_gpt2(config).to(device).eval()
                        kv["gpt2"], kv["gpt2_error"] = hf_generate_rate(
                            lm, context, n, g["repeats"], clock, use_cache=True), None
                    except Exception as e:  # noqa: BLE001
                        kv["gpt2_error"] = f"{type(e).__name__}: {first_line(e)}"
    except Exception as e:  # noqa: BLE001 -- the case fails, the section goes on
        rec["error"] = f"{type(e).__name__}: {first_line(e)}"
    finally:
        del model, lm
        empty_device(clock)
    rec["kv_cache_tokens_per_s"] = kv.get("seqmix")
    rec["hf_kv_cache_tokens_per_s"] = kv.get("gpt2")
    if kv.get("gpt2_error"):
        rec["hf_kv_cache_error"] = kv["gpt2_error"]
    for key in ("seqmix_error", "hf_error", "error"):
        if key in rec:
            print(f"bench: {preset} context {ctx} batch {B}: {key}: {rec[key]}", flush=True)
    return rec


def kilo(x, width):
    return f"{x / 1e3:{width}.1f}" if x is not None else f"{'-':>{width}}"


def train_header():
    return (f"{'model':11} {'L':>5} {'seqmix':>6} {'sx+c':>6} {'comp':>6} {'ratio':>5} "
            f"{'eager':>6} {'GiBsx':>5} {'GiBpt':>5} {'kern sx':>7} {'kern pt':>7}")


def train_line(r):
    def count(x):
        return "-" if x is None else str(x)
    return (f"{r['model']:11} {r['L']:5d} {kilo(r['seqmix_tokens_per_s'], 6)} "
            f"{kilo(r.get('seqmix_compiled_tokens_per_s'), 6)} "
            f"{kilo(r['pytorch_tokens_per_s'], 6)} {fmt(r['ratio'], 5, 2)} "
            f"{kilo(r.get('pytorch_eager_tokens_per_s'), 6)} {fmt(r['seqmix_peak_gib'], 5, 2)} "
            f"{fmt(r['pytorch_peak_gib'], 5, 2)} {count(r['seqmix_kernels_per_step']):>7} "
            f"{count(r['pytorch_kernels_per_step']):>7}")


def generate_header():
    return (f"{'model':21} {'ctx':>6} {'B':>2} {'seqmix':>8} {'hf':>8} {'x hf':>6} "
            f"{'kv':>8} {'x kv':>5} {'gpt2 kv':>8}")


def generate_line(r):
    s, h, k = r["seqmix_tokens_per_s"], r["hf_tokens_per_s"], r["kv_cache_tokens_per_s"]
    return (f"{r['model']:21} {r['context']:6d} {r['batch']:2d} {fmt(s, 8, 0)} {fmt(h, 8, 0)} "
            f"{fmt(s / h if s and h else None, 6, 2)} {fmt(k, 8, 0)} "
            f"{fmt(s / k if s and k else None, 5, 2)} {fmt(r['hf_kv_cache_tokens_per_s'], 8, 0)}")


def write_outputs(state):
    """bench.json and bench-gpu.jsonl (the scan, training and generation records, in that
    order), rewritten whole after every case, so that a run cut short leaves what it
    measured."""
    out = state["out"]
    info = dict(state["info"], elapsed_s=time.time() - state["start"],
                scans=state["records"], checks=state["checks"], training=state["training"],
                generation=state["generation"], skipped=state["budget"].skipped,
                errors=state["errors"])
    with open(os.path.join(out, "bench.json.tmp"), "w") as f:
        json.dump(info, f, indent=1)
    os.replace(os.path.join(out, "bench.json.tmp"), os.path.join(out, "bench.json"))
    with open(os.path.join(out, "bench-gpu.jsonl.tmp"), "w") as f:
        for r in state["records"] + state["training"] + state["generation"]:
            f.write(json.dumps(r) + "\n")
    os.replace(os.path.join(out, "bench-gpu.jsonl.tmp"), os.path.join(out, "bench-gpu.jsonl"))


def print_tables(state):
    """The scan table, then (after a line gpu-check.sh finds) training, generation, checks,
    skips."""
    info = state["info"]
    print()
    print(f"==== bench: {info['card']} (driver {info['driver']}), PyTorch {info['torch']} "
          f"(CUDA {info['cuda']}); copy {info['copy_tb_per_s']:.2f} TB/s (read + written); "
          f"{time.time() - state['start']:.0f} s of a {info['budget_s']:.0f} s budget")
    print(header_line())
    for r in state["records"]:
        print(record_line(r))
    print("==== bench: training, checks, skipped")
    say("training: tokens/s in thousands (comp, eager: the user's plain-PyTorch model, "
        "compiled and not; sx+c: seqmix's modules compiled); ratio = seqmix / comp; peak GiB and kernels per step of seqmix (sx) and "
        "compiled (pt)" + ("" if info["device"] == "cuda" else
                           "; cpu dry run: no peak, operators for kernels"))
    print(train_header())
    for r in state["training"]:
        print(train_line(r))
    blocks = [r for r in state["training"] if r.get("seqmix_kernels_per_block")]
    if blocks:
        say("training: kernels per block, forward + backward (layer order), seqmix | "
            "eager PyTorch:")
        for r in blocks:
            eager = r.get("pytorch_eager_kernels_per_block")
            print(f"  {r['model']:11} {r['L']:6d} {r['seqmix_kernels_per_block']} | "
                  f"{eager if eager else '-'}")
    if state["generation"]:
        say("generation: tokens/s (all sequences) of seqmix's step decoding; hf: "
            "transformers' generate of the same model (no cache); kv: seqmix's Transformer "
            "(KV cache); gpt2 kv: transformers' GPT-2 with its cache")
        print(generate_header())
        for r in state["generation"]:
            print(generate_line(r))
    for c in state["checks"]:
        verdict = {True: "ok", False: "FAIL", None: "not available"}[c["ok"]]
        print(f"bench-check: {c['what']}: {c['detail']} -- {verdict}")
    for s in state["budget"].skipped:
        print(f"bench: skipped (budget): {s}")
    for e in state["errors"]:
        print(f"bench: error: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="", help="libseqmix_ops.so (default: seqmix.nn)")
    parser.add_argument("--out", default=".")
    parser.add_argument("--budget", type=float, default=240, help="seconds for all cases")
    parser.add_argument("--dry-run", action="store_true",
                        help="every section at tiny shapes on the CPU (tests this script)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend of the baselines (the CPU test uses "
                             "'eager': dynamo alone, no code generation)")
    parser.add_argument("--command", default="",
                        help="the command recorded with the results (default: this one)")
    args = parser.parse_args()
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA device (torch.cuda.is_available() is false); "
                 "--dry-run runs it on the CPU at tiny shapes")
    models.load_ops(args.lib)
    device = torch.device("cpu" if args.dry_run else "cuda")
    size = SIZES["dry" if args.dry_run else "gpu"]
    clock = Clock(device)
    # One compiled graph per (op, L, dtype) of a function, more than dynamo's default limit
    # of recompilations per function.
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    budget = Budget(args.budget)
    meta = machine(device, args.dry_run)
    meta["command"] = args.command or " ".join([os.path.basename(sys.executable)] + sys.argv)
    meta["dry_run"] = args.dry_run
    state = {"out": args.out, "start": time.time(), "budget": budget, "records": [],
             "checks": [], "training": [], "generation": [], "errors": [],
             "info": dict(meta, device=str(device), budget_s=args.budget)}
    print(f"bench: {meta['card']} (driver {meta['driver']}), PyTorch {meta['torch']}, CUDA "
          f"{meta['cuda']}, {meta['date']}, budget {args.budget:.0f} s", flush=True)
    rate = copy_rate(device, clock, size["copy_elems"])
    state["info"]["copy_tb_per_s"] = rate / 1e12
    print(f"bench: copy {rate / 1e12:.3f} TB/s (read + written)", flush=True)
    write_outputs(state)

    sections = (
        ("scans", lambda: scan_rows(device, clock, size, rate, budget, meta, state,
                                    args.compile_backend)),
        ("fallback check", lambda: fallback_check(device, clock, size, state)),
        ("CUDA graph check", lambda: graph_check(device, clock, size, state)),
        ("training", lambda: model_rows(device, clock, size, budget, meta, state,
                                        args.compile_backend, size["generate_reserve_s"])),
        ("generation", lambda: generate_rows(device, clock, size, budget, meta, state)),
    )
    for name, run in sections:
        try:
            run()
        except Exception as e:  # noqa: BLE001 -- one section's crash does not end the others
            state["errors"].append(f"{name}: {type(e).__name__}: {e}")
            print(f"bench: {name} failed: {type(e).__name__}: {e}", flush=True)
    write_outputs(state)
    print_tables(state)
    sys.exit(1 if any(c["ok"] is False for c in state["checks"]) else 0)


if __name__ == "__main__":
    main()
