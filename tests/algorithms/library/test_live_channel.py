"""The live exchange's rendezvous folder: whole records or none, checked digests, the same
prompts for every agent, a timeout naming the missing agent, and records that stay for a
resumed agent (re-publishing only what was published)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from algorithms.library.channel import Channel, ChannelError, StepRecord, _payload_digest
from graft_env.types import AgentRollouts

AGENTS = ["a", "b", "c"]


def rollouts(agent: str, keys=("k0", "k1"), reward: float = 1.0) -> AgentRollouts:
    n = 2
    return AgentRollouts(
        agent=agent,
        prompt_ids=list(keys),
        prompts=[f"problem {k}" for k in keys],
        texts=[[f"{agent} says {k} {i}" for i in range(n)] for k in keys],
        token_ids=[[[3, 4, i] for i in range(n)] for _ in keys],
        logprobs=[[np.array([-0.1, -1 / 3, -2.0 + i]) for i in range(n)] for _ in keys],
        finish_reasons=[["stop", "length"] for _ in keys],
        rewards=np.array([[reward, 0.0] for _ in keys]),
        advantages=np.array([[0.7071067811865476, -0.7071067811865476] for _ in keys]),
    )


def test_a_record_reads_back_exactly(tmp_path):
    channel = Channel(tmp_path, AGENTS, timeout=5)
    for agent in AGENTS:
        channel.publish(StepRecord(agent, 3, rollouts(agent)))
    records = channel.wait(3, "a", ["k0", "k1"])
    assert sorted(records) == ["b", "c"]
    got, sent = records["b"].rollouts, rollouts("b")
    for name in ("prompt_ids", "prompts", "texts", "token_ids", "finish_reasons"):
        assert getattr(got, name) == getattr(sent, name)
    assert np.array_equal(got.rewards, sent.rewards)
    assert np.array_equal(got.advantages, sent.advantages)  # JSON keeps doubles exactly
    for g, s in zip(got.logprobs, sent.logprobs, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(g, s, strict=True))
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no temporary left


def test_waiting_returns_once_the_last_peer_publishes(tmp_path):
    channel = Channel(tmp_path, AGENTS[:2], timeout=10)
    late = threading.Timer(0.3, lambda: channel.publish(StepRecord("b", 0, rollouts("b"))))
    late.start()
    start = time.monotonic()
    assert list(channel.wait(0, "a", ["k0", "k1"])) == ["b"]
    assert time.monotonic() - start >= 0.25
    late.join()


def test_a_missing_peer_is_named_after_the_timeout(tmp_path):
    channel = Channel(tmp_path, AGENTS, timeout=0.2)
    channel.publish(StepRecord("b", 1, rollouts("b")))
    with pytest.raises(ChannelError, match=r"step-1 record of 'c'") as error:
        channel.wait(1, "a", ["k0", "k1"])
    assert "\n" not in str(error.value)


def test_other_prompts_are_refused(tmp_path):
    channel = Channel(tmp_path, AGENTS[:2], timeout=5)
    channel.publish(StepRecord("b", 0, rollouts("b", keys=("k0", "k9"))))
    with pytest.raises(ChannelError, match=r"'b' answered other prompts .* at prompt 1 of 2"):
        channel.wait(0, "a", ["k0", "k1"])


def test_records_stay_and_only_the_same_record_is_published_again(tmp_path):
    channel = Channel(tmp_path, AGENTS[:2], timeout=5)
    channel.publish(StepRecord("b", 2, rollouts("b")))
    channel.publish(StepRecord("b", 2, rollouts("b")))  # a resumed agent, same sampling
    with pytest.raises(ChannelError, match="already holds another step-2 record of 'b'"):
        channel.publish(StepRecord("b", 2, rollouts("b", reward=0.0)))
    resumed = Channel(tmp_path, AGENTS[:2], timeout=5)  # a new process reads step 2 again
    assert resumed.wait(2, "a", ["k0", "k1"])["b"].rollouts.texts == rollouts("b").texts


def test_a_damaged_record_is_refused(tmp_path):
    channel = Channel(tmp_path, AGENTS[:2], timeout=5)
    channel.publish(StepRecord("b", 0, rollouts("b")))
    path = channel.path(0, "b")
    document = json.loads(path.read_text())
    document["payload"]["rewards"][0][1] = 1.0
    path.write_text(json.dumps(document))
    with pytest.raises(ChannelError, match="payload does not match its SHA-256"):
        channel.wait(0, "a", ["k0", "k1"])


@pytest.mark.parametrize(
    ("agents", "timeout", "error"),
    [(["a"], 1, "two or more distinct agents"), (["a", "a"], 1, "distinct"), (AGENTS, 0, "> 0")],
)
def test_bad_channel_settings_are_refused(tmp_path, agents, timeout, error):
    with pytest.raises(ValueError, match=error):
        Channel(tmp_path, agents, timeout)


def test_success_counts_that_disagree_with_the_rewards_are_refused(tmp_path):
    channel = Channel(tmp_path, AGENTS[:2], timeout=5)
    channel.publish(StepRecord("b", 0, rollouts("b")))
    path = channel.path(0, "b")
    document = json.loads(path.read_text())
    document["payload"]["successes"] = [2, 1]
    document["payload_sha256"] = _payload_digest(document["payload"])
    path.write_text(json.dumps(document))
    with pytest.raises(ChannelError, match=r"counts successes \[2, 1\] for rewards with \[1, 1\]"):
        channel.wait(0, "a", ["k0", "k1"])
