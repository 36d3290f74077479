"""The seqmix layers and models as ordinary ``torch.nn.Module``s, written once for two sets of
ops (internal; users import ``seqmix.nn`` or ``seqmix.reference``).

Each class here owns its parameters (``nn.Linear``, ``nn.Parameter``) with the names and the
initialisation of its C++ twin (include/seqmix/nn/*.h, models/sequence_model.h), so a state
dict loads into either, and the same seed draws the same weights in the same order. The
sequence mixing itself is one call to ``self._ops`` (a class attribute):

* ``seqmix.nn`` binds the ops PyTorch's dispatcher holds (``torch.ops.seqmix.*``, the fused
  CPU kernels or the ATen references, chosen by ``impl``), which need the extension;
* ``seqmix.reference`` binds plain-PyTorch versions of the papers' algorithms
  (seqmix/_torch_ops.py), which need nothing but torch.

Nothing else differs, so everything PyTorch does with modules (deepcopy, pickling,
``torch.save(model)``, parametrizations, ``functional_call``, ``apply``, hooks, ``.to()``,
``torch.compile``, ``torch.export``) works on both as on modules built from ``nn.Linear``.

Masks: every forward takes ``mask`` [B, L] bool, True = valid position (seqmix's
convention), or ``key_padding_mask`` [B, L] bool, True = padding (``nn.MultiheadAttention``'s
convention) -- never both. Padded positions contribute nothing to any mixer's output (a
BatchNorm block in training still counts them in its batch statistics, as the C++ one does).
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ._mixer import (BASE_FAMILY, DecodingState, Mixer, _choice, _flag, _positive,  # noqa: F401
                     _probability, find_mixer, mixers, valid_mask)


# ---- blocks and models ----------------------------------------------------------------------

_ACTIVATIONS = ("gelu", "relu", "leaky_relu")


class FeedForward(nn.Module):
    """The block's MLP: w_2(act(w_1 x)), act GELU (GPT-2), ReLU or Leaky-ReLU (slope 0.01,
    Moss). Init: W_1 ~ N(0, 1/D), W_2 ~ N(0, 1.7047^2 (1 - 2/D) / (2 N F)), biases 0."""

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "gelu",
                 dropout: float = 0.0, bias: bool = True, n_layers: int = 1, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.d_model, self.d_ff = _positive("d_model", d_model), _positive("d_ff", d_ff)
        self.activation = _choice("activation", activation, _ACTIVATIONS)
        self.dropout = _probability("dropout", dropout)
        self.bias = _flag("bias", bias)
        self.n_layers = _positive("n_layers", n_layers)
        f = {"device": device, "dtype": dtype}
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias, **f)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias, **f)
        with torch.no_grad():
            nn.init.normal_(self.w_1.weight, 0.0, 1 / math.sqrt(d_model))
            std = 1.7047 * math.sqrt(max(1.0 - 2.0 / d_model, 1e-3) / (2.0 * n_layers * d_ff))
            nn.init.normal_(self.w_2.weight, 0.0, std)
            if bias:
                self.w_1.bias.zero_()
                self.w_2.bias.zero_()

    def forward(self, x):
        h = self.w_1(x)
        if self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "relu":
            h = F.relu(h)
        else:
            h = F.leaky_relu(h, 0.01)
        if self.dropout > 0 and self.training:
            h = F.dropout(h, self.dropout, True)
        return self.w_2(h)


class Block(nn.Module):
    """One layer of a seqmix stack (Weird-Net Sec. III.E, Fig. 4): norm -> mixer -> residual,
    norm -> FFN -> residual (pre-norm, GPT-2's arrangement; ``pre_norm=False``: post-norm).
    Without an FFN (``with_ffn=False``) it is norm -> mixer -> residual: the ETSMLP block,
    whose ESMLP mixer is itself the MLP.

    Parameters: ``mixer.*`` (the given mixer's own), ``ffn.w_1``, ``ffn.w_2``, and
    ``norm_1``, ``norm_2`` (LayerNorm) or ``bn_1``, ``bn_2`` (BatchNorm over batch and
    positions, ``norm_type='batch'``).

    Args:
        mixer: a seqmix mixer module (AIBAttention, SelfAttention, ESMLP, Extractor, ...).
        d_ff: FFN width (default 4 D). activation: 'gelu', 'relu' or 'leaky_relu'.
        ffn_bias, pre_norm, dropout (residual and FFN), norm (False: no norms, the
        Extractor paper's stack), with_ffn, norm_type ('layer' or 'batch'), n_layers.

    forward(x [B, L, D], mask=None, *, key_padding_mask=None) -> [B, L, D];
    step(x_t [B, D], state) with the mixer's ``init_state``.
    """

    def __init__(self, mixer: Mixer, *, d_ff: Optional[int] = None, activation: str = "gelu",
                 ffn_bias: bool = True, pre_norm: bool = True, dropout: float = 0.0,
                 norm: bool = True, with_ffn: bool = True, norm_type: str = "layer",
                 n_layers: int = 1, device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        if not isinstance(mixer, Mixer):
            raise TypeError("mixer: expected a seqmix mixer (AIBAttention, SelfAttention, "
                            f"ESMLP, Extractor, CausalMean), got {type(mixer).__name__}")
        D = mixer.d_model
        self.d_model = D
        self.pre_norm = _flag("pre_norm", pre_norm)
        self.dropout = _probability("dropout", dropout)
        _flag("norm", norm)
        _flag("with_ffn", with_ffn)
        _choice("norm_type", norm_type, ("layer", "batch"))
        f = {"device": device, "dtype": dtype}
        self.mixer = mixer
        self.ffn = FeedForward(D, 4 * D if d_ff is None else _positive("d_ff", d_ff),
                               activation=activation, dropout=dropout, bias=ffn_bias,
                               n_layers=n_layers, **f) if with_ffn else None
        self.norm_1 = self.norm_2 = self.bn_1 = self.bn_2 = None
        if norm and norm_type == "layer":
            self.norm_1 = nn.LayerNorm(D, **f)
            self.norm_2 = nn.LayerNorm(D, **f) if with_ffn else None
        elif norm:
            self.bn_1 = nn.BatchNorm1d(D, **f)
            self.bn_2 = nn.BatchNorm1d(D, **f) if with_ffn else None

    @staticmethod
    def _norm(ln, bn, x):
        if ln is not None:
            return ln(x)
        if bn is None:
            return x
        return bn(x.transpose(1, 2)).transpose(1, 2) if x.dim() == 3 else bn(x)

    def _drop(self, x):
        return F.dropout(x, self.dropout, True) if self.dropout > 0 and self.training else x

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        mask = valid_mask(x, mask, key_padding_mask)
        n1 = lambda t: self._norm(self.norm_1, self.bn_1, t)  # noqa: E731
        n2 = lambda t: self._norm(self.norm_2, self.bn_2, t)  # noqa: E731
        if self.pre_norm:
            h = x + self._drop(self.mixer(n1(x), mask))
            return h if self.ffn is None else h + self._drop(self.ffn(n2(h)))
        h = n1(x + self._drop(self.mixer(x, mask)))
        return h if self.ffn is None else n2(h + self._drop(self.ffn(h)))

    def step(self, x_t: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """One token: x_t [B, D] -> [B, D], with a state from ``self.mixer.init_state``."""
        n1 = lambda t: self._norm(self.norm_1, self.bn_1, t)  # noqa: E731
        n2 = lambda t: self._norm(self.norm_2, self.bn_2, t)  # noqa: E731
        if self.pre_norm:
            h = x_t + self.mixer.step(n1(x_t), state)
            return h if self.ffn is None else h + self.ffn(n2(h))
        h = n1(x_t + self.mixer.step(x_t, state))
        return h if self.ffn is None else n2(h + self.ffn(h))


def _section(model, entry):
    section = model.get(entry.section, {})
    if not isinstance(section, dict):
        raise ValueError(f"model.{entry.section}: expected a table of options, got {section!r}")
    unknown = sorted(set(section) - entry.keys)
    if unknown:
        raise ValueError(f"model.{entry.section}.{unknown[0]}: unknown key (expected one of "
                         f"{', '.join(sorted(entry.keys))})")
    return section


def _build_mixer(family, name, model, f):
    """Layer ``name`` of the mixer registry from the [model] configuration, as the C++
    registry row builds it; (mixer, has_ffn)."""
    entry = find_mixer(name)
    return entry.build(family, model, _section(model, entry), f)


_MODEL_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len", "mixers",
               "causal")


class SequenceModel(nn.Module):
    """The stack every seqmix model shares (Weird-Net Sec. III.E, Fig. 4; GPT-2 for the
    Transformer): token embedding + learned position embedding, ``n_layers`` blocks whose
    mixers ``model.mixers`` names (layer i: mixers[i % len(mixers)]), a final LayerNorm,
    and the language-model head (tied to the token embedding unless
    ``tie_embeddings = false``); classifiers add ``cls_head`` (and ``cls_pair_proj``).

    Built from the [model] section of a resolved seqmix configuration (a dict, as
    ``config.toml`` of a run holds it, or ``seqmix.build(...).config["model"]``). Parameter
    names, shapes and initialisation are those of the C++ model (models/sequence_model.h),
    so state dicts load both ways.

    Legend: B batch, L sequence length (<= max_len), D = d_model, V = vocab_size.
    ``forward(tokens [B, L] int64, mask=None, *, key_padding_mask=None)`` -> logits
    [B, L, V] in the parameters' dtype (bfloat16 under CPU autocast).
    Raises ValueError for L > max_len or a mask of the wrong shape or dtype, IndexError
    for a token id outside [0, V).
    """

    _family = BASE_FAMILY  # the classes it builds from: seqmix.nn's or seqmix.reference's

    def __init__(self, model_config: dict, *, device=None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        if not isinstance(model_config, dict):
            raise TypeError("model_config: expected the [model] section as a dict, got "
                            f"{type(model_config).__name__}")
        missing = [k for k in _MODEL_KEYS if k not in model_config]
        if missing:
            raise ValueError(f"model_config: missing model.{', model.'.join(missing)}")
        c = model_config
        self.model_config = dict(c)
        D = _positive("model.d_model", c["d_model"])
        self.vocab_size = _positive("model.vocab_size", c["vocab_size"])
        self.max_len = _positive("model.max_len", c["max_len"])
        self.causal = _flag("model.causal", c["causal"])
        self.tie_embeddings = _flag("model.tie_embeddings", c.get("tie_embeddings", True))
        n_layers = _positive("model.n_layers", c["n_layers"])
        mixers = c["mixers"]
        if not isinstance(mixers, (list, tuple)) or not mixers:
            raise ValueError(f"model.mixers: expected a non-empty list of names, got {mixers!r}")
        causal_only = sorted(n for n in set(mixers) if isinstance(n, str) and
                             find_mixer(n).causal_only)
        if not self.causal and causal_only:
            raise ValueError(f"model.mixers: {causal_only[0]} is causal only; an encoder "
                             "(model.causal = false) cannot use it")
        n_classes = c.get("n_classes", 0)
        if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 0:
            raise ValueError(f"model.n_classes: expected an int >= 0, got {n_classes!r}")
        cls_pair = _flag("model.cls_pair", c.get("cls_pair", False))
        if cls_pair and n_classes == 0:
            raise ValueError("model.cls_pair: a pair classifier needs model.n_classes > 0")
        f = {"device": device, "dtype": dtype}
        self.tok_emb = nn.Embedding(self.vocab_size, D, **f)
        self.pos_emb = nn.Parameter(torch.empty(self.max_len, D, **f))
        self.blocks = nn.ModuleList()
        norm = c.get("norm", True)
        for i in range(n_layers):
            # The mixer first, then its block: the order the C++ model draws its weights in.
            mixer, has_ffn = _build_mixer(self._family, mixers[i % len(mixers)], c, f)
            self.blocks.append(self._family["Block"](
                mixer, d_ff=c["d_ff"], activation=c.get("activation", "gelu"),
                ffn_bias=c.get("bias", True), pre_norm=c.get("pre_norm", True),
                dropout=c.get("dropout", 0.0), norm=norm, with_ffn=has_ffn,
                norm_type=c.get("norm_type", "layer"), n_layers=n_layers, **f))
        self.dropout = _probability("model.dropout", c.get("dropout", 0.0))
        self.norm_f = nn.LayerNorm(D, **f) if norm else None
        self.head = None if self.tie_embeddings else nn.Linear(D, self.vocab_size, bias=False,
                                                               **f)
        self.cls_head = nn.Linear(D, n_classes, **f) if n_classes > 0 else None
        self.cls_pair_proj = nn.Linear(4 * D, D, **f) if cls_pair else None
        with torch.no_grad():
            std = 1 / math.sqrt(D)
            nn.init.normal_(self.tok_emb.weight, 0.0, std)
            nn.init.normal_(self.pos_emb, 0.0, std)
            if self.head is not None:
                nn.init.normal_(self.head.weight, 0.0, std)
            if self.cls_head is not None:
                nn.init.normal_(self.cls_head.weight, 0.0, std)
                self.cls_head.bias.zero_()
            if self.cls_pair_proj is not None:
                nn.init.normal_(self.cls_pair_proj.weight, 0.0, 1 / math.sqrt(4.0 * D))
                self.cls_pair_proj.bias.zero_()

    def _check_tokens(self, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or \
                tokens.dtype != torch.int64:
            what = (f"{tokens.dtype} {list(tokens.shape)}" if isinstance(tokens, torch.Tensor)
                    else type(tokens).__name__)
            raise ValueError(f"tokens: expected an int64 tensor [B, L], got {what}")
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens: sequence length {tokens.shape[1]} exceeds max_len "
                             f"{self.max_len} (model.max_len)")
        where = self.tok_emb.weight.device
        if tokens.device != where:
            raise ValueError(f"tokens: on {tokens.device}, but the model is on {where} "
                             "(move one with .to())")
        # A value check reads the data: skipped while torch.compile / export traces, and on
        # the meta device (shapes only, no values).
        if tokens.numel() and not tokens.is_meta and not torch.compiler.is_compiling() and \
                not torch.jit.is_tracing():
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < 0 or hi >= self.vocab_size:
                raise IndexError(f"tokens: ids must be in [0, {self.vocab_size}) "
                                 f"(model.vocab_size), got {lo} .. {hi}")

    def hidden(self, tokens, mask=None, *, key_padding_mask=None):
        """Hidden states after the final norm: tokens [B, L] -> [B, L, D]."""
        self._check_tokens(tokens)
        mask = valid_mask(tokens, mask, key_padding_mask)
        L = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb[:L]
        if self.dropout > 0 and self.training:
            x = F.dropout(x, self.dropout, True)
        for block in self.blocks:
            x = block(x, mask)
        return x if self.norm_f is None else self.norm_f(x)

    def logits(self, h):
        """Next-token logits from hidden states: [..., D] -> [..., V]."""
        return torch.matmul(h, self.tok_emb.weight.t()) if self.head is None else self.head(h)

    def forward(self, tokens: torch.Tensor, mask: Optional[torch.Tensor] = None, *,
                key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Next-token logits: tokens [B, L] -> [B, L, V]."""
        return self.logits(self.hidden(tokens, mask, key_padding_mask=key_padding_mask))

    def pooled(self, tokens, mask=None, *, key_padding_mask=None):
        """One vector per sequence: the mean over valid positions (encoders) or the last
        valid position (decoders): tokens [B, L] -> [B, D]."""
        h = self.hidden(tokens, mask, key_padding_mask=key_padding_mask)
        valid = valid_mask(tokens, mask, key_padding_mask)
        B, L = tokens.shape
        if valid is None:
            valid = torch.ones(B, L, dtype=torch.bool, device=tokens.device)
        if not torch.compiler.is_compiling() and (L == 0 or not bool(valid.any(1).all())):
            raise ValueError("pooled: every sequence needs at least one valid position")
        if not self.causal:
            w = valid.unsqueeze(-1).to(h.dtype)
            return (h * w).sum(1) / w.sum(1)
        last = (L - 1) - valid.flip(1).to(torch.float32).argmax(1)
        return h[torch.arange(B, device=h.device), last]

    def classify(self, tokens, mask=None, *, key_padding_mask=None):
        """Class logits of a classifier: tokens [B, L] -> [B, n_classes]."""
        if self.cls_head is None:
            raise RuntimeError("classify: the model has no classification head (set "
                               "model.n_classes)")
        if self.cls_pair_proj is not None:
            raise RuntimeError("classify: a pair classifier (model.cls_pair) classifies two "
                               "sequences: use classify_pair")
        return self.cls_head(self.pooled(tokens, mask, key_padding_mask=key_padding_mask))

    def classify_pair(self, tokens_a, mask_a, tokens_b, mask_b):
        """Pair class logits (LRA Retrieval's two towers): [B, n_classes]."""
        if self.cls_pair_proj is None:
            raise RuntimeError("classify_pair: the model is not a pair classifier (set "
                               "model.cls_pair and model.n_classes)")
        u, v = self.pooled(tokens_a, mask_a), self.pooled(tokens_b, mask_b)
        return self.cls_head(torch.relu(self.cls_pair_proj(torch.cat([u, v, u * v, u - v], -1))))

    def init_state(self, batch: int) -> List[DecodingState]:
        """Decoding state: one ``DecodingState`` per block (a list). RuntimeError for an
        encoder or a mixer that does not decode step by step."""
        return [block.mixer.init_state(batch) for block in self.blocks]

    def step(self, token: torch.Tensor, states: List[DecodingState]) -> torch.Tensor:
        """Consumes token [B] (int64) at position states[0].pos: logits [B, V]. Equal to
        forward's row at that position on the whole prefix."""
        if not isinstance(states, list) or len(states) != len(self.blocks):
            raise ValueError(f"step: expected the list of {len(self.blocks)} states that "
                             "init_state returns")
        if not isinstance(token, torch.Tensor) or token.dim() != 1 or token.dtype != torch.int64:
            raise ValueError("step: token must be an int64 tensor [B]")
        pos = states[0].pos if states else 0
        if pos >= self.max_len:
            raise ValueError(f"step: position {pos} reaches max_len {self.max_len}")
        self._check_tokens(token.unsqueeze(1))
        x = self.tok_emb(token) + self.pos_emb[pos]
        for block, state in zip(self.blocks, states):
            x = block.step(x, state)
        return self.logits(x if self.norm_f is None else self.norm_f(x))


BASE_FAMILY.update(FeedForward=FeedForward, Block=Block, SequenceModel=SequenceModel)
for _cls in (FeedForward, Block, SequenceModel):
    _cls._family = BASE_FAMILY


def public_classes():
    """seqmix.nn's classes: every registered mixer's, then FeedForward, Block, SequenceModel."""
    return [c for e in mixers() for c in e.classes] + [FeedForward, Block, SequenceModel]


def bind(ops, module_name):
    """Subclasses of every public class whose layers mix with ``ops`` (an object or module
    with every registered mixer's ops, as ``seqmix._torch_ops``), named as members of
    ``module_name`` (so pickles refer to them there): {class name: class}. seqmix.reference
    makes its classes so; scripts that register the ops themselves can too."""
    out = {}
    for base in public_classes():
        name = base.__name__
        attrs = {"__module__": module_name, "__doc__": base.__doc__, "__qualname__": name,
                 "_family": out}
        if hasattr(base, "_ops"):
            attrs["_ops"] = ops
        out[name] = type(name, (base,), attrs)
    return out
