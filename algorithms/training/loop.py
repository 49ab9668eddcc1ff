"""The common multi-agent training loop (local, in-process backend).

Every registry entry trains through `Trainer.run_step`; no algorithm has a private
loop. One step, for the shared prompt batch of step t:

1. rollout   each live policy samples n responses per prompt (seeded per step/agent);
             a stored peer (graft-stored) is read from its run's trajectory store;
2. verify    the multi-agent environment scores every response (math-verify); a
             library (graft-library) is then looked up for the all-fail prompts, its
             groups re-verified (`algorithms.library.source`), and dynamic sampling
             refills the batch (`algorithms.rollouts.refill`); with `rollout_correction`
             set, each live policy rescores its own responses (`correct_rollouts`), and a
             mean log-prob gap above its `max_logprob_gap` stops the run;
3. exchange  the algorithm computes advantages and its exchange strategy picks the
             transfers, scoring peer texts under each receiver's π_old (`scoring`);
4. update    each live policy runs its `TrainBatch` in the algorithm's minibatch order;
5. store     the live agents' groups go to the run's trajectory store, and the step's
             metrics rows are computed (`algorithms.training.step`).

Every policy is started on its sampling and its update before any is waited for
(`Policy.generate_async`, `update_async`): Ray actors work at once, a policy in this
process has finished when the call returns. All randomness of step t derives from
(seed, t), and checkpoints hold weights, optimizer and RNG state and the exchange
strategy's state (HACPO's capability window), so a run resumed from a checkpoint
reproduces an uninterrupted one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml

import algorithms
from algorithms.algorithm import Algorithm, BatchCounts
from algorithms.core.rollout_correction import check_logprob_gap
from algorithms.exchange import ExchangeResult
from algorithms.exchange.resample import ResamplingScorer, loop_resampler
from algorithms.library.source import Lookup
from algorithms.rollouts import (
    generated_rollouts,
    refill,
    refill_seed,
    response_texts,
    sampling_seed,
    step_rng,
)
from algorithms.storage.store import StoredRollouts, StoreError, TrajectoryStore, atomic_write_bytes
from algorithms.training.checkpoint import restore_checkpoint, save_checkpoint
from algorithms.training.metrics import MetricsLog
from algorithms.training.periodic_eval import PeriodicEvaluator
from algorithms.training.resume import (
    check_library_unchanged,
    check_peer_store,
    check_run_dir,
    check_threads,
    loop_state,
    stream_meta,
)
from algorithms.training.run_config import (
    ConfigError,
    Start,
    TrainConfig,
    check_stored_source,
    resolved_config,
    run_library,
)
from algorithms.training.run_dir import (
    RESOLVED_CONFIG,
    RunLog,
    create_run_dir,
    holds_files,
    remove_fresh,
    set_aside,
    write_hparams,
)
from algorithms.training.step import (
    StepRecord,
    correct_rollouts,
    step_metrics,
    timed,
    update_policies,
)
from algorithms.training.wandb_sink import WandbSink
from graft_env.envs import MultiAgentMathEnv, prompt_batch_indices
from graft_env.policies import Generation, Policy, SamplingParams, load_policy
from graft_env.types import AgentRollouts, ScoredText, Scorer, TrainBatch

log = logging.getLogger(__name__)

Groups = dict[str, list[list[Generation]]]  # each live agent's sampled groups


def make_policies(config: TrainConfig) -> dict[str, Policy]:
    """The run's policies: in this process, or one Ray actor each (`backend: ray`)."""
    if config.backend == "ray":
        from algorithms.training.ray import make_ray_policies

        return make_ray_policies(config)
    return {a.name: load_policy(a.model, **dict(a.options)) for a in config.agents}


class Trainer:
    """Drives N policies through one algorithm on one shared prompt stream.

    `start` says what to do with what the run directory holds: "resume" from its newest
    intact checkpoint, "restart" from step 0 with its files moved to ``earlier-<UTC time>/``,
    or "fresh": delete it (only a directory a graft run created) once the whole run is set
    up. The directory is checked, and its checkpoint found, when the Trainer is made, before
    any model loads (`algorithms.training.resume.check_run_dir`)."""

    def __init__(
        self,
        config: TrainConfig,
        policies: Mapping[str, Policy] | None = None,
        algorithm: Algorithm | None = None,
        start: Start = "resume",
    ) -> None:
        self.config = config.validate()
        self.algorithm = algorithm or algorithms.make(config.algorithm, **config.algorithm_options)
        names = [a.name for a in config.agents]
        check_stored_source(config, self.algorithm.name, self.algorithm.config.stored)
        self.library = None  # read before any model loads, so its errors come at once
        if config.library is not None:
            self.library = run_library(config, self.algorithm.config)
            log.info("%s", self.library.summary)
        self.run_dir, self.start = Path(config.run_dir), start
        self._resume_from = check_run_dir(self.run_dir, config.to_dict(), start)
        if policies is None:
            policies = make_policies(config)
        if sorted(policies) != sorted(names):
            raise ConfigError(f"policies {sorted(policies)} do not match agents {names}")
        self.policies = {name: policies[name] for name in names}
        self.step = 0
        self.peer = config.stored_peer
        stored_source = self.peer is not None or config.library is not None
        if self.algorithm.strategy.moves_groups and len(names) + stored_source < 2:
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
        self.stream = stream_meta(config, self.algorithm.config.n)
        self.peer_store = TrajectoryStore(self.peer.run_dir) if self.peer else None
        if self.peer_store is not None:
            check_peer_store(self.peer_store, self.peer.run_dir, self.stream)
        self.store = TrajectoryStore(self.run_dir) if config.store_trajectories else None
        self.metrics: MetricsLog | None = None
        self.run_log: RunLog | None = None
        self.checkpoint: Path | None = None  # the one this run resumed from or last wrote
        self.evaluator = PeriodicEvaluator(config.eval, self.run_dir, config.env.data_dir)

    def open(self, resume: bool = True) -> None:
        """Prepare the run directory (for `start` "fresh" deleted first, for "restart" its
        files set aside) and its records: config.yaml (the settings as written),
        resolved_config.yaml (every setting: `resolved_config`), run.log; resume from the
        checkpoint found when the Trainer was made, unless `resume` is False
        (`algorithms.training.resume` says what it must agree with)."""
        kept = None
        if self.start == "fresh":
            remove_fresh(self.run_dir)
        elif self.start == "restart" and holds_files(self.run_dir):
            kept = set_aside(self.run_dir)
        create_run_dir(self.run_dir)
        self.run_log = RunLog(self.run_dir)
        if kept is not None:
            log.warning("%s starts over from step 0; its earlier files: %s", self.run_dir, kept)
        ours = self.config.to_dict()
        found = self._resume_from if resume else None
        resolved = resolved_config(self.config, self.algorithm.config)
        for name, data, what in (
            ("config.yaml", ours, "the run's config"),  # steps, run_dir may change
            (RESOLVED_CONFIG, resolved, "the run's resolved config"),
        ):
            path, text = self.run_dir / name, yaml.safe_dump(data, sort_keys=False)
            if not path.is_file() or path.read_text() != text:
                atomic_write_bytes(path, text.encode(), what=what)
        self.checkpoint = found[0] if found is not None else None
        if found is not None:
            path, state = found
            if self.library is not None:
                library = self.config.library.path, self.library.manifest_sha256
                check_library_unchanged(self.run_dir, *library, path, state)
            self.step = restore_checkpoint(path, state, self.policies, self.algorithm.strategy)
            log.info("resumed %s from %s (step %d)", self.run_dir, path, self.step)
            check_threads(path, state)
        if self.store is not None:  # its steps before self.step were verified by check_run_dir
            self.store.write_meta(self.stream)
        sink = WandbSink(self.config.wandb, self.run_dir, resolved) if self.config.wandb else None
        self.metrics = MetricsLog(self.run_dir, tensorboard=self.config.tensorboard, wandb=sink)
        if self.config.tensorboard:
            write_hparams(self.run_dir, resolved, [a.name for a in self.config.agents])
        self.metrics.truncate_to(self.step)

    # --- one step --------------------------------------------------------------
    def run_step(self) -> StepRecord:
        """Run step `self.step` end to end and advance the step counter."""
        t, timings = self.step, {}
        obs, infos = self.env.reset(options={"start_step": t})
        prompt_ids = infos[next(iter(self.policies))]["prompt_ids"]
        with timed(timings, "rollout"):
            groups = self._sample(t, obs)
            stored = self._read_peer(t, prompt_ids) if self.peer else None
        with timed(timings, "verify"):
            rollouts, statuses, step_infos = self._verify(prompt_ids, obs, groups, stored)
        lookup = None
        if self.library is not None:  # graft-library: its groups for the all-fail prompts
            with timed(timings, "library"):
                lookup = self._look_up_library(t, rollouts)
        sampled = {name: sum(map(len, gens)) for name, gens in groups.items()}
        if self.algorithm.config.dynamic_sampling:
            with timed(timings, "refill"):
                self._refill(t, rollouts, statuses, sampled)
        corrections = {}
        if self.config.rollout_correction is not None:  # own responses at θ_old, by the trainer
            with timed(timings, "rescoring"):
                corrected, corrections = correct_rollouts(
                    self.policies, rollouts, self.config.rollout_correction
                )
            for name, measured in corrections.items():  # before any update trains on them
                check_logprob_gap(
                    f"agent {name}",
                    t,
                    measured["rollout_correction/logp_diff_mean"],
                    measured["rollout_correction/logp_diff_max"],
                    self.config.rollout_correction.max_logprob_gap,
                )
            rollouts.update(corrected)
        with timed(timings, "exchange"):
            exchanged, batches, counts = self._exchange(t, rollouts, timings)
        timings["exchange"] -= timings.get("scoring", 0.0)
        with timed(timings, "update"):
            updates = update_policies(self.policies, batches, self.algorithm.loss, t)
        self._store(t, rollouts, statuses)
        record = StepRecord(
            t,
            rollouts,
            statuses,
            exchanged.transfers,
            exchanged.stats,
            batches,
            counts,
            updates,
            timings,
            corrections=corrections,
        )
        status_counts = {name: info["status_counts"] for name, info in step_infos.items()}
        record.metrics = step_metrics(record, status_counts, sampled, stored, lookup)
        self.step += 1
        return record

    def _sampling(self, seed: int) -> SamplingParams:
        """The run's sampling settings with `seed`."""
        sampling = self.config.sampling
        return SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens,
            seed=seed,
        )

    def _sample(self, t: int, obs: Mapping[str, Sequence[str]]) -> Groups:
        """Rollout: every live policy's groups for its prompts, all started at once."""
        n, seed = self.algorithm.config.n, self.config.seed
        pending = {
            name: policy.generate_async(
                list(obs[name]), n, self._sampling(sampling_seed(seed, t, i))
            )
            for i, (name, policy) in enumerate(self.policies.items())
        }
        return {name: call.result() for name, call in pending.items()}

    def _read_peer(self, t: int, prompt_ids: Sequence[str]) -> StoredRollouts:
        """The stored peer's groups of step t, which must answer this step's prompts."""
        stored = self.peer_store.read(t, self.peer.agent, self.algorithm.config.n)
        if stored.prompt_ids != list(prompt_ids):
            raise StoreError(
                f"stored peer {self.peer.agent!r} at step {t} answered prompts "
                f"{stored.prompt_ids[:3]}..., this run has {list(prompt_ids)[:3]}...: "
                "the prompt streams differ"
            )
        return stored

    def _verify(
        self,
        prompt_ids: Sequence[str],
        obs: Mapping[str, Sequence[str]],
        groups: Groups,
        stored: StoredRollouts | None,
    ) -> tuple[dict[str, AgentRollouts], dict[str, list[str]], dict]:
        """Verify: every response scored, as rollouts (a stored peer's verified again),
        each response's status, and the environment's per-agent infos."""
        actions = {name: response_texts(gens) for name, gens in groups.items()}
        if stored is not None:
            actions[stored.agent] = stored.texts
        _, rewards, _, _, step_infos = self.env.step(actions)
        rollouts = {
            name: generated_rollouts(name, prompt_ids, obs[name], gens, rewards[name])
            for name, gens in groups.items()
        }
        if stored is not None:
            rollouts[stored.agent] = stored.with_rewards(rewards[stored.agent])
        statuses = {name: list(info["statuses"]) for name, info in step_infos.items()}
        return rollouts, statuses, step_infos

    def _look_up_library(self, t: int, rollouts: dict[str, AgentRollouts]) -> Lookup:
        """The library's groups for the first live agent's all-fail prompts, added to
        `rollouts` as one more agent's."""
        cfg = self.config
        indices = prompt_batch_indices(len(self.env.problems), cfg.env.batch_size, cfg.seed, t)
        receiver = rollouts[next(iter(self.policies))]
        lookup = self.library.lookup(receiver, indices, self.env.score_groups)
        rollouts[lookup.rollouts.agent] = lookup.rollouts
        return lookup

    def _refill(
        self,
        t: int,
        rollouts: dict[str, AgentRollouts],
        statuses: dict[str, list[str]],
        sampled: dict[str, int],
    ) -> None:
        """Dynamic sampling: each live agent's batch refilled (`refill`), its refill
        rounds seeded per round; `sampled` counts every response drawn."""
        cfg = self.config
        for i, (name, policy) in enumerate(self.policies.items()):
            rounds = [
                self._sampling(sampling_seed(cfg.seed, t, i, r))
                for r in range(1, cfg.dynamic_max_rounds + 1)
            ]
            rollouts[name], statuses[name], drawn = refill(
                rollouts[name],
                statuses[name],
                self.env,
                policy,
                rounds,
                refill_seed(cfg.seed, t),
                cfg.env.batch_size,
            )
            sampled[name] += drawn

    def _exchange(
        self, t: int, rollouts: Mapping[str, AgentRollouts], timings: dict[str, float]
    ) -> tuple[ExchangeResult, dict[str, TrainBatch], dict[str, BatchCounts]]:
        """Exchange: advantages, the strategy's transfers and every live agent's batch."""
        rng, live = step_rng(self.config.seed, t), list(self.policies)
        self.algorithm.compute_advantages(rollouts)
        cfg = self.config
        resample = loop_resampler(
            self.policies,
            self.env,
            self._sampling,
            rollouts,
            seed=cfg.seed,
            batch_size=cfg.env.batch_size,
            n=self.algorithm.config.n,
            step=t,
        )
        scorer = ResamplingScorer(self._scorer(rollouts, timings), resample)
        exchanged = self.algorithm.exchange(rollouts, live, scorer, rng)
        batches, counts = self.algorithm.build_batches(rollouts, exchanged.transfers, live, rng)
        return exchanged, batches, counts

    def _scorer(self, rollouts: Mapping[str, AgentRollouts], timings: dict[str, float]) -> Scorer:
        def score(
            receiver: str,
            prompt_indices: Sequence[int],
            texts: Sequence[str],
            finish_reasons: Sequence[str],
        ) -> list[ScoredText]:
            prompts = [rollouts[receiver].prompts[p] for p in prompt_indices]
            with timed(timings, "scoring"):
                return self.policies[receiver].score(prompts, list(texts), list(finish_reasons))

        return score

    def _store(
        self, t: int, rollouts: Mapping[str, AgentRollouts], statuses: Mapping[str, list[str]]
    ) -> None:
        """Store: the live agents' groups of step t, for graft-stored runs and libraries."""
        if self.store is not None:
            for name in self.policies:
                self.store.write(self.run_dir.name, t, rollouts[name], statuses[name], name)

    # --- the whole run ---------------------------------------------------------
    def train(self, resume: bool = True, on_step: Callable[[StepRecord], None] | None = None):
        """Run (or resume) to `config.steps`; returns every metrics row of the run."""
        from algorithms.training.progress import StepProgress, summary

        try:
            self.open(resume=resume)
            start = self.evaluator.before_training(self.policies) if self.step == 0 else {}
            with StepProgress(self.config.steps, self.step, enabled=self.config.progress) as bar:
                while self.step < self.config.steps:
                    record = self.run_step()
                    for name, values in start.items():  # the evaluation before step 0, in its row
                        record.metrics[name].update(values)
                    start = {}
                    if self.evaluator.due(self.step, self.config.steps):
                        self._evaluate(record)
                    for name, metrics in record.metrics.items():
                        self.metrics.write(record.step, name, metrics)
                        details = record.exchange_stats, record.rollouts.get(name)
                        self.metrics.write_details(record.step, name, *details)
                    last = self.step == self.config.steps
                    if self.step % self.config.checkpoint_every == 0 or last:
                        self._save_checkpoint()
                    bar.update(record)
                    self.run_log.note(f"step {self.step}/{self.config.steps}  {summary(record)}")
                    if on_step is not None:
                        on_step(record)
        except BaseException as error:
            if self.run_log is not None:
                self.run_log.note(f"stopped in step {self.step}: {type(error).__name__}: {error}")
            self.close()
            raise
        rows = self.metrics.rows()
        self.close()
        return rows

    def close(self) -> None:
        """Close the run's metrics writers and its run.log (`train` does, at its end)."""
        if self.metrics is not None:
            self.metrics.close()
        if self.run_log is not None:
            self.run_log.close()

    def _evaluate(self, record: StepRecord) -> None:
        """The periodic evaluation after `record`'s step, added to its metrics rows."""
        with timed(record.timings, "eval"):
            results = self.evaluator.run(self.policies, record.step)
        for name, metrics in record.metrics.items():
            metrics.update(results[name], **{"time/eval": record.timings["eval"]})

    def _save_checkpoint(self) -> None:
        """Checkpoint the completed steps (`algorithms.training.checkpoint`), keeping the newest."""
        library_sha256 = self.library.manifest_sha256 if self.library else None
        state = loop_state(self.step, self.algorithm.name, self.algorithm.strategy, library_sha256)
        self.checkpoint = save_checkpoint(
            self.run_dir / "checkpoints",
            self.step,
            self.policies,
            state,
            keep=self.config.keep_checkpoints,
        )
