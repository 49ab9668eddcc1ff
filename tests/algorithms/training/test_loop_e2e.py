"""End to end: every registry entry trains the real tiny pair through the one loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from run_configs import small_config

import algorithms
from algorithms.training.loop import Trainer

SINGLE_AGENT = {"grpo", "grpo-dynamic"}
# entries that read a stored source: their updates are tested with one (test_loop_stored.py,
# tests/algorithms/library/test_library_receiver.py)
NEEDS_STORE = {"graft-stored", "graft-library"}


def snapshot(policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def changed(before, policy) -> bool:
    after = policy.model.state_dict()
    return any(not torch.equal(before[k], after[k]) for k in before)


class RecordingLoss:
    """Wraps `Algorithm.loss` to keep what each loss call really received."""

    def __init__(self, algorithm):
        self.inner = algorithm.loss
        self.calls = []

    def __call__(self, new_logp, sequences):
        self.calls.append(list(sequences))
        return self.inner(new_logp, sequences)


@pytest.mark.parametrize("name", sorted(set(algorithms.available()) - NEEDS_STORE))
def test_every_entry_updates_its_policies(name, tmp_path, fresh_policies):
    agents = ("tiny-a",) if name in SINGLE_AGENT else ("tiny-a", "tiny-b")
    config = small_config(tmp_path / name, name, agents=agents, steps=1)
    policies = fresh_policies(*agents)
    before = {a: snapshot(p) for a, p in policies.items()}
    rows = Trainer(config, policies=policies).train()
    assert {row["agent"] for row in rows} == set(agents)
    for agent, policy in policies.items():
        assert changed(before[agent], policy), f"{name}: {agent} did not change"
    for row in rows:
        assert np.isfinite(row["loss"]) and row["tokens"] > 0
        for key in (
            "all_fail_share",
            "clipped_share_own",
            "clipped_share_peer",
            "exchange/w/count",
            "time/rollout",
            "time/update",
            "entropy",
            "grad_norm",
        ):
            assert key in row, f"{name}: metrics row lacks {key}"
        assert 0.0 <= row["all_fail_share"] <= 1.0


def test_graft_with_one_agent_is_grpo(tmp_path, fresh_policies, caplog):
    """GRAFT-SPEC §8: with N = 1 nothing can move, so the loop runs plain GRPO."""
    finals, rows = {}, {}
    for name in ("grpo", "graft"):
        policies = fresh_policies("tiny-a")
        config = small_config(tmp_path / name, name, agents=("tiny-a",))
        with caplog.at_level("INFO", logger="algorithms.training.loop"):
            run = Trainer(config, policies=policies).train()
        rows[name] = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in run]
        finals[name] = snapshot(policies["tiny-a"])
    assert all(torch.equal(finals["grpo"][k], finals["graft"][k]) for k in finals["grpo"])
    assert rows["graft"] == rows["grpo"] and rows["grpo"][0]["loss"] != 0
    assert "'graft' has one agent: no exchange can happen" in caplog.text


@pytest.mark.parametrize("name", ["graft", "graft-no-compat"])
def test_transferred_groups_reach_the_receivers_loss(name, tmp_path, fresh_policies):
    config = small_config(tmp_path / "run", name, steps=4)
    trainer = Trainer(config, policies=fresh_policies("tiny-a", "tiny-b"))
    recorder = RecordingLoss(trainer.algorithm)
    trainer.algorithm.loss = recorder
    trainer.open()
    transferred = 0
    while trainer.step < config.steps:
        recorder.calls.clear()
        record = trainer.run_step()
        for receiver, groups in record.transfers.items():
            admitted = sorted(
                (g.prompt_index, g.source, tuple(s.token_ids))
                for g in groups
                for s, w in zip(g.scored, g.weights, strict=True)
                if w > 0
            )
            in_batch = {id(seq) for seq in record.batches[receiver].sequences}
            seen_by_loss = sorted(
                (seq.prompt_index, seq.source, tuple(seq.response_token_ids))
                for call in recorder.calls
                for seq in call
                if id(seq) in in_batch and seq.is_peer
            )
            assert seen_by_loss == admitted
            transferred += len(groups)  # admitted or not: how many pass the floor is the CPU's
    assert transferred > 0, "no exchange happened in 4 steps: the test pair is not complementary"


def test_rollout_count_includes_the_responses_dynamic_sampling_discards(tmp_path, fresh_policies):
    """The metrics row counts every sampled response (the compare harness's compute table
    sums it), so a refill round adds a whole batch even when it keeps few groups."""
    batch, n = 6, 4
    plain, dynamic = (
        Trainer(
            small_config(tmp_path / name, name, agents=("tiny-a",), steps=1),
            policies=fresh_policies("tiny-a"),
        ).train()[0]
        for name in ("grpo", "grpo-dynamic")
    )
    assert plain["rollouts_generated"] == batch * n
    # step 0 samples the same first batch in both runs; refills start where it falls short
    informative = round(batch * (1 - plain["all_fail_share"] - plain["all_pass_share"]))
    rounds, rest = divmod(dynamic["rollouts_generated"], batch * n)
    assert rest == 0
    assert rounds >= 2 if informative < batch else rounds == 1


class Started:
    """A call in flight, as a Ray actor's: `result()` logs when the loop waits for it."""

    def __init__(self, events, what, value):
        self.events, self.what, self.value = events, what, value

    def result(self):
        self.events.append(("wait", self.what))
        return self.value


class InFlight:
    """A policy whose `*_async` calls log when they start and hand back a `Started`."""

    def __init__(self, policy, events):
        self.inner, self.events = policy, events

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate_async(self, prompts, n, sampling):
        self.events.append(("start", f"generate {self.inner.name}"))
        return Started(
            self.events, f"generate {self.inner.name}", self.generate(prompts, n, sampling)
        )

    def update_async(self, batch, loss_fn):
        self.events.append(("start", f"update {self.inner.name}"))
        return Started(self.events, f"update {self.inner.name}", self.update(batch, loss_fn))


def test_the_loop_starts_every_agents_sampling_and_update_before_it_waits_for_any(
    tmp_path, fresh_policies
):
    events = []
    policies = {name: InFlight(p, events) for name, p in fresh_policies("tiny-a", "tiny-b").items()}
    trainer = Trainer(small_config(tmp_path / "run", "graft", steps=1), policies=policies)
    trainer.open()
    record = trainer.run_step()
    assert events == [
        ("start", "generate tiny-a"), ("start", "generate tiny-b"),
        ("wait", "generate tiny-a"), ("wait", "generate tiny-b"),
        ("start", "update tiny-a"), ("start", "update tiny-b"),
        ("wait", "update tiny-a"), ("wait", "update tiny-b"),
    ]  # fmt: skip
    assert set(record.update_metrics) == {"tiny-a", "tiny-b"}


def test_dynamic_sampling_trains_two_agents_side_by_side_each_on_its_own_refills(
    tmp_path, fresh_policies
):
    """GRPO's agents share nothing, so dynamic sampling refills each agent's batch on its
    own: their batches differ, which only an exchange that moves groups must refuse."""
    config = small_config(tmp_path / "run", "grpo-dynamic", steps=2)
    rows = Trainer(config, policies=fresh_policies("tiny-a", "tiny-b")).train()
    assert sorted((row["step"], row["agent"]) for row in rows) == [
        (0, "tiny-a"), (0, "tiny-b"), (1, "tiny-a"), (1, "tiny-b"),
    ]  # fmt: skip
    assert all(row["rollouts_generated"] % (6 * 4) == 0 for row in rows)
