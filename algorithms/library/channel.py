"""The rendezvous of a live exchange between separately launched trainers: a shared folder.

Per step each agent publishes one record (`StepRecord`: its groups of the step, with
prompt keys, texts, token ids, rewards and success counts, group advantages, the sampler's
per-token log-probs and finish reasons) to `DIR/step-000012/AGENT.json`, written to a
temporary file and moved into place with `os.replace`, so a reader sees a whole record or
none, also across nodes on a shared filesystem. Each record carries the SHA-256 of its
payload (checked on every read) and of its step's prompt keys, so agents that drew different
prompts are refused instead of exchanging groups of different problems. Records stay: a
resumed agent reads step s again, and re-publishing step s is accepted only with the same
payload (an agent whose resumed sampling drew other responses than its peers already
trained on is stopped).

`wait` polls until every peer's record of the step is there; past `timeout` it raises one
line naming the agents still missing, before anything of the step is applied.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graft_env.types import AgentRollouts

FORMAT = "graft-live-step/1"
POLL_SECONDS = 0.05


class ChannelError(RuntimeError):
    """A record that is missing past the timeout, damaged, or disagrees with the step."""


def keys_digest(keys: Sequence[str]) -> str:
    """SHA-256 of a step's prompt keys in batch order."""
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()


def _payload_digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class StepRecord:
    """One agent's groups of one step, as published: `rollouts` with `advantages` filled
    (the agent's own group advantages, which a receiver of its groups trains with)."""

    agent: str
    step: int
    rollouts: AgentRollouts

    def payload(self) -> dict:
        r = self.rollouts
        if r.advantages is None:
            raise ValueError(f"step record of {self.agent!r}: the rollouts have no advantages")
        return {
            "prompt_ids": list(r.prompt_ids),
            "prompts": list(r.prompts),
            "texts": [list(g) for g in r.texts],
            "token_ids": [[[int(t) for t in ids] for ids in g] for g in r.token_ids],
            "logprobs": [
                [np.asarray(lp, dtype=np.float64).tolist() for lp in g] for g in r.logprobs
            ],
            "finish_reasons": [list(g) for g in r.finish_reasons],
            "rewards": np.asarray(r.rewards, dtype=np.float64).tolist(),
            "successes": r.k.tolist(),
            "advantages": np.asarray(r.advantages, dtype=np.float64).tolist(),
        }

    @classmethod
    def from_payload(cls, agent: str, step: int, payload: dict) -> StepRecord:
        """The record of `payload`; its success counts must be its rewards' (k = sum)."""
        rollouts = AgentRollouts(
            agent=agent,
            prompt_ids=payload["prompt_ids"],
            prompts=payload["prompts"],
            texts=payload["texts"],
            token_ids=payload["token_ids"],
            logprobs=[[np.asarray(lp, dtype=np.float64) for lp in g] for g in payload["logprobs"]],
            finish_reasons=payload["finish_reasons"],
            rewards=np.asarray(payload["rewards"], dtype=np.float64),
            advantages=np.asarray(payload["advantages"], dtype=np.float64),
        )
        if rollouts.k.tolist() != payload["successes"]:
            raise ChannelError(
                f"live exchange: the step-{step} record of {agent!r} counts successes "
                f"{payload['successes']} for rewards with {rollouts.k.tolist()}"
            )
        return cls(agent, step, rollouts)


class Channel:
    """The rendezvous folder `root` of the agents `agents` (in the exchange's order)."""

    def __init__(self, root: str | Path, agents: Sequence[str], timeout: float) -> None:
        if len(agents) < 2 or len(set(agents)) != len(agents):
            raise ValueError(f"live exchange: needs two or more distinct agents, got {agents}")
        if timeout <= 0:
            raise ValueError(f"live exchange: timeout must be > 0 seconds, got {timeout}")
        self.root, self.agents, self.timeout = Path(root), list(agents), float(timeout)

    def path(self, step: int, agent: str) -> Path:
        return self.root / f"step-{step:06d}" / f"{agent}.json"

    def publish(self, record: StepRecord) -> None:
        """Write `record` atomically; an existing record of the step must be the same."""
        if record.agent not in self.agents:
            raise ValueError(f"live exchange: {record.agent!r} is not one of {self.agents}")
        payload = record.payload()
        digest = _payload_digest(payload)
        path = self.path(record.step, record.agent)
        if path.exists():
            stored = self._read(path, record.step, record.agent)
            if stored["payload_sha256"] != digest:
                raise ChannelError(
                    f"live exchange: {path} already holds another step-{record.step} record of "
                    f"{record.agent!r} (its peers may have trained on it): this run sampled "
                    "other responses for the step, so it cannot rejoin the exchange there"
                )
            return
        document = {
            "format": FORMAT,
            "agent": record.agent,
            "step": record.step,
            "keys_sha256": keys_digest(record.rollouts.prompt_ids),
            "payload_sha256": digest,
            "payload": payload,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{record.agent}.")
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(document, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def wait(self, step: int, me: str, keys: Sequence[str]) -> dict[str, StepRecord]:
        """Every other agent's record of `step`, once all are there; their prompt keys
        must be `keys` (this agent's, in batch order)."""
        peers = [agent for agent in self.agents if agent != me]
        deadline = time.monotonic() + self.timeout
        while True:
            missing = [agent for agent in peers if not self.path(step, agent).exists()]
            if not missing:
                break
            if time.monotonic() > deadline:
                raise ChannelError(
                    f"live exchange: {me!r} waited {self.timeout:g} s for the step-{step} "
                    f"record of {', '.join(map(repr, missing))} in {self.root}: that agent "
                    "stopped or fell behind, so this one stops too (rerun all agents to resume)"
                )
            time.sleep(POLL_SECONDS)
        ours = keys_digest(keys)
        records = {}
        for agent in peers:
            document = self._read(self.path(step, agent), step, agent)
            if document["keys_sha256"] != ours:
                theirs = document["payload"]["prompt_ids"]
                first = next(
                    (
                        j
                        for j, pair in enumerate(zip(keys, theirs, strict=False))
                        if len(set(pair)) > 1
                    ),
                    min(len(keys), len(theirs)),
                )
                raise ChannelError(
                    f"live exchange: step {step}: {agent!r} answered other prompts than {me!r} "
                    f"(first difference at prompt {first} of {len(keys)} / {len(theirs)}): "
                    "every agent needs the same dataset, seed and batch shape"
                )
            records[agent] = StepRecord.from_payload(agent, step, document["payload"])
        return records

    def _read(self, path: Path, step: int, agent: str) -> dict:
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ChannelError(f"live exchange: cannot read {path}: {error}") from error
        if document.get("format") != FORMAT or (document.get("agent"), document.get("step")) != (
            agent,
            step,
        ):
            raise ChannelError(
                f"live exchange: {path} is not the {FORMAT} record of {agent!r} at step {step}"
            )
        if _payload_digest(document["payload"]) != document["payload_sha256"]:
            raise ChannelError(f"live exchange: {path}: payload does not match its SHA-256")
        return document
