"""Softmax self-attention, the baseline the papers measure against: the layer
``SelfAttention`` and ``attention`` in plain PyTorch (the C++ op: src/mixers/attention/).
Registered as mixer "attention", section [model.attention].
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._mixer import (DecodingState, Mixer, MixerEntry, _IMPLS, _check_step, _check_x,
                      _choice, _flag, _linear_init, _out_std, _positive, _probability,
                      register_mixer, valid_mask, float32_compute as _float32,
                      widen as _widen)


# ---- the op in plain PyTorch (seqmix.reference) ---------------------------------------------

def attention_reference(q, k, v, key_mask=None, direction="causal", dropout=0.0):
    """Softmax attention, Vaswani et al. eq. 1, literally: q, k, v [B, H, L, d_head];
    key_mask [B, L] bool (True = valid key). A query that sees no key outputs 0."""
    if q.dtype == torch.bfloat16:
        with _float32():
            return attention_reference(_widen(q), _widen(k), _widen(v), key_mask, direction,
                                       dropout).to(q.dtype)
    L, S = q.shape[2], k.shape[2]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if direction == "causal":
        allowed = torch.tril(allowed)
    allowed = allowed.view(1, 1, L, S)
    if key_mask is not None:
        allowed = allowed & key_mask.view(key_mask.shape[0], 1, 1, S)
    scores = scores.masked_fill(allowed.logical_not(), -math.inf)
    any_key = allowed.any(-1, keepdim=True)
    p = torch.softmax(torch.where(any_key, scores, torch.zeros_like(scores)), -1)
    p = torch.where(any_key & allowed, p, torch.zeros_like(p))
    if dropout > 0:
        p = F.dropout(p, dropout, True)
    return torch.matmul(p, v)


def attention(q, k, v, key_mask=None, direction="causal", impl=None):
    """``attention_reference`` without dropout."""
    return attention_reference(q, k, v, key_mask, direction, 0.0)


# ---- the layer --------------------------------------------------------------------------------

class SelfAttention(Mixer):
    """Multi-head softmax self-attention (Vaswani et al. 2017, eq. 1; GPT-2's layout), the
    baseline of every paper and Weird-Net Structure B's even layers::

        Q, K, V = X W_qkv + b;  head_h = softmax(Q_h K_h^T / sqrt(d_head) + M) V_h
        Y = concat(heads) W_out + b_out

    Without a padding mask it runs PyTorch's ``scaled_dot_product_attention``; with one,
    ``seqmix.ops.attention`` (padded rows output exactly 0, where SDPA gives NaN).

    Parameters: ``qkv`` (Linear D -> 3D), ``out`` (Linear D -> D). Init: qkv ~ N(0, 1/D),
    out ~ N(0, (1 - 2/D) / (2 N D)), biases 0. Decoding state: K and V caches
    [B, H, t, d_head].

    Args:
        d_model: D, divisible by n_heads. n_heads: H. causal: decoder or encoder.
        dropout: on the attention probabilities in training. bias: projection biases.
        impl: 'kernel' or 'reference'. n_layers: init only. device, dtype: of the parameters.
    """

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = True,
                 dropout: float = 0.0, bias: bool = True, impl: str = "kernel",
                 n_layers: int = 1, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model = _positive("d_model", d_model)
        self.n_heads = _positive("n_heads", n_heads)
        if d_model % n_heads:
            raise ValueError(f"n_heads: must divide d_model ({d_model}), got {n_heads}")
        self.causal = _flag("causal", causal)
        self.dropout = _probability("dropout", dropout)
        self.bias = _flag("bias", bias)
        self.impl = _choice("impl", impl, _IMPLS)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias, **f)
        self.out = nn.Linear(d_model, d_model, bias=bias, **f)
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            _linear_init(self.qkv.weight, 1 / math.sqrt(self.d_model))
            _linear_init(self.out.weight, _out_std(self.d_model, self.n_layers))
            if self.bias:
                self.qkv.bias.zero_()
                self.out.bias.zero_()

    def extra_repr(self):
        return f"d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}"

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _check_x("SelfAttention", x, self.d_model)
        mask = valid_mask(x, mask, key_padding_mask)
        B, L, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(x).view(B, L, 3, H, D // H).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        direction = "causal" if self.causal else "bidirectional"
        if mask is None and self.impl == "kernel" and p == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        elif self.impl == "kernel" and p == 0:
            y = self._ops.attention(q, k, v, mask, direction, "kernel")
        else:
            y = self._ops.attention_reference(q, k, v, mask, direction, p)
        y = self.out(y.transpose(1, 2).reshape(B, L, D))
        if mask is not None:
            y = y.masked_fill(mask.logical_not().unsqueeze(-1), 0)
        return y

    def _init_state(self, batch):
        f = {"dtype": self.qkv.weight.dtype, "device": self.qkv.weight.device}
        empty = torch.empty(batch, self.n_heads, 0, self.d_model // self.n_heads, **f)
        return DecodingState("SelfAttention", batch, [empty, empty.clone()])

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token per sequence: x_t [B, D] -> y_t [B, D] (a KV cache)."""
        _check_step("SelfAttention", x_t, self.d_model, state, "SelfAttention")
        B, H, dh = x_t.shape[0], self.n_heads, self.d_model // self.n_heads
        parts = self.qkv(x_t).view(B, 3, H, 1, dh)
        k_cache, v_cache = state.tensors
        k_cache = torch.cat([k_cache, parts[:, 1].to(k_cache.dtype)], 2)
        v_cache = torch.cat([v_cache, parts[:, 2].to(v_cache.dtype)], 2)
        scores = torch.matmul(parts[:, 0], k_cache.transpose(-2, -1)) / math.sqrt(dh)
        y = torch.matmul(torch.softmax(scores, -1), v_cache)
        state.tensors = [k_cache, v_cache]
        state.pos += 1
        return self.out(y.reshape(B, self.d_model))


def _build(family, model, s, f):
    return family["SelfAttention"](
        model["d_model"], model["n_heads"], causal=model["causal"],
        dropout=model.get("dropout", 0.0), bias=model.get("bias", True),
        impl=s.get("impl", "kernel"), n_layers=model["n_layers"], **f), True


register_mixer(MixerEntry(
    name="attention", section="attention", keys=frozenset({"impl"}), build=_build,
    classes=(SelfAttention,), ops=("attention", "attention_reference"),
    torch_ops=(attention, attention_reference)))
