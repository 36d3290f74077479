"""ETSMLP's complex exponential smoothing (CES): the layers ``CES`` and ``ESMLP`` (plain and
gated), ``ces_coefficients``, and ``ces_scan`` in plain PyTorch (the C++ op:
src/mixers/ces/). Registered as mixer "etsmlp", section [model.ces].
"""
from __future__ import annotations

import collections
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._mixer import (DecodingState, Mixer, MixerEntry, _IMPLS, _check_step, _check_x,
                      _choice, _flag, _number, _positive, register_mixer, valid_mask,
                      float32_compute as _float32, widen as _widen)

_SHORTCUTS = ("omega", "sigmoid", "none")

CESCoefficients = collections.namedtuple("CESCoefficients", ["q", "mu", "c"])
CESCoefficients.__doc__ = """The CES recurrence's per-channel coefficients, each [C, 2]
(real, imaginary): q (constrained log of mu), mu = exp(q), c (output weights)."""


# ---- the scan in plain PyTorch (seqmix.reference) -----------------------------------------

def ces_scan(x, mu, c, mask=None, direction="causal", impl=None):
    """Complex exponential smoothing, ETSMLP eq. 10 (eq. 14 bidirectional), as the authors'
    code computes it: a convolution with the Vandermonde kernel K[n] = Re(c mu^n) by FFT.
    x [B, L, H]; mu, c [C, 2] (C = H, or 2H: forward rows then backward rows) -> [B, L, H].
    The FFT's rounding error is absolute (about eps log2(L) max|x| sum|K| per batch and
    channel) and reaches every position, the causal form's earlier ones too: outputs far
    below that bound are not exact, and a huge later input moves earlier outputs by its
    rounding (the extension's recurrence, ``torch.ops.seqmix.ces_scan``, is exact position
    by position and causal exactly)."""
    if x.dtype == torch.bfloat16:
        with _float32():
            return ces_scan(_widen(x), _widen(mu), _widen(c), mask, direction).to(x.dtype)
    B, L, H = x.shape
    if L == 0 or H == 0 or B == 0:
        return torch.zeros_like(x)
    if mask is not None:
        x = x.masked_fill(mask.logical_not().unsqueeze(-1), 0)
    n = torch.arange(L, dtype=x.dtype, device=x.device).unsqueeze(0)
    mag = torch.sqrt(mu[:, 0] ** 2 + mu[:, 1] ** 2).unsqueeze(1)
    angle = torch.atan2(mu[:, 1], mu[:, 0]).unsqueeze(1)
    decay = torch.pow(mag, n)
    kernel = c[:, 0:1] * decay * torch.cos(n * angle) - c[:, 1:2] * decay * torch.sin(n * angle)
    if direction == "causal":
        k2l = F.pad(kernel, (0, L))
    else:
        # [K_fwd(0 .. L-1), flip(K_bwd(0 .. L-1))]: position 2L - m holds the backward
        # kernel's lag m (coefficient m - 1), m = 1 .. L.
        k2l = torch.cat([kernel[:H], kernel[H:].flip(1)], 1)
    xf = torch.fft.rfft(x.transpose(1, 2), 2 * L, -1)
    kf = torch.fft.rfft(k2l, 2 * L, -1)
    y = torch.fft.irfft(xf * kf, 2 * L, -1)[..., :L].transpose(1, 2)
    if mask is not None:
        y = y.masked_fill(mask.logical_not().unsqueeze(-1), 0)
    return y.contiguous()


# ---- the layers -------------------------------------------------------------------------------

def ces_coefficients(log_lambda: torch.Tensor, log_alpha: torch.Tensor,
                     log_beta: torch.Tensor, max_lambda: float = 0.9999,
                     normalize: bool = False) -> CESCoefficients:
    """Complex exponential smoothing coefficients: ETSMLP Sec. 3.1, eqs. 10-12 (the authors'
    code, module/smlp_module.py, class CETS), complex numbers as [..., 2] (real, imaginary)::

        q = exp(log_lambda) * alpha,  alpha = e^{a0} + i e^{a1},  mu = exp(q)
        if |mu| > max_lambda: Re q = log(max_lambda)      (no gradient through the bound)
        c = exp(log_beta) (1 - mu)  [* sqrt(1 - |mu|^2) if normalize]

    Args:
        log_lambda, log_alpha, log_beta: [C, 2] floating tensors of one dtype (complex as
            [.., 2]), on any device.
        max_lambda: bound on |mu| in (0, 1] (below 1 with ``normalize``).
        normalize: the LRU-style normalisation of c.

    Returns:
        CESCoefficients(q, mu, c), each [C, 2], differentiable in the three parameters.

    Raises:
        TypeError for a non-tensor, a non-bool ``normalize`` or a non-number ``max_lambda``;
        ValueError for other shapes or dtypes, or ``max_lambda`` out of range.
    """
    for name, t in (("log_lambda", log_lambda), ("log_alpha", log_alpha),
                    ("log_beta", log_beta)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor [C, 2], got {type(t).__name__}")
        if t.dim() != 2 or t.shape[1] != 2 or t.shape[0] != log_lambda.shape[0]:
            raise ValueError(f"ces_coefficients: {name} must be [C, 2] with C = "
                             f"{log_lambda.shape[0]} (log_lambda's rows), got {list(t.shape)}")
        if not t.is_floating_point() or t.dtype != log_lambda.dtype:
            raise ValueError("ces_coefficients: log_lambda, log_alpha and log_beta must share "
                             f"a floating dtype, got {log_lambda.dtype} and {t.dtype} ({name})")
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize: expected a bool, got {type(normalize).__name__}")
    if not isinstance(max_lambda, (int, float)) or isinstance(max_lambda, bool):
        raise TypeError(f"max_lambda: expected a number in (0, 1], got "
                        f"{type(max_lambda).__name__}")
    if not 0 < max_lambda <= 1:
        raise ValueError(f"ces_coefficients: max_lambda must be in (0, 1], got {max_lambda}")
    if normalize and max_lambda >= 1:
        raise ValueError("ces_coefficients: normalize needs max_lambda < 1 (sqrt(1 - |mu|^2) "
                         "has no gradient at |mu| = 1)")
    mag_w = torch.exp(log_lambda[:, 0])
    wr, wi = mag_w * torch.cos(log_lambda[:, 1]), mag_w * torch.sin(log_lambda[:, 1])
    ar, ai = torch.exp(log_alpha[:, 0]), torch.exp(log_alpha[:, 1])
    qr = wr * ar - wi * ai
    qi = wr * ai + wi * ar
    log_max = math.log(max_lambda)
    over = (qr > log_max).to(qr.dtype)
    qr = qr + over * (log_max - qr)
    mag = torch.exp(qr)
    mur, mui = mag * torch.cos(qi), mag * torch.sin(qi)
    mag_b = torch.exp(log_beta[:, 0])
    br, bi = mag_b * torch.cos(log_beta[:, 1]), mag_b * torch.sin(log_beta[:, 1])
    cr = br * (1 - mur) + bi * mui
    ci = bi * (1 - mur) - br * mui
    if normalize:
        f = torch.sqrt(1 - mag * mag)
        cr, ci = cr * f, ci * f
    return CESCoefficients(torch.stack([qr, qi], 1), torch.stack([mur, mui], 1),
                           torch.stack([cr, ci], 1))


class CES(nn.Module):
    """Complex exponential smoothing with its shortcut: ETSMLP Sec. 3.1, eqs. 10-14 (the
    authors' class CETS): y = ces_scan(x) + omega * x (``shortcut='sigmoid'``: sigmoid(omega)
    * x, eq. 13), s_t = mu s_{t-1} + x_t, y_t = Re(c s_t).

    Parameters (C = channels, 2 channels when bidirectional; P = 2, or 1 with ``real``):
    ``log_lambda`` [C, P], ``log_alpha`` [C, P] (unless ``alpha=False``), ``log_beta``
    [C, P] (unless ``beta=False``), ``omega`` [channels] (unless shortcut 'none').
    Init: |lambda| on the ring [r_min, r_max] (|lambda|^2 uniform) with phase uniform in
    [0, max_phase], log_alpha = log dt (dt log-uniform in [dt_min, dt_max]),
    log_beta ~ N(0, 0.2^2), omega ~ N(0, 1).

    forward(x [B, L, channels], mask=None, *, key_padding_mask=None) -> [B, L, channels].
    Decoding state: s [B, channels, 2] (complex).
    """

    _ops = Mixer._ops

    def __init__(self, channels: int, *, bidirectional: bool = False, r_min: float = 0.1,
                 r_max: float = 0.9, max_phase: float = 2 * math.pi, dt_min: float = 1e-3,
                 dt_max: float = 0.1, max_lambda: float = 0.9999, shortcut: str = "omega",
                 normalize: bool = False, impl: str = "kernel", alpha: bool = True,
                 beta: bool = True, real: bool = False, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.channels = _positive("channels", channels)
        self.bidirectional = _flag("bidirectional", bidirectional)
        self.r_min, self.r_max = _number("r_min", r_min), _number("r_max", r_max)
        if not 0 < r_min <= r_max < 1:
            raise ValueError(f"r_min, r_max: need 0 < r_min <= r_max < 1, got {r_min}, {r_max}")
        self.max_phase = _number("max_phase", max_phase)
        if max_phase < 0:
            raise ValueError(f"max_phase: must be a finite number >= 0 (radians), got {max_phase}")
        self.dt_min, self.dt_max = _number("dt_min", dt_min), _number("dt_max", dt_max)
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"dt_min, dt_max: need 0 < dt_min <= dt_max, got {dt_min}, "
                             f"{dt_max}")
        self.max_lambda = _number("max_lambda", max_lambda)
        self.normalize = _flag("normalize", normalize)
        if not 0 < max_lambda <= 1 or (normalize and max_lambda >= 1):
            raise ValueError("max_lambda: must be in (0, 1] (below 1 with normalize), got "
                             f"{max_lambda}")
        self.shortcut = _choice("shortcut", shortcut, _SHORTCUTS)
        self.impl = _choice("impl", impl, _IMPLS)
        self.alpha, self.beta, self.real = (_flag("alpha", alpha), _flag("beta", beta),
                                            _flag("real", real))
        C, P = (2 if bidirectional else 1) * channels, 1 if real else 2
        f = {"device": device, "dtype": dtype}
        self.log_lambda = nn.Parameter(torch.empty(C, P, **f))
        self.log_alpha = nn.Parameter(torch.empty(C, P, **f)) if alpha else None
        self.log_beta = nn.Parameter(torch.empty(C, P, **f)) if beta else None
        self.omega = nn.Parameter(torch.empty(channels, **f)) if shortcut != "none" else None
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            C = self.log_lambda.shape[0]
            u1 = torch.rand(C, dtype=torch.float64)
            u2 = torch.rand(C, dtype=torch.float64)
            nu = -0.5 * torch.log(u1 * (self.r_max ** 2 - self.r_min ** 2) + self.r_min ** 2)
            theta = torch.zeros_like(u2) if self.real else self.max_phase * u2
            self.log_lambda[:, 0].copy_(0.5 * torch.log(nu * nu + theta * theta))
            if not self.real:
                self.log_lambda[:, 1].copy_(torch.atan2(theta, -nu))
            # Drawn even when unused: the other parameters get the same values with and
            # without an ablation.
            log_dt = math.log(self.dt_min) + torch.rand(C, dtype=torch.float64) * (
                math.log(self.dt_max) - math.log(self.dt_min))
            if self.log_alpha is not None:
                self.log_alpha.copy_(log_dt.unsqueeze(1).expand_as(self.log_alpha))
            if self.log_beta is not None:
                nn.init.normal_(self.log_beta, 0.0, 0.2)
            if self.omega is not None:
                nn.init.normal_(self.omega, 0.0, 1.0)

    def extra_repr(self):
        return (f"channels={self.channels}, bidirectional={self.bidirectional}, "
                f"shortcut={self.shortcut!r}, normalize={self.normalize}")

    def coefficients(self):
        """(q, mu, c), each [C, 2], from the parameters (the ablations' fixed parts filled
        in: a real lambda has argument pi, an absent alpha or beta is 1)."""
        ll = self.log_lambda

        def complete(p, imaginary):
            return torch.cat([p, torch.full_like(p, imaginary)], 1) if self.real else p

        C = ll.shape[0]
        one = torch.tensor([0.0, -math.inf], dtype=ll.dtype, device=ll.device).expand(C, 2)
        la = complete(self.log_alpha, -math.inf) if self.log_alpha is not None else one
        lb = (complete(self.log_beta, 0.0) if self.log_beta is not None
              else torch.zeros(C, 2, dtype=ll.dtype, device=ll.device))
        return ces_coefficients(complete(ll, math.pi), la, lb, max_lambda=self.max_lambda,
                                normalize=self.normalize)

    def _shortcut(self, x):
        if self.shortcut == "omega":
            return x * self.omega
        if self.shortcut == "sigmoid":
            return x * torch.sigmoid(self.omega)
        return None

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("CES", x, self.channels)
        mask = valid_mask(x, mask, key_padding_mask)
        _, mu, c = self.coefficients()
        y = self._ops.ces_scan(x, mu, c, mask,
                               "bidirectional" if self.bidirectional else "causal", self.impl)
        s = self._shortcut(x)
        return y if s is None else y + s

    def init_state(self, batch):
        """Decoding state s = 0 [batch, channels, 2]. RuntimeError if bidirectional."""
        _positive("batch", batch)
        if self.bidirectional:
            raise RuntimeError("CES: a bidirectional CES cannot decode step by step")
        s = torch.zeros(batch, self.channels, 2, dtype=self.log_lambda.dtype,
                        device=self.log_lambda.device)
        return DecodingState("CES", batch, [s])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """s <- mu s + x_t, y_t = Re(c s) (+ the shortcut): x_t [B, channels] -> [B, channels]."""
        if self.bidirectional:
            raise RuntimeError("CES: a bidirectional CES cannot decode step by step")
        _check_step("CES", x_t, self.channels, state, "CES")
        _, mu, c = self.coefficients()
        s = state.tensors[0]
        sr, si = s[..., 0], s[..., 1]
        nr = mu[:, 0] * sr - mu[:, 1] * si + x_t
        ni = mu[:, 0] * si + mu[:, 1] * sr
        state.tensors = [torch.stack([nr, ni], 2)]
        state.pos += 1
        y = c[:, 0] * nr - c[:, 1] * ni
        sc = self._shortcut(x_t)
        return y if sc is None else y + sc


class ESMLP(Mixer):
    """The ETSMLP block's mixer (ETSMLP Sec. 3.2, Fig. 2): in_proj (D -> H), CES over the H
    channels, ReLU, out_proj (H -> D), optionally gated by sigmoid(W_g X) (ETSMLP-Gate).

    Parameters: ``in_proj``, ``ces.*`` (see CES), ``out_proj``, ``gate_proj`` if gated.
    Init: Xavier-uniform weights, zero biases (the authors' reset).

    Args:
        d_model: D. d_hidden: H, the CES channels. causal: language modelling (True) or the
        paper's bidirectional encoder. gate: ETSMLP-Gate. The rest: CES's options.
    """

    def __init__(self, d_model: int, d_hidden: int, *, causal: bool = True,
                 gate: bool = False, r_min: float = 0.1, r_max: float = 0.9,
                 max_phase: float = 2 * math.pi, dt_min: float = 1e-3, dt_max: float = 0.1,
                 max_lambda: float = 0.9999, shortcut: str = "omega", normalize: bool = False,
                 impl: str = "kernel", alpha: bool = True, beta: bool = True,
                 real: bool = False, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.d_hidden = _positive("d_hidden", d_hidden)
        self.causal = _flag("causal", causal)
        self.gate = _flag("gate", gate)
        f = {"device": device, "dtype": dtype}
        self.in_proj = nn.Linear(d_model, d_hidden, **f)
        self.ces = self._family["CES"](d_hidden, bidirectional=not causal, r_min=r_min,
                                   r_max=r_max, max_phase=max_phase, dt_min=dt_min,
                                   dt_max=dt_max, max_lambda=max_lambda, shortcut=shortcut,
                                   normalize=normalize, impl=impl, alpha=alpha, beta=beta,
                                   real=real, **f)
        self.out_proj = nn.Linear(d_hidden, d_model, **f)
        self.gate_proj = nn.Linear(d_model, d_model, **f) if gate else None
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            for lin in (self.in_proj, self.out_proj, self.gate_proj):
                if lin is not None:
                    nn.init.xavier_uniform_(lin.weight)
                    lin.bias.zero_()

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("ESMLP", x, self.d_model)
        mask = valid_mask(x, mask, key_padding_mask)
        h = self.in_proj(x)
        if mask is not None:
            h = h.masked_fill(mask.logical_not().unsqueeze(-1), 0)
        z = self.out_proj(torch.relu(self.ces(h, mask)))
        return z if self.gate_proj is None else z * torch.sigmoid(self.gate_proj(x))

    def _init_state(self, batch):
        return DecodingState("ESMLP", batch, [self.ces.init_state(batch)])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token: x_t [B, D] -> [B, D] (CES's recurrence, O(H) per step)."""
        _check_step("ESMLP", x_t, self.d_model, state, "ESMLP")
        z = self.out_proj(torch.relu(self.ces.step(self.in_proj(x_t), state.tensors[0])))
        state.pos += 1
        return z if self.gate_proj is None else z * torch.sigmoid(self.gate_proj(x_t))


def _build(family, model, s, f):
    s = dict(s)
    gate = s.pop("gate", False)
    return family["ESMLP"](model["d_model"], model["d_ff"], causal=model["causal"], gate=gate,
                           **s, **f), False


register_mixer(MixerEntry(
    name="etsmlp", section="ces",
    keys=frozenset({"gate", "shortcut", "normalize", "r_min", "r_max", "max_phase",
                    "max_lambda", "impl", "alpha", "beta", "real"}),
    build=_build, classes=(CES, ESMLP), functions=(ces_coefficients,), ops=("ces_scan",),
    torch_ops=(ces_scan,)))
