"""One timed run of either trainer on the TRL-comparison workload (issue #8).

`benchmarks.perf.vs_trl` runs each of these in a fresh subprocess so that every
run's peak RSS is its own, and alternates the two sides. Both runners report the
same `RunResult`: per timed step the wall seconds, generated tokens, trained
tokens (real response tokens) and trained slots (rows x padded response width),
and the step split into rollout / verify / update.

Ours: GRPO through the common loop (`Trainer.run_step`, one agent); the phases are
the loop's own timings. TRL: `GRPOTrainer` with the settings described in
`vs_trl`; its step is timed from `on_step_begin` to `on_step_end`, rollout is
`_generate_and_score_completions` minus the reward function, verify is the reward
function, update is the rest of the step.
"""

from __future__ import annotations

import resource
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.perf.trl_workload import (
    DATASET,
    DATASET_OPTIONS,
    Workload,
    WorkloadSpec,
    load_workload,
)

SIDES = ("trl", "ours")
PHASES = ("rollout", "verify", "update")


@dataclass
class RunResult:
    """What one run measured: per timed step, plus the process's memory."""

    seconds: list[float] = field(default_factory=list)
    generated_tokens: list[int] = field(default_factory=list)
    trained_tokens: list[int] = field(default_factory=list)  # real response tokens
    trained_slots: list[int] = field(default_factory=list)  # rows x padded response width
    phases: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    start_rss: int = 0  # bytes, RSS high-water mark after setup, before the first step
    peak_rss: int = 0  # bytes, high-water mark of the whole process

    def add(
        self, seconds: float, generated: int, trained: int, slots: int, **phases: float
    ) -> None:
        self.seconds.append(seconds)
        self.generated_tokens.append(generated)
        self.trained_tokens.append(trained)
        self.trained_slots.append(slots)
        for phase in PHASES:
            self.phases[phase].append(phases[phase])


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# --- our side ---------------------------------------------------------------------


def run_ours(workload: Workload, steps: int, warmup: int, run_dir: Path) -> RunResult:
    """GRPO through the common loop (`Trainer.run_step`), one agent."""
    from algorithms.training.loop import Trainer
    from algorithms.training.run_config import config_from_dict

    spec = workload.spec
    total = warmup + steps
    options = {
        "lr": spec.lr,
        "weight_decay": spec.weight_decay,
        "grad_clip": spec.grad_clip,
        "temperature": spec.temperature,
        "generation_batch_size": spec.prompts * spec.n,
    }
    config = config_from_dict(
        {
            "agents": [{"name": "ours", "model": str(workload.model_dir), "options": options}],
            "algorithm": "grpo",
            "algorithm_options": {
                "n": spec.n,
                "num_minibatches": 1,
                "eps_low": spec.eps_low,
                "eps_high": spec.eps_high,
            },
            "env": {
                "dataset": DATASET,
                "dataset_options": DATASET_OPTIONS,
                "batch_size": spec.prompts,
            },
            "sampling": {"temperature": spec.temperature, "max_new_tokens": spec.max_new_tokens},
            "steps": total,
            "seed": spec.seed,
            "run_dir": str(run_dir),
            "checkpoint_every": total,
            "store_trajectories": False,
            "tensorboard": False,
            "progress": False,
        }
    )
    trainer = Trainer(config)
    trainer.open()
    result = RunResult(start_rss=_peak_rss())
    for step in range(total):
        started = time.perf_counter()
        record = trainer.run_step()
        seconds = time.perf_counter() - started
        rollouts, batch = record.rollouts["ours"], record.batches["ours"]
        if sorted(rollouts.prompts) != sorted(workload.prompts):
            raise RuntimeError("our trainer saw prompts other than the workload's")
        if step < warmup:
            continue
        lengths = [len(s.response_token_ids) for s in batch.sequences]
        result.add(
            seconds,
            generated=sum(len(ids) for group in rollouts.token_ids for ids in group),
            trained=int(record.update_metrics["ours"]["tokens"]),
            slots=sum(len(mb) * max(lengths[i] for i in mb) for mb in batch.minibatches),
            **{phase: record.timings.get(phase, 0.0) for phase in PHASES},
        )
    result.peak_rss = _peak_rss()
    return result


# --- TRL's side -------------------------------------------------------------------


def run_trl(workload: Workload, steps: int, warmup: int, run_dir: Path) -> RunResult:
    """TRL's GRPOTrainer on the same files, prompts, reward and hyperparameters."""
    import warnings

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from graft_env.rewards import verify_batch

    # TRL 1.16 still calls transformers' renamed gradient-checkpointing API
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
    spec = workload.spec
    result = RunResult()
    current = {"generated": 0, "slots": 0, "verify": 0.0, "generate": 0.0}

    def boxed_reward(completions, answer, completion_ids, **_):
        started = time.perf_counter()
        verdicts = verify_batch(completions, answer)
        current["verify"] += time.perf_counter() - started
        current["generated"] += sum(len(ids) for ids in completion_ids)
        current["slots"] += len(completion_ids) * max(len(ids) for ids in completion_ids)
        return [v.reward for v in verdicts]

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            started = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                current["generate"] += time.perf_counter() - started

    class StepTimer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            result.start_rss = _peak_rss()

        def on_step_begin(self, args, state, control, **kwargs):
            current.update(
                generated=0, slots=0, verify=0.0, generate=0.0, started=time.perf_counter()
            )

        def on_step_end(self, args, state, control, **kwargs):
            seconds = time.perf_counter() - current["started"]
            if state.global_step <= warmup:
                return
            result.add(
                seconds,
                generated=current["generated"],
                trained=current["generated"],  # every generated token is trained on
                slots=current["slots"],
                rollout=current["generate"] - current["verify"],
                verify=current["verify"],
                update=seconds - current["generate"],
            )

    tokenizer = AutoTokenizer.from_pretrained(workload.model_dir)
    model = AutoModelForCausalLM.from_pretrained(workload.model_dir, dtype=torch.float32)
    rows = [
        {"prompt": prompt, "answer": problem.answer}
        for prompt, problem in zip(workload.prompts, workload.problems, strict=True)
    ]
    total = warmup + steps
    config = GRPOConfig(
        output_dir=str(run_dir),
        per_device_train_batch_size=spec.prompts * spec.n,
        gradient_accumulation_steps=1,
        num_generations=spec.n,
        max_completion_length=spec.max_new_tokens,
        temperature=spec.temperature,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=spec.eps_low,
        epsilon_high=spec.eps_high,
        loss_type="dapo",
        num_iterations=1,
        learning_rate=spec.lr,
        weight_decay=spec.weight_decay,
        max_grad_norm=spec.grad_clip,
        lr_scheduler_type="constant",
        max_steps=total,
        bf16=False,
        fp16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        disable_dropout=True,
        logging_steps=total,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=spec.seed,
    )
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=boxed_reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    trainer.train()
    result.peak_rss = _peak_rss()
    return result


# --- one run in this process ------------------------------------------------------


def run_side(side: str, model_dir: Path, spec: WorkloadSpec, steps: int, warmup: int) -> RunResult:
    """One run of `side` in this process (the parent calls this in a fresh subprocess)."""
    import torch

    torch.set_num_threads(spec.threads)
    workload = load_workload(model_dir, spec)
    runner = {"trl": run_trl, "ours": run_ours}[side]
    with tempfile.TemporaryDirectory() as scratch:
        return runner(workload, steps, warmup, Path(scratch))
