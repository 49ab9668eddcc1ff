"""The fixed workload of the TRL comparison (issue #8), and the arithmetic of its report.

Both trainers must do the same work, so everything that defines it lives here once:
a tiny Llama-config model (4 layers, hidden 128, 4 heads, intermediate 384) with
random weights from a fixed seed, a character-level tokenizer (a real
`PreTrainedTokenizerFast`), both saved to one directory that our `HFPolicy` and TRL's
`GRPOTrainer` load from, and 16 arithmetic prompts (procedural addition and
multiplication, level 1) formatted with the paper's template. A character
tokenizer keeps the vocabulary (99 symbols) from dominating the cost, so the
comparison measures the trainers, not one big soft-max.

The report arithmetic is here too (not in `vs_trl`) so that it can be tested
without `trl` installed: runs alternate TRL, ours, TRL, ours, ...; each figure is
summarised as the median over all measured steps of each side, their ratio, and the
spread of per-pair ratios. Ratios are stated as the candidate's (our) *advantage*:
TRL / ours for lower-is-better figures (seconds, bytes), ours / TRL for rates, so
> 1 always means we are better.
"""

from __future__ import annotations

import statistics
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from graft_env.data import Problem, load
from graft_env.prompts import format_prompt

DATASET = "procedural"
DATASET_OPTIONS = {"skills": ["addition", "multiplication"], "size": 8, "difficulty": 1}
"""16 problems (8 per skill): every step trains on all of them, in a shuffled order."""

EOS, PAD, UNK = "</s>", "<pad>", "<unk>"
CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]


@dataclass(frozen=True)
class WorkloadSpec:
    """The work of one training step, as issue #8 states it, and the optimiser both use."""

    prompts: int = 16
    n: int = 8
    max_new_tokens: int = 32
    temperature: float = 1.0
    eps_low: float = 0.2
    eps_high: float = 0.28
    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    threads: int = 2
    seed: int = 0


@dataclass(frozen=True)
class Workload:
    """A built workload: the model directory both trainers load, and the prompts."""

    model_dir: Path
    problems: tuple[Problem, ...]
    prompts: tuple[str, ...]  # formatted exactly as HFPolicy.format_prompt does
    spec: WorkloadSpec


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character (newline included), plus EOS, pad and unk.

    A BPE model without merges splits text into characters; the Fuse decoder joins
    them back, so decode(encode(text)) == text for printable ASCII.
    """
    specials = [UNK, EOS, PAD]
    vocab = {token: index for index, token in enumerate(specials + CHARACTERS)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
    )


def tiny_llama(tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    """The issue's model shape with random weights drawn from `seed` (global RNG untouched)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def write_model(directory: Path, seed: int) -> Path:
    """Save the tokenizer and a `seed`-initialised tiny Llama (fp32) to `directory`."""
    tokenizer = char_tokenizer()
    directory.mkdir(parents=True, exist_ok=True)
    tiny_llama(tokenizer, seed).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def load_workload(model_dir: Path, spec: WorkloadSpec | None = None) -> Workload:
    """The workload around an already written `model_dir`: its problems and prompts."""
    spec = spec or WorkloadSpec()
    problems = tuple(load(DATASET, **DATASET_OPTIONS))
    if len(problems) != spec.prompts:
        raise ValueError(
            f"dataset {DATASET} {DATASET_OPTIONS} has {len(problems)} problems, "
            f"WorkloadSpec.prompts is {spec.prompts}"
        )
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    prompts = tuple(format_prompt(p.problem, tokenizer) for p in problems)
    return Workload(Path(model_dir), problems, prompts, spec)


def build_workload(directory: Path, spec: WorkloadSpec | None = None) -> Workload:
    """Write the model (seed `spec.seed`) to `directory` and collect the formatted prompts."""
    spec = spec or WorkloadSpec()
    return load_workload(write_model(directory, spec.seed), spec)


# --- the report's arithmetic ------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One figure of a baseline (TRL) against a candidate (ours) over paired runs.

    `advantage` > 1 means the candidate is better; it is computed from the two
    medians, `pair_advantages` from each pair's own run medians.
    """

    name: str
    baseline_median: float
    candidate_median: float
    lower_is_better: bool
    advantage: float
    pair_advantages: tuple[float, ...]


def advantage(baseline: float, candidate: float, lower_is_better: bool) -> float:
    """The candidate's advantage: baseline/candidate for costs, candidate/baseline for rates."""
    if baseline <= 0 or candidate <= 0:
        raise ValueError(
            f"figures must be positive to compare, got baseline={baseline}, candidate={candidate}"
        )
    return baseline / candidate if lower_is_better else candidate / baseline


def compare(
    name: str,
    baseline_runs: Sequence[Sequence[float]],
    candidate_runs: Sequence[Sequence[float]],
    lower_is_better: bool,
) -> Comparison:
    """Summarise one figure from alternating runs; run i of each side forms pair i.

    Each run holds that run's measured values (per step, or one value per run for
    peak memory). The headline advantage is the ratio of the medians over all values
    of each side; the per-pair advantages use each run's own median.
    """
    if len(baseline_runs) != len(candidate_runs) or not baseline_runs:
        raise ValueError(
            f"{name}: need the same non-zero number of runs per side, "
            f"got {len(baseline_runs)} and {len(candidate_runs)}"
        )
    empty = [i for i, run in enumerate([*baseline_runs, *candidate_runs]) if not run]
    if empty:
        raise ValueError(f"{name}: run(s) {empty} (baseline first) have no measured values")
    baseline = statistics.median(v for run in baseline_runs for v in run)
    candidate = statistics.median(v for run in candidate_runs for v in run)
    pairs = tuple(
        advantage(statistics.median(b), statistics.median(c), lower_is_better)
        for b, c in zip(baseline_runs, candidate_runs, strict=True)
    )
    return Comparison(
        name,
        baseline,
        candidate,
        lower_is_better,
        advantage(baseline, candidate, lower_is_better),
        pairs,
    )
