"""graft-library inside TRL's `GRPOTrainer`: the stored update where TRL computes advantages.

    from trl import GRPOConfig
    from algorithms.library.trl_adapter import GraftGRPOTrainer, math_reward

    trainer = GraftGRPOTrainer(
        model="path/to/model",
        reward_funcs=math_reward,  # this project's verifier: 1 correct, 0 not
        args=GRPOConfig(output_dir="out", num_generations=8, per_device_train_batch_size=32,
                        steps_per_generation=4, gradient_accumulation_steps=1, loss_type="bnpo"),
        train_dataset=dataset,  # columns prompt, problem (the library key) and answer (gold)
        library="runs/lib",
    )
    trainer.train()

After TRL has sampled, rewarded and normalised a generation batch
(`_generate_and_score_completions`), each all-fail group (every reward 0) whose problem
the library holds a group for is looked up, re-verified and gated exactly as graft-library
does (`LibrarySource`, then the algorithm's exchange: Eq.4 one-way, s = exp(l_R - l_S) with
l_R from this trainer's model, the floor delta). A group that passes replaces the
receiver's rows: the peer responses re-tokenised with TRL's tokenizer (EOS iff the source
stopped), old log-probs = the receiver's scoring, advantages = the source's group
advantages, computed as TRL computes its own (eps 1e-4, sample std; `scale_rewards`
'group' or 'none'). The rows are then laid out in minibatch order (peer-last by default,
`order_minibatches`) instead of TRL's shuffle, and TRL splits them into its
`steps_per_generation` micro-batches. Per generation batch `library/...` counts go to
TRL's logs (summed over processes).

The weight w of a peer row is folded into its advantage (a w). That is exact: every TRL
loss is positively homogeneous in the advantage for a fixed sign (the clipped surrogate
min(r a, clip(r) a) w = min(r a w, clip(r) a w) for w > 0; cispo, sapo and vespo are
linear in a with a sign-dependent factor), and w > 0 keeps the sign. A removed response
(w = 0) is masked out (completion mask 0, advantage 0), as TRL masks truncated
completions: it leaves numerator and token count; only 'grpo' and 'dr_grpo', which divide
by the number of rows, still count it there. TRL's KL term (beta > 0) is not scaled by w,
as this project's is not. With `loss_type="bnpo"`, `gradient_accumulation_steps=1`,
`beta=0` and `steps_per_generation` = `num_minibatches`, TRL's loss on this batch is
Eq.10 on this project's minibatches; other TRL settings keep their own meaning.

[project choice] Where they differ from this project's batch: a fully removed group stays
as masked rows at the end (this project drops it, so with S micro-batches its chunks can
then split the remaining groups differently); with `mask_truncated_completions` a peer
response the source cut at its token limit is masked too; with vLLM the importance ratio
pi_old / pi_sampler of a peer row is 1 (the receiver's engine never sampled it). Each
process orders its own rows, so peer-last holds within each process.

The exchange sees the whole generation batch, over all processes: each process gathers the
receiver's groups of every process, all compute the same exchange, and each splices the
transferred groups of its own prompts. Peer texts are scored under the receiver on every
process, a process without any peer rows of its own scoring padding rows, with the same
number of forward passes everywhere, so that setups whose every forward is collective
(FSDP, DeepSpeed ZeRO-3) do not hang (`ExchangeGRPOTrainer._logps_everywhere`).
`trl_live.LiveGRPOTrainer` shares this path with live peers in place of the library. Epoch
e's prompt order is drawn from (seed, e) (`trl_batch.EpochSampler`), and plain checkpoints
reload through `from_pretrained`, so a resumed run continues the run it resumes exactly.

Before the exchange, each generation batch's own rows are checked against the engine that
sampled them: where TRL keeps both the sampler's per-token log-probs and the trainer's old
ones (vLLM with TRL's importance-sampling correction, its default), the mean and largest
|sampler - trainer| over the completion tokens of the whole batch are logged as
`graft/logprob_gap_mean` / `_max`, and a mean above `max_logprob_gap` (default 0.1 nats,
`algorithms.core.rollout_correction.MAX_LOGPROB_GAP`) stops training with one line: an engine
that samples from other weights than the trained ones (a weight-sync bug) would otherwise
train silently. Without vLLM transformers samples from the trained model itself, TRL keeps
no sampler log-probs, and there is nothing to compare.

Importing this module imports TRL; nothing in the project imports it (TRL is optional).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import trl
from accelerate.utils import gather_object
from packaging.version import Version
from transformers import PreTrainedModel
from trl import GRPOTrainer
from trl.trainer.utils import pad, split_tensor_dict, use_adapter

import algorithms
from algorithms.algorithm import Algorithm
from algorithms.core import order_minibatches
from algorithms.core.rollout_correction import MAX_LOGPROB_GAP, check_logprob_gap
from algorithms.library import LIBRARY_AGENT
from algorithms.library.choice import CHOICES
from algorithms.library.format import LibraryError, prompt_key
from algorithms.library.source import LibrarySource, Lookup
from algorithms.library.trl_batch import (
    EpochSampler,
    checkpointing_off,
    in_order,
    with_peer_rows,
)
from algorithms.rollouts import step_rng
from graft_env.rewards import verify_batch
from graft_env.types import AgentRollouts, ScoredText, TransferredGroup

RECEIVER = "receiver"
"""The trained model as an agent of the exchange (exchange/library->receiver/...)."""
TRL_ADVANTAGE_EPS = 1e-4
"""What TRL 1.16 adds to the group std before dividing (`_generate_and_score_completions`)."""
EXCHANGE_OPTIONS = (
    "candidates", "compat", "delta", "compat_norm", "admission", "admission_match",
    "success_only", "order",
)  # fmt: skip
"""The AlgorithmConfig options that act before TRL's loss; its loss options are GRPOConfig's."""
ADVANTAGE_SCALES = {"group": "std", "none": "none"}  # TRL scale_rewards -> adv_scale


def math_reward(completions: Sequence[Any], answer: Sequence[str], **_: Any) -> list[float]:
    """This project's verifier as a TRL reward function: 1.0 where a completion's last
    boxed answer matches the row's gold `answer` column, else 0.0."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [verdict.reward for verdict in verify_batch(texts, list(answer))]


def logprob_gap(sampler: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[sum, max, count] (float64) of |sampler - trainer| per-token log-probs [B, T] over the
    tokens where `mask` is nonzero and the sampler gave a log-prob (vLLM reports NaN where it
    has none; left out, as TRL's own metric leaves them; a NaN of the trainer's stays, so the
    mean is NaN and the guard stops); max is 0 where nothing counts. Totals, so that
    processes combine exactly (`gap_statistics`)."""
    diff = (sampler.double() - trainer.double()).abs()
    values = diff[mask.bool() & ~torch.isnan(sampler)]
    largest = values.max() if values.numel() else values.new_zeros(())
    return torch.stack([values.sum(), largest, values.new_tensor(float(values.numel()))])


def gap_statistics(totals: torch.Tensor) -> tuple[float, float]:
    """The mean and max |sampler - trainer| per token from `logprob_gap` rows [P, 3] (one
    per process); (0, 0) where no token was compared."""
    count = float(totals[:, 2].sum())
    if count == 0:
        return 0.0, 0.0
    return float(totals[:, 0].sum()) / count, float(totals[:, 1].max())


def check_trl_version(where: str) -> None:
    """Refuse any TRL but 1.16: the trainers here override its private hooks."""
    if Version(trl.__version__).release[:2] != (1, 16):
        raise RuntimeError(
            f"{where} hooks TRL 1.16's GRPOTrainer internals; found trl {trl.__version__} "
            "(pip install trl==1.16.0)"
        )


class ExchangeGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with an exchange on each generation batch: the path library replay
    (`GraftGRPOTrainer`) and live peers (`trl_live.LiveGRPOTrainer`) share. A subclass names
    the algorithm, the receiver's agent name and metric prefix, and supplies the step's peer
    rollouts (`_peers`)."""

    algorithm_name = "graft-library"
    exchange_options = EXCHANGE_OPTIONS
    metric_prefix = "library"
    agent = RECEIVER

    def _setup_exchange(
        self,
        graft_options: Mapping[str, Any] | None,
        problem_column: str,
        answer_column: str,
        max_logprob_gap: float | None,
    ) -> None:
        self.max_logprob_gap = self._gap_bound(max_logprob_gap)
        self.graft = self._algorithm(dict(graft_options or {}))
        self.problem_column = problem_column
        self._problems = self._column(problem_column)
        self._answers = self._column(answer_column)
        self._rewards_per_func: torch.Tensor | None = None

    def _gap_bound(self, bound: float | None) -> float | None:
        """`max_logprob_gap`, checked: a positive number or None, and with vLLM only where
        TRL computes the trainer's old log-probs to compare the engine's with."""
        name = type(self).__name__
        if bound is not None and not (
            isinstance(bound, int | float) and not isinstance(bound, bool) and bound > 0
        ):
            raise ValueError(f"{name}: max_logprob_gap must be a number > 0 or None, got {bound!r}")
        generate_every = self.args.steps_per_generation * self.num_iterations
        aligned = self.args.gradient_accumulation_steps % generate_every == 0
        if (
            bound is not None
            and self.use_vllm
            and not self.vllm_importance_sampling_correction
            and aligned
        ):
            raise ValueError(
                f"{name}: with vllm_importance_sampling_correction=False TRL computes no "
                "trainer log-probs to check vLLM's against (max_logprob_gap="
                f"{bound:g}): turn the correction on, or pass max_logprob_gap=None to train "
                "unchecked"
            )
        return bound

    def _algorithm(self, options: dict[str, Any]) -> Algorithm:
        """The exchange algorithm with TRL's group size, advantage rule and micro-batch count."""
        args, n = self.args, self.num_generations
        unknown = sorted(set(options) - set(self.exchange_options))
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: graft_options {unknown} are not exchange options "
                f"({', '.join(self.exchange_options)}); TRL's loss takes its settings from "
                "GRPOConfig"
            )
        if self.scale_rewards not in ADVANTAGE_SCALES:
            raise ValueError(
                f"{type(self).__name__}: scale_rewards={self.scale_rewards!r} normalises over "
                "the batch, but a peer group carries its own group's advantages: "
                "use 'group' or 'none'"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"{type(self).__name__}: multi_objective_aggregation='normalize_then_sum' "
                "normalises over the batch; use 'sum_then_normalize'"
            )
        if args.per_device_train_batch_size % n:
            raise ValueError(
                f"{type(self).__name__}: per_device_train_batch_size="
                f"{args.per_device_train_batch_size} must be a multiple of num_generations={n}, "
                "so that each micro-batch holds whole groups, as this project's minibatches do"
            )
        if self._is_vlm:
            raise ValueError(f"{type(self).__name__}: vision-language models are not supported")
        return algorithms.make(
            self.algorithm_name,
            n=n,
            adv_eps=TRL_ADVANTAGE_EPS,
            adv_scale=ADVANTAGE_SCALES[self.scale_rewards],
            adv_ddof=1,  # TRL's nanstd is the sample std
            num_minibatches=args.steps_per_generation,
            **options,
        )

    def _column(self, name: str) -> list[str]:
        names = getattr(self.train_dataset, "column_names", None)
        if names is None or name not in names:
            raise LibraryError(
                f"{type(self).__name__}: the train dataset needs a {name!r} column "
                f"(columns: {names})"
            )
        return list(self.train_dataset[name])

    def _peers(
        self, receiver: AgentRollouts, step: int
    ) -> tuple[dict[str, AgentRollouts], dict[str, float]]:
        """The step's peer rollouts by agent, advantages filled, in the exchange's agent
        order (the receiver's place marked by `agent`), and counts to log. `receiver` holds
        the whole generation batch (every process's groups) with its advantages."""
        raise NotImplementedError

    # --- TRL's hooks ----------------------------------------------------------------

    def _get_train_sampler(self, dataset=None):
        return EpochSampler(super()._get_train_sampler(dataset))

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        """transformers' loader, then the weights once more through `from_pretrained`: the
        Trainer loads a checkpoint as a plain state dict, while transformers 5 saves some
        architectures' weights under their legacy names (GPT-NeoX: `embed_out` for
        `lm_head`), which that load skips with a warning, so a resumed run would go on with
        its initial head (and a live agent's resumed step would differ from its record).
        Sharded (FSDP, DeepSpeed) and adapter checkpoints keep transformers' loader."""
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        unwrapped = self.accelerator.unwrap_model(self.model if model is None else model)
        sharded = self.is_fsdp_enabled or self.is_deepspeed_enabled
        if (
            sharded
            or not isinstance(unwrapped, PreTrainedModel)
            or not any(
                Path(resume_from_checkpoint, name).is_file()
                for name in ("model.safetensors", "model.safetensors.index.json")
            )
        ):
            return
        saved = type(unwrapped).from_pretrained(resume_from_checkpoint, dtype=unwrapped.dtype)
        unwrapped.load_state_dict(saved.state_dict())

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        return self._rewards_per_func

    def _generate(self, prompts: list):
        out = super()._generate(prompts)
        # each completion's own length: TRL's completion_mask is all 0 for a truncated row
        # under mask_truncated_completions, but the row was rewarded on its whole text
        self._completion_lengths = [len(ids) for ids in out[1]]
        return out

    def _generate_and_score_completions(self, inputs):
        batch = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return batch
        self._check_sampler(batch)
        return self._graft(inputs, batch)

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        # TRL 1.16's training branch without its row shuffle (`_graft` has put the rows in
        # minibatch order) and its image handling (refused in __init__)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = split_tensor_dict(batch, self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # --- the update -------------------------------------------------------------------

    def _check_sampler(self, batch: dict[str, Any]) -> None:
        """Log the gap between the sampler's and the trainer's log-probs of this generation
        batch's own rows (all processes, before any peer row is spliced in), and stop above
        `max_logprob_gap`: every process gathers the same totals, so all stop together."""
        sampler = batch.get("sampling_per_token_logps")
        trainer = batch.get("old_per_token_logps")
        if sampler is None or trainer is None:
            return
        mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        totals = logprob_gap(sampler, trainer, mask)[None]
        if self.accelerator.num_processes > 1:
            totals = self.accelerator.gather(totals)
        mean, largest = gap_statistics(totals)
        self._metrics["train"]["graft/logprob_gap_mean"].append(mean)
        self._metrics["train"]["graft/logprob_gap_max"].append(largest)
        check_logprob_gap(
            f"{type(self).__name__} agent {self.agent!r}",
            self.state.global_step,
            mean,
            largest,
            self.max_logprob_gap,
        )

    def _graft(self, inputs: list[dict], batch: dict[str, Any]) -> dict[str, Any]:
        """The generation batch with its transferred groups spliced in and its rows in
        minibatch order; every row's weight is `graft_weight` and `graft_peer` marks peer
        rows. The exchange runs on the whole batch (all processes), identically on each."""
        n = self.num_generations
        keys = [prompt_key(row[self.problem_column]) for row in inputs]
        starts = range(0, len(keys), n)
        split = [p for p, start in enumerate(starts) if len(set(keys[start : start + n])) != 1]
        if split:
            raise ValueError(
                f"{type(self).__name__}: rows {split[0] * n}..{split[0] * n + n - 1} of this "
                "process are not one prompt's group (a group split across processes?)"
            )
        receiver = self._gathered(self._receiver(inputs, batch, keys[::n]))
        self.graft.compute_advantages({self.agent: receiver})
        # the micro-step this generation batch starts at: unique per batch also when one
        # optimiser step spans several batches, and the same after a resume (at an
        # optimiser step, where `_step` restarts)
        gas = self.args.gradient_accumulation_steps
        step = self.state.global_step * gas + self._step % gas
        peers, counts = self._peers(receiver, step)
        rollouts = {name: receiver if name == self.agent else peers[name] for name in peers}
        rng = step_rng(self.args.seed, step)
        exchanged = self.graft.exchange(rollouts, [self.agent], self._scorer(batch), rng)
        transfers = exchanged.transfers[self.agent]
        batch, mine = self._replace(batch, transfers, rollouts)
        peer = {group.prompt_index for group in mine}
        chunks = order_minibatches(
            [p in peer for p in range(len(starts))],
            self.args.steps_per_generation,
            self.graft.config.order,
            rng=rng,
        )
        order = torch.tensor([p * n + i for chunk in chunks for p in chunk for i in range(n)])
        self._log_counts(counts, transfers)
        return {key: in_order(value, order) for key, value in batch.items()}

    def _receiver(
        self, inputs: list[dict], batch: dict[str, Any], keys: list[str]
    ) -> AgentRollouts:
        """This process's groups as this project's rollouts, with TRL's total rewards and
        the sampler's per-token log-probs where TRL keeps them (vLLM's, or pi_old's, which
        sampled them with transformers' generate)."""
        n, rows = self.num_generations, len(inputs)
        process = self.accelerator.process_index
        totals = self._rewards_per_func * self.reward_weights.to(self._rewards_per_func.device)
        rewards = totals.nansum(dim=1)[process * rows : (process + 1) * rows].cpu().numpy()
        wrong = rewards[(rewards != 0) & (rewards != 1)]
        if wrong.size:
            raise ValueError(
                f"{type(self).__name__}: the gate needs binary rewards (1 correct, 0 not), "
                f"got total reward {wrong[0]:g}: use math_reward or a 0/1 "
                "correctness reward"
            )
        lengths = self._completion_lengths
        ids = [
            row[:length].tolist()
            for row, length in zip(batch["completion_ids"].cpu(), lengths, strict=True)
        ]
        texts = self._tokenizer.batch_decode(ids, skip_special_tokens=True)
        ended = ["stop" if row and row[-1] in self.eos_token_ids else "length" for row in ids]
        sampler = batch.get("sampling_per_token_logps")
        old = batch.get("old_per_token_logps")
        if sampler is not None and old is not None:  # vLLM's NaN tokens: pi_old's, as TRL's IS
            sampler = torch.where(torch.isnan(sampler), old, sampler)
        sampler = old if sampler is None else sampler
        logprobs = (
            [np.empty(0)] * rows
            if sampler is None
            else [
                row[:length].double().numpy()
                for row, length in zip(sampler.detach().cpu(), lengths, strict=True)
            ]
        )

        def groups(values: list) -> list[list]:
            return [values[start : start + n] for start in range(0, rows, n)]

        return AgentRollouts(
            agent=self.agent,
            prompt_ids=keys,
            prompts=[row[self.problem_column] for row in inputs[::n]],
            texts=groups(texts),
            token_ids=groups(ids),
            logprobs=groups(logprobs),
            finish_reasons=groups(ended),
            rewards=rewards.reshape(-1, n),
        )

    def _gathered(self, local: AgentRollouts) -> AgentRollouts:
        """The rollouts of every process, in process order (TRL's order of the batch)."""
        if self.accelerator.num_processes == 1:
            return local
        fields = ("prompt_ids", "prompts", "texts", "token_ids", "logprobs", "finish_reasons")
        rows = list(zip(*(getattr(local, name) for name in fields), local.rewards, strict=True))
        every = gather_object(rows)
        columns = list(zip(*every, strict=True))
        return AgentRollouts(
            agent=local.agent,
            **{name: list(column) for name, column in zip(fields, columns, strict=False)},
            rewards=np.stack(columns[-1]),
        )

    def _local_prompts(self, batch: dict[str, Any]) -> range:
        """The prompts of the whole batch this process holds (every process holds as many)."""
        size = batch["prompt_ids"].size(0) // self.num_generations
        start = self.accelerator.process_index * size
        return range(start, start + size)

    def _verify(
        self, indices: Sequence[int], groups: Mapping[str, Sequence[Sequence[str]]]
    ) -> tuple[dict[str, np.ndarray], dict]:
        """`MultiAgentMathEnv.score_groups` on the train dataset's gold answers."""
        rewards = {}
        for agent, agent_groups in groups.items():
            texts = [text for group in agent_groups for text in group]
            golds = [
                self._answers[i]
                for i, group in zip(indices, agent_groups, strict=True)
                for _ in group
            ]
            verdicts = verify_batch(texts, golds)
            rewards[agent] = np.array([v.reward for v in verdicts]).reshape(len(indices), -1)
        return rewards, {}

    def _encode_response(self, text: str, finish_reason: str) -> list[int]:
        """`HFPolicy.encode_response` on TRL's tokenizer: the text, then EOS iff it stopped."""
        ids = self._tokenizer(text, add_special_tokens=False, split_special_tokens=True)
        return [*ids["input_ids"], *([self._tokenizer.eos_token_id] * (finish_reason == "stop"))]

    def _scorer(self, batch: dict[str, Any]):
        """The receiver's scorer: peer texts re-tokenised and scored by this model (pi_old),
        on every process (`_logps_everywhere`)."""

        def score(
            receiver: str, prompts: Sequence[int], texts: Sequence[str], reasons: Sequence[str]
        ) -> list[ScoredText]:
            ids = [self._encode_response(t, r) for t, r in zip(texts, reasons, strict=True)]
            logps = self._logps_everywhere(False, batch, prompts, ids)
            return [
                ScoredText(row, logp.cpu().double().numpy())
                for row, logp in zip(ids, logps, strict=True)
            ]

        return score

    def _logps_everywhere(
        self,
        reference: bool,
        batch: dict[str, Any],
        prompts: Sequence[int],
        completions: Sequence[list[int]],
    ) -> list[torch.Tensor]:
        """Per-token log-probs of `completions[j]` after batch prompt `prompts[j]` (of the
        whole batch), the same list on every process. Each process scores the rows of its
        own prompts, padded with one-token rows to the most any process has, so that every
        process runs the same forward passes; the results are gathered. Every process
        calls this with the same arguments (the exchange is computed identically on each)."""
        if not completions:
            return []
        local, n = self._local_prompts(batch), self.num_generations
        owners = [p // len(local) for p in prompts]
        counts = [owners.count(rank) for rank in range(self.accelerator.num_processes)]
        mine = [j for j, owner in enumerate(owners) if owner == self.accelerator.process_index]
        padding = max(counts) - len(mine)
        rows = [(prompts[j] - local.start) * n for j in mine] + [0] * padding
        ids = [list(completions[j]) for j in mine] + [[self._tokenizer.eos_token_id]] * padding
        width = max(map(len, completions))
        logps = self._logps(reference, batch, rows, ids)
        logps = torch.nn.functional.pad(logps, (0, width - logps.size(1)))
        every = self.accelerator.gather(logps) if self.accelerator.num_processes > 1 else logps
        out: list[torch.Tensor | None] = [None] * len(completions)
        for rank in range(self.accelerator.num_processes):
            at = [j for j, owner in enumerate(owners) if owner == rank]
            for k, j in enumerate(at):
                out[j] = every[rank * max(counts) + k, : len(completions[j])]
        return out

    def _logps(
        self,
        reference: bool,
        batch: dict[str, Any],
        rows: Sequence[int],
        completions: Sequence[list[int]],
    ) -> torch.Tensor:
        """Per-token log-probs of `completions[j]` after the prompt of this process's batch
        row `rows[j]` under this model (pi_old) or, with `reference`, TRL's reference, as
        TRL computes them for its loss (temperature, padding)."""
        model, context = self.model, contextlib.nullcontext()
        if reference and self.ref_model is not None:
            model = self.ref_model
        elif reference:  # PEFT: the reference is the model without its adapter, as in TRL
            unwrapped = self.accelerator.unwrap_model(self.model)
            name = "ref" if "ref" in unwrapped.peft_config else None
            context = use_adapter(unwrapped, adapter_name=name)
        device = self.accelerator.device
        ids = pad([torch.tensor(c) for c in completions], self._tokenizer.pad_token_id)
        mask = pad([torch.ones(len(c), dtype=torch.long) for c in completions], 0)
        picked = torch.tensor(list(rows), device=batch["prompt_ids"].device)
        input_ids = torch.cat([batch["prompt_ids"][picked], ids.to(device)], dim=1)
        attention = torch.cat([batch["prompt_mask"][picked], mask.to(device)], dim=1)
        checkpointing = getattr(self.args, "activation_checkpointing_kwargs", None)
        if checkpointing is None:  # transformers < 5.24 knows only the old name
            checkpointing = self.args.gradient_checkpointing_kwargs
        with torch.no_grad(), checkpointing_off(self.model, checkpointing), context:
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention, ids.size(1), self.args.per_device_train_batch_size
            )
        return logps

    def _replace(
        self,
        batch: dict[str, Any],
        transfers: Sequence[TransferredGroup],
        rollouts: Mapping[str, AgentRollouts],
    ) -> tuple[dict[str, Any], list[TransferredGroup]]:
        """The batch with each transferred group of this process's prompts holding its peer
        responses (`trl_batch.with_peer_rows`) and TRL's loss normaliser over the new rows;
        and those groups, with prompt indices into this process's rows."""
        n, local = self.num_generations, self._local_prompts(batch)
        peer_rows = [(g, i) for g in transfers for i in range(n)]
        reference = None
        if "ref_per_token_logps" in batch and peer_rows:  # every process scores them all
            reference = self._logps_everywhere(
                True,
                batch,
                [g.prompt_index for g, _ in peer_rows],
                [g.scored[i].token_ids for g, i in peer_rows],
            )
        mine, truncated, references = [], [], []
        for j, group in enumerate(transfers):
            if group.prompt_index in local:
                reasons = rollouts[group.source].finish_reasons[group.prompt_index]
                mine.append(
                    dataclasses.replace(group, prompt_index=group.prompt_index - local.start)
                )
                truncated.append([reason == "length" for reason in reasons])
                if reference is not None:
                    references.extend(reference[j * n : (j + 1) * n])
        pad_id, masked = self._tokenizer.pad_token_id, self.mask_truncated_completions
        out = with_peer_rows(
            batch, mine, truncated, n, pad_id, masked, references if reference else None
        )
        loss_mask = out["completion_mask"] * out.get("tool_mask", 1)
        # every process gathers, whether or not it received peer rows
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return out, mine

    def _log_counts(
        self, counts: Mapping[str, float], transfers: Sequence[TransferredGroup]
    ) -> None:
        """The peers' counts and what the gate moved over the whole batch (the same on
        every process)."""
        weights = [group.weights for group in transfers]
        admitted = sum(int(np.count_nonzero(w > 0)) for w in weights)
        prefix = self.metric_prefix
        moved = {
            **counts,
            f"{prefix}/used_groups": float(len(transfers)),
            f"{prefix}/rescued_prompts": float(sum(bool(np.any(w > 0)) for w in weights)),
            f"{prefix}/peer_sequences": float(admitted),
            f"{prefix}/removed_peer_responses": float(sum(w.size for w in weights) - admitted),
        }
        for name, value in moved.items():
            self._metrics["train"][name].append(value)


class GraftGRPOTrainer(ExchangeGRPOTrainer):
    """TRL's GRPOTrainer with graft-library's update on its all-fail groups.

    library: a trajectory library (`graft library build/import`); choose and
    library_model: its choice rule and model filter (run config `library:`);
    graft_options: `EXCHANGE_OPTIONS` of graft-library (delta, order, ...);
    problem_column / answer_column: the train dataset's problem text (the library key)
    and gold answer (which re-verifies the stored groups); max_logprob_gap: the largest
    mean |sampler - trainer| log-prob per own token, in nats, before training stops
    (None: never)."""

    def __init__(
        self,
        *args: Any,
        library: str,
        choose: str = "most_recent",
        library_model: str | None = None,
        graft_options: Mapping[str, Any] | None = None,
        problem_column: str = "problem",
        answer_column: str = "answer",
        max_logprob_gap: float | None = MAX_LOGPROB_GAP,
        **kwargs: Any,
    ) -> None:
        check_trl_version("GraftGRPOTrainer")
        if choose not in CHOICES or (choose == "model") != (library_model is not None):
            raise ValueError(
                f"GraftGRPOTrainer: choose={choose!r} (one of {', '.join(CHOICES)}) with "
                f"library_model={library_model!r}, which must be set exactly for 'model'"
            )
        super().__init__(*args, **kwargs)
        self._setup_exchange(graft_options, problem_column, answer_column, max_logprob_gap)
        self.library = LibrarySource(
            str(library), choose, library_model, self._problems, self.graft.config
        )
        self._dataset_index: dict[str, int] = {}
        for index, key in enumerate(self.library.keys):
            self._dataset_index.setdefault(key, index)

    def _peers(
        self, receiver: AgentRollouts, step: int
    ) -> tuple[dict[str, AgentRollouts], dict[str, float]]:
        """The library's groups for the batch's all-fail prompts (`LibrarySource.lookup`)."""
        missing = [p for p, key in enumerate(receiver.prompt_ids) if key not in self._dataset_index]
        if missing:
            raise LibraryError(
                f"GraftGRPOTrainer: batch problem {receiver.prompts[missing[0]][:60]!r} is not "
                "in the train dataset"
            )
        indices = [self._dataset_index[key] for key in receiver.prompt_ids]
        lookup: Lookup = self.library.lookup(receiver, indices, self._verify)
        self.graft.compute_advantages({LIBRARY_AGENT: lookup.rollouts})
        return {RECEIVER: receiver, LIBRARY_AGENT: lookup.rollouts}, lookup.counts
