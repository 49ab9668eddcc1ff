"""Random-weight policies of the paper's architectures, built from their transformers config
classes (no download), and a fixed GRPO batch of exact lengths for them.

A model directory gets its random weights and a word-level tokenizer over the model's whole
vocabulary (token `t<i>` is id i), so `HFPolicy` loads it like any model and a prompt of k
words is k tokens. `memory_plan_check` (on CPU) and `scale_check` (on a GPU) measure
`HFPolicy`'s own update and scoring on them, with the peak meters here (CUDA's allocator
statistics on a GPU; on CPU the resident high-water mark, VmHWM, reset via clear_refs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from algorithms.training.memory_plan import PAPER_MODELS
from graft_env.types import TrainBatch, TrainSequence

SHRUNK = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4)
"""The CPU check's width and depth; vocabulary, head layout and layer types stay the model's."""
SHRUNK_ARCHITECTURES = {
    "smollm3": ("SmolLM3Config", dict(vocab_size=128256, num_key_value_heads=1)),
    "qwen3": (
        "Qwen3Config",
        dict(vocab_size=151936, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True),
    ),
    "llama3.2": (
        "LlamaConfig",
        dict(vocab_size=128256, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True),
    ),
}
"""The shrunk architectures: real vocabularies and tied embeddings, as the paper's models."""
TOY_QWEN3 = dict(
    vocab_size=2048,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    tie_word_embeddings=True,
)
"""A toy-width Qwen3 for smoke runs: its layer structure (q/k norms, GQA, tied head)."""
SPECIAL = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
EOS = SPECIAL["</s>"]


def config_of(class_name: str, fields: dict[str, Any]) -> Any:
    """A transformers config of class `class_name`, its BOS, EOS and pad ids ours (0-2)."""
    import transformers

    ids = dict(bos_token_id=1, eos_token_id=EOS, pad_token_id=0)
    return getattr(transformers, class_name)(**{**fields, **ids})


def paper_config(model: str) -> Any:
    """The full-size config of one of the paper's models (`memory_plan.PAPER_MODELS`)."""
    class_name, fields = PAPER_MODELS[model]
    return config_of(class_name, fields)


def shrunk_config(name: str, **sizes: int) -> Any:
    """The shrunk architecture `name` at `SHRUNK`'s sizes, or at `sizes` where given
    (`hidden_size`, `num_hidden_layers`, ...: smaller still for a run of the whole loop)."""
    class_name, fields = SHRUNK_ARCHITECTURES[name]
    return config_of(class_name, {**SHRUNK, **fields, **sizes})


def write_random_model(directory: Path, config: Any, *, seed: int, device: str = "cpu") -> Path:
    """Random weights of `config` (float32) and a word-level tokenizer of its vocabulary,
    saved to `directory` (built on `device`: much faster on a GPU for billions of weights)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(directory)
    del model
    vocab = {**SPECIAL, **{f"t{i}": i for i in range(len(SPECIAL), config.vocab_size)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    fast.save_pretrained(directory)
    return directory


def grpo_batch(
    vocab_size: int, prompts: int, n: int, prompt_tokens: int, response_tokens: int, seed: int
) -> TrainBatch:
    """`prompts` x `n` responses of exactly `response_tokens` random tokens (no EOS) after
    prompts of `prompt_tokens` words, advantages +-0.5, one minibatch; each prompt starts
    with BOS, so it encodes to exactly `prompt_tokens` tokens."""
    rng = np.random.default_rng(seed)
    texts = [
        " ".join(["<s>", *(f"t{i}" for i in rng.integers(4, vocab_size, prompt_tokens - 1))])
        for _ in range(prompts)
    ]
    sequences = [
        TrainSequence(
            p,
            [int(i) for i in rng.integers(4, vocab_size, response_tokens)],
            np.full(response_tokens, -np.log(vocab_size)),
            advantage=float(j % 2) - 0.5,
        )
        for p in range(prompts)
        for j in range(n)
    ]
    return TrainBatch("random", texts, sequences, [list(range(len(sequences)))])


def _status(field: str) -> int:
    """A /proc/self/status memory field in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field}")


def resident_bytes() -> int:
    """This process's resident memory now."""
    return _status("VmRSS")


def reset_peak(device: str) -> None:
    """Start a new peak: CUDA's allocator statistics, or Linux's VmHWM on CPU (clear_refs)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def peak_bytes(device: str) -> int:
    """The peak since `reset_peak`: torch.cuda.max_memory_allocated, or VmHWM on CPU."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    return _status("VmHWM")
