"""`RayPolicy`: the driver-side proxy of one agent's actor, speaking the Policy protocol.

Every protocol method is one remote call to the agent's `PolicyWorker`; the
`*_async` variants return a `PendingCall` at once so the loop can keep several
actors busy together (all agents sampling in parallel). The blocking methods are
the async ones followed by `result()`.

Failure handling: the agents of a run form one `ActorGroup`. When any call fails
(the actor died, raised, or timed out), the whole group is shut down, which frees
its CPUs/GPUs, and `AgentFailure` names the agent and the method. The raylet ends a
killed actor's child processes too (a vLLM engine's among them), so their GPU memory is
freed with the actor's. The group also shuts down when the driver exits.
The loop does not catch it, so the run stops; running it again resumes from the last checkpoint with
new actors. Continuing with a half-updated actor would not reproduce anything.
"""

from __future__ import annotations

import atexit
import pickle
import weakref
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import ray
from ray.util.placement_group import remove_placement_group

from algorithms.algorithm import Algorithm
from graft_env.policies import Generation, LossFn, SamplingParams
from graft_env.types import ScoredText, TrainBatch

RESUME_HINT = (
    "the run's actors were shut down; once the cause is fixed, running it again resumes "
    "from its last checkpoint"
)


class AgentFailure(RuntimeError):
    """An agent's actor died, raised or timed out; `agent` and `method` say where."""

    def __init__(self, agent: str, method: str, reason: str) -> None:
        self.agent, self.method, self.reason = agent, method, reason
        super().__init__(f"agent {agent!r} failed in {method}(): {reason}\n({RESUME_HINT})")


class TrafficMeter:
    """Bytes crossing the actor boundary: the pickle size of arguments and results.

    Off unless a `TrafficMeter` is set on `RayPolicy.traffic` (the benchmark does):
    measuring pickles every payload once more on the driver.
    """

    def __init__(self) -> None:
        self.bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)

    def add(self, method: str, direction: str, payload: Any) -> None:
        """Count `payload` as sent to (`direction="sent"`) or received from the actor."""
        self.bytes[(method, direction)] += len(pickle.dumps(payload, protocol=5))
        if direction == "sent":
            self.calls[method] += 1

    def total(self) -> int:
        return sum(self.bytes.values())


class ActorGroup:
    """The actors and the placement group of one run: they stop together.

    If the group is garbage-collected without `shutdown`, a finalizer still kills the
    actors and returns the placement group, so a process that builds several runs
    (tests, notebooks) does not keep paying for the dead ones.
    """

    def __init__(
        self,
        actors: Mapping[str, Any],
        placement_groups: Sequence[Any],
        call_timeout_s: float | None,
    ) -> None:
        self.call_timeout_s = call_timeout_s
        self.closed = False
        self._release = weakref.finalize(
            self, _release, list(actors.values()), list(placement_groups)
        )
        # at exit too: registered after ray.init's own atexit disconnect, so it runs first
        # (atexit is last-in first-out); the finalizer holds no reference to the group
        self._release.atexit = False
        atexit.register(self._release)

    def shutdown(self) -> None:
        """Kill every actor and free its resources (idempotent)."""
        self.closed = True
        self._release()

    def get(self, agent: str, method: str, ref: ray.ObjectRef, timeout: float | None) -> Any:
        """Wait up to `timeout` s (None: while the actor lives) for one call's result;
        any failure stops the group and raises AgentFailure."""
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            reason = f"no answer within ray.call_timeout_s={timeout} s"
        except ray.exceptions.RayActorError as error:
            reason = f"its Ray actor died: {error}"
        except ray.exceptions.RayTaskError as error:
            cause = error.cause if error.cause is not None else error
            reason = f"it raised {type(cause).__name__}: {cause}"
        except ray.exceptions.RayError as error:
            reason = f"Ray error {type(error).__name__}: {error}"
        self.fail_and_raise(agent, method, reason)

    def fail_and_raise(self, agent: str, method: str, reason: str) -> NoReturn:
        """Stop the group, then raise AgentFailure."""
        self.shutdown()
        raise AgentFailure(agent, method, reason)


def check_driver_sees(group: ActorGroup, agent: str, directory: Path, writer: str) -> None:
    """What `writer` (an agent's actor) saved must be visible to the driver: on a
    multi-node cluster run_dir must be on a filesystem every node mounts at the same path."""
    if not directory.is_dir():
        group.fail_and_raise(
            agent,
            "save",
            f"{writer} wrote {directory}, but this driver does not see it: on a multi-node "
            "cluster run_dir must be on a filesystem shared by every node and mounted at the "
            "same path",
        )


def _release(actors: list[Any], placement_groups: list[Any]) -> None:
    if not ray.is_initialized():
        return  # the cluster (and everything in it) is already gone
    for actor in actors:
        ray.kill(actor, no_restart=True)
    for placement_group in placement_groups:
        remove_placement_group(placement_group)


class PendingCall:
    """A remote call in flight. `ref` is its ObjectRef (for `ray.wait`); `result()`
    waits for it and raises `AgentFailure` if it failed."""

    def __init__(self, policy: RayPolicy, method: str, ref: ray.ObjectRef) -> None:
        self.policy, self.method, self.ref = policy, method, ref

    def result(self) -> Any:
        group = self.policy.group
        value = group.get(self.policy.agent, self.method, self.ref, group.call_timeout_s)
        if self.policy.traffic is not None:
            self.policy.traffic.add(self.method, "received", value)
        return value


class RayPolicy:
    """One agent's policy in a Ray actor, behind the Policy protocol (`policies.base`)."""

    def __init__(
        self,
        agent: str,
        actor: Any,
        group: ActorGroup,
        info: Mapping[str, Any],
        algorithm: Algorithm,
    ) -> None:
        self.agent = agent
        self.actor = actor
        self.group = group
        self.name: str = info["name"]
        self.temperature: float = info["temperature"]
        self.placement = dict(info)
        self.algorithm_name, self.algorithm_config = algorithm.name, algorithm.config
        self.traffic: TrafficMeter | None = None

    def __repr__(self) -> str:
        return f"RayPolicy({self.agent!r}, node={self.placement['node_id'][:8]})"

    def _submit(self, method: str, *args: Any) -> PendingCall:
        if self.group.closed:
            self.group.fail_and_raise(self.agent, method, "the run's actors are already shut down")
        if self.traffic is not None:
            self.traffic.add(method, "sent", args)
        return PendingCall(self, method, getattr(self.actor, method).remote(*args))

    def _call(self, method: str, *args: Any) -> Any:
        return self._submit(method, *args).result()

    # -- the Policy protocol ------------------------------------------------------
    def format_prompt(self, problem: str) -> str:
        return self._call("format_prompt", problem)

    def generate_async(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> PendingCall:
        """Start sampling and return at once; `.result()` gives what `generate` returns."""
        return self._submit("generate", list(prompts), n, sampling)

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        return self.generate_async(prompts, n, sampling).result()

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[ScoredText]:
        return self._call("score", list(prompts), list(responses), list(finish_reasons))

    def update_async(self, batch: TrainBatch, loss_fn: LossFn) -> PendingCall:
        """Start one optimisation pass and return at once; `.result()` gives the metrics."""
        check_loss(self.agent, (self.algorithm_name, self.algorithm_config), loss_fn)
        return self._submit("update", batch)

    def update(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        return self.update_async(batch, loss_fn).result()

    def save(self, path: str | Path) -> None:
        """Save on the actor's filesystem; the driver must see the result (shared FS)."""
        directory = Path(path).absolute()
        self._call("save", str(directory))
        check_driver_sees(
            self.group, self.agent, directory, f"the actor on node {self.placement['node_id']}"
        )

    def load(self, path: str | Path) -> None:
        self._call("load", str(Path(path).absolute()))

    # -- for tests and benchmarks -------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The actor's current weights as numpy arrays (the whole model crosses over)."""
        return self._call("state_dict")


def check_loss(agent: str, algorithm: tuple[str, Any], loss_fn: LossFn) -> None:
    """The actors train with their own copy of the run's algorithm (`algorithm`: its name
    and config); refuse any other loss, naming `agent`."""
    owner = getattr(loss_fn, "__self__", None)
    same = (
        isinstance(owner, Algorithm)
        and getattr(loss_fn, "__func__", None) is Algorithm.loss
        and (owner.name, owner.config) == algorithm
    )
    if not same:
        raise ValueError(
            f"agent {agent!r}: the Ray backend trains with the `loss` of algorithm "
            f"{algorithm[0]!r} as built from the run config inside the actor; "
            f"update() was given {loss_fn!r}, which is not that loss (a wrapped or "
            "different loss function cannot be used with backend: ray)"
        )
