"""The rollout correction (`rollout_correction: {mode: truncate}`) through worker groups
(`ray.ranks_per_agent`) on a local CPU Ray cluster, gloo and FSDP2: the rescoring fans out
to the ranks (`GroupPolicy.score`, rows split over them) and the rows' `rollout_weights`
travel in the batch every rank trains its share of (`GroupPolicy.update`).

The HF engine records the log-probs the trainer would score (weights ~1), so each group
policy is wrapped to record them off by N(0, 0.5) per token (`correction_runs.perturb`),
as a vLLM engine would be off by less: the weights then differ from 1 enough that a loss
computed without them is far from the one the ranks report. By default, one run: 2 ranks
per agent, the token level, 2 GRAFT steps, checked only for that loss (which fails when
`GroupPolicy.update_async` drops the rows' rollout_weights, or `GroupPolicy.score` merges
the ranks' answers out of order). Slow: the tiny pair trains 3 steps with 1 rank per agent
and with 2, at the token and at the sequence level, and the runs are compared. Every rank
is a fresh process: the default run takes about a minute, the slow ones minutes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
from correction_runs import NOISE, PREFIX, Key, Recording, perturb
from group_runs import (
    TWO_RANK_OPTIONS,
    Run,
    assert_weights_within_adam_noise,
    comparable,
    group_config,
    train,
)

import algorithms

CORRECTION_METRICS = (
    "ratio_mean",
    "weight_mean",
    "above_cap_share",
    "below_floor_share",
    "logp_diff_mean",
    "logp_diff_max",
    "kl_k3",
    "tokens",
    "responses",
    "retokenised",
)
# one minibatch a step: each update starts at the weights its rows were rescored at, so every
# step's reported loss is the loss at ratio 1, computable here from the batch
ALGORITHM_OPTIONS = {"num_minibatches": 1}


class Perturbed:
    """A pending generation whose result records log-probs off by N(0, NOISE) per token
    (`perturb`, once: a second `result()` returns the same groups)."""

    def __init__(self, call, prompts, seed: int, recorded: dict[Key, list[Recording]]) -> None:
        self.call, self.prompts, self.seed, self.recorded = call, list(prompts), seed, recorded
        self.groups = None

    def result(self):
        if self.groups is None:
            groups = self.call.result()
            self.groups = perturb(self.prompts, groups, self.seed, NOISE, self.recorded)
        return self.groups


class NoisyRecording:
    """A group policy whose sampling records log-probs off (an engine that disagrees with
    the trainer); scoring and updates are the group's own."""

    def __init__(self, policy) -> None:
        self.inner = policy
        self.recorded: dict[Key, list[Recording]] = {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate_async(self, prompts, n, sampling):
        call = self.inner.generate_async(prompts, n, sampling)
        return Perturbed(call, prompts, sampling.seed, self.recorded)

    def generate(self, prompts, n, sampling):
        return self.generate_async(prompts, n, sampling).result()


@dataclasses.dataclass
class CorrectionRun:
    run: Run
    wrapped: dict[str, NoisyRecording]  # each agent's wrapper, with its recordings
    algorithm: algorithms.Algorithm  # the run's, to compute its loss here


def correction_run(
    root: Path, paths: Mapping[str, Path], ranks: int, steps: int, level: str
) -> CorrectionRun:
    """GRAFT on the tiny pair with `ranks` ranks per agent, truncate at `level`, every
    group policy's recorded log-probs perturbed."""
    config = group_config(
        root,
        paths,
        ranks,
        steps,
        TWO_RANK_OPTIONS if ranks == 2 else None,
        algorithm_options=ALGORITHM_OPTIONS,
        rollout_correction={"mode": "truncate", "level": level},
    )
    wrapped: dict[str, NoisyRecording] = {}

    def wrap(agent, policy):
        wrapped[agent] = NoisyRecording(policy)
        return wrapped[agent]

    run = train(config, wrap=wrap)
    algorithm = algorithms.make(config.algorithm, **config.algorithm_options)
    return CorrectionRun(run, wrapped, algorithm)


@pytest.fixture(scope="module")
def cluster():
    import ray

    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def two_ranks_token_level(cluster, tmp_path_factory, tiny_pair_paths) -> CorrectionRun:
    return correction_run(tmp_path_factory.mktemp("correction"), tiny_pair_paths, 2, 2, "token")


@pytest.fixture(scope="module", params=["token", "sequence"])
def runs(request, cluster, tmp_path_factory, tiny_pair_paths):
    level = request.param
    root = tmp_path_factory.mktemp(f"correction-{level}")
    return {
        "level": level,
        "one": correction_run(root / "one", tiny_pair_paths, 1, 3, level),
        "two": correction_run(root / "two", tiny_pair_paths, 2, 3, level),
    }


@pytest.mark.slow
def test_two_ranks_give_the_correction_metrics_of_one_rank(runs):
    """Every row has every rollout_correction/* metric, and 2 ranks give those of 1 rank to
    rel 1e-5, and every other metric to rel 1e-5 at the token level. At the sequence level a
    weight below the cap is exp of a sum over the response's tokens, so the float-order
    noise by which the two runs' weights part after a step grows in the weights (step 2's
    grad norm: rel 1.4e-5 once); the metrics the update gives are held to 1e-4 there."""
    other_rel = {"token": 1e-5, "sequence": 1e-4}[runs["level"]]
    one, two = comparable(runs["one"].run.rows), comparable(runs["two"].run.rows)
    assert [(r["step"], r["agent"]) for r in one] == [
        (s, a) for s in range(3) for a in ("tiny-a", "tiny-b")
    ]
    assert [(r["step"], r["agent"]) for r in two] == [(r["step"], r["agent"]) for r in one]
    for a, b in zip(one, two, strict=True):
        assert {PREFIX + key for key in CORRECTION_METRICS} <= set(a), a["step"]
        assert sorted(a) == sorted(b)
        for key, value in a.items():
            if isinstance(value, float):
                rel = 1e-5 if key.startswith(PREFIX) else other_rel
                assert b[key] == pytest.approx(value, rel=rel, abs=1e-7), (a["step"], key)
            else:
                assert b[key] == value, (a["step"], key)


@pytest.mark.slow
def test_two_ranks_give_the_weights_of_one_rank(runs):
    assert_weights_within_adam_noise(runs["one"].run.weights, runs["two"].run.weights)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["one", "two"])
def test_the_rescoring_by_the_ranks_measures_the_recording_noise(runs, name):
    """The ranks' `score` answers each response with its own tokens' log-probs: responses
    are matched (how many are retokenised depends on what the pair samples) and the
    log-prob gap is the injected noise."""
    for row in runs[name].run.rows:
        assert row[PREFIX + "responses"] > 0, row["step"]
        assert row[PREFIX + "responses"] + row[PREFIX + "retokenised"] == row["rollouts_generated"]
        assert 0.3 < row[PREFIX + "logp_diff_mean"] < 0.5, row["step"]  # E|N(0, 0.5)| = 0.40
        assert row[PREFIX + "above_cap_share"] > 0 and row[PREFIX + "weight_mean"] != 1.0


def first_minibatch(batch):
    [indices] = batch.minibatches
    return [batch.sequences[i] for i in indices]


def logp_at_old_weights(batch, sequences, recorded: dict[Key, list[Recording]]) -> torch.Tensor:
    """Each row's log-probs at the weights of its step, padded: the rescoring's (a corrected
    own row's old log-probs), the receiver's scoring (a peer row's), or the true recording
    of a retokenised own row (the HF engine's, <1e-4 from the trainer's)."""
    width = max(len(s.old_logprobs) for s in sequences)
    logp = torch.zeros(len(sequences), width, dtype=torch.float64)
    for r, seq in enumerate(sequences):
        if seq.is_peer or seq.rollout_weights is not None:
            values = seq.old_logprobs
        else:
            key = batch.prompts[seq.prompt_index], tuple(seq.response_token_ids)
            values = recorded[key][0].true
        logp[r, : len(values)] = torch.as_tensor(values)
    return logp


def assert_trained_on_the_rollout_weights(run: CorrectionRun, name: str) -> None:
    """Each step's one minibatch starts at the rescoring's weights, so the loss the ranks
    report is the weighted loss at ratio 1, computed here from the batch. Where the same
    batch without its rollout_weights gives a loss far from it (a step with advantages),
    the ranks' loss tells which one they trained on: at least one (step, agent) must."""
    telling = 0
    for record in run.run.records:
        for agent, batch in record.batches.items():
            sequences = first_minibatch(batch)
            own = [s for s in sequences if not s.is_peer]
            assert any(s.rollout_weights is not None for s in own), "no own row rescored"
            logp = logp_at_old_weights(batch, sequences, run.wrapped[agent].recorded)
            weighted = run.algorithm.loss(logp, sequences)[0].item()
            bare = [dataclasses.replace(s, rollout_weights=None) for s in sequences]
            unweighted = run.algorithm.loss(logp, bare)[0].item()
            reported = record.update_metrics[agent]["loss"]
            tolerance = 1e-3 * abs(weighted) + 1e-6
            where = f"{name} rank(s), step {record.step}, {agent}"
            print(f"{where}: loss {reported:.6g}, weighted {weighted:.6g}, bare {unweighted:.6g}")
            assert reported == pytest.approx(weighted, abs=tolerance), where
            telling += abs(weighted - unweighted) > 10 * tolerance
    print(f"{name} rank(s): {telling} of {len(run.run.rows)} (step, agent) losses tell")
    assert telling >= 1, "no loss told weighted from bare (no advantages, no row rescored?)"


def test_two_ranks_train_on_the_rollout_weights_at_the_token_level(two_ranks_token_level):
    assert_trained_on_the_rollout_weights(two_ranks_token_level, "two")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["one", "two"])
def test_the_ranks_train_on_the_rollout_weights(runs, name):
    assert_trained_on_the_rollout_weights(runs[name], name)
