"""seqmix ops and layers against the plain PyTorch a Python user would write instead.

Run ``python3 -m seqmix.bench`` (``--help`` for the flags). Everything runs in one process,
float32, on the CPU. For each case and sequence length L the benchmark times forward +
backward (the gradient of ``y.sum()``, i.e. ``y.backward(ones_like(y))``, reaching every
input and parameter; gradients cleared before each run): one warm-up run, then the median
of ``--reps`` runs (3 when the warm-up took more than 5 s, as ``seqmix bench ops`` does).

Cases (default shapes B = 4, D = 512, L = 1024 .. 16384):

``aib_op``
    ``seqmix.ops.aib_scan(a, v, w, direction='causal', weights='prefix_exp')`` against
    Algorithm 1 of the Weird-Net paper (Weird-attention in the decoder; eqs. 29-38) written
    literally in PyTorch: E = exp(A - max) (a per-channel constant that cancels in H / U),
    H = E * V, U = E, W = exp(cumsum(w)) (eqs. 32-34), then for j = 0 .. ceil(log2 L) - 1
    ``H[:, 2^j:] += H[:, :-2^j] * W_j`` and the same for U (eqs. 35-38; written out of
    place, as autograd needs), O = H / U. a, v [B, L, D], w [K, D], K = ceil(log2 L).
``aib_layer``
    ``seqmix.nn.AIBAttention(d_model=D, max_len=L)`` against the same layer in PyTorch
    (Algorithm 1: A = X W_A, V = X W_V as ``nn.Linear`` without bias, the literal scan above,
    Y = O W_O + b as ``nn.Linear``). x [B, L, D].
``ces_op``
    ``seqmix.ops.ces_scan(x, ces_coefficients(...), direction='causal')`` (the coefficients
    computed from the raw parameters inside the timed region, max_lambda = 0.9999, no
    normalisation) against the ETSMLP authors' FFT formulation (PKUAI-LINGroup/ETSMLP,
    module/smlp_module.py, class CETS, complex version "normal"; the paper's eqs. 7-12),
    re-written here: q = exp(lambda') alpha constrained to |exp q| <= max_lambda, the
    Vandermonde kernel K[n] = Re(beta (1 - exp q) exp(n q)) with complex tensors, then an
    rfft / irfft convolution of length 2 L. x [B, L, H], H = D channels.
``attention``
    ``seqmix.ops.attention(q, k, v, direction='causal')`` against matmul + masked_fill +
    softmax + matmul (scaled dot-product attention, Vaswani et al. 2017, eq. 1).
    q, k, v [B, D/64, L, 64].
``overhead``
    The cost of calling seqmix from Python: ``seqmix.ops.aib_scan`` and ``ces_scan`` (and,
    up to L = 2048, ``attention`` and the AIBAttention layer) timed from Python against
    ``seqmix._C.run_ops_bench``, the C++ benchmark of the same case (``seqmix bench ops``:
    same input distributions, same gradients, a forward-only run before each forward +
    backward run) in the same process: overhead% = (python_ms - cpp_ms) / cpp_ms * 100.
    Two rounds (C++, then Python, twice) per L; each side keeps the lower of its medians.

``modules``
    Whole layers and models, seqmix (``seqmix.nn``: the layers' own Python modules on the
    extension's ops) against ``seqmix.reference``'s classes (the same modules and weights on
    the papers' algorithms in plain PyTorch; the AIB scan in its literal form,
    ``_torch_ops.aib_scan_literal``, as a user writes it) eager and under ``torch.compile`` (inductor, the
    default backend): the layers AIBAttention, SelfAttention (SDPA), ESMLP at D =
    ``--d-model`` (the Extractor at D = 128) and the models weird-net, weird-net-a,
    transformer and etsmlp-lm at D = 256, 4 layers, byte
    vocabulary, scored by the mean next-token cross-entropy; L = ``--module-lengths``
    (1024, 4096). The three sides run alternately, one fwd+bwd each per round, after a
    warm-up (which includes compilation); medians of ``--reps`` rounds.

Units: ms of wall time (median); MiB = 2^20 bytes. Peak memory is the peak of the tensor
bytes live during the warm-up forward + backward above what was live before it (inputs and
parameters excluded, outputs and gradients included): every allocation and free of
LibTorch's CPU allocator is recorded by ``torch.profiler`` (profile_memory=True) and the
running sum's maximum taken. Like ``seqmix bench ops``' counter, it does not see memory
that BLAS, FFT libraries or ``new`` take outside tensors; unlike it, it sees only the
calling thread's allocations (not a kernel's scratch tensors made in worker threads).
The overhead rows show both counters side by side.

A PyTorch reference whose estimated memory exceeds 60% of MemAvailable is skipped with a
line saying so (the seqmix side is then timed only with ``--time-unmatched``).

``--check`` compares, in float64 at small shapes, every PyTorch reference here with seqmix
(outputs and gradients) and with a naive closed form (AIB: the O(L^2) sum of eq. 29;
CES: the complex recurrence of eq. 10), and prints the largest absolute differences.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn as nn

DEFAULT_LENGTHS = [1024, 2048, 4096, 8192, 16384]
CASES = ["aib_op", "aib_layer", "ces_op", "attention", "overhead", "modules"]
MODULE_LENGTHS = [1024, 4096]
# Whole layers at D = --d-model and whole models at this width (4 layers, byte vocabulary);
# the Extractor's [L, D, D] lag matrices at L = 4096 need a narrower layer (D = 128: 256 MiB).
MODEL_D = 256
MODEL_LAYERS = 4
EXTRACTOR_D = 128
HEAD_WIDTH = 64
MAX_LAMBDA = 0.9999
MEMORY_FRACTION = 0.6
TARGET_L = 4096
# Overhead rows of the costlier ops (the attention kernel is O(L^2) in time, the layer
# GEMM-bound) stop at this L; aib_scan_kernel and ces_scan_kernel run at every L.
OVERHEAD_EXTRA_MAX_L = 2048
OVERHEAD_ROUNDS = 2
# (case, label, target, unit); speed-ups are "at least", the overhead "at most".
TARGETS = [
    ("aib_op", "AIB op speed-up vs Algorithm 1", 50.0, "x"),
    ("aib_layer", "AIB layer speed-up vs PyTorch layer", 5.0, "x"),
    ("ces_op", "CES speed-up vs authors' FFT", 10.0, "x"),
    ("overhead", "Python overhead (bound), aib_scan", 2.0, "%"),
]

MiB = float(1 << 20)


# --------------------------------------------------------------------------------------
# The PyTorch references: what a user would write without seqmix.


def aib_num_levels(length: int) -> int:
    """K = ceil(log2 L), at least 1 (eq. 32)."""
    return max(1, (int(length) - 1).bit_length())


def aib_scan_torch(a: torch.Tensor, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Weird-Net Algorithm 1 (decoder), eqs. 30-38, literally: a, v [B, L, D], w [K, D]."""
    length = a.shape[1]
    # Exp(A), stabilised: the per-(batch, channel) maximum cancels in H / U.
    e = torch.exp(a - a.amax(dim=1, keepdim=True).detach())
    h = e * v
    u = e
    big_w = torch.exp(torch.cumsum(w, dim=0))  # eqs. 33-34: W = Exp(Prefix sum(w))
    for j in range((length - 1).bit_length()):  # j = 0 .. ceil(log2 L) - 1
        s = 1 << j
        # H[2^j:] += H[:-2^j] * W_{2^(j+1)} (eq. 36), out of place so autograd can follow.
        h = torch.cat((h[:, :s], h[:, s:] + h[:, :-s] * big_w[j]), dim=1)
        u = torch.cat((u[:, :s], u[:, s:] + u[:, :-s] * big_w[j]), dim=1)  # eq. 37
    return h / u


class AIBAttentionTorch(nn.Module):
    """Algorithm 1 as a layer: A, V = X W_A, X W_V; the scan; Y = O W_O + b."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.w_a = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w = nn.Parameter(torch.randn(aib_num_levels(max_len), d_model))
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_o(aib_scan_torch(self.w_a(x), self.w_v(x), self.w))


def ces_scan_torch(x: torch.Tensor, log_lambda: torch.Tensor, log_alpha: torch.Tensor,
                   log_beta: torch.Tensor, max_lambda: float = MAX_LAMBDA) -> torch.Tensor:
    """The ETSMLP authors' CETS (complex version "normal"), causal, without the shortcut.

    x [B, L, H]; log_lambda, log_alpha, log_beta [H, 2] (real, imaginary) as the authors'
    log_delta, alpha and beta. Returns y [B, L, H] (a permuted view, as in their code).
    """
    length = x.shape[1]
    q = torch.view_as_complex(log_lambda).exp() * torch.view_as_complex(log_alpha.exp())
    # Constraint (eq. 12): Re q <- log(max_lambda) where |exp q| > max_lambda.
    q = q + (q.exp().abs() > max_lambda) * (max_lambda / q.exp().abs()).log()
    vander = torch.arange(length, dtype=x.dtype).view(1, length) * q.unsqueeze(-1)  # [H, L]
    k = (torch.view_as_complex(log_beta).exp() * (1 - q.exp())).unsqueeze(-1) * vander.exp()
    kernel = k.real  # the authors' k.float(): the real part
    xt = x.permute(0, 2, 1)  # B x H x L
    k_f = torch.fft.rfft(kernel, n=2 * length)
    x_f = torch.fft.rfft(xt, n=2 * length)
    y = torch.fft.irfft(x_f * k_f, n=2 * length)[..., :length]
    return y.permute(0, 2, 1)


def causal_mask(length: int) -> torch.Tensor:
    """True above the diagonal: the keys a causal query must not see (a layer's buffer)."""
    return torch.ones(length, length, dtype=torch.bool).triu(1)


def attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d) masked) V, q, k, v [B, H, L, d]; mask [L, L] from causal_mask."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


# --------------------------------------------------------------------------------------
# Inputs, drawn like the C++ op cases (src/mixers/<name>/op_cases.cpp) so both sides see the same
# distributions.


def ces_parameters(channels: int, gen: torch.Generator, dtype=torch.float32):
    """Ring initialisation: |lambda|^2 ~ U[0.01, 0.81], phase ~ U[0, pi], dt log-uniform in
    [0.05, 0.5]; returns log_lambda = log(log lambda), log_alpha = log dt (both parts),
    log_beta ~ N(0, 0.2^2), each [channels, 2]."""
    r = torch.sqrt(torch.rand(channels, generator=gen, dtype=torch.float64) * 0.80 + 0.01)
    theta = torch.rand(channels, generator=gen, dtype=torch.float64) * math.pi
    log_lam = torch.log(torch.complex(torch.log(r), theta))
    dt = torch.exp(torch.rand(channels, generator=gen, dtype=torch.float64)
                   * (math.log(0.5) - math.log(0.05)) + math.log(0.05))
    log_lambda = torch.view_as_real(log_lam).to(dtype).clone()
    log_alpha = torch.log(dt).unsqueeze(1).repeat(1, 2).to(dtype)
    log_beta = (torch.randn(channels, 2, generator=gen) * 0.2).to(dtype)
    return [t.requires_grad_(True) for t in (log_lambda, log_alpha, log_beta)]


def randn(shape, gen, scale=1.0, dtype=torch.float32, grad=True):
    t = (torch.randn(*shape, generator=gen) * scale).to(dtype)
    return t.requires_grad_(grad)


# --------------------------------------------------------------------------------------
# Measurement.


def mem_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def peak_tensor_bytes(run: Callable[[], None]) -> int:
    """Runs `run` once under torch.profiler and returns the peak of the live CPU tensor bytes
    above the level at its start (the running sum of every recorded allocation and free)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())  # stable: equal stamps keep their order
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


class Timing:
    def __init__(self, fwd_bwd_ms: float, peak_mib: float, fwd_ms: Optional[float] = None):
        self.fwd_bwd_ms = fwd_bwd_ms
        self.peak_mib = peak_mib
        self.fwd_ms = fwd_ms


def measure(fwd: Callable[[], torch.Tensor], leaves: Sequence[torch.Tensor], reps: int,
            with_fwd_only: bool = False) -> Timing:
    """Median forward+backward ms over `reps` runs after one warm-up (also the memory
    measurement). `with_fwd_only` adds a no-grad forward before each timed run, as the C++
    benchmark does (its forward-only timing)."""

    def fwd_bwd():
        for t in leaves:
            t.grad = None
        y = fwd()
        y.backward(torch.ones_like(y))

    gc.collect()
    t0 = time.perf_counter()
    peak = peak_tensor_bytes(fwd_bwd)
    first_ms = (time.perf_counter() - t0) * 1e3
    if first_ms > 5000:
        reps = min(reps, 3)
    f_ms, fb_ms = [], []
    for _ in range(reps):
        if with_fwd_only:
            t0 = time.perf_counter()
            with torch.no_grad():
                fwd()
            f_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        fwd_bwd()
        fb_ms.append((time.perf_counter() - t0) * 1e3)
    for t in leaves:
        t.grad = None
    return Timing(statistics.median(fb_ms), peak / MiB,
                  statistics.median(f_ms) if f_ms else None)


def estimate_bytes(case: str, side: str, B: int, L: int, D: int) -> int:
    """Rough tensor bytes of one forward+backward, to skip what cannot fit instead of
    being killed."""
    bld = B * L * D * 4
    K = aib_num_levels(L)
    if side == "seqmix":
        return {"aib_op": 8, "aib_layer": 14, "ces_op": 6, "attention": 10}[case] * bld
    # Measured at L = 512, 1024: Algorithm 1 keeps about two [B, L, D] tensors per level
    # (2 K + 8), the FFT ~16.5, attention ~3.4 score-sized [B, H, L, L] tensors.
    if case == "aib_op":
        return (2 * K + 10) * bld
    if case == "aib_layer":
        return (2 * K + 14) * bld
    if case == "ces_op":
        return 18 * bld
    heads = max(1, D // HEAD_WIDTH)
    return 4 * B * heads * L * L * 4 + 10 * bld


def fits(need: int) -> Optional[str]:
    """None if `need` bytes fit in MEMORY_FRACTION of MemAvailable, else the reason."""
    avail = mem_available_bytes()
    if need <= MEMORY_FRACTION * avail:
        return None
    return "needs ~{:.1f} GiB, more than {:.0f}% of the {:.1f} GiB available".format(
        need / (1 << 30), 100 * MEMORY_FRACTION, avail / (1 << 30))


# --------------------------------------------------------------------------------------
# The cases: each returns (fwd, leaves) for the seqmix side and the PyTorch side.


def setup_case(case: str, side: str, B: int, L: int, D: int, seed: int):
    import seqmix.nn
    import seqmix.ops

    gen = torch.Generator().manual_seed(seed)
    if case == "aib_op":
        a, v = randn((B, L, D), gen, 2.0), randn((B, L, D), gen)
        w = randn((aib_num_levels(L), D), gen, 0.3)
        if side == "seqmix":
            return (lambda: seqmix.ops.aib_scan(a, v, w, direction="causal",
                                                weights="prefix_exp")), [a, v, w]
        return (lambda: aib_scan_torch(a, v, w)), [a, v, w]
    if case == "aib_layer":
        torch.manual_seed(seed)
        x = randn((B, L, D), gen)
        layer = seqmix.nn.AIBAttention(D, L) if side == "seqmix" else AIBAttentionTorch(D, L)
        return (lambda: layer(x)), [x] + list(layer.parameters())
    if case == "ces_op":
        x = randn((B, L, D), gen)
        params = ces_parameters(D, gen)
        if side == "seqmix":
            def fwd():
                coef = seqmix.ops.ces_coefficients(*params, max_lambda=MAX_LAMBDA,
                                                   normalize=False)
                return seqmix.ops.ces_scan(x, coef, direction="causal")
            return fwd, [x] + params
        return (lambda: ces_scan_torch(x, *params)), [x] + params
    if case == "attention":
        shape = (B, D // HEAD_WIDTH, L, HEAD_WIDTH)
        q, k, v = randn(shape, gen, 2.0), randn(shape, gen, 2.0), randn(shape, gen)
        if side == "seqmix":
            return (lambda: seqmix.ops.attention(q, k, v, direction="causal")), [q, k, v]
        mask = causal_mask(L)
        return (lambda: attention_torch(q, k, v, mask)), [q, k, v]
    raise ValueError(case)


# The C++ op rows the overhead case compares, and the Python call of each.
OVERHEAD_OPS = ["aib_scan_kernel", "ces_scan_kernel", "attention_kernel", "aib_layer"]
OVERHEAD_CASE = {"aib_scan_kernel": "aib_op", "ces_scan_kernel": "ces_op",
                 "attention_kernel": "attention", "aib_layer": "aib_layer"}


# --------------------------------------------------------------------------------------
# Output.


class Reporter:
    def __init__(self, as_json: bool, quiet: bool):
        self.as_json = as_json
        self.quiet = quiet

    def emit(self, row: Dict) -> None:
        if self.as_json:
            print(json.dumps(row), flush=True)

    def progress(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def text(self, text: str = "") -> None:
        if not self.as_json:
            print(text, flush=True)


def fmt_ms(x: Optional[float]) -> str:
    return "-" if x is None else ("{:.1f}".format(x) if x >= 100 else "{:.2f}".format(x))


def fmt_mib(x: Optional[float]) -> str:
    return "-" if x is None else "{:.0f}".format(x)


def wrap(line: str, width: int = 80, indent: int = 20) -> str:
    """`line` broken at spaces to `width` columns, continuation lines indented."""
    import textwrap

    return "\n".join(textwrap.wrap(line, width, subsequent_indent=" " * indent))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def header(args, rep: Reporter) -> None:
    import seqmix

    info = {
        "kind": "header",
        "torch": torch.__version__,
        "seqmix": getattr(seqmix, "__version__", "?"),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "B": args.batch,
        "D": args.d_model,
        "lengths": args.lengths,
        "reps": args.reps,
        "dtype": "float32",
        "mem_available_gib": round(mem_available_bytes() / (1 << 30), 1),
        "peak_memory": "peak live CPU tensor bytes of the warm-up fwd+bwd above the start "
                       "(torch.profiler profile_memory)",
    }
    rep.emit(info)
    rep.text("seqmix.bench: seqmix vs plain PyTorch, forward+backward, float32, CPU")
    rep.text("torch {}, seqmix {}, Python {}, threads {} (nproc {}), {}".format(
        info["torch"], info["seqmix"], info["python"], info["threads"], info["nproc"],
        info["cpu"]))
    rep.text("B={} D={} L={} ; median of {} after 1 warm-up; ms wall time".format(
        args.batch, args.d_model, ",".join(map(str, args.lengths)), args.reps))
    rep.text("shapes: aib_op a,v [B,L,D] w [ceil(log2 L),D]; aib_layer x [B,L,D];")
    rep.text("        ces_op x [B,L,D] params [D,2]; attention q,k,v [B,{},L,{}]".format(
        args.d_model // HEAD_WIDTH, HEAD_WIDTH))
    rep.text("peak MiB: live CPU tensor bytes during the warm-up fwd+bwd above the level")
    rep.text("before it (torch.profiler allocation events of the calling thread; BLAS/FFT")
    rep.text("scratch and tensors made inside worker threads are not seen)")
    rep.text("PyTorch references estimated above {:.0f}% of MemAvailable ({:.1f} GiB now) are "
             "skipped".format(100 * MEMORY_FRACTION, info["mem_available_gib"]))
    rep.text()


def run_pairs(args, rep: Reporter) -> List[Dict]:
    rows = []
    cases = [c for c in args.cases if c not in ("overhead", "modules")]
    if not cases:
        return rows
    rep.text("{:<10} {:>6} {:>11} {:>11} {:>9} {:>11} {:>10}".format(
        "case", "L", "seqmix ms", "torch ms", "speed-up", "seqmix MiB", "torch MiB"))
    B, D = args.batch, args.d_model
    for case in cases:
        for L in args.lengths:
            row = {"kind": "pair", "case": case, "L": L, "B": B, "D": D}
            torch_skip = fits(estimate_bytes(case, "torch", B, L, D))
            seqmix_skip = fits(estimate_bytes(case, "seqmix", B, L, D))
            if torch_skip and not args.time_unmatched:
                seqmix_skip = seqmix_skip or "nothing to compare (--time-unmatched times it)"
            for side, skip in (("seqmix", seqmix_skip), ("torch", torch_skip)):
                if skip:
                    row[side + "_skipped"] = skip
                    continue
                rep.progress("  {} L={} {} ...".format(case, L, side))
                fwd, leaves = setup_case(case, side, B, L, D, args.seed)
                t = measure(fwd, leaves, args.reps)
                del fwd, leaves
                row[side + "_ms"] = t.fwd_bwd_ms
                row[side + "_peak_mib"] = t.peak_mib
                rep.progress("    {:.2f} ms, {:.1f} MiB".format(t.fwd_bwd_ms, t.peak_mib))
            if "seqmix_ms" in row and "torch_ms" in row:
                row["speedup"] = row["torch_ms"] / row["seqmix_ms"]
            rows.append(row)
            rep.emit(row)
            if "torch_skipped" in row and "seqmix_ms" not in row:
                rep.text(wrap("{:<10} {:>6}   skipped: the PyTorch reference {}".format(
                    case, L, row["torch_skipped"])))
            else:
                rep.text("{:<10} {:>6} {:>11} {:>11} {:>9} {:>11} {:>10}".format(
                    case, L, fmt_ms(row.get("seqmix_ms")), fmt_ms(row.get("torch_ms")),
                    "{:.1f}x".format(row["speedup"]) if "speedup" in row else "-",
                    fmt_mib(row.get("seqmix_peak_mib")), fmt_mib(row.get("torch_peak_mib"))))
                if "torch_skipped" in row:
                    rep.text(wrap("{:<17} PyTorch reference skipped: {}".format(
                        "", row["torch_skipped"])))
    rep.text()
    return rows


def python_call(op: str, B: int, L: int, D: int, seed: int):
    """The Python side of one overhead row: the C++ row's case, called through seqmix (the
    layer with max_len = L, as run_ops_bench([L], ...) builds it)."""
    return setup_case(OVERHEAD_CASE[op], "seqmix", B, L, D, seed)


def run_overhead(args, rep: Reporter) -> List[Dict]:
    import seqmix._C

    rows = []
    if "overhead" not in args.cases:
        return rows
    B, D = args.batch, args.d_model
    rep.text("Python call overhead: seqmix from Python vs seqmix._C.run_ops_bench (C++), "
             "fwd+bwd")
    rep.text("{:<17} {:>6} {:>10} {:>10} {:>9} {:>8} {:>8}".format(
        "op", "L", "python ms", "C++ ms", "overhead", "py MiB", "C++ MiB"))
    for L in args.lengths:
        ops = [op for op in OVERHEAD_OPS
               if op in ("aib_scan_kernel", "ces_scan_kernel")
               or (L <= OVERHEAD_EXTRA_MAX_L and (op != "attention_kernel"
                                                  or D % HEAD_WIDTH == 0))]
        best: Dict[str, Dict] = {}
        for rnd in range(OVERHEAD_ROUNDS):
            rep.progress("  overhead L={} round {}: C++ ...".format(L, rnd + 1))
            cpp_rows = seqmix._C.run_ops_bench([L], B, D, max(1, D // HEAD_WIDTH), args.reps,
                                               ops)
            for r in cpp_rows:
                if r.get("op") not in ops or "fwd_bwd_ms" not in r:
                    continue
                b = best.setdefault(r["op"], {})
                if "cpp_ms" not in b or r["fwd_bwd_ms"] < b["cpp_ms"]:
                    b["cpp_ms"], b["cpp_peak_mib"] = r["fwd_bwd_ms"], r["peak_mib"]
            for op in ops:
                if op not in best:  # the C++ side skipped it
                    continue
                rep.progress("  overhead L={} round {}: python {} ...".format(L, rnd + 1, op))
                fwd, leaves = python_call(op, B, L, D, args.seed)
                t = measure(fwd, leaves, args.reps, with_fwd_only=True)
                del fwd, leaves
                b = best[op]
                if "python_ms" not in b or t.fwd_bwd_ms < b["python_ms"]:
                    b["python_ms"], b["python_peak_mib"] = t.fwd_bwd_ms, t.peak_mib
        for op in ops:
            if op not in best:
                rep.text("{:<17} {:>6}   skipped by the C++ benchmark".format(op, L))
                continue
            b = best[op]
            row = {"kind": "overhead", "op": op, "L": L, "B": B, "D": D, **b,
                   "overhead_pct": (b["python_ms"] - b["cpp_ms"]) / b["cpp_ms"] * 100}
            rows.append(row)
            rep.emit(row)
            rep.text("{:<17} {:>6} {:>10} {:>10} {:>+8.1f}% {:>8} {:>8}".format(
                op, L, fmt_ms(row["python_ms"]), fmt_ms(row["cpp_ms"]), row["overhead_pct"],
                fmt_mib(row["python_peak_mib"]), fmt_mib(row["cpp_peak_mib"])))
    rep.text()
    fixed = fixed_call_cost_us()
    for r in rows:
        if r["op"] == "aib_scan_kernel":
            r["bound_pct"] = fixed["python_us"] / (r["cpp_ms"] * 1e3) * 100
    rep.emit({"kind": "overhead_fixed", **fixed})
    rep.text(wrap("Fixed cost of one Python call (what does not grow with the tensors: "
                  "argument checks, pybind11, autograd bookkeeping; no tensor is copied), "
                  "fwd+bwd of seqmix.ops.aib_scan at B=1, L=2, D=8, median of {} calls: "
                  "{:.1f} us ({:.1f} us of it in seqmix/ops.py's checks). As a share of the "
                  "C++ time of the row above it is an upper bound on the Python overhead, "
                  "free of the run-to-run spread of the differences:".format(
                      FIXED_CALLS, fixed["python_us"],
                      fixed["python_us"] - fixed["binding_us"]), indent=0))
    for r in rows:
        if "bound_pct" in r:
            rep.text("  aib_scan_kernel L={:<6} bound {:.3f}% of {} ms".format(
                r["L"], r["bound_pct"], fmt_ms(r["cpp_ms"])))
    rep.text()
    return rows



# --------------------------------------------------------------------------------------
# modules: whole layers and models, seqmix vs the user's PyTorch (eager and compiled).

# extractor-transformer is left out of the models: at D = 256 its lag matrices are 1 GiB
# per layer at L = 4096 (with gradients and their FFTs, more than this machine's memory).
MODULE_KINDS = ["AIBAttention", "SelfAttention", "ESMLP", "Extractor", "weird-net",
                "weird-net-a", "transformer", "etsmlp-lm"]


def _user_modules():
    """seqmix.reference's classes with the AIB op as a PyTorch user writes it from the paper
    (``_torch_ops.aib_scan_literal``: one maximum per sequence), the other ops as
    seqmix.reference has them: the baseline is the papers' cost, not the exact reference's
    per-position maxima (about 3x the work)."""
    import types

    from . import _layers, _torch_ops
    ops = types.SimpleNamespace(**{name: getattr(_torch_ops, name) for name in (
        "ces_scan", "attention", "attention_reference", "extractor_conv", "causal_mean")})
    ops.aib_scan = _torch_ops.aib_scan_literal
    return types.SimpleNamespace(**_layers.bind(ops, "seqmix.bench"))


def module_pair(kind: str, B: int, L: int, D: int, seed: int):
    """(seqmix module, the user's PyTorch module with the same weights, input, loss of the
    output)."""
    import seqmix
    import seqmix.nn
    user = _user_modules()

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if kind in ("AIBAttention", "SelfAttention", "ESMLP", "Extractor"):
        width = EXTRACTOR_D if kind == "Extractor" else D
        args = {"AIBAttention": (width, L), "SelfAttention": (width, max(1, width // HEAD_WIDTH)),
                "ESMLP": (width, 2 * width), "Extractor": (width, L)}[kind]
        fast = getattr(seqmix.nn, kind)(*args)
        ref = getattr(user, kind)(*args)
        x = torch.randn(B, L, width, generator=gen)

        def loss(y):
            return y.square().mean()
    else:
        fast = seqmix.build(kind, "tiny", d_model=MODEL_D, n_layers=MODEL_LAYERS,
                            n_heads=MODEL_D // HEAD_WIDTH, d_ff=4 * MODEL_D, max_len=L,
                            seed=seed)
        ref = user.SequenceModel(fast.config["model"])
        x = torch.randint(0, 256, (B, L), generator=gen)

        def loss(y):
            return nn.functional.cross_entropy(y[:, :-1].reshape(-1, y.shape[-1]),
                                               x[:, 1:].reshape(-1))
    ref.load_state_dict(fast.state_dict())
    return fast, ref, x, loss


def run_modules(args, rep: Reporter) -> List[Dict]:
    rows = []
    if "modules" not in args.cases:
        return rows
    B, D = args.batch, args.d_model
    rep.text("Layers (D={}, the Extractor D={}) and models (D={}, {} layers), fwd+bwd, "
             "ms:".format(D, EXTRACTOR_D, MODEL_D, MODEL_LAYERS))
    rep.text("{:<22} {:>6} {:>9} {:>10} {:>10} {:>8} {:>9}".format(
        "module", "L", "seqmix", "reference", "compiled", "vs ref", "vs comp."))
    for kind in args.modules:
        for L in args.module_lengths:
            rep.progress("  modules {} L={} ...".format(kind, L))
            fast, ref, x, loss = module_pair(kind, B, L, D, args.seed)
            compiled = torch.compile(ref)
            sides = {"seqmix": fast, "reference": ref, "compiled": compiled}
            params = {name: list(m.parameters()) for name, m in
                      (("seqmix", fast), ("reference", ref), ("compiled", ref))}

            def run(name):
                for p in params[name]:
                    p.grad = None
                loss(sides[name](x)).backward()

            times: Dict[str, List[float]] = {name: [] for name in sides}
            row = {"kind": "module", "module": kind, "L": L, "B": B}
            for name in sides:  # warm-up (and compilation)
                t0 = time.perf_counter()
                try:
                    run(name)
                except Exception as e:  # a side that cannot run is reported, not fatal
                    row[name + "_error"] = "{}: {}".format(type(e).__name__, e)[:200]
                row[name + "_warmup_s"] = time.perf_counter() - t0
            live = [n for n in sides if n + "_error" not in row]
            for _ in range(args.reps):
                for name in live:
                    t0 = time.perf_counter()
                    run(name)
                    times[name].append((time.perf_counter() - t0) * 1e3)
            for name in live:
                row[name + "_ms"] = statistics.median(times[name])
            if "seqmix_ms" in row:
                for name in ("reference", "compiled"):
                    if name + "_ms" in row:
                        row["speedup_vs_" + name] = row[name + "_ms"] / row["seqmix_ms"]
            rows.append(row)
            rep.emit(row)
            rep.text("{:<22} {:>6} {:>9} {:>10} {:>10} {:>8} {:>9}".format(
                kind, L, fmt_ms(row.get("seqmix_ms")), fmt_ms(row.get("reference_ms")),
                fmt_ms(row.get("compiled_ms")),
                "{:.1f}x".format(row["speedup_vs_reference"])
                if "speedup_vs_reference" in row else "-",
                "{:.1f}x".format(row["speedup_vs_compiled"])
                if "speedup_vs_compiled" in row else "-"))
            for name in sides:
                if name + "_error" in row:
                    rep.text(wrap("{:<22} {} failed: {}".format("", name, row[name + "_error"])))
            del fast, ref, compiled, sides, params
            torch._dynamo.reset()
            gc.collect()
    rep.text()
    return rows


FIXED_CALLS = 2000


def fixed_call_cost_us() -> Dict:
    """Median wall time (us) of a forward+backward of aib_scan on a tiny input: through
    seqmix.ops (the public function) and through the registered op torch.ops.seqmix.aib_scan
    directly."""
    import seqmix.ops

    gen = torch.Generator().manual_seed(0)
    a = randn((1, 2, 8), gen)
    v = randn((1, 2, 8), gen)
    w = randn((1, 8), gen)
    calls = {
        "python_us": lambda: seqmix.ops.aib_scan(a, v, w),
        "binding_us": lambda: torch.ops.seqmix.aib_scan(a, v, w),
    }
    out = {}
    for name, call in calls.items():
        times = []
        for _ in range(FIXED_CALLS):
            t0 = time.perf_counter()
            call().sum().backward()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1e6
    return out


def report_targets(args, pairs: List[Dict], overhead: List[Dict], rep: Reporter) -> None:
    rep.text("Targets at L = {}:".format(TARGET_L))
    for case, label, target, unit in TARGETS:
        if case not in args.cases:
            continue
        value = None
        if case == "overhead":
            # The bound (fixed cost of a call / C++ time): the difference of two medians
            # ("overhead" rows) is within the run-to-run spread here.
            for r in overhead:
                if r["op"] == "aib_scan_kernel" and r["L"] == TARGET_L:
                    value = r.get("bound_pct", r["overhead_pct"])
            ok = value is not None and value <= target
            cond = "<= {:.0f}%".format(target)
            shown = None if value is None else "{:.3f}%".format(value)
        else:
            for r in pairs:
                if r["case"] == case and r["L"] == TARGET_L and "speedup" in r:
                    value = r["speedup"]
            ok = value is not None and value >= target
            cond = ">= {:.0f}x".format(target)
            shown = None if value is None else "{:.1f}x".format(value)
        status = "PASS" if ok else "MISS"
        row = {"kind": "target", "case": case, "L": TARGET_L, "target": target, "unit": unit,
               "value": value, "status": status if value is not None else "not measured"}
        rep.emit(row)
        if value is None:
            rep.text("  {:<37} {:>8}  not measured (L = {} not run)".format(label, cond,
                                                                          TARGET_L))
        else:
            rep.text("  {:<37} {:>8}  {}  {}".format(label, cond, status, shown))


# --------------------------------------------------------------------------------------
# --check: the references against seqmix and against naive closed forms, float64.


def aib_closed_form(a, v, w):
    """Eq. 29 summed directly: O_i = sum_j a_{i-j} E_j V_j / sum_j a_{i-j} E_j, where the
    lag weight a_d is the product of W_b over the set bits b of d (W = exp(cumsum w))."""
    B, L, D = a.shape
    e = torch.exp(a - a.amax(dim=1, keepdim=True))
    big_w = torch.exp(torch.cumsum(w, 0))
    lag = []
    for d in range(L):
        x = torch.ones(D, dtype=a.dtype)
        for b in range(d.bit_length()):
            if d >> b & 1:
                x = x * big_w[b]
        lag.append(x)
    lag = torch.stack(lag)  # [L, D]
    idx = torch.arange(L)
    dist = idx.view(L, 1) - idx.view(1, L)
    m = lag[dist.clamp(min=0)] * (dist >= 0).unsqueeze(-1).to(a.dtype)  # [L, L, D]
    h = torch.einsum("ijd,bjd->bid", m, e * v)
    u = torch.einsum("ijd,bjd->bid", m, e)
    return h / u


def ces_recurrence(x, log_lambda, log_alpha, log_beta, max_lambda=MAX_LAMBDA):
    """Eq. 10 step by step: s_t = mu s_{t-1} + x_t, y_t = Re(c s_t), complex mu and c."""
    lam = torch.complex(log_lambda[:, 0], log_lambda[:, 1]).exp()
    alpha = torch.complex(log_alpha[:, 0].exp(), log_alpha[:, 1].exp())
    q = lam * alpha
    if max_lambda is not None:
        over = q.real > math.log(max_lambda)
        q = torch.complex(torch.where(over, torch.full_like(q.real, math.log(max_lambda)),
                                      q.real), q.imag)
    mu = q.exp()
    c = torch.complex(log_beta[:, 0], log_beta[:, 1]).exp() * (1 - mu)
    s = torch.zeros(x.shape[0], x.shape[2], dtype=mu.dtype)
    ys = []
    for t in range(x.shape[1]):
        s = mu * s + x[:, t]
        ys.append((c * s).real)
    return torch.stack(ys, 1)


def max_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x.detach() - y.detach()).abs().max())


def grads_of(fwd, leaves, gy):
    for t in leaves:
        t.grad = None
    y = fwd()
    y.backward(gy)
    # An input the output does not depend on (w at L = 1) has no gradient: zeros.
    out = [torch.zeros_like(t) if t.grad is None else t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    return y.detach(), out


def compare(name: str, fwd_a, fwd_b, leaves, rep: Reporter, tol: float, grads=True) -> bool:
    ya = fwd_a()
    gy = torch.randn(ya.shape, dtype=ya.dtype, generator=torch.Generator().manual_seed(3))
    ya, ga = grads_of(fwd_a, leaves, gy) if grads else (ya.detach(), [])
    yb, gb = grads_of(fwd_b, leaves, gy) if grads else (fwd_b().detach(), [])
    d_out = max_diff(ya, yb)
    d_grad = max((max_diff(p, q) for p, q in zip(ga, gb)), default=0.0)
    scale = float(ya.abs().max())
    ok = d_out <= tol * max(1.0, scale) and d_grad <= tol * max(1.0, scale)
    rep.emit({"kind": "check", "name": name, "max_abs_diff_out": d_out,
              "max_abs_diff_grad": d_grad if grads else None, "ok": ok})
    rep.text("  {:<48} out {:.1e} grad {} {}".format(
        name, d_out, "{:.1e}".format(d_grad) if grads else "-", "ok" if ok else "MISMATCH"))
    return ok


def run_check(args, rep: Reporter) -> bool:
    import seqmix.nn
    import seqmix.ops

    dt = torch.float64
    tol = 1e-9
    ok = True
    rep.text("--check: float64, max |difference| of outputs and of every input and "
             "parameter\ngradient (the same random output gradient on both sides)")
    for B, L, D in ((2, 37, 16), (2, 64, 8), (1, 1, 4)):
        gen = torch.Generator().manual_seed(args.seed)
        a, v = randn((B, L, D), gen, 2.0, dt), randn((B, L, D), gen, 1.0, dt)
        w = randn((aib_num_levels(L), D), gen, 0.3, dt)
        leaves = [a, v, w]
        tag = "B{} L{} D{}".format(B, L, D)
        ok &= compare("aib  Alg. 1 vs closed form (eq. 29) " + tag,
                      lambda: aib_scan_torch(a, v, w), lambda: aib_closed_form(a, v, w),
                      leaves, rep, tol)
        ok &= compare("aib  Alg. 1 vs seqmix.ops.aib_scan  " + tag,
                      lambda: aib_scan_torch(a, v, w),
                      lambda: seqmix.ops.aib_scan(a, v, w, direction="causal",
                                                  weights="prefix_exp"), leaves, rep, tol)
    B, L, D = 2, 45, 16
    torch.manual_seed(args.seed)
    ref = AIBAttentionTorch(D, 64).to(dt)
    sm = seqmix.nn.AIBAttention(D, 64).to(dt)
    with torch.no_grad():
        ours = dict(ref.named_parameters())
        for name, p in sm.named_parameters():
            ours[name].copy_(p)  # same names: w_a.weight, w_v.weight, w, w_o.weight, w_o.bias
    x = randn((B, L, D), torch.Generator().manual_seed(1), 1.0, dt)
    ok &= compare("aib_layer  PyTorch vs seqmix.nn.AIBAttention", lambda: ref(x),
                  lambda: sm(x), [x] + list(ref.parameters()) + list(sm.parameters()), rep,
                  tol, grads=False)
    # Gradients of the two layers live on separate parameters: compare them pairwise.
    gy = torch.randn(B, L, D, dtype=dt, generator=torch.Generator().manual_seed(3))
    names = [n for n, _ in ref.named_parameters()]
    sm_params = dict(sm.named_parameters())
    _, g_ref = grads_of(lambda: ref(x), [x] + [ours[n] for n in names], gy)
    _, g_sm = grads_of(lambda: sm(x), [x] + [sm_params[n] for n in names], gy)
    names = ["x"] + names
    d = max(max_diff(p, q) for p, q in zip(g_ref, g_sm))
    good = d <= tol * 10
    ok &= good
    rep.emit({"kind": "check", "name": "aib_layer gradients", "max_abs_diff_grad": d,
              "ok": good, "of": names})
    label = "aib_layer  gradients: x and {} parameters".format(len(names) - 1)
    rep.text("  {:<48} grad {:.1e} {}".format(label, d, "ok" if good else "MISMATCH"))
    for B, L, H in ((2, 50, 12), (1, 1, 3)):
        gen = torch.Generator().manual_seed(args.seed)
        x = randn((B, L, H), gen, 1.0, dt)
        params = ces_parameters(H, gen, dt)
        with torch.no_grad():  # one channel past max_lambda, so the constraint is exercised
            params[0][0] = torch.tensor([1.0, 0.0])  # log lambda = e: |mu| = e^e
            params[1][0] = 0.0
        leaves = [x] + params
        tag = "B{} L{} H{}".format(B, L, H)
        ok &= compare("ces  FFT vs recurrence (eq. 10) " + tag,
                      lambda: ces_scan_torch(x, *params), lambda: ces_recurrence(x, *params),
                      leaves, rep, tol)

        def seqmix_ces():
            coef = seqmix.ops.ces_coefficients(*params, max_lambda=MAX_LAMBDA, normalize=False)
            return seqmix.ops.ces_scan(x, coef, direction="causal")

        ok &= compare("ces  FFT vs seqmix.ops.ces_scan " + tag,
                      lambda: ces_scan_torch(x, *params), seqmix_ces, leaves, rep, tol)
    for B, H, L, dh in ((2, 3, 33, 64), (1, 2, 130, 16)):
        gen = torch.Generator().manual_seed(args.seed)
        q, k, v = (randn((B, H, L, dh), gen, s, dt) for s in (2.0, 2.0, 1.0))
        mask = causal_mask(L)
        ok &= compare("attn matmul+softmax vs seqmix B{} H{} L{} d{}".format(
                          B, H, L, dh),
                      lambda: attention_torch(q, k, v, mask),
                      lambda: seqmix.ops.attention(q, k, v, direction="causal"),
                      [q, k, v], rep, tol)
    rep.text("check: {}".format("all agree" if ok else "MISMATCH"))
    return ok


# --------------------------------------------------------------------------------------
# Command line.


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive integer, got '{}'".format(text))
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got {}".format(value))
    return value


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python3 -m seqmix.bench",
        description="Times seqmix's ops and layers against the plain PyTorch a user would "
                    "write instead (forward+backward, float32, CPU; median of --reps after "
                    "one warm-up; peak tensor memory), and the Python call overhead against "
                    "the C++ benchmark. See the module docstring for the references.",
        epilog="cases: aib_op (aib_scan vs Weird-Net Algorithm 1), aib_layer (AIBAttention vs "
               "the PyTorch layer), ces_op (ces_scan vs the ETSMLP authors' FFT), attention "
               "(fused kernel vs matmul+softmax), overhead (Python vs C++ run_ops_bench), "
               "modules (layers and models: seqmix vs seqmix.reference, eager and "
               "compiled). "
               "Targets at L=4096: AIB op >= 50x, AIB layer >= 5x, CES >= 10x, overhead <= 2%.")
    p.add_argument("--lengths", "-L", type=positive_int, nargs="+", default=DEFAULT_LENGTHS,
                   metavar="L", help="sequence lengths (default: %(default)s)")
    p.add_argument("--batch", "-B", type=positive_int, default=4, help="batch size B "
                   "(default: %(default)s)")
    p.add_argument("--d-model", "-D", type=positive_int, default=512,
                   help="channels D; attention uses D/64 heads of width 64 "
                        "(default: %(default)s)")
    p.add_argument("--module-lengths", type=positive_int, nargs="+", default=MODULE_LENGTHS,
                   metavar="L", help="sequence lengths of the modules case "
                   "(default: %(default)s)")
    p.add_argument("--modules", nargs="+", choices=MODULE_KINDS, default=MODULE_KINDS,
                   metavar="MODULE", help="the layers and models of the modules case, of: "
                   "{} (default: all)".format(", ".join(MODULE_KINDS)))
    p.add_argument("--reps", type=positive_int, default=5,
                   help="timed runs per measurement, median reported (default: %(default)s)")
    p.add_argument("--cases", nargs="+", choices=CASES, default=CASES, metavar="CASE",
                   help="which cases to run, of: {} (default: all)".format(", ".join(CASES)))
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads, 0 = one per core (default: 0, i.e. {})".format(
                       os.cpu_count()))
    p.add_argument("--seed", type=int, default=0, help="input seed (default: %(default)s)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per line (header, rows, targets) instead of "
                        "the table")
    p.add_argument("--time-unmatched", action="store_true",
                   help="also time the seqmix side where the PyTorch reference is skipped "
                        "(attention at long L: minutes)")
    p.add_argument("--check", action="store_true",
                   help="only compare the references with seqmix and with naive closed "
                        "forms in float64 at small shapes (seconds), print the max abs "
                        "differences; exit status 1 on a mismatch")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    cores = os.cpu_count() or 1
    if args.threads < 0 or args.threads > 4 * cores:
        p.error("--threads must be 0 (one per core) or 1 .. {}, got {}".format(4 * cores,
                                                                             args.threads))
    if not args.check and "attention" in args.cases and args.d_model % HEAD_WIDTH:
        p.error("--d-model {} is not a multiple of the head width {} that the attention case "
                "uses; choose another D or leave attention out of --cases".format(
                    args.d_model, HEAD_WIDTH))
    args.cases = [c for c in CASES if c in args.cases]  # canonical order, no repeats
    args.lengths = list(dict.fromkeys(args.lengths))
    args.module_lengths = list(dict.fromkeys(args.module_lengths))
    args.modules = [m for m in MODULE_KINDS if m in args.modules]
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads if args.threads > 0 else (os.cpu_count() or 1))
    rep = Reporter(args.json, args.quiet)
    if args.check:
        return 0 if run_check(args, rep) else 1
    header(args, rep)
    pairs = run_pairs(args, rep)
    overhead = run_overhead(args, rep)
    run_modules(args, rep)
    report_targets(args, pairs, overhead, rep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
