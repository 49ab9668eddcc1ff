"""An engine that disagrees with the trainer, for the rollout-correction tests
(test_rollout_correction_loop.py): the HF engine records
the log-probs the trainer would score (weights ~1), so a test wraps its policy to record
them off by N(0, sd) per token, as a vLLM engine would be off by less."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from graft_env.policies import Generation

PREFIX = "rollout_correction/"  # the metrics' prefix
NOISE = 0.5  # the tests' sd of the recorded log-probs' error, per token: E|N(0, 0.5)| = 0.40

Key = tuple[str, tuple[int, ...]]  # (prompt, a response's token ids)


@dataclasses.dataclass(frozen=True)
class Recording:
    """One response's log-probs: the engine's (`true`) and the perturbed ones its rollout
    records (`noisy`), both float64."""

    true: np.ndarray
    noisy: np.ndarray


def perturb(
    prompts: Sequence[str],
    groups: Sequence[Sequence[Generation]],
    seed: int,
    sd: float,
    recorded: dict[Key, list[Recording]],
) -> list[list[Generation]]:
    """`groups` (one per prompt) with each response's log-probs plus N(0, sd) per token,
    drawn from `default_rng(seed)` prompt by prompt, response by response; each response's
    `Recording` is appended under its (prompt, token ids) in `recorded` (identical responses
    of a group get their own noise). `groups` is left as it was."""
    rng = np.random.default_rng(seed)
    out = []
    for prompt, group in zip(prompts, groups, strict=True):
        noisy_group = []
        for g in group:
            noisy = g.logprobs + rng.normal(0.0, sd, len(g.logprobs)).astype(np.float32)
            recording = Recording(np.asarray(g.logprobs, np.float64), noisy.astype(np.float64))
            recorded.setdefault((prompt, tuple(g.token_ids)), []).append(recording)
            noisy_group.append(dataclasses.replace(g, logprobs=noisy))
        out.append(noisy_group)
    return out
