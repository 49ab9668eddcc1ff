"""Options and loading of transformers models for `HFPolicy`.

Dropout is switched off at load time (every `*dropout*` / `*pdrop*` config field
set to 0): with dropout the first minibatch's ratio would not be 1 and generation
log-probs would not match the training forward.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerBase,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# float16 autocast would need loss scaling (GradScaler), which `update` does not do.
AUTOCAST_DTYPES = (None, "bfloat16")


@dataclass(frozen=True)
class HFPolicyOptions:
    """Options of a transformers policy.

    temperature: the log-prob temperature (see `policies.base`); training forward,
        `score` and recorded generation log-probs all use it.
    dtype: "float32", "bfloat16" or "float16" weights; log-softmax is always float32.
        `update` refuses half-precision weights below lr 1e-4, where AdamW steps
        round away (`policies.precision`); train float32 weights with `autocast`.
    autocast: None, or "bfloat16": mixed precision. Forwards (sampling, scoring,
        training) compute in bfloat16 under `torch.autocast` while the weights and
        AdamW state stay float32 (master weights, as in FSDP's mixed precision), so
        small steps accumulate; it needs dtype "float32". Log-probs then carry
        bfloat16 rounding (generation vs training forward within ~0.1 nats per token).
    device: torch device string ("cpu", "cuda", "cuda:1", ...).
    lr, betas, weight_decay: AdamW hyperparameters (paper: 1e-6, (0.9, 0.999), 0.01).
    grad_clip: max global grad norm per optimiser step (paper: 1.0).
    gradient_checkpointing: trade compute for activation memory in `update`.
    generation_batch_size: sequences decoded together by `generate`.
    score_batch_size: sequences per forward in `score` / `score_tokens`.
    micro_batch_size: sequences per forward inside an `update` minibatch; None runs
        the whole minibatch at once. Either way the gradient is the same.
    local_files_only: never contact the model hub (the default on these machines).
    """

    temperature: float = 1.0
    dtype: str = "float32"
    autocast: str | None = None
    device: str = "cpu"
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    gradient_checkpointing: bool = False
    generation_batch_size: int = 64
    score_batch_size: int = 64
    micro_batch_size: int | None = None
    local_files_only: bool = True

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"HFPolicyOptions.temperature must be > 0, got {self.temperature}")
        if self.dtype not in DTYPES:
            raise ValueError(
                f"HFPolicyOptions.dtype must be one of {list(DTYPES)}, got {self.dtype!r}"
            )
        if self.autocast not in AUTOCAST_DTYPES:
            raise ValueError(
                f"HFPolicyOptions.autocast must be one of {AUTOCAST_DTYPES}, got {self.autocast!r}"
            )
        if self.autocast is not None and self.dtype != "float32":
            raise ValueError(
                f"HFPolicyOptions.autocast={self.autocast!r} needs dtype 'float32' (the master "
                f"weights), got dtype {self.dtype!r}"
            )
        for field_name in ("generation_batch_size", "score_batch_size"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"HFPolicyOptions.{field_name} must be >= 1")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError("HFPolicyOptions.micro_batch_size must be >= 1 or None")
        if not self.grad_clip > 0:
            raise ValueError(f"HFPolicyOptions.grad_clip must be > 0, got {self.grad_clip}")

    @classmethod
    def from_kwargs(cls, **overrides: object) -> HFPolicyOptions:
        """Build options from keyword overrides; unknown names list the valid ones."""
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(overrides) - set(valid))
        if unknown:
            raise TypeError(f"unknown policy option(s) {unknown}; valid options: {valid}")
        if "betas" in overrides:
            overrides["betas"] = tuple(overrides["betas"])  # YAML gives lists
        return cls(**overrides)


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
    """The causal LM at `path`, dropout off, on `options.device`, in eval mode."""
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=options.local_files_only)
        for key, value in config.to_dict().items():
            if ("dropout" in key or "pdrop" in key) and isinstance(value, float):
                setattr(config, key, 0.0)
        model = AutoModelForCausalLM.from_pretrained(
            path,
            config=config,
            dtype=DTYPES[options.dtype],
            local_files_only=options.local_files_only,
        )
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot load a causal LM from {path!r}: {err}") from err
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    if options.gradient_checkpointing:
        # transformers >= 5.x renamed it; 4.x only has the old name.
        enable = getattr(model, "activation_checkpointing_enable", None)
        (enable or model.gradient_checkpointing_enable)()
    return model.to(options.device).eval()
