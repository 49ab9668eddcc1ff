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

Tested in one process only. The receiver scores peer texts only on processes that received
some, so sharded-parameter setups whose every forward is collective (DeepSpeed ZeRO-3,
FSDP) are not supported yet; data-parallel ones (DDP, ZeRO-1/2) need no collective there.

Importing this module imports TRL; nothing in the project imports it (TRL is optional).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import trl
from packaging.version import Version
from trl import GRPOTrainer
from trl.trainer.utils import pad, split_tensor_dict, use_adapter

import algorithms
from algorithms.algorithm import Algorithm
from algorithms.core import order_minibatches
from algorithms.library import LIBRARY_AGENT
from algorithms.library.choice import CHOICES
from algorithms.library.format import LibraryError, prompt_key
from algorithms.library.source import LibrarySource, Lookup
from algorithms.library.trl_batch import checkpointing_off, in_order, with_peer_rows
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


class GraftGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with graft-library's update on its all-fail groups.

    library: a trajectory library (`graft library build/import`); choose and
    library_model: its choice rule and model filter (run config `library:`);
    graft_options: `EXCHANGE_OPTIONS` of graft-library (delta, order, ...);
    problem_column / answer_column: the train dataset's problem text (the library key)
    and gold answer (which re-verifies the stored groups)."""

    def __init__(
        self,
        *args: Any,
        library: str,
        choose: str = "most_recent",
        library_model: str | None = None,
        graft_options: Mapping[str, Any] | None = None,
        problem_column: str = "problem",
        answer_column: str = "answer",
        **kwargs: Any,
    ) -> None:
        if Version(trl.__version__).release[:2] != (1, 16):
            raise RuntimeError(
                f"GraftGRPOTrainer hooks TRL 1.16's GRPOTrainer internals; found trl "
                f"{trl.__version__} (pip install trl==1.16.0)"
            )
        if choose not in CHOICES or (choose == "model") != (library_model is not None):
            raise ValueError(
                f"GraftGRPOTrainer: choose={choose!r} (one of {', '.join(CHOICES)}) with "
                f"library_model={library_model!r}, which must be set exactly for 'model'"
            )
        super().__init__(*args, **kwargs)
        self.graft = self._algorithm(dict(graft_options or {}))
        self.problem_column = problem_column
        problems, self._answers = self._column(problem_column), self._column(answer_column)
        self.library = LibrarySource(
            str(library), choose, library_model, problems, self.graft.config
        )
        self._dataset_index: dict[str, int] = {}
        for index, key in enumerate(self.library.keys):
            self._dataset_index.setdefault(key, index)
        self._rewards_per_func: torch.Tensor | None = None

    def _algorithm(self, options: dict[str, Any]) -> Algorithm:
        """graft-library with TRL's group size, advantage rule and micro-batch count."""
        args, n = self.args, self.num_generations
        unknown = sorted(set(options) - set(EXCHANGE_OPTIONS))
        if unknown:
            raise ValueError(
                f"GraftGRPOTrainer: graft_options {unknown} are not exchange options "
                f"({', '.join(EXCHANGE_OPTIONS)}); TRL's loss takes its settings from GRPOConfig"
            )
        if self.scale_rewards not in ADVANTAGE_SCALES:
            raise ValueError(
                f"GraftGRPOTrainer: scale_rewards={self.scale_rewards!r} normalises over the "
                "batch, but a peer group carries its own group's advantages: "
                "use 'group' or 'none'"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "GraftGRPOTrainer: multi_objective_aggregation='normalize_then_sum' normalises "
                "over the batch; use 'sum_then_normalize'"
            )
        if args.per_device_train_batch_size % n:
            raise ValueError(
                f"GraftGRPOTrainer: per_device_train_batch_size={args.per_device_train_batch_size}"
                f" must be a multiple of num_generations={n}, so that each micro-batch holds "
                "whole groups, as this project's minibatches do"
            )
        if self._is_vlm:
            raise ValueError("GraftGRPOTrainer: vision-language models are not supported")
        return algorithms.make(
            "graft-library",
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
                f"GraftGRPOTrainer: the train dataset needs a {name!r} column (columns: {names})"
            )
        return list(self.train_dataset[name])

    # --- TRL's hooks ----------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        return self._rewards_per_func

    def _generate_and_score_completions(self, inputs):
        batch = super()._generate_and_score_completions(inputs)
        return self._graft(inputs, batch) if self.model.training else batch

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

    def _graft(self, inputs: list[dict], batch: dict[str, Any]) -> dict[str, Any]:
        """The generation batch with its rescued groups replaced and its rows in minibatch
        order; every row's weight is `graft_weight` and `graft_peer` marks peer rows."""
        n = self.num_generations
        keys = [prompt_key(row[self.problem_column]) for row in inputs]
        starts = range(0, len(keys), n)
        split = [p for p, start in enumerate(starts) if len(set(keys[start : start + n])) != 1]
        if split:
            raise ValueError(
                f"GraftGRPOTrainer: rows {split[0] * n}..{split[0] * n + n - 1} of this "
                "process are not one prompt's group (a group split across processes?)"
            )
        missing = [start for start in starts if keys[start] not in self._dataset_index]
        if missing:
            problem = inputs[missing[0]][self.problem_column]
            raise LibraryError(
                f"GraftGRPOTrainer: batch problem {problem[:60]!r} is not in the train dataset"
            )
        indices = [self._dataset_index[keys[start]] for start in starts]
        receiver = self._receiver(inputs, batch, keys[::n])
        lookup = self.library.lookup(receiver, indices, self._verify)
        rollouts = {RECEIVER: receiver, LIBRARY_AGENT: lookup.rollouts}
        self.graft.compute_advantages(rollouts)
        rng = step_rng(self.args.seed, self.state.global_step)
        exchanged = self.graft.exchange(rollouts, [RECEIVER], self._scorer(batch), rng)
        transfers = exchanged.transfers[RECEIVER]
        batch = self._replace(batch, transfers, lookup)
        peer = {group.prompt_index for group in transfers}
        chunks = order_minibatches(
            [p in peer for p in range(len(indices))],
            self.args.steps_per_generation,
            self.graft.config.order,
            rng=rng,
        )
        order = torch.tensor([p * n + i for chunk in chunks for p in chunk for i in range(n)])
        self._log_counts(lookup, transfers)
        return {key: in_order(value, order) for key, value in batch.items()}

    def _receiver(
        self, inputs: list[dict], batch: dict[str, Any], keys: list[str]
    ) -> AgentRollouts:
        """The batch's groups as this project's rollouts, with TRL's total rewards."""
        n, rows = self.num_generations, len(inputs)
        process = self.accelerator.process_index
        totals = self._rewards_per_func * self.reward_weights.to(self._rewards_per_func.device)
        rewards = totals.nansum(dim=1)[process * rows : (process + 1) * rows].cpu().numpy()
        wrong = rewards[(rewards != 0) & (rewards != 1)]
        if wrong.size:
            raise ValueError(
                f"GraftGRPOTrainer: the gate needs binary rewards (1 correct, 0 not), "
                f"got total reward {wrong[0]:g}: use math_reward or a 0/1 correctness reward"
            )
        mask = batch["completion_mask"].bool().cpu()
        ids = [
            row[keep].tolist()
            for row, keep in zip(batch["completion_ids"].cpu(), mask, strict=True)
        ]
        texts = self._tokenizer.batch_decode(ids, skip_special_tokens=True)
        ended = ["stop" if row and row[-1] in self.eos_token_ids else "length" for row in ids]

        def groups(values: list) -> list[list]:
            return [values[start : start + n] for start in range(0, rows, n)]

        return AgentRollouts(
            agent=RECEIVER,
            prompt_ids=keys,
            prompts=[row[self.problem_column] for row in inputs[::n]],
            texts=groups(texts),
            token_ids=groups(ids),
            # the exchange never reads the receiver's generation log-probs (its pi_old enters
            # through the scorer), and TRL keeps them only in some configurations
            logprobs=groups([np.empty(0)] * rows),
            finish_reasons=groups(ended),
            rewards=rewards.reshape(-1, n),
        )

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
        """The receiver's scorer: peer texts re-tokenised and scored by this model (pi_old)."""
        n = self.num_generations

        def score(
            receiver: str, prompts: Sequence[int], texts: Sequence[str], reasons: Sequence[str]
        ) -> list[ScoredText]:
            ids = [self._encode_response(t, r) for t, r in zip(texts, reasons, strict=True)]
            logps = self._logps(False, batch, [p * n for p in prompts], ids)
            return [
                ScoredText(row, logp[: len(row)].cpu().double().numpy())
                for row, logp in zip(ids, logps, strict=True)
            ]

        return score

    def _logps(
        self,
        reference: bool,
        batch: dict[str, Any],
        rows: Sequence[int],
        completions: Sequence[list[int]],
    ) -> torch.Tensor:
        """Per-token log-probs of `completions[j]` after the prompt of batch row `rows[j]`
        under this model (pi_old) or, with `reference`, TRL's reference, as TRL computes
        them for its loss (temperature, padding)."""
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
        self, batch: dict[str, Any], transfers: Sequence[TransferredGroup], lookup: Lookup
    ) -> dict[str, Any]:
        """The batch with each transferred group's rows holding its peer responses
        (`trl_batch.with_peer_rows`) and TRL's loss normaliser over the new rows."""
        n = self.num_generations
        peer_rows = [(g, i) for g in transfers for i in range(n)]
        reference = None
        if "ref_per_token_logps" in batch and peer_rows:
            row_of = [g.prompt_index * n + i for g, i in peer_rows]
            ids = [g.scored[i].token_ids for g, i in peer_rows]
            reference = self._logps(True, batch, row_of, ids)
        pad_id, masked = self._tokenizer.pad_token_id, self.mask_truncated_completions
        out = with_peer_rows(batch, transfers, lookup, n, pad_id, masked, reference)
        loss_mask = out["completion_mask"] * out.get("tool_mask", 1)
        # every process gathers, whether or not it received peer rows
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return out

    def _log_counts(self, lookup: Lookup, transfers: Sequence[TransferredGroup]) -> None:
        """The lookup's counts and what the gate moved, summed over processes."""
        weights = [group.weights for group in transfers]
        admitted = sum(int(np.count_nonzero(w > 0)) for w in weights)
        counts = {
            **lookup.counts,
            "library/used_groups": float(len(transfers)),
            "library/rescued_prompts": float(sum(bool(np.any(w > 0)) for w in weights)),
            "library/peer_sequences": float(admitted),
            "library/removed_peer_responses": float(sum(w.size for w in weights) - admitted),
        }
        values = torch.tensor(list(counts.values()), device=self.accelerator.device)
        totals = self.accelerator.reduce(values, reduction="sum").tolist()
        for name, total in zip(counts, totals, strict=True):
            self._metrics["train"][name].append(total)
