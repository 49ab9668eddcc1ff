"""The common multi-agent training loop (local, in-process backend).

Every registry entry trains through `Trainer.run_step`; no algorithm has a private
loop. One step, for the shared prompt batch of step t:

1. rollout   each live policy samples n responses per prompt (seeded per step/agent);
             a stored peer (graft-stored) is read from its run's trajectory store;
2. verify    the multi-agent environment scores every response (math-verify); a
             library (graft-library) is then looked up for the all-fail prompts, its
             groups re-verified (`algorithms.library.source`);
3. exchange  the algorithm computes advantages and its exchange strategy picks the
             transfers, scoring peer texts under each receiver's π_old (`scoring`);
4. update    each live policy runs its `TrainBatch` in the algorithm's minibatch order.

All randomness of step t derives from (seed, t), and checkpoints hold weights,
optimizer and RNG state and the exchange strategy's state (HACPO's capability
window), so a run resumed from a checkpoint reproduces an uninterrupted one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml

import algorithms
from algorithms.algorithm import Algorithm, BatchCounts
from algorithms.checkpoint import (
    exchange_state,
    has_checkpoints,
    latest_checkpoint,
    restore_exchange_state,
    save_checkpoint,
)
from algorithms.exchange import ExchangeStats
from algorithms.library.source import Lookup, lookup_metrics, run_library
from algorithms.metrics import MetricsLog, agent_step_metrics
from algorithms.periodic_eval import PeriodicEvaluator
from algorithms.rollout import (
    append_groups,
    build_rollouts,
    refill_seed,
    sampling_seed,
    step_rng,
)
from algorithms.run_config import (
    ConfigError,
    TrainConfig,
    check_stored_source,
    parse_yaml,
    result_differences,
)
from algorithms.run_dir import create_run_dir, holds_steps, set_aside
from algorithms.store import StoreError, TrajectoryStore, atomic_write_bytes
from algorithms.types import AgentRollouts, ScoredText, Scorer, TrainBatch, TransferredGroup
from algorithms.wandb_sink import WandbSink
from graft_env.envs import MultiAgentMathEnv, prompt_batch_indices
from graft_env.policies import Policy, SamplingParams, load_policy

log = logging.getLogger(__name__)


@dataclass
class StepRecord:
    """What one step did, for metrics, tests and callers driving the loop by hand."""

    step: int
    rollouts: dict[str, AgentRollouts]
    statuses: dict[str, list[str]]
    transfers: dict[str, list[TransferredGroup]]
    exchange_stats: ExchangeStats
    batches: dict[str, TrainBatch]
    batch_counts: dict[str, BatchCounts]
    update_metrics: dict[str, dict[str, float]]
    timings: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


def _texts(generations) -> list[list[str]]:
    return [[g.text for g in group] for group in generations]


def _rollouts(name, prompt_ids, prompts, generations, rewards) -> AgentRollouts:
    return build_rollouts(
        name,
        prompt_ids,
        prompts,
        _texts(generations),
        [[g.token_ids for g in group] for group in generations],
        [[g.logprobs for g in group] for group in generations],
        [[g.finish_reason for g in group] for group in generations],
        rewards,
    )


@contextmanager
def _timed(timings: dict[str, float], phase: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - start


def make_policies(config: TrainConfig) -> dict[str, Policy]:
    """The run's policies: in this process, or one Ray actor each (`backend: ray`)."""
    if config.backend == "ray":
        from algorithms.ray_backend import make_ray_policies

        return make_ray_policies(config)
    return {a.name: load_policy(a.model, **dict(a.options)) for a in config.agents}


class Trainer:
    """Drives N policies through one algorithm on one shared prompt stream."""

    def __init__(
        self,
        config: TrainConfig,
        policies: Mapping[str, Policy] | None = None,
        algorithm: Algorithm | None = None,
    ) -> None:
        self.config = config.validate()
        self.algorithm = algorithm or algorithms.make(config.algorithm, **config.algorithm_options)
        names = [a.name for a in config.agents]
        check_stored_source(config, self.algorithm.name, self.algorithm.config.stored)
        self.library = None  # read before any model loads, so its errors come at once
        if config.library is not None:
            self.library = run_library(config, self.algorithm.config)
            log.info("%s", self.library.summary)
        if policies is None:
            policies = make_policies(config)
        if sorted(policies) != sorted(names):
            raise ConfigError(f"policies {sorted(policies)} do not match agents {names}")
        self.policies = {name: policies[name] for name in names}
        self.run_dir = Path(config.run_dir)
        self.step = 0
        self.peer = config.stored_peer
        stored_source = self.peer is not None or config.library is not None
        if self.algorithm.config.exchange != "none" and len(names) + stored_source < 2:
            # GRAFT-SPEC §8: with N = 1 every strategy transfers nothing (graft is then GRPO).
            log.info("%r has one agent: no exchange can happen", self.algorithm.name)
        env_agents = [*names, *([self.peer.agent] if self.peer else [])]
        self.env = MultiAgentMathEnv(
            agents=env_agents,
            dataset=config.env.dataset,
            split=config.env.split,
            data_dir=config.env.data_dir,
            dataset_options=config.env.dataset_options,
            batch_size=config.env.batch_size,
            n=self.algorithm.config.n,
            num_steps=config.steps,
            seed=config.seed,
            formatters={name: p.format_prompt for name, p in self.policies.items()},
        )
        self.peer_store = TrajectoryStore(self.peer.run_dir) if self.peer else None
        if self.peer_store is not None:
            self._check_peer_store()
        self.store = TrajectoryStore(self.run_dir) if config.store_trajectories else None
        self.metrics: MetricsLog | None = None
        self.checkpoint: Path | None = None  # the one this run resumed from or last wrote
        self.evaluator = PeriodicEvaluator(config.eval, self.run_dir, config.env.data_dir)

    # --- setup -----------------------------------------------------------------
    def _stream_meta(self) -> dict:
        env = self.config.env
        return {
            "dataset": env.dataset,
            "split": env.split,
            "dataset_options": dict(env.dataset_options),
            "seed": self.config.seed,
            "batch_size": env.batch_size,
            "n": self.algorithm.config.n,
        }

    def _check_peer_store(self) -> None:
        meta = self.peer_store.read_meta()
        ours = self._stream_meta()
        diffs = {k: (meta.get(k), v) for k, v in ours.items() if meta.get(k) != v}
        if diffs:
            raise StoreError(
                f"stored peer run {self.peer.run_dir} does not match this run's prompt stream: "
                + ", ".join(f"{k}: stored {a!r} vs ours {b!r}" for k, (a, b) in diffs.items())
            )

    def open(self, resume: bool = True) -> None:
        """Prepare the run directory; resume from its newest intact checkpoint if any.

        A directory whose checkpoints are all unusable restarts from step 0, its earlier
        files set aside (`algorithms.run_dir.set_aside`), never deleted."""
        create_run_dir(self.run_dir)
        ours = self.config.to_dict()
        self._check_config(ours)
        checkpoints = self.run_dir / "checkpoints"
        found = latest_checkpoint(checkpoints) if resume else None
        if found is None and resume and has_checkpoints(checkpoints):
            # before this run's config.yaml replaces the one that describes those files
            kept = set_aside(self.run_dir)
            log.warning(
                "%s: no checkpoint is usable (see above), so the run restarts from step 0; "
                "the earlier attempt's files are kept in %s",
                self.run_dir,
                kept,
            )
        config_path, text = self.run_dir / "config.yaml", yaml.safe_dump(ours, sort_keys=False)
        if not config_path.is_file() or config_path.read_text() != text:
            # this run's settings (steps, run_dir may change)
            atomic_write_bytes(config_path, text.encode(), what="the run's config")
        self.checkpoint = found[0] if found is not None else None
        if found is not None:
            path, state = found
            self._check_library_unchanged(path, state)
            restore_exchange_state(self.algorithm.strategy, state, path)
            for name, policy in self.policies.items():
                policy.load(path / name)
            self.step = int(state["step"])
            log.info("resumed %s from %s (step %d)", self.run_dir, path, self.step)
            if state.get("threads", torch.get_num_threads()) != torch.get_num_threads():
                log.warning(
                    "checkpoint %s was written with %d torch thread(s) and this run resumes "
                    "with %d: it continues, but other thread counts change results in the "
                    "last bits, so it will not be bit-identical to an uninterrupted run",
                    path,
                    state["threads"],
                    torch.get_num_threads(),
                )
        if self.store is not None:
            self.store.verify(before_step=self.step)  # the steps this run keeps
            self.store.write_meta(self._stream_meta())
        sink = WandbSink(self.config.wandb, self.run_dir, ours) if self.config.wandb else None
        self.metrics = MetricsLog(self.run_dir, tensorboard=self.config.tensorboard, wandb=sink)
        self.metrics.truncate_to(self.step)

    def _check_library_unchanged(self, checkpoint: Path, state: Mapping) -> None:
        """Refuse to resume a graft-library run whose library changed since `checkpoint`
        (its manifest's SHA-256 differs from the one the checkpoint recorded): an appended
        part changes which groups a prompt gets, so the resume would not be exact."""
        if self.library is None:
            return
        recorded, ours = state.get("library_manifest_sha256"), self.library.manifest_sha256
        if recorded != ours:
            raise ConfigError(
                f"{self.run_dir}: checkpoint {checkpoint} was trained on library "
                f"{self.config.library.path} when its manifest's SHA-256 was {recorded}; it is "
                f"{ours} now (an --append since?), which changes the groups the run gets: "
                "resume with the library as it was, or choose another run_dir"
            )

    def _check_config(self, ours: dict) -> None:
        """Refuse a run directory whose steps were computed with other settings that change
        results, naming each; settings that do not (`RESUMABLE_CHANGES`) may differ, and a
        directory whose earlier attempt recorded no step takes any config."""
        path = self.run_dir / "config.yaml"
        if not path.exists():
            return
        differences = result_differences(parse_yaml(path.read_text()), ours)
        if not differences:
            return
        if holds_steps(self.run_dir):
            raise ConfigError(
                f"{self.run_dir} holds a run whose settings differ in what changes results "
                f"(its value -> this config's): {'; '.join(differences)}; use its values to "
                "resume it, or choose another run_dir"
            )
        log.info(
            "%s: its earlier attempt recorded no step; starting over with this config (%s)",
            self.run_dir,
            "; ".join(differences),
        )

    # --- one step --------------------------------------------------------------
    def run_step(self) -> StepRecord:
        """Run step `self.step` end to end and advance the step counter."""
        t, cfg = self.step, self.config
        timings: dict[str, float] = {}
        obs, infos = self.env.reset(options={"start_step": t})
        live = list(self.policies)
        prompt_ids = infos[live[0]]["prompt_ids"]

        with _timed(timings, "rollout"):
            waits = {
                name: self._start_generate(name, obs[name], sampling_seed(cfg.seed, t, index))
                for index, name in enumerate(live)
            }
            generations = {name: wait() for name, wait in waits.items()}
            stored = self._read_peer(t, prompt_ids) if self.peer else None
        actions = {name: _texts(gens) for name, gens in generations.items()}
        if stored is not None:
            actions[self.peer.agent] = stored.texts

        with _timed(timings, "verify"):
            _, rewards, _, _, step_infos = self.env.step(actions)
        statuses = {name: list(info["statuses"]) for name, info in step_infos.items()}

        rollouts = {
            name: _rollouts(name, prompt_ids, obs[name], gens, rewards[name])
            for name, gens in generations.items()
        }
        if stored is not None:
            rollouts[self.peer.agent] = stored.with_rewards(rewards[self.peer.agent])
        lookup = None
        if self.library is not None:  # graft-library: its groups for the all-fail prompts
            indices = prompt_batch_indices(len(self.env.problems), cfg.env.batch_size, cfg.seed, t)
            with _timed(timings, "library"):
                lookup = self.library.lookup(rollouts[live[0]], indices, self.env.score_groups)
            rollouts[lookup.rollouts.agent] = lookup.rollouts
        sampled = {name: sum(map(len, gens)) for name, gens in generations.items()}
        if self.algorithm.config.dynamic_sampling:
            with _timed(timings, "refill"):
                for index, name in enumerate(live):
                    rollouts[name], drawn = self._refill(t, index, rollouts[name], statuses[name])
                    sampled[name] += drawn

        rng = step_rng(cfg.seed, t)
        with _timed(timings, "exchange"):
            self.algorithm.compute_advantages(rollouts)
            exchanged = self.algorithm.exchange(
                rollouts, live, self._scorer(rollouts, timings), rng
            )
            batches, counts = self.algorithm.build_batches(rollouts, exchanged.transfers, live, rng)
        timings["exchange"] -= timings.get("scoring", 0.0)

        update_metrics = {}
        with _timed(timings, "update"):
            waits = {}
            for name, policy in self.policies.items():
                if not batches[name].minibatches:
                    # e.g. dynamic sampling found no informative group, even after refills
                    log.warning("step %d: %s has nothing to train on; update skipped", t, name)
                    update_metrics[name] = {"update_skipped": 1.0}
                elif hasattr(policy, "update_async"):  # Ray actors train concurrently
                    waits[name] = policy.update_async(batches[name], self.algorithm.loss).result
                else:
                    update_metrics[name] = policy.update(batches[name], self.algorithm.loss)
            update_metrics.update({name: wait() for name, wait in waits.items()})

        if self.store is not None:
            for name in live:
                self.store.write(self.run_dir.name, t, rollouts[name], statuses[name], name)
        record = StepRecord(
            t,
            rollouts,
            statuses,
            exchanged.transfers,
            exchanged.stats,
            batches,
            counts,
            update_metrics,
            timings,
        )
        record.metrics = self._step_metrics(record, step_infos, stored, sampled, lookup)
        self.step += 1
        return record

    def _generate(self, name: str, index: int, prompts: Sequence[str], seed: int):
        return self._start_generate(name, prompts, seed)()

    def _start_generate(self, name: str, prompts: Sequence[str], seed: int):
        """Start `name`'s sampling; the returned callable waits for its groups.

        Policies with `generate_async` (Ray actors) sample concurrently, each in its
        own process; the others sample right here, one after the other.
        """
        sampling = self.config.sampling
        policy = self.policies[name]
        args = (
            list(prompts),
            self.algorithm.config.n,
            SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_new_tokens=sampling.max_new_tokens,
                seed=seed,
            ),
        )
        if hasattr(policy, "generate_async"):
            return policy.generate_async(*args).result
        groups = policy.generate(*args)
        return lambda: groups

    def _refill(
        self, t: int, index: int, rollouts: AgentRollouts, statuses: list[str]
    ) -> tuple[AgentRollouts, int]:
        """Dynamic sampling (DAPO): draw extra prompts until the batch has `batch_size`
        informative groups (0 < k < n) or `dynamic_max_rounds` rounds are spent.

        Refill prompts come from their own deterministic stream (seeded by run seed
        and step), so resumed runs refill identically. Kept refill groups are
        appended; `statuses` is extended in place to match. Returns the rollouts and
        the number of responses the refills generated, kept or not.
        """
        cfg, n, name = self.config, self.algorithm.config.n, rollouts.agent
        need = cfg.env.batch_size - int(np.count_nonzero((rollouts.k > 0) & (rollouts.k < n)))
        drawn = 0
        stream = refill_seed(cfg.seed, t)
        for round_ in range(1, cfg.dynamic_max_rounds + 1):
            if need <= 0:
                break
            indices = prompt_batch_indices(
                len(self.env.problems), cfg.env.batch_size, stream, round_ - 1
            )
            prompts = self.env.prompts_for(name, indices)
            gens = self._generate(name, index, prompts, sampling_seed(cfg.seed, t, index, round_))
            drawn += sum(map(len, gens))
            rewards, infos = self.env.score_groups(indices, {name: _texts(gens)})
            ids = [self.env.problems[i].id for i in indices]
            extra = _rollouts(name, ids, prompts, gens, rewards[name])
            keep = np.flatnonzero((extra.k > 0) & (extra.k < n))[:need].tolist()
            rollouts = append_groups(rollouts, extra, keep)
            statuses += [infos[name]["statuses"][p * n + i] for p in keep for i in range(n)]
            need -= len(keep)
        return rollouts, drawn

    def _read_peer(self, t: int, prompt_ids: Sequence[str]):
        stored = self.peer_store.read(t, self.peer.agent, self.algorithm.config.n)
        if stored.prompt_ids != list(prompt_ids):
            raise StoreError(
                f"stored peer {self.peer.agent!r} at step {t} answered prompts "
                f"{stored.prompt_ids[:3]}..., this run has {list(prompt_ids)[:3]}...: "
                "the prompt streams differ"
            )
        return stored

    def _scorer(self, rollouts: Mapping[str, AgentRollouts], timings: dict[str, float]) -> Scorer:
        def score(
            receiver: str,
            prompt_indices: Sequence[int],
            texts: Sequence[str],
            finish_reasons: Sequence[str],
        ) -> list[ScoredText]:
            prompts = [rollouts[receiver].prompts[p] for p in prompt_indices]
            with _timed(timings, "scoring"):
                return self.policies[receiver].score(prompts, list(texts), list(finish_reasons))

        return score

    def _step_metrics(
        self,
        record: StepRecord,
        step_infos,
        stored,
        sampled: dict[str, int],
        lookup: Lookup | None,
    ) -> dict[str, dict[str, float]]:
        out = {
            name: agent_step_metrics(
                name,
                record.rollouts[name],
                step_infos[name]["status_counts"],
                record.update_metrics[name],
                record.batch_counts[name],
                record.exchange_stats,
                record.timings,
                sampled[name],
            )
            for name in self.policies
        }
        if stored is not None:
            changed = np.count_nonzero(stored.rewards != record.rollouts[self.peer.agent].rewards)
            for metrics in out.values():
                metrics["stored_peer/reward_changed_on_reverify"] = float(changed)
        if lookup is not None:
            for name, metrics in out.items():
                metrics.update(lookup_metrics(lookup, record.transfers[name]))
        return out

    # --- the whole run ---------------------------------------------------------
    def train(self, resume: bool = True, on_step: Callable[[StepRecord], None] | None = None):
        """Run (or resume) to `config.steps`; returns every metrics row of the run."""
        from algorithms.progress import StepProgress

        self.open(resume=resume)
        with StepProgress(self.config.steps, self.step, enabled=self.config.progress) as progress:
            while self.step < self.config.steps:
                record = self.run_step()
                if self.evaluator.due(self.step, self.config.steps):
                    with _timed(record.timings, "eval"):
                        results = self.evaluator.run(self.policies, record.step)
                    for name, metrics in record.metrics.items():
                        metrics.update(results[name], **{"time/eval": record.timings["eval"]})
                for name, metrics in record.metrics.items():
                    self.metrics.write(record.step, name, metrics)
                if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                    self.checkpoint = save_checkpoint(
                        self.run_dir / "checkpoints",
                        self.step,
                        self.policies,
                        {
                            "step": self.step,
                            "algorithm": self.algorithm.name,
                            "exchange": exchange_state(self.algorithm.strategy),
                            "threads": torch.get_num_threads(),  # checked on resume
                            "library_manifest_sha256": (  # checked on resume
                                self.library.manifest_sha256 if self.library else None
                            ),
                        },
                        keep=self.config.keep_checkpoints,
                    )
                progress.update(record)
                if on_step is not None:
                    on_step(record)
        rows = self.metrics.rows()
        self.metrics.close()
        return rows
