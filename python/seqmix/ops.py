"""seqmix's sequence-mixing ops as differentiable PyTorch functions.

Each op is registered in PyTorch's dispatcher by libseqmix (include/seqmix/ops/*.h) as
``torch.ops.seqmix.<op>``: ``aib_scan``, ``attention``, ``ces_scan`` and ``extractor_conv``,
each with a ``<op>_reference`` twin. The functions here call them with keyword options and
argument checks: the optimised CPU kernel by default (``impl='kernel'``), or the paper's
algorithm in ATen ops (``impl='reference'``), which the kernel is tested against. Both
carry their own backward, so ``torch.autograd`` (``.backward()``, ``torch.autograd.grad``,
``gradcheck``) works through them, and both have fake-tensor implementations, so
``torch.compile`` and ``torch.export`` see them as single ops. Inputs are tensors on a
device the op has kernels for (the CPU; CUDA where seqmix was built with its CUDA kernels,
``seqmix._C.CUDA_KERNELS``; meta, for shapes), of one dtype, float32 or float64; or, for
mixed precision (``torch.autocast("cpu", dtype=torch.bfloat16)``), bfloat16 activations
with float32 parameters: the op computes in float32 and returns bfloat16 (rounded once), the parameters' gradients are float32. The AIB, CES and attention kernels
read bfloat16 directly, without a float32 copy of their inputs.

Legend: B batch, L sequence length, D channels, H heads (attention) or channels (CES).

Errors: a wrong type raises TypeError naming the argument; a wrong choice ValueError naming
the argument and the choices; a shape or dtype the op refuses RuntimeError (ValueError for
the Extractor) with the op's message, which names the argument as the papers do (e.g.
"aib_scan_kernel: V must match A [2, 5, 4], got [2, 5, 3]").
"""
import torch

from ._ext import _C  # noqa: F401  (loads libseqmix: registers torch.ops.seqmix.*)
from ._mixer import _choice
# One implementation each, shared with seqmix.nn and seqmix.reference.
from .mixers.aib import aib_level_weights, aib_num_levels
from .mixers.ces import CESCoefficients, ces_coefficients

__all__ = ["aib_scan", "aib_scan_fallbacks", "aib_num_levels", "aib_level_weights",
           "CESCoefficients",
           "ces_coefficients", "ces_scan", "attention", "extractor_conv"]

# Loading seqmix._C registered the ops; resolving each once makes torch.ops.seqmix list them
# (dir(), iteration), as a namespace a user can explore.
for _name in sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("seqmix::")):
    getattr(torch.ops.seqmix, _name.split("::", 1)[1])

_DIRECTIONS = ("causal", "bidirectional")
_IMPLS = ("kernel", "reference")
_AIB_WEIGHTS = ("prefix_exp", "exp", "ones")


def _tensor(name, value, optional=False):
    if value is None and optional:
        return None
    if not isinstance(value, torch.Tensor):
        kind = "a tensor or None" if optional else "a tensor"
        raise TypeError(f"{name}: expected {kind}, got {type(value).__name__}")
    return value


def _op(name, impl):
    """The registered op (torch.ops.seqmix.<name>) of one implementation: the kernel's op
    itself, or <name>_reference."""
    _choice("impl", impl, _IMPLS)
    return getattr(torch.ops.seqmix, name if impl == "kernel" else name + "_reference").default


def _mask(name, value, padding=None, padding_name="key_padding_mask"):
    """The op's mask (True = valid) from seqmix's ``name`` or PyTorch's ``padding`` (True =
    padding); both at once is an error."""
    if value is not None and padding is not None:
        raise ValueError(f"{name} (True = valid) and {padding_name} (True = padding) are the "
                         "same information in opposite conventions; pass one of them")
    if padding is not None:
        padding = _tensor(padding_name, padding)
        if padding.dtype != torch.bool:
            raise ValueError(f"{padding_name}: expected a bool tensor [B, L] (True = padding), "
                             f"got dtype {padding.dtype}")
        return padding.logical_not()
    value = _tensor(name, value, optional=True)
    if value is not None and value.dtype != torch.bool:
        raise ValueError(f"{name}: expected a bool tensor [B, L] (True = valid position), "
                         f"got dtype {value.dtype}")
    return value


def aib_scan(a, v, w, mask=None, *, direction="causal", weights="prefix_exp", impl="kernel",
             key_padding_mask=None):
    """AIB attention (alias Weird attention) scan: Moss Sec. III, Weird-Net Sec. III.B,
    eqs. 29-38, Algorithms 1 (causal) and 2 (bidirectional).

    With E = exp(A), H = E * V, U = E and per-level distance weights W_j (from ``w``)::

        for j in range(ceil(log2 L)):
            H[:, 2**j:] += H[:, :-2**j] * W_j;  U[:, 2**j:] += U[:, :-2**j] * W_j
        O = H / U

    i.e. O_i is a softmax over the prefix with the prior a_{i-j} = prod_{k in bits(i-j)} W_k.
    Bidirectional: channels [0, D/2) run the prefix form, [D/2, D) the mirrored suffix form.

    Args:
        a: A = X W_A [B, L, D], float32, float64 or bfloat16 (with float32 ``w``).
        v: V = X W_V [B, L, D], same dtype.
        w: level parameters [K, D], K >= ceil(log2 L) (``aib_num_levels``); may be None when
            ``weights='ones'``.
        mask: [B, L] bool, True = valid position, or None. Padded positions contribute
            nothing and output 0; a position with no valid input in its window outputs 0.
        key_padding_mask: the same as PyTorch spells it, [B, L] bool with True = padding
            (``nn.MultiheadAttention``'s convention); give ``mask`` or this, not both.
        direction: 'causal' or 'bidirectional' (D even).
        weights: 'prefix_exp' (W = exp(cumsum(w)), eq. 34), 'exp' (W = exp(w)) or 'ones'
            (PS attention).
        impl: 'kernel' (fused CPU scan, O(B L D log L), never overflows where the result is
            finite, for |v| below 2^64 in float32 and 2^960 in float64) or 'reference'
            (Algorithm 1/2 in ATen ops, each level carrying a maximum per position: exact
            for any finite a, w and v).

    Returns:
        O [B, L, D]; gradients flow to a, v and w.

    Example::

        o = seqmix.ops.aib_scan(a, v, w)      # [B, L, D]
        o.sum().backward()
    """
    _tensor("a", a)
    _tensor("v", v)
    _choice("weights", weights, _AIB_WEIGHTS)
    _tensor("w", w, optional=weights == "ones")
    op = _op("aib_scan", impl)
    return op(a, v, w, _mask("mask", mask, key_padding_mask),
              _choice("direction", direction, _DIRECTIONS), weights)


def aib_scan_fallbacks():
    """Number of times ``aib_scan``'s fused kernels left their fast path since the process
    started (``torch.ops.seqmix.aib_scan_fallbacks()``; C++ ``seqmix::ops::aib_scan_fallbacks``).

    CPU: each channel block (16 float32 or 8 float64 channels of one sequence, one pass)
    rerun on the exponent path, and each call answered whole by the ATen scan (|A| >= 2**19
    or a non-finite A). CUDA: each channel group of one sequence rerun by the exact kernel.
    The answer stays exact; only speed suffers. Normal training never falls back (learned
    distance weights of any size are handled by per-row exponents): a fallback means A spans
    about 70 nats within a few hundred positions, one distance level's weight beyond about
    e^+-50, |V| >= 2**64, or NaN/inf. The
    first fallback of a process also warns once. Reading the CUDA count synchronises the
    device.

    Returns:
        int, a running total (subtract two readings to count the fallbacks of some work).
    """
    return int(torch.ops.seqmix.aib_scan_fallbacks())


def ces_scan(x, coef, mask=None, *, direction="causal", impl="kernel", key_padding_mask=None):
    """Complex exponential smoothing over the sequence: ETSMLP eq. 10 (causal),
    eq. 14 (bidirectional)::

        y_t = sum_{n <= t} Re(c mu^(t-n)) x_n        (s_t = mu s_{t-1} + x_t, y_t = Re(c s_t))

    bidirectional adds sum_{n > t} Re(c' mu'^(n-t-1)) x_n with the second half of the rows.

    Args:
        x: [B, L, H] float32 or float64 (or bfloat16, with float32 coefficients).
        coef: ``ces_coefficients(...)`` with C = H rows (causal) or 2 H (bidirectional: rows
            [0, H) forward, [H, 2H) backward).
        mask: [B, L] bool (True = valid) or None; padded inputs are zeroed, their outputs 0.
        key_padding_mask: [B, L] bool, True = padding (PyTorch's convention), instead of mask.
        direction: 'causal' or 'bidirectional'.
        impl: 'kernel' (the complex recurrence, O(B H L), hand-written backward) or
            'reference' (the authors' FFT convolution with the Vandermonde kernel).

    Returns:
        y [B, L, H] (the module's shortcut omega x is not included).
    """
    _tensor("x", x)
    if not isinstance(coef, tuple) or len(coef) != 3:
        raise TypeError("coef: expected the CESCoefficients that ces_coefficients returns, "
                        f"got {type(coef).__name__}")
    _, mu, c = (_tensor(f"coef.{n}", t) for n, t in zip(("q", "mu", "c"), coef))
    op = _op("ces_scan", impl)
    return op(x, mu, c, _mask("mask", mask, key_padding_mask),
              _choice("direction", direction, _DIRECTIONS))


def attention(q, k, v, key_mask=None, *, direction="causal", impl="kernel",
              key_padding_mask=None):
    """Scaled dot-product softmax attention (Vaswani et al. 2017, eq. 1)::

        O_h = softmax(Q_h K_h^T / sqrt(d_head) + M) V_h

    M = -inf for padded keys and, if causal, future keys. A query that sees no key outputs 0.

    Args:
        q, k, v: [B, H, L, d_head], float32, float64 or bfloat16.
        key_mask: [B, L] bool (True = valid key) or None.
        key_padding_mask: [B, L] bool, True = padded key (``nn.MultiheadAttention``'s and
            ``scaled_dot_product_attention``'s convention), instead of key_mask.
        direction: 'causal' or 'bidirectional'.
        impl: 'kernel' (fused, flash-attention's scheme on the CPU: never stores the [L, L]
            scores; first-order gradients) or 'reference' (the literal formula in ATen ops).

    Returns:
        O [B, H, L, d_head].
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor(name, t)
    op = _op("attention", impl)
    return op(q, k, v, _mask("key_mask", key_mask, key_padding_mask),
              _choice("direction", direction, _DIRECTIONS))


def extractor_conv(x, w, *, impl="kernel"):
    """The Extractor's extraction (The Extractor, Sec. 5, eq. 18): a causal convolution with
    one D x D matrix per lag::

        ext[i] = sum_{k=0..i} x[i - k] @ W[k]

    Args:
        x: [B, t, D] float32 or float64 (or bfloat16, with float32 ``w``).
        w: [l, D, D] lag matrices, l >= t.
        impl: 'kernel' (FFT over the sequence, one batched complex matmul per frequency) or
            'reference' (the literal per-lag sum, O(t^2 D^2)).

    Returns:
        ext [B, t, D].
    """
    return _op("extractor_conv", impl)(_tensor("x", x), _tensor("w", w))
