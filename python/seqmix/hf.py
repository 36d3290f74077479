"""seqmix models in Hugging Face transformers (the optional ``hf`` extra:
``pip install transformers safetensors``).

Importing this module registers ``SeqmixConfig`` (model_type "seqmix") with ``AutoConfig``
and ``SeqmixForCausalLM`` with ``AutoModelForCausalLM``, so a folder that
``Model.save_pretrained`` or ``seqmix export RUN --format hf --out DIR`` wrote loads with::

    import seqmix.hf
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("wn-hf")
    out = model.generate(torch.tensor([list(b"The ")]), max_new_tokens=50, do_sample=False)

``SeqmixForCausalLM`` holds the model's parameters under the same names as seqmix's state
dict (no prefix), runs ``seqmix.nn``'s layers (the extension's kernels), and returns
``CausalLMOutput`` (``logits`` [B, L, V], ``loss`` with ``labels``: the mean next-token
cross-entropy, labels shifted inside as transformers' causal LMs do, -100 ignored).
``attention_mask`` is transformers' (1 = token, 0 = padding); padding must come after the
tokens (seqmix's learned positions start at each row's first entry), so a batch of prompts
of different lengths is generated one prompt at a time. It keeps no decoding cache:
``generate`` re-reads the sequence at each step (seqmix's own ``Model.generate`` and
``seqmix generate`` decode incrementally), and past ``max_len`` it slides the window by one
token per step, where seqmix's generators restart from the last half window: beyond
``max_len`` the two differ. Loading is strict: a missing or unexpected tensor in
model.safetensors is an error (transformers alone would warn and keep fresh weights). Greedy decoding gives the tokens of ``seqmix
generate --temperature 0``; sampling with ``top_k=0`` (transformers' default is 50) and
``torch.manual_seed(seed)`` before ``generate`` draws the tokens of ``seqmix generate --top-k
0 --top-p 1 --seed seed`` at the same temperature (the same softmax and multinomial on the
same generator state; transformers' top_p and seqmix's differ in which token is cut at the
threshold).
"""
import os

import torch
import torch.nn.functional as F

try:
    from transformers import (AutoConfig, AutoModelForCausalLM, GenerationMixin,
                              PretrainedConfig, PreTrainedModel)
    from transformers.modeling_outputs import CausalLMOutput
except ImportError as e:
    raise ImportError("seqmix.hf needs transformers: pip install 'transformers>=5' "
                      "safetensors (the seqmix[hf] extra)") from e

from . import nn as _nn

__all__ = ["SeqmixConfig", "SeqmixForCausalLM"]


class SeqmixConfig(PretrainedConfig):
    """A seqmix model's configuration in transformers: the resolved seqmix configuration
    (sections ``model``, ``data``, ``train``) lives in ``seqmix["config"]``; the standard
    names (vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
    max_position_embeddings) mirror it for tools that read them."""

    model_type = "seqmix"

    def __init__(self, seqmix=None, tie_word_embeddings=False, **kwargs):
        self.seqmix = seqmix if seqmix is not None else {}
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


_SHARED = ("_check_tokens", "hidden", "logits", "pooled", "init_state", "step")


class SeqmixForCausalLM(PreTrainedModel, GenerationMixin):
    """A seqmix language model as a transformers causal LM (see the module's docstring)."""

    config_class = SeqmixConfig
    main_input_name = "input_ids"
    base_model_prefix = ""
    _supports_cache_class = False

    def __init__(self, config):
        super().__init__(config)
        seqmix = getattr(config, "seqmix", None)
        if not isinstance(seqmix, dict) or not isinstance(seqmix.get("config"), dict) or \
                not isinstance(seqmix["config"].get("model"), dict):
            raise ValueError("SeqmixConfig.seqmix must hold the seqmix configuration "
                             "({'config': {'model': ...}}), as save_pretrained writes it")
        inner = _nn.SequenceModel(seqmix["config"]["model"])
        if not inner.causal or inner.cls_head is not None:
            raise ValueError("SeqmixForCausalLM: the model is an encoder or classifier, not a "
                             "language model")
        # The seqmix model's parts become this module's own, under their seqmix names, so
        # model.safetensors loads without renaming.
        for name, param in inner.named_parameters(recurse=False):
            self.register_parameter(name, param)
        for name, module in inner.named_children():
            self.add_module(name, module)
        for name in ("model_config", "vocab_size", "max_len", "causal", "tie_embeddings",
                     "dropout", "norm_f", "head", "cls_head", "cls_pair_proj"):
            setattr(self, name, getattr(inner, name))
        self.post_init()

    def _init_weights(self, module):
        # The weights are drawn by the seqmix layers themselves (their C++ twins' rule) or
        # loaded; transformers must not re-initialise them.
        pass

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' loader, after the checks every seqmix reader makes: a local folder
        is first read by the library's reader (``seqmix.from_pretrained``'s and ``seqmix
        import``'s: the format version, the configuration validated as a run's and against
        the machine's memory, the tokenizer it names, every tensor's name, shape, dtype and
        finiteness), so a folder that those refuse is refused here with the same message
        (ValueError) before transformers builds anything. Then a checkpoint that does not
        fit exactly is refused (ValueError naming the tensors)."""
        path = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        if isinstance(path, (str, os.PathLike)) and os.path.isdir(path):
            from ._api import from_pretrained as _check_with_seqmix
            _check_with_seqmix(path)
        wants_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        bad = {k: sorted(v) for k, v in info.items()
               if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
        if bad:
            raise ValueError("model.safetensors does not fit the seqmix configuration: " +
                             "; ".join(f"{k.replace('_', ' ')} {v[:5]}" for k, v in bad.items()))
        return (model, info) if wants_info else model

    def get_input_embeddings(self):
        return self.tok_emb

    def get_output_embeddings(self):
        return None

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            mask = attention_mask.bool()
            # A token after padding: left padding, which would move the learned positions.
            if bool((mask[:, 1:] & ~mask[:, :-1]).any()):
                raise ValueError("attention_mask: padding before a token (left padding); "
                                 "seqmix's positions start at each row's first entry: pad on "
                                 "the right, or generate one prompt at a time")
        logits = self.logits(self.hidden(input_ids, mask))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No cache: the whole sequence, its last max_len tokens past the model's context.
        ids = input_ids[:, -self.max_len:]
        mask = attention_mask[:, -self.max_len:] if attention_mask is not None else None
        return {"input_ids": ids, "attention_mask": mask}


for _name in _SHARED:
    setattr(SeqmixForCausalLM, _name, getattr(_nn.SequenceModel, _name))

AutoConfig.register("seqmix", SeqmixConfig, exist_ok=True)
AutoModelForCausalLM.register(SeqmixConfig, SeqmixForCausalLM, exist_ok=True)
