"""Loading of transformers models for `HFPolicy` (its options: `policies.options`).

Dropout is switched off at load time (every `*dropout*` / `*pdrop*` config field
set to 0): with dropout the first minibatch's ratio would not be 1 and generation
log-probs would not match the training forward.
"""

from __future__ import annotations

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from graft_env.policies.options import DTYPE_NAMES, HFPolicyOptions

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


def load_tokenizer(path: str, options: HFPolicyOptions) -> PreTrainedTokenizerBase:
    """The tokenizer at `path`; it must have an EOS token."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=options.local_files_only)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot load a tokenizer from {path!r}: {err}") from err
    if tokenizer.eos_token_id is None:
        raise ValueError(
            f"tokenizer at {path!r} has no EOS token: generation could not stop and "
            "score could not end a response; set eos_token in its tokenizer_config.json"
        )
    return tokenizer


def load_model(path: str, options: HFPolicyOptions) -> torch.nn.Module:
    """The causal LM at `path`, dropout off, on `options.device`, in eval mode, with
    `options.attn_implementation` (None: transformers' default)."""
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=options.local_files_only)
        for key, value in config.to_dict().items():
            if ("dropout" in key or "pdrop" in key) and isinstance(value, float):
                setattr(config, key, 0.0)
        attention = {}
        if options.attn_implementation is not None:
            attention["attn_implementation"] = options.attn_implementation
        model = AutoModelForCausalLM.from_pretrained(
            path,
            config=config,
            dtype=DTYPES[options.dtype],
            local_files_only=options.local_files_only,
            **attention,
        )
    except (OSError, ValueError, ImportError) as err:  # ImportError: flash-attn not installed
        raise ValueError(f"cannot load a causal LM from {path!r}: {err}") from err
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    if options.gradient_checkpointing:
        enable_checkpointing(model)
    return model.to(options.device).eval()


def enable_checkpointing(model: PreTrainedModel) -> None:
    """Turn on gradient checkpointing: transformers >= 5.x renamed it; 4.x only has the old
    name."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()
