"""seqmix against the PyTorch code a user writes today: eager, torch.compile'd, and seqmix.

Run from the source tree (``PYTHONPATH=build/python .venv/bin/python -m
seqmix.bench_anchors --help``). Everything runs in one process, on the CPU, with
``torch.set_num_threads(os.cpu_count())`` for every side, in the PyTorch the package runs
on. Three sides are timed for every cell:

``eager``
    plain PyTorch as a user writes it, softmax attention through
    ``torch.nn.functional.scaled_dot_product_attention``;
``compiled``
    the same PyTorch code under ``torch.compile`` (inductor, CPU, default mode; a fresh
    compilation per cell after ``torch._dynamo.reset()``, so every cell gets static shapes);
``seqmix``
    seqmix's ops (``seqmix.ops``) or models (``seqmix.build``).

Cases
-----
``ops`` (``--lengths``, default L = 1024, 4096; B = 4, D = 512; fp32): one run is the
forward and the backward of ``y.sum()``, gradients reaching every input.

* ``aib``: ``seqmix.ops.aib_scan(a, v, w, direction='causal', weights='prefix_exp')``
  against Weird-Net's Algorithm 1 written literally in PyTorch (``seqmix.bench``'s
  ``aib_scan_torch``); a, v [B, L, D], w [ceil(log2 L), D].
* ``ces``: ``seqmix.ops.ces_scan(x, ces_coefficients(...))`` (coefficients computed inside
  the timed run) against the ETSMLP authors' FFT formulation (``seqmix.bench``'s
  ``ces_scan_torch``); x [B, L, D], D channels.
* ``attention``: ``seqmix.ops.attention(q, k, v, direction='causal')`` against
  ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``; q, k, v [B, D/64, L, 64].

``models`` (``--shapes``, default (L, B, d_model) = (256, 32, 128), (1024, 8, 256),
(4096, 2, 256); ``--precisions`` fp32 and bf16): one run is one training step on a fixed
random batch of byte tokens (vocabulary 256): ``zero_grad``, forward, cross-entropy of the
next token (computed in float32 outside autocast, as seqmix's trainer does), backward,
``torch.optim.AdamW`` step (default hyper-parameters, the same on every side). bf16 runs
the forward under ``torch.autocast('cpu', dtype=torch.bfloat16)`` with float32 master
weights. Models, 4 layers, d_ff = 4 d_model, heads of 64 (d_model / 64 heads):

* ``weird-net`` (Structure B: AIB attention in layers 1 and 3, causal softmax
  self-attention in layers 2 and 4), ``weird-net-a`` (Structure A: AIB attention in every
  layer) and ``transformer`` (GPT-2 style).
* seqmix side: ``seqmix.build(preset, "mini", d_model=..., n_layers=4, n_heads=..., d_ff=...,
  max_len=L, vocab_size=256, dropout=0.0)``, its forward giving the logits.
* PyTorch side (``TorchLM`` below), as a user would write it: ``nn.Embedding`` plus learned
  positions, pre-norm blocks (LayerNorm -> mixer -> residual, LayerNorm -> Linear-GELU-Linear
  -> residual), a final LayerNorm and the LM head tied to the embedding. The AIB mixer is
  Linear W_A, W_V (no bias), Algorithm 1, Linear W_O (``seqmix.bench.AIBAttentionTorch``);
  attention is one Linear for q, k, v, SDPA with ``is_causal=True`` and a Linear out. Its
  parameters carry seqmix's names and are loaded from the seqmix model, so every side
  starts from the same weights. The compiled side is ``torch.compile(model)`` (the optimizer
  step stays eager, as it does on the other sides). Before the first models cell, each
  model is built at a small size (L = 64, B = 2, d_model = 64) on both sides: the parameter
  counts are printed and the losses of one forward from the same weights compared.

Method
------
Per cell, each side first runs once (for ``compiled`` this includes compilation; the
"compile s" column is that first run minus the side's median run) and then ``--warmup``
more times, untimed. Then ``--reps`` rounds (default 5) run the sides round-robin (eager,
compiled, seqmix, eager, compiled, seqmix, ...), ``gc.collect()`` before each run, outside
the timer. Each side's number is the median of its runs' wall times, and the ratios
eager/seqmix and compiled/seqmix are taken between medians of the same cell. A side that
raises (out of memory, a failed compilation) has its error text recorded in the cell and
the others go on. Each cell also records ``other_cpu_share``, the share of the machine's
CPU time that other processes used during its timed rounds (from /proc/stat minus this
process's own CPU time); rows where it exceeds 5% carry a note.

Targets
-------
* ops: the AIB op at least 10x faster than compiled Algorithm 1 at L = 4096.
* models: seqmix trains every model at every shape at least 1.3x faster than the compiled
  PyTorch model of the same precision, and at least 2x at L = 4096.

Output: an 80-column table on stdout; with ``--json FILE``, one JSON object per measured
cell appended to FILE (flushed and synced when the cell ends). ``--resume FILE`` skips the
cells already in FILE (matched by case, name, shape and precision, whatever their outcome)
and shows them in the table, so an interrupted run continues where it stopped (``--json``
defaults to the ``--resume`` file).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import resource
import statistics
import sys
import textwrap
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bench import (MAX_LAMBDA, AIBAttentionTorch, aib_num_levels, aib_scan_torch,
                    ces_parameters, ces_scan_torch, cpu_model, positive_int, randn)

SIDES = ("eager", "compiled", "seqmix")
CASES = ("ops", "models")
OPS = ("aib", "ces", "attention")
MODELS = ("weird-net", "weird-net-a", "transformer")
PRECISIONS = ("fp32", "bf16")
DEFAULT_LENGTHS = (1024, 4096)
DEFAULT_SHAPES = ((256, 32, 128), (1024, 8, 256), (4096, 2, 256))
OPS_BATCH, OPS_D_MODEL = 4, 512
SMOKE_SHAPE = (64, 2, 64)  # L, B, d_model; the ops use the same L, B and D
HEAD_WIDTH = 64
N_LAYERS = 4
VOCAB = 256
LONG_L = 4096  # the length the stricter targets refer to
TARGET_OP = 10.0  # aib: compiled / seqmix at L = LONG_L
TARGET_MODEL = 1.3  # every model cell: compiled / seqmix
TARGET_MODEL_LONG = 2.0  # model cells at L = LONG_L
ERROR_CHARS = 2000  # error text kept in a cell
OTHER_LOAD_NOTE = 0.05  # a row notes other processes' CPU share above this


# --------------------------------------------------------------------------------------
# The PyTorch models, as a user writes them. Parameter names follow seqmix's (tok_emb,
# pos_emb, blocks.i.{norm_1, mixer, norm_2, ffn}, norm_f) so one state dict fits both.


class SelfAttentionSDPA(nn.Module):
    """Causal multi-head self-attention: q, k, v from one Linear, SDPA, Linear out."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, D // self.n_heads).permute(
            2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, L, D))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.gelu(self.w_1(x)))


class Block(nn.Module):
    """Pre-norm: x + mixer(LN(x)), then h + FFN(LN(h))."""

    def __init__(self, mixer: nn.Module, d_model: int, d_ff: int):
        super().__init__()
        self.norm_1 = nn.LayerNorm(d_model)
        self.mixer = mixer
        self.norm_2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.mixer(self.norm_1(x))
        return h + self.ffn(self.norm_2(h))


class TorchLM(nn.Module):
    """Token embedding + learned positions, blocks whose mixers cycle through `mixers`
    ("aib" or "attention"), final LayerNorm, LM head tied to the token embedding."""

    def __init__(self, mixers: Sequence[str], vocab: int, d_model: int, n_layers: int,
                 n_heads: int, d_ff: int, max_len: int):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Parameter(torch.randn(max_len, d_model) * d_model ** -0.5)
        blocks = []
        for i in range(n_layers):
            kind = mixers[i % len(mixers)]
            mixer = (AIBAttentionTorch(d_model, max_len) if kind == "aib"
                     else SelfAttentionSDPA(d_model, n_heads))
            blocks.append(Block(mixer, d_model, d_ff))
        self.blocks = nn.ModuleList(blocks)
        self.norm_f = nn.LayerNorm(d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_emb(tokens) + self.pos_emb[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.tok_emb.weight)


MODEL_MIXERS = {"weird-net": ("aib", "attention"), "weird-net-a": ("aib",),
                "transformer": ("attention",)}


def model_dims(d_model: int) -> Dict[str, int]:
    return {"d_model": d_model, "n_layers": N_LAYERS, "n_heads": d_model // HEAD_WIDTH,
            "d_ff": 4 * d_model}


def build_seqmix(name: str, L: int, d_model: int, seed: int):
    import seqmix

    return seqmix.build(name, "mini", seed=seed, max_len=L, vocab_size=VOCAB, dropout=0.0,
                        **model_dims(d_model))


def build_torch(name: str, L: int, d_model: int, state: Dict[str, torch.Tensor]) -> TorchLM:
    dims = model_dims(d_model)
    model = TorchLM(MODEL_MIXERS[name], VOCAB, dims["d_model"], dims["n_layers"],
                    dims["n_heads"], dims["d_ff"], L)
    model.load_state_dict(state)  # strict: same names and shapes as the seqmix model
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------
# One run of each kind.


def autocast(precision: str):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


def lm_loss(model: Callable, batch: torch.Tensor, precision: str) -> torch.Tensor:
    """Next-token cross-entropy of batch [B, L + 1]: forward under autocast, loss in fp32."""
    with autocast(precision):
        logits = model(batch[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                           batch[:, 1:].reshape(-1))


def train_step_fn(model: Callable, params, batch: torch.Tensor,
                  precision: str) -> Callable[[], None]:
    opt = torch.optim.AdamW(params)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model, batch, precision)
        loss.backward()
        opt.step()

    return step


def fwd_bwd_fn(fn: Callable[[], torch.Tensor], leaves: List[torch.Tensor]) -> Callable[[], None]:
    def run():
        for t in leaves:
            t.grad = None
        fn().sum().backward()

    return run


def describe(e: BaseException) -> str:
    text = "{}: {}".format(type(e).__name__, str(e).strip())
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + " [...]"


# --------------------------------------------------------------------------------------
# Cells: the runners of each side, then the alternated measurement.


def op_runners(op: str, L: int, B: int, D: int, seed: int,
               with_compile: bool) -> Tuple[Dict[str, Callable[[], None]], Dict[str, str]]:
    """Runners (fwd + bwd of y.sum()) of the eager, compiled and seqmix sides of one op."""
    import seqmix.ops

    gen = torch.Generator().manual_seed(seed)
    if op == "aib":
        a, v = randn((B, L, D), gen, 2.0), randn((B, L, D), gen)
        w = randn((aib_num_levels(L), D), gen, 0.3)
        leaves = [a, v, w]
        torch_fn = aib_scan_torch
        args = (a, v, w)

        def seqmix_fn():
            return seqmix.ops.aib_scan(a, v, w, direction="causal", weights="prefix_exp")
    elif op == "ces":
        x = randn((B, L, D), gen)
        params = ces_parameters(D, gen)
        leaves = [x] + params
        torch_fn = ces_scan_torch
        args = (x, *params)

        def seqmix_fn():
            coef = seqmix.ops.ces_coefficients(*params, max_lambda=MAX_LAMBDA, normalize=False)
            return seqmix.ops.ces_scan(x, coef, direction="causal")
    elif op == "attention":
        shape = (B, D // HEAD_WIDTH, L, HEAD_WIDTH)
        q, k, v = randn(shape, gen), randn(shape, gen), randn(shape, gen)
        leaves = [q, k, v]

        def torch_fn(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        args = (q, k, v)

        def seqmix_fn():
            return seqmix.ops.attention(q, k, v, direction="causal")
    else:
        raise ValueError(op)
    runners = {"eager": fwd_bwd_fn(lambda: torch_fn(*args), leaves)}
    errors: Dict[str, str] = {}
    if with_compile:
        try:
            compiled = torch.compile(torch_fn)
            runners["compiled"] = fwd_bwd_fn(lambda: compiled(*args), leaves)
        except Exception as e:  # torch.compile itself is lazy; this is for odd setups
            errors["compiled"] = describe(e)
    runners["seqmix"] = fwd_bwd_fn(seqmix_fn, leaves)
    return runners, errors


def model_runners(name: str, L: int, B: int, d_model: int, precision: str, seed: int,
                  with_compile: bool) -> Tuple[Dict[str, Callable[[], None]], Dict[str, str]]:
    """Training-step runners of the three sides of one model, all from the same weights and
    on the same batch."""
    batch = torch.randint(0, VOCAB, (B, L + 1), generator=torch.Generator().manual_seed(seed))
    sx = build_seqmix(name, L, d_model, seed)
    state = {k: t.detach().clone() for k, t in sx.state_dict().items()}
    runners: Dict[str, Callable[[], None]] = {}
    errors: Dict[str, str] = {}
    try:
        eager = build_torch(name, L, d_model, state)
        runners["eager"] = train_step_fn(eager, eager.parameters(), batch, precision)
    except Exception as e:
        errors["eager"] = describe(e)
    if with_compile:
        try:
            model = build_torch(name, L, d_model, state)
            compiled = torch.compile(model)
            runners["compiled"] = train_step_fn(compiled, model.parameters(), batch, precision)
        except Exception as e:
            errors["compiled"] = describe(e)
    runners["seqmix"] = train_step_fn(sx, sx.parameters(), batch, precision)
    return runners, errors


def cpu_seconds() -> Tuple[float, float]:
    """(CPU seconds the whole machine has been busy, CPU seconds of this process) so far."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        # user, nice, system, idle, iowait, irq, softirq, steal
        busy = (sum(ticks[:3]) + sum(ticks[5:8])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        busy = float("nan")
    own = resource.getrusage(resource.RUSAGE_SELF)
    return busy, own.ru_utime + own.ru_stime


def measure(runners: Dict[str, Callable[[], None]], errors: Dict[str, str], reps: int,
            warmup: int, progress: Callable[[str], None]) -> Tuple[Dict[str, Dict], float]:
    """First run and warm-up of each side, then `reps` round-robin rounds. Returns, per
    side, first_s, times_ms, median_ms, or error; and the share of the machine's CPU time
    that other processes used during the rounds (0 on an idle machine)."""
    out: Dict[str, Dict] = {side: {"error": err} for side, err in errors.items()}
    active = []
    for side, run in runners.items():
        progress("    {} first run{} ...".format(
            side, " (compiles)" if side == "compiled" else ""))
        try:
            gc.collect()
            t0 = time.perf_counter()
            run()
            first = time.perf_counter() - t0
            for _ in range(warmup):
                run()
        except Exception as e:
            out[side] = {"error": describe(e)}
            progress("    {} failed: {}".format(side, out[side]["error"].splitlines()[0]))
            continue
        out[side] = {"first_s": first, "times_ms": []}
        active.append(side)
    wall0, (busy0, own0) = time.perf_counter(), cpu_seconds()
    for r in range(reps):
        for side in list(active):
            try:
                gc.collect()
                t0 = time.perf_counter()
                runners[side]()
                out[side]["times_ms"].append((time.perf_counter() - t0) * 1e3)
            except Exception as e:
                out[side]["error"] = describe(e)
                active.remove(side)
        progress("    round {}/{}: {}".format(r + 1, reps, ", ".join(
            "{} {}".format(s, fmt_ms(out[s]["times_ms"][-1])) for s in active)))
    wall, (busy1, own1) = time.perf_counter() - wall0, cpu_seconds()
    other = ((busy1 - busy0) - (own1 - own0)) / (wall * (os.cpu_count() or 1)) if wall > 0 \
        else 0.0
    for side in active:
        out[side]["median_ms"] = statistics.median(out[side]["times_ms"])
    if "median_ms" in out.get("compiled", {}):
        c = out["compiled"]
        c["compile_s"] = max(0.0, c["first_s"] - c["median_ms"] / 1e3)
    return {side: out[side] for side in SIDES if side in out}, max(0.0, other)


def finish_cell(cell: Dict) -> Dict:
    """Ratios and the target verdict of a measured cell (in place)."""
    sides = cell["sides"]
    sx = sides.get("seqmix", {}).get("median_ms")
    ratios = {}
    for side in ("eager", "compiled"):
        t = sides.get(side, {}).get("median_ms")
        if t is not None and sx:
            ratios[side + "/seqmix"] = t / sx
    cell["ratios"] = ratios
    target = cell_target(cell)
    if target is not None:
        value = ratios.get("compiled/seqmix")
        cell["target"] = {"ratio": "compiled/seqmix", "at_least": target,
                          "status": ("not measured" if value is None
                                     else "PASS" if value >= target else "MISS")}
    return cell


def cell_target(cell: Dict) -> Optional[float]:
    if cell["case"] == "ops":
        return TARGET_OP if cell["name"] == "aib" and cell["L"] == LONG_L else None
    return TARGET_MODEL_LONG if cell["L"] >= LONG_L else TARGET_MODEL


def cell_key(cell: Dict) -> Tuple:
    return (cell["case"], cell["name"], cell["L"], cell["B"], cell["D"], cell["precision"])


# --------------------------------------------------------------------------------------
# Output.


def fmt_ms(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return "{:.0f}".format(x) if x >= 1000 else "{:.1f}".format(x) if x >= 10 else \
        "{:.2f}".format(x)


def fmt_ratio(x: Optional[float]) -> str:
    return "-" if x is None else "{:.1f}x".format(x) if x < 100 else "{:.0f}x".format(x)


ROW = "{:<11} {:>10} {:<4} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>4}"


def table_header(title: str) -> List[str]:
    return [title,
            ROW.format("", "", "", "eager", "compiled", "seqmix", "eager/", "comp/",
                       "comp.", ""),
            ROW.format("name", "L/B/D", "prec", "ms", "ms", "ms", "seqmx", "seqmx",
                       "s", "tgt"),
            "-" * 80]


def table_row(cell: Dict) -> List[str]:
    s, r = cell["sides"], cell["ratios"]
    status = cell.get("target", {}).get("status", "")
    status = {"PASS": "ok", "MISS": "MISS", "not measured": "n/a"}.get(status, "")
    compile_s = s.get("compiled", {}).get("compile_s")

    def t(side):
        d = s.get(side, {})
        return "ERR" if "error" in d and "median_ms" not in d else fmt_ms(d.get("median_ms"))

    lines = [ROW.format(cell["name"], "{}/{}/{}".format(cell["L"], cell["B"], cell["D"]),
                        cell["precision"], t("eager"), t("compiled"), t("seqmix"),
                        fmt_ratio(r.get("eager/seqmix")), fmt_ratio(r.get("compiled/seqmix")),
                        "-" if compile_s is None else "{:.0f}".format(compile_s), status)]
    for side in SIDES:
        err = s.get(side, {}).get("error")
        if err:
            first = err.splitlines()[0] if err.splitlines() else err
            lines += textwrap.wrap("{} error: {}".format(side, first), 78,
                                   initial_indent="  ", subsequent_indent="    ",
                                   max_lines=3, placeholder=" [...]")
    other = cell.get("other_cpu_share")
    if other is not None and other > OTHER_LOAD_NOTE:
        lines.append("  note: other processes used {:.0f}% of the CPU time during the timed "
                     "runs".format(100 * other))
    return lines


class Output:
    def __init__(self, json_path: Optional[str], quiet: bool):
        self.json_path = json_path
        self.quiet = quiet

    def text(self, line: str = "") -> None:
        print(line, flush=True)

    def progress(self, line: str) -> None:
        if not self.quiet:
            print(line, file=sys.stderr, flush=True)

    def cell(self, cell: Dict) -> None:
        if not self.json_path:
            return
        with open(self.json_path, "a") as f:
            f.write(json.dumps(cell) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_resume(path: str) -> Dict[Tuple, Dict]:
    done: Dict[Tuple, Dict] = {}
    if not os.path.exists(path):
        return done
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                cell = json.loads(line)
                done[cell_key(cell)] = cell
            except (ValueError, KeyError, TypeError):
                # A line cut short by a kill: that cell is measured again.
                print("note: {} line {} is not a cell; ignored".format(path, n),
                      file=sys.stderr)
    return done


def environment() -> Dict:
    import seqmix

    return {"torch": torch.__version__, "seqmix": getattr(seqmix, "__version__", "?"),
            "python": platform.python_version(), "threads": torch.get_num_threads(),
            "nproc": os.cpu_count(), "cpu": cpu_model()}


# --------------------------------------------------------------------------------------
# The parameter-count check.


def parameter_check(models: Sequence[str], seed: int, out: Output) -> None:
    L, B, D = SMOKE_SHAPE
    out.text("Parameter check at L={} B={} d_model={} ({} head(s)), the same weights on "
             "both sides:".format(L, B, D, model_dims(D)["n_heads"]))
    batch = torch.randint(0, VOCAB, (B, L + 1), generator=torch.Generator().manual_seed(seed))
    for name in models:
        try:
            sx = build_seqmix(name, L, D, seed)
            tm = build_torch(name, L, D, {k: t.detach().clone()
                                          for k, t in sx.state_dict().items()})
            with torch.no_grad():
                ls, lt = float(lm_loss(sx, batch, "fp32")), float(lm_loss(tm, batch, "fp32"))
            ns, nt = count_parameters(sx), count_parameters(tm)
            out.text("  {:<11} seqmix {:>9,} params, PyTorch {:>9,} params ({}); "
                     "loss {:.5f} vs {:.5f}".format(name, ns, nt,
                                                   "same" if ns == nt else "DIFFERENT", ls, lt))
        except Exception as e:
            out.text("  {:<11} check failed: {}".format(name, describe(e)))
    out.text()


# --------------------------------------------------------------------------------------
# The run.


def run(args) -> int:
    out = Output(args.json, args.quiet)
    done = read_resume(args.resume) if args.resume else {}
    env = environment()
    out.text("seqmix.bench_anchors: eager PyTorch, torch.compile (inductor) and seqmix, CPU")
    out.text("torch {}, seqmix {}, Python {}, threads {} (nproc {})".format(
        env["torch"], env["seqmix"], env["python"], env["threads"], env["nproc"]))
    out.text("CPU: {}".format(env["cpu"]))
    out.text("median of {} alternated runs per side after 1 + {} warm-up run(s)".format(
        args.reps, args.warmup))
    out.text("compiled side: {}".format("off (--no-compile)" if args.no_compile else
                                        "torch.compile(), default mode, inductor CPU"))
    if args.resume:
        out.text("resuming from {}: {} cell(s) already measured there".format(
            args.resume, len(done)))
    out.text()
    cells: List[Dict] = []

    def one_cell(cell: Dict, make: Callable) -> None:
        key = cell_key(cell)
        if key in done:
            old = dict(done[key], resumed=True)
            cells.append(old)
            for line in table_row(old):
                out.text(line)
            return
        out.progress("  {} {} L={} B={} D={} {} ...".format(
            cell["case"], cell["name"], cell["L"], cell["B"], cell["D"], cell["precision"]))
        torch._dynamo.reset()
        gc.collect()
        t0 = time.perf_counter()
        try:
            runners, errors = make()
            cell["sides"], cell["other_cpu_share"] = measure(runners, errors, args.reps,
                                                             args.warmup, out.progress)
        except Exception as e:  # setup failed (e.g. seqmix refused the shape)
            cell["sides"] = {"seqmix": {"error": describe(e)}}
        finally:
            runners = None
            torch._dynamo.reset()
            gc.collect()
        cell.update(reps=args.reps, warmup=args.warmup, seconds=time.perf_counter() - t0,
                    when=datetime.datetime.now().isoformat(timespec="seconds"), **env)
        finish_cell(cell)
        cells.append(cell)
        out.cell(cell)
        for line in table_row(cell):
            out.text(line)

    if "ops" in args.cases:
        B, D = args.ops_batch, args.ops_d_model
        for line in table_header("OPS: forward + backward of y.sum(), fp32, B={} D={} "
                                 "(attention: {} head(s) of {})".format(
                                     B, D, D // HEAD_WIDTH, HEAD_WIDTH)):
            out.text(line)
        for L in args.lengths:
            for op in args.ops:
                cell = {"case": "ops", "name": op, "L": L, "B": B, "D": D,
                        "precision": "fp32"}
                one_cell(cell, lambda: op_runners(op, L, B, D, args.seed,
                                                  not args.no_compile))
        out.text()
    if "models" in args.cases:
        parameter_check(args.models, args.seed, out)
        for line in table_header("MODELS: one training step (fwd, CE, bwd, AdamW), "
                                 "{} layers, d_ff 4D, heads of {}".format(
                                     N_LAYERS, HEAD_WIDTH)):
            out.text(line)
        for L, B, D in args.shapes:
            for precision in args.precisions:
                for name in args.models:
                    cell = {"case": "models", "name": name, "L": L, "B": B, "D": D,
                            "precision": precision}
                    one_cell(cell, lambda: model_runners(name, L, B, D, precision, args.seed,
                                                         not args.no_compile))
        out.text()
    report_targets(cells, out)
    return 0


def report_targets(cells: List[Dict], out: Output) -> None:
    out.text("Targets (compiled PyTorch time / seqmix time, same cell):")
    rows = [c for c in cells if "target" in c]
    if not rows:
        out.text("  none of the target cells was run")
        return
    for case, label in (("ops", "AIB op at L={}: >= {:.0f}x".format(LONG_L, TARGET_OP)),
                        ("models", "models: >= {}x, >= {:.0f}x at L={}".format(
                            TARGET_MODEL, TARGET_MODEL_LONG, LONG_L))):
        these = [c for c in rows if c["case"] == case]
        if not these:
            continue
        counts = {k: sum(c["target"]["status"] == k for c in these)
                  for k in ("PASS", "MISS", "not measured")}
        out.text("  {:<38} {} pass, {} miss, {} not measured".format(
            label, counts["PASS"], counts["MISS"], counts["not measured"]))
        for c in these:
            if c["target"]["status"] != "PASS":
                out.text("    {} {} L={} B={} D={} {}: {} (compiled/seqmix {})".format(
                    c["target"]["status"], c["name"], c["L"], c["B"], c["D"],
                    c["precision"], ">= {}x".format(c["target"]["at_least"]),
                    fmt_ratio(c["ratios"].get("compiled/seqmix"))))


# --------------------------------------------------------------------------------------
# Command line.


def nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer >= 0, got '{}'".format(text))
    if value < 0:
        raise argparse.ArgumentTypeError("expected an integer >= 0, got {}".format(value))
    return value


def choice_list(choices: Sequence[str]) -> Callable[[str], List[str]]:
    def parse(text: str) -> List[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list of: {}".format(
                ", ".join(choices)))
        bad = [t for t in items if t not in choices]
        if bad:
            raise argparse.ArgumentTypeError("unknown {} (expected a comma-separated list "
                                             "of: {})".format(", ".join(repr(b) for b in bad),
                                                              ", ".join(choices)))
        return [c for c in choices if c in items]  # canonical order, no repeats

    return parse


def length_list(text: str) -> List[int]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected comma-separated lengths, e.g. 1024,4096")
    return list(dict.fromkeys(positive_int(t) for t in items))


def shape_list(text: str) -> List[Tuple[int, int, int]]:
    shapes = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        parts = item.lower().split("x")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(
                "shape '{}': expected LxBxD (sequence length x batch x d_model), e.g. "
                "1024x8x256".format(item))
        try:
            L, B, D = (positive_int(p) for p in parts)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError("shape '{}': {}".format(item, e))
        if D % HEAD_WIDTH:
            raise argparse.ArgumentTypeError(
                "shape '{}': d_model {} is not a multiple of the head width {}".format(
                    item, D, HEAD_WIDTH))
        shapes.append((L, B, D))
    if not shapes:
        raise argparse.ArgumentTypeError("expected comma-separated LxBxD shapes")
    return list(dict.fromkeys(shapes))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m seqmix.bench_anchors",
        description="Times seqmix against eager PyTorch and torch.compile'd PyTorch in one "
                    "process on the CPU: ops (forward + backward) and whole-model training "
                    "steps, median of alternated runs. See the module docstring.",
        epilog="Targets: AIB op >= {:.0f}x faster than compiled Algorithm 1 at L={}; every "
               "model cell >= {}x faster than the compiled PyTorch model (>= {:.0f}x at "
               "L={}).".format(TARGET_OP, LONG_L, TARGET_MODEL, TARGET_MODEL_LONG, LONG_L))
    p.add_argument("--cases", type=choice_list(CASES), default=list(CASES),
                   help="comma-separated, of: ops, models (default: both)")
    p.add_argument("--ops", type=choice_list(OPS), default=list(OPS),
                   help="ops to time, of: aib, ces, attention (default: all)")
    p.add_argument("--lengths", type=length_list, default=None,
                   help="ops: comma-separated sequence lengths (default: 1024,4096)")
    p.add_argument("--models", type=choice_list(MODELS), default=list(MODELS),
                   help="comma-separated, of: weird-net, weird-net-a, transformer "
                        "(default: all)")
    p.add_argument("--precisions", type=choice_list(PRECISIONS), default=list(PRECISIONS),
                   help="models: comma-separated, of: fp32, bf16 (default: both)")
    p.add_argument("--shapes", type=shape_list, default=None,
                   help="models: comma-separated LxBxD (sequence length x batch x d_model, "
                        "d_model a multiple of 64) (default: 256x32x128,1024x8x256,"
                        "4096x2x256)")
    p.add_argument("--reps", type=positive_int, default=None,
                   help="alternated timed runs per side, median reported (default: 5; "
                        "--smoke: 2)")
    p.add_argument("--warmup", type=nonnegative_int, default=1,
                   help="untimed runs per side after the first (compiling) one "
                        "(default: %(default)s)")
    p.add_argument("--no-compile", action="store_true",
                   help="leave out the torch.compile side")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes to check every code path: L={}, B={}, D={} for ops and "
                        "models, reps 2".format(*SMOKE_SHAPE))
    p.add_argument("--json", metavar="FILE", default=None,
                   help="append one JSON object per measured cell to FILE (flushed per cell)")
    p.add_argument("--resume", metavar="FILE", default=None,
                   help="skip the cells already in FILE (a --json file of an earlier run); "
                        "new cells are appended to it unless --json names another file")
    p.add_argument("--seed", type=nonnegative_int, default=0,
                   help="seed of inputs, weights and batches (default: %(default)s)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    if args.smoke:
        if args.lengths is not None or args.shapes is not None:
            p.error("--smoke sets the shapes itself; leave out --lengths and --shapes")
        L, B, D = SMOKE_SHAPE
        args.lengths, args.shapes = [L], [SMOKE_SHAPE]
        args.ops_batch, args.ops_d_model = B, D
        args.reps = args.reps or 2
    else:
        args.lengths = args.lengths or list(DEFAULT_LENGTHS)
        args.shapes = args.shapes or list(DEFAULT_SHAPES)
        args.ops_batch, args.ops_d_model = OPS_BATCH, OPS_D_MODEL
        args.reps = args.reps or 5
    if args.resume:
        if os.path.isdir(args.resume):
            p.error("--resume {}: is a folder, expected a JSON lines file".format(args.resume))
        args.json = args.json or args.resume
    if args.json:
        if os.path.isdir(args.json):
            p.error("--json {}: is a folder, expected a file".format(args.json))
        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder):
            p.error("--json {}: folder {} does not exist".format(args.json, folder))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
