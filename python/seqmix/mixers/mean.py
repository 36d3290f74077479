"""The causal mean, seqmix's template of a mixer (its C++ half: src/mixers/mean/): the layer
``CausalMean`` and ``causal_mean`` in plain PyTorch. Registered as mixer "causal-mean",
section [model.mean]; causal only.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._mixer import (DecodingState, Mixer, MixerEntry, _IMPLS, _check_step, _check_x,
                      _choice, _positive, register_mixer, valid_mask,
                      float32_compute as _float32, widen as _widen)


# ---- the op in plain PyTorch (seqmix.reference) ---------------------------------------------

def causal_mean(x, window, mask=None, impl=None):
    """The mean of the last ``window`` valid positions (0 at padded ones): x [B, L, D]."""
    if x.dtype == torch.bfloat16:
        with _float32():
            return causal_mean(_widen(x), window, mask).to(x.dtype)
    valid = (mask.to(x.dtype) if mask is not None
             else torch.ones(x.shape[:2], dtype=x.dtype, device=x.device))

    def window_sum(t):
        pad = [0, 0] * (t.dim() - 2) + [window - 1, 0]
        return F.pad(t, pad).unfold(1, window, 1).sum(-1)

    count = window_sum(valid)
    inv = torch.where(valid > 0, 1 / count.clamp_min(1), torch.zeros_like(count))
    return window_sum(x * valid.unsqueeze(-1)) * inv.unsqueeze(-1)


# ---- the layer --------------------------------------------------------------------------------

class CausalMean(Mixer):
    """The causal-mean mixer (seqmix's example of a mixer added in one folder,
    src/mixers/mean): Y = W_o causal_mean(W_v X) (``torch.ops.seqmix.causal_mean``: the
    mean of the last ``window`` valid positions). Parameters ``w_v`` (no bias), ``w_o``;
    W_v ~ N(0, 1/D), W_o ~ N(0, 1/(2 N D)), bias 0."""

    causal = True

    def __init__(self, d_model: int, window: int = 4, *, impl: str = "kernel",
                 n_layers: int = 1, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.window = _positive("window", window)
        self.impl = _choice("impl", impl, _IMPLS)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.w_v = nn.Linear(d_model, d_model, bias=False, **f)
        self.w_o = nn.Linear(d_model, d_model, **f)
        with torch.no_grad():
            nn.init.normal_(self.w_v.weight, 0.0, 1 / math.sqrt(d_model))
            nn.init.normal_(self.w_o.weight, 0.0, 1 / math.sqrt(2.0 * n_layers * d_model))
            self.w_o.bias.zero_()

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("CausalMean", x, self.d_model)
        mask = valid_mask(x, mask, key_padding_mask)
        y = self.w_o(self._ops.causal_mean(self.w_v(x), self.window, mask, self.impl))
        return y if mask is None else y * mask.unsqueeze(-1).to(y.dtype)

    def _init_state(self, batch):
        empty = torch.empty(batch, 0, self.d_model, dtype=self.w_v.weight.dtype,
                            device=self.w_v.weight.device)
        return DecodingState("CausalMean", batch, [empty])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        _check_step("CausalMean", x_t, self.d_model, state, "CausalMean")
        last = torch.cat([state.tensors[0], self.w_v(x_t).unsqueeze(1).to(
            state.tensors[0].dtype)], 1)[:, -self.window:]
        state.tensors = [last]
        state.pos += 1
        return self.w_o(last.mean(1))


def _build(family, model, s, f):
    return family["CausalMean"](model["d_model"], s.get("window", 4),
                                impl=s.get("impl", "kernel"), n_layers=model["n_layers"],
                                **f), True


register_mixer(MixerEntry(
    name="causal-mean", section="mean", keys=frozenset({"window", "impl"}), build=_build,
    classes=(CausalMean,), ops=("causal_mean",), torch_ops=(causal_mean,), causal_only=True))
