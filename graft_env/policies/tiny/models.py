"""Configs of the tiny architectures (~1M parameters each at the default shape).

Different transformer families, so a pair differs the way real heterogeneous
models do. The built-in pair uses GPT-NeoX (partial rotary positions, parallel
attention + MLP, LayerNorm, GELU MLP, biases) and Llama (full rotary positions,
RMSNorm, SwiGLU MLP, grouped-query attention, no biases). GPT-2 (learned absolute
positions, tied embeddings) is here too: tests and benchmarks use it, and it
learns arithmetic about half as fast as the rotary families.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)


@dataclass(frozen=True)
class TinyShape:
    """Width and depth shared by both families."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    max_positions: int = 512


def gpt2_model(vocab_size: int, eos_id: int, pad_id: int, shape: TinyShape) -> PreTrainedModel:
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=shape.max_positions,
        n_embd=shape.hidden,
        n_layer=shape.layers,
        n_head=shape.heads,
        # Exact GELU is one fused op; GPT-2's tanh form costs ~20 % of a CPU step.
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    return GPT2LMHeadModel(config)


def llama_model(vocab_size: int, eos_id: int, pad_id: int, shape: TinyShape) -> PreTrainedModel:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.hidden * 8 // 3,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=max(1, shape.heads // 2),
        max_position_embeddings=shape.max_positions,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    return LlamaForCausalLM(config)


def gpt_neox_model(vocab_size: int, eos_id: int, pad_id: int, shape: TinyShape) -> PreTrainedModel:
    config = GPTNeoXConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.hidden * 4,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        max_position_embeddings=shape.max_positions,
        rotary_pct=0.5,
        use_parallel_residual=True,
        hidden_act="gelu",
        attention_dropout=0.0,
        hidden_dropout=0.0,
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    return GPTNeoXForCausalLM(config)


ARCHITECTURES = {"gpt2": gpt2_model, "gpt_neox": gpt_neox_model, "llama": llama_model}


def build_model(
    architecture: str, vocab_size: int, eos_id: int, pad_id: int, shape: TinyShape, seed: int
) -> PreTrainedModel:
    """A randomly initialised model of `architecture`, seeded for reproducibility."""
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"unknown tiny architecture {architecture!r}; valid: {list(ARCHITECTURES)}"
        )
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG alone
        torch.manual_seed(seed)
        return ARCHITECTURES[architecture](vocab_size, eos_id, pad_id, shape)
