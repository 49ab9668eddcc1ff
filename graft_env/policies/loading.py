"""Loading of transformers models for `HFPolicy` (its options: `policies.options`).

Dropout is switched off at load time (every `*dropout*` / `*pdrop*` config field
set to 0): with dropout the first minibatch's ratio would not be 1 and generation
log-probs would not match the training forward.
"""

from __future__ import annotations

import re
from pathlib import Path

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
# A Hugging Face Hub id, "owner/name", as opposed to a path to a local directory.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(path: str) -> bool:
    """Whether `path` reads as a Hub id ("Qwen/Qwen3-1.7B"), not a filesystem path."""
    return HUB_ID.fullmatch(path) is not None


def load_error(what: str, path: str, options: HFPolicyOptions, error: Exception) -> ValueError:
    """Why `what` (a tokenizer, a causal LM) could not be loaded from `path`, in one line; for
    a Hub id that is not on disk, how to get it (offline, or `local_files_only`)."""
    if not is_hub_id(path) or Path(path).exists():
        return ValueError(f"cannot load {what} from {path!r}: {error}")
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if options.local_files_only:
        fix = (
            "local_files_only is true, so only the Hugging Face cache is read: set it false "
            "(an agent's options.local_files_only in a run config, --option in graft eval) "
            f"to download it, or download it first (hf download {path})"
        )
    else:
        fix = (
            f"download it first where the Hub can be reached (hf download {path}; with "
            "HF_HUB_OFFLINE=1 only the cache is read), or point the model at a local directory"
        )
    return ValueError(
        f"cannot load {what} {path!r}: not in the Hugging Face cache and not downloaded "
        f"({first}); {fix}"
    )


def load_tokenizer(path: str, options: HFPolicyOptions) -> PreTrainedTokenizerBase:
    """The tokenizer at `path`; it must have an EOS token."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=options.local_files_only)
    except (OSError, ValueError) as err:
        raise load_error("a tokenizer", path, options, err) from err
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
        raise load_error("a causal LM", path, options, err) from err
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
