"""The Extractor (The Extractor, Sec. 5): the layer ``Extractor`` and ``extractor_conv`` in
plain PyTorch (the C++ op: src/mixers/extractor/). Registered as mixer "extractor", section
[model.extractor]; causal only.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from .._mixer import (DecodingState, Mixer, MixerEntry, _IMPLS, _check_length, _check_step,
                      _check_x, _choice, _flag, _positive, register_mixer, valid_mask,
                      float32_compute as _float32, widen as _widen)


# ---- the op in plain PyTorch (seqmix.reference) ---------------------------------------------

def extractor_conv(x, w, impl=None):
    """The Extractor's extraction (The Extractor eq. 18): ext[i] = sum_{k<=i} x[i-k] W[k],
    a causal convolution with one D x D matrix per lag, by FFT over the sequence.
    x [B, t, D], w [l, D, D] (l >= t) -> [B, t, D]."""
    if x.dtype == torch.bfloat16:
        with _float32():
            return extractor_conv(_widen(x), _widen(w)).to(x.dtype)
    t = x.shape[1]
    if t > w.shape[0]:
        raise ValueError(f"extractor_conv: {w.shape[0]} lag matrices cover sequences up to "
                         f"{w.shape[0]}, got t = {t}")
    n = 2 * t
    # Transforms over the last, contiguous dimension (torch.compile's inductor asserts the
    # CPU FFT's output strides, which differ from its fake kernel's for an inner one).
    xf = torch.fft.rfft(x.transpose(1, 2).contiguous(), n, -1)              # [B, D, F]
    wf = torch.fft.rfft(w[:t].permute(1, 2, 0).contiguous(), n, -1)        # [D, E, F]
    y = torch.einsum("bdf,def->bef", xf, wf)                                # [B, E, F]
    return torch.fft.irfft(y, n, -1)[..., :t].transpose(1, 2).contiguous()


# ---- the layer --------------------------------------------------------------------------------

class Extractor(Mixer):
    """The Extractor (The Extractor, Sec. 5, eqs. 18-20): a causal convolution with one
    learned D x D matrix per lag, times an element-wise adjustment, then an output
    projection::

        ext[i] = sum_{k=0..i} x[i-k] @ W_ext[k];  y = W_opt((x W_adj) * ext)

    Parameters: ``w_ext`` [max_len, D, D] ~ N(0, 1/(max_len D)), ``w_adj.weight`` [D, D]
    ~ N(0, 1/D) (with ``adjust``), ``w_opt.weight`` [D, D] ~ N(0, 1/(2 N D)) (with
    ``out_proj``); no biases. Decoding state: the inputs so far [B, t, D].

    Args:
        d_model: D. max_len: the number of lag matrices (the longest sequence).
        adjust, out_proj: the two ablations of the paper. impl: 'kernel' (FFT) or
        'reference' (the literal per-lag sum). n_layers: init only.
    """

    causal = True

    def __init__(self, d_model: int, max_len: int, *, adjust: bool = True,
                 out_proj: bool = True, impl: str = "kernel", n_layers: int = 1, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.max_len = _positive("max_len", max_len)
        self.adjust, self.out_proj = _flag("adjust", adjust), _flag("out_proj", out_proj)
        self.impl = _choice("impl", impl, _IMPLS)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.w_ext = nn.Parameter(torch.empty(max_len, d_model, d_model, **f))
        self.w_adj = nn.Linear(d_model, d_model, bias=False, **f) if adjust else None
        self.w_opt = nn.Linear(d_model, d_model, bias=False, **f) if out_proj else None
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            D, n = self.d_model, self.n_layers
            nn.init.normal_(self.w_ext, 0.0, 1 / math.sqrt(self.max_len * D))
            if self.w_adj is not None:
                nn.init.normal_(self.w_adj.weight, 0.0, 1 / math.sqrt(D))
            if self.w_opt is not None:
                nn.init.normal_(self.w_opt.weight, 0.0, 1 / math.sqrt(2.0 * n * D))

    def _finish(self, x, ext):
        y = self.w_adj(x) * ext if self.w_adj is not None else ext
        return self.w_opt(y) if self.w_opt is not None else y

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("Extractor", x, self.d_model)
        _check_length("Extractor", x, self.max_len, " (the number of lag matrices)")
        mask = valid_mask(x, mask, key_padding_mask)
        if mask is None:
            return self._finish(x, self._ops.extractor_conv(x, self.w_ext, self.impl))
        # Padded inputs zeroed (they feed nothing forward), padded outputs zeroed.
        keep = mask.unsqueeze(-1).to(x.dtype)
        xin = x * keep
        return self._finish(xin, self._ops.extractor_conv(xin, self.w_ext, self.impl)) * keep

    def _init_state(self, batch):
        empty = torch.empty(batch, 0, self.d_model, dtype=self.w_ext.dtype,
                            device=self.w_ext.device)
        return DecodingState("Extractor", batch, [empty])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token: x_t [B, D] -> [B, D]; O(t D^2) per step (every lag is a product)."""
        _check_step("Extractor", x_t, self.d_model, state, "Extractor")
        if state.pos >= self.max_len:
            raise ValueError(f"Extractor.step: position {state.pos} reaches max_len "
                             f"{self.max_len} (the number of lag matrices)")
        history = torch.cat([state.tensors[0], x_t.unsqueeze(1).to(state.tensors[0].dtype)], 1)
        B, t, D = history.shape
        # sum_k x[t-1-k] W[k]: the flipped history against the first t lag matrices, in the
        # history's dtype with autocast off, as the op's own forward computes.
        with torch.autocast(history.device.type, enabled=False):
            ext = torch.matmul(history.flip(1).reshape(B, t * D),
                               self.w_ext[:t].reshape(t * D, D).to(history.dtype))
        state.tensors = [history]
        state.pos += 1
        return self._finish(x_t, ext.to(x_t.dtype))


def _build(family, model, s, f):
    return family["Extractor"](
        model["d_model"], model["max_len"], adjust=s.get("adjust", True),
        out_proj=s.get("out_proj", True), impl=s.get("impl", "kernel"),
        n_layers=model["n_layers"], **f), True


register_mixer(MixerEntry(
    name="extractor", section="extractor", keys=frozenset({"adjust", "out_proj", "impl"}),
    build=_build, classes=(Extractor,), ops=("extractor_conv",), torch_ops=(extractor_conv,),
    causal_only=True))
