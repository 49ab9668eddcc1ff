"""The shape of a decoder-only model as the memory plan reads it: from a transformers config
(a local directory, the Hugging Face cache) or the paper's models' published shapes, so a plan
needs no download."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAPER_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "HuggingFaceTB/SmolLM3-3B-Base": (
        "SmolLM3Config",
        dict(
            vocab_size=128256,
            hidden_size=2048,
            intermediate_size=11008,
            num_hidden_layers=36,
            num_attention_heads=16,
            num_key_value_heads=4,
            tie_word_embeddings=True,
        ),
    ),
    "Qwen/Qwen3-1.7B-Base": (
        "Qwen3Config",
        dict(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=True,
        ),
    ),
    "OctoThinker/OctoThinker-3B-Hybrid-Base": (  # Llama-3.2-3B's shape
        "LlamaConfig",
        dict(
            vocab_size=128256,
            hidden_size=3072,
            intermediate_size=8192,
            num_hidden_layers=28,
            num_attention_heads=24,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=True,
        ),
    ),
}
"""The paper's models (GRAFT-SPEC §11) as transformers config classes and their published
shapes, so a plan needs no download; `benchmarks/perf/scale_check.py` builds them."""
MODEL_TYPES = {"SmolLM3Config": "smollm3", "Qwen3Config": "qwen3", "LlamaConfig": "llama"}


@dataclass(frozen=True)
class Architecture:
    """The shape of a decoder-only (Llama-family) transformer, as its config gives it."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied: bool
    rope_layers: int
    qk_norm: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Architecture:
        """From a transformers config as a dict (config.json, `PretrainedConfig.to_dict()`);
        a multimodal config's `text_config` is its language model."""
        text = config.get("text_config") or config
        model_type = str(text.get("model_type", config.get("model_type", "")))
        heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        layers = int(text["num_hidden_layers"])
        no_rope = text.get("no_rope_layers")  # SmolLM3: 1 = the layer uses RoPE
        if no_rope is not None:
            rope_layers = sum(int(flag) for flag in no_rope[:layers])
        elif model_type == "smollm3":
            interval = int(text.get("no_rope_layer_interval", 4))
            rope_layers = layers - layers // interval
        else:
            rope_layers = layers
        return cls(
            model_type=model_type,
            vocab_size=int(text["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(text["intermediate_size"]),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or hidden // heads),
            tied=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))),
            rope_layers=rope_layers,
            qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text", "gemma3"),
            attention_bias=bool(text.get("attention_bias", False)),
            mlp_bias=bool(text.get("mlp_bias", False)),
        )

    @property
    def layer_linear_params(self) -> int:
        q, kv, h = (
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
            self.hidden_size,
        )
        attention = h * (q + 2 * kv) + q * h + (q + 2 * kv + h) * self.attention_bias
        mlp = 3 * h * self.intermediate_size + (2 * self.intermediate_size + h) * self.mlp_bias
        return attention + mlp

    @property
    def linear_params(self) -> int:
        """Parameters of every linear layer, the output head included (tied or not)."""
        return self.num_layers * self.layer_linear_params + self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        norms = self.num_layers * (2 * self.hidden_size + 2 * self.head_dim * self.qk_norm)
        embedding = 0 if self.tied else self.vocab_size * self.hidden_size
        return self.linear_params + embedding + norms + self.hidden_size


class UnknownArchitecture(ValueError):
    """A model the plan cannot size without downloading its config."""


def paper_architecture(model: str) -> Architecture | None:
    """The architecture of one of the paper's models, from `PAPER_MODELS`; None otherwise."""
    if model not in PAPER_MODELS:
        return None
    class_name, fields = PAPER_MODELS[model]
    return Architecture.from_config({"model_type": MODEL_TYPES[class_name], **fields})


def local_architecture(directory: Path) -> Architecture:
    """The architecture in `directory`/config.json (a local model or checkpoint)."""
    path = directory / "config.json"
    try:
        return Architecture.from_config(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{path}: not a decoder config the memory plan reads ({err})") from err


def architecture_of(model: str, where: str) -> Architecture:
    """A model's architecture without loading it or downloading anything: the paper's
    table, a local directory (or built-in name), else the Hugging Face cache's config.json."""
    known = paper_architecture(model)
    if known is not None:
        return known
    from graft_env.policies.zoo import model_path  # no torch; builds a missing tiny pair

    path = model_path(model)
    if path.is_dir():
        return local_architecture(path)
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json")
    if isinstance(cached, str):
        return local_architecture(Path(cached).parent)
    raise UnknownArchitecture(
        f"{where}: {model!r} is not a local directory, not one of the paper's models "
        f"({sorted(PAPER_MODELS)}) and has no cached config.json: the plan cannot size it"
    )
