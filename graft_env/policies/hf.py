"""The transformers backend: any local causal LM directory behind the Policy interface.

Sampling is a small own loop over the model's forward with a KV cache
(`policies.generation.sample`) rather than `model.generate`, because the recorded
log-probs must be the ones the training forward computes: same temperature, same
float32 log-softmax, same padding and position ids. `benchmarks/perf/policy_throughput.py`
measures what that costs against `model.generate`.

Dropout is switched off at load time (see `policies.loading`). Every random draw comes from
`SamplingParams.seed`, so a policy has no hidden RNG state to checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from graft_env.policies.base import FINISH_REASONS, Done, Generation, LossFn, SamplingParams
from graft_env.policies.forward import packing_error, response_logprobs
from graft_env.policies.generation import sample
from graft_env.policies.loading import DTYPES, is_hub_id, load_model, load_tokenizer
from graft_env.policies.micro_batches import micro_batches
from graft_env.policies.options import HFPolicyOptions
from graft_env.policies.packed import PackedWeights
from graft_env.policies.precision import half_precision_training_error
from graft_env.policies.training import OptimStep, optimise, wants_reference
from graft_env.prompts import format_prompt
from graft_env.types import ScoredText, TrainBatch

OPTIMIZER_FILE = "optimizer.pt"
POLICY_FILE = "graft_policy.json"


class HFPolicy:
    """A transformers causal LM as a Policy (see `policies.base` for the contract)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        name: str | None = None,
        options: HFPolicyOptions | None = None,
    ) -> None:
        self.options = options or HFPolicyOptions()
        self.path = str(model_path)
        if not Path(self.path).exists() and not is_hub_id(self.path):
            raise FileNotFoundError(f"model path {self.path!r} does not exist")
        if self.options.packed_decode and not torch.backends.mkldnn.is_available():
            raise ValueError("HFPolicyOptions.packed_decode: this torch build has no oneDNN")
        self.name = name or Path(self.path).name
        self.temperature = self.options.temperature
        self.device = torch.device(self.options.device)
        self.tokenizer = load_tokenizer(self.path, self.options)
        self.eos_id = int(self.tokenizer.eos_token_id)
        pad = self.tokenizer.pad_token_id
        self.pad_id = self.eos_id if pad is None else int(pad)  # pads are always masked
        self.model = load_model(self.path, self.options)
        error = packing_error(self.model) if self.options.padding_free else None
        if error:
            raise ValueError(f"HFPolicyOptions.padding_free ({self.path}): {error}")
        self._reference: torch.nn.Module | None = None  # see reference_model
        self.optimizer = self._new_optimizer()
        self.max_positions = getattr(self.model.config, "max_position_embeddings", None)
        self._packs = PackedWeights()  # filled on first use under packed_decode

    def _new_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            self.model.parameters(),
            lr=self.options.lr,
            betas=self.options.betas,
            weight_decay=self.options.weight_decay,
        )

    @property
    def compute_dtype(self) -> str:
        """The dtype forwards compute in: the autocast dtype, else the weights'."""
        return self.options.autocast or self.options.dtype

    def compute_precision(self) -> contextlib.AbstractContextManager:
        """The context every model forward runs in: `torch.autocast` under the
        `autocast` option (mixed precision), else nothing."""
        if self.options.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.options.autocast])

    def decode_kernels(self) -> contextlib.AbstractContextManager:
        """The context sampling runs in (under `torch.no_grad`): the model's linear layers
        on prepacked oneDNN weights under `packed_decode` (`policies.packed`), else nothing."""
        if not self.options.packed_decode:
            return contextlib.nullcontext()
        return self._packs.applied(self.model)

    # -- text <-> tokens ---------------------------------------------------------
    def format_prompt(self, problem: str) -> str:
        return format_prompt(problem, self.tokenizer)

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt tokens; special tokens (BOS) are added unless the text already has them."""
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{self.name}: a prompt must be a non-empty string, got {prompt!r}")
        bos = self.tokenizer.bos_token
        add_special = not (bos and prompt.startswith(bos))
        ids = self.tokenizer(prompt, add_special_tokens=add_special)["input_ids"]
        if not ids:
            raise ValueError(f"{self.name}: prompt {prompt[:60]!r} tokenises to nothing")
        return list(ids)

    def encode_response(self, text: str, finish_reason: str) -> list[int]:
        """Response tokens ending as the source's generation ended: the text, then this
        policy's EOS iff `finish_reason == "stop"` (none after a `max_new_tokens` cut).

        Special-token strings inside the text (a peer's "<|im_end|>", say) are plain
        text here, so `decode_response(encode_response(t, r)) == t` for byte-level BPEs.
        """
        if not isinstance(text, str):
            raise TypeError(f"{self.name}: a response must be a string, got {type(text).__name__}")
        if finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"{self.name}: finish reason {finish_reason!r} is not one of {FINISH_REASONS}"
            )
        encoded = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)
        eos = [self.eos_id] if finish_reason == "stop" else []
        return [*encoded["input_ids"], *eos]

    def decode_response(self, token_ids: Sequence[int]) -> str:
        """The response text without special tokens (EOS included), as peers receive it."""
        return self.tokenizer.decode(
            list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False
        )

    def _check_length(self, total: int, what: str) -> None:
        if self.max_positions is not None and total > self.max_positions:
            raise ValueError(
                f"{self.name}: {what} needs {total} positions, the model has {self.max_positions}"
            )

    # -- sampling and scoring ----------------------------------------------------
    def encode_for_generation(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[int]]:
        """Prompt token ids, after checking `n` and that every prompt leaves room for
        `max_new_tokens` (shared by every rollout backend)."""
        if n < 1:
            raise ValueError(f"{self.name}: n must be >= 1, got {n}")
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        budget = self.options.max_tokens_per_micro_batch
        for index, ids in enumerate(prompt_ids):
            total, what = len(ids) + sampling.max_new_tokens, f"prompt {index} + max_new_tokens"
            self._check_length(total, what)
            if budget is not None and total > budget:
                # found here, before sampling, not in the update after the rollout
                raise ValueError(
                    f"{self.name}: {what} is {total} tokens, over max_tokens_per_micro_batch="
                    f"{budget}: a full-length response could not be trained; raise the budget"
                )
        return prompt_ids

    def generate_async(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> Done[list[list[Generation]]]:
        """`generate`, finished before it returns: this policy samples in this process."""
        return Done(self.generate(prompts, n, sampling))

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        prompt_ids = self.encode_for_generation(prompts, n, sampling)
        rows = [index for index in range(len(prompts)) for _ in range(n)]
        generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        groups: list[list[Generation]] = [[] for _ in prompts]
        size = self.options.generation_batch_size
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            with torch.no_grad(), self.compute_precision(), self.decode_kernels():
                sampled = sample(
                    self.model,
                    [prompt_ids[i] for i in chunk],
                    sampling,
                    eos_id=self.eos_id,
                    pad_id=self.pad_id,
                    temperature=self.temperature,
                    generator=generator,
                )
            for index, ids, logprobs, stopped in zip(
                chunk, sampled.token_ids, sampled.logprobs, sampled.stopped, strict=True
            ):
                groups[index].append(
                    Generation(
                        text=self.decode_response(ids),
                        token_ids=ids,
                        logprobs=np.asarray(logprobs, dtype=np.float32),
                        finish_reason="stop" if stopped else "length",
                    )
                )
        return groups

    @torch.no_grad()
    def score_tokens(
        self, prompts: Sequence[str], response_token_ids: Sequence[Sequence[int]]
    ) -> list[np.ndarray]:
        """Log-probs of given response token ids (the training forward, without grad), in
        forwards of `score_batch_size` rows or, with `max_tokens_per_micro_batch`, of rows
        grouped by length under that token budget."""
        if len(prompts) != len(response_token_ids):
            raise ValueError(
                f"{self.name}: {len(prompts)} prompts but {len(response_token_ids)} responses"
            )
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        responses = [list(r) for r in response_token_ids]
        groups = micro_batches(
            [len(ids) for ids in prompt_ids],
            [len(r) for r in responses],
            size=self.options.score_batch_size,
            budget=self.options.max_tokens_per_micro_batch,
            where=f"{self.name}: scoring",
            padding_free=self.options.padding_free,
        )
        scored: dict[int, np.ndarray] = {}
        for group in groups:
            with self.compute_precision():
                result = response_logprobs(
                    self.model,
                    [prompt_ids[j] for j in group],
                    [responses[j] for j in group],
                    pad_id=self.pad_id,
                    temperature=self.temperature,
                    with_entropy=False,
                    share_prompts=True,
                    logits_chunk_tokens=self.options.logits_chunk_tokens,
                    padding_free=self.options.padding_free,
                )
            rows = result.logprobs.cpu().numpy()
            scored.update(
                (j, row[: len(responses[j])].copy()) for j, row in zip(group, rows, strict=True)
            )
        return [scored[j] for j in range(len(responses))]

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[ScoredText]:
        if len(finish_reasons) != len(responses):
            raise ValueError(
                f"{self.name}: {len(responses)} responses but {len(finish_reasons)} finish reasons"
            )
        token_ids = [
            self.encode_response(text, reason)
            for text, reason in zip(responses, finish_reasons, strict=True)
        ]
        empty = [j for j, ids in enumerate(token_ids) if not ids]
        if empty:
            raise ValueError(
                f"{self.name}: responses {empty} have no text and no EOS (cut at "
                "max_new_tokens after special tokens only): nothing to score"
            )
        logprobs = self.score_tokens(prompts, token_ids)
        return [ScoredText(ids, lp) for ids, lp in zip(token_ids, logprobs, strict=True)]

    # -- training ----------------------------------------------------------------
    def update_async(self, batch: TrainBatch, loss_fn: LossFn) -> Done[dict[str, float]]:
        """`update`, finished before it returns: this policy trains in this process."""
        return Done(self.update(batch, loss_fn))

    def update(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        self._check_trainable_precision()
        sequences = batch.sequences
        for number, indices in enumerate(batch.minibatches):
            if not indices:
                raise ValueError(
                    f"{self.name}: minibatch {number} of agent {batch.agent!r} is empty"
                )
            bad = [i for i in indices if not 0 <= i < len(sequences)]
            if bad:
                raise IndexError(f"{self.name}: minibatch {number} indexes missing sequences {bad}")
        prompt_tokens: dict[int, list[int]] = {}
        for number, seq in enumerate(sequences):
            if not 0 <= seq.prompt_index < len(batch.prompts):
                raise IndexError(
                    f"{self.name}: sequence {number} has prompt_index {seq.prompt_index}, "
                    f"batch has {len(batch.prompts)} prompts"
                )
            if seq.prompt_index not in prompt_tokens:
                prompt_tokens[seq.prompt_index] = self.encode_prompt(
                    batch.prompts[seq.prompt_index]
                )
        step = OptimStep(
            temperature=self.temperature,
            pad_id=self.pad_id,
            grad_clip=self.options.grad_clip,
            micro_batch_size=self.options.micro_batch_size,
            max_tokens_per_micro_batch=self.options.max_tokens_per_micro_batch,
            logits_chunk_tokens=self.options.logits_chunk_tokens,
            padding_free=self.options.padding_free,
            precision=self.compute_precision,
            reference=self.reference_model() if wants_reference(loss_fn) else None,
        )
        self.model.train(self.options.gradient_checkpointing)  # checkpointing needs train mode
        try:
            metrics = optimise(
                self.model,
                self.optimizer,
                [prompt_tokens[seq.prompt_index] for seq in sequences],
                sequences,
                batch.minibatches,
                loss_fn,
                step,
            )
        finally:
            self.model.eval()
        metrics["lr"] = float(self.optimizer.param_groups[0]["lr"])
        return metrics

    def _check_trainable_precision(self) -> None:
        """Refuse an update that would mostly round away (see `policies.precision`)."""
        error = half_precision_training_error(self.options.dtype, self.options.lr)
        if error:
            raise ValueError(f"{self.name}: options {error}")

    def reference_model(self) -> torch.nn.Module:
        """The frozen initial policy of KL losses, loaded from `self.path` on first use.

        Read from the directory this policy was created from, never copied from
        `self.model`: after `load` (a resume) the policy holds checkpoint weights, and
        the reference must stay the initial ones. Losses without a KL term never ask,
        so their policies hold no second model.
        """
        if self._reference is None:
            self._reference = load_model(self.path, self.options).requires_grad_(False)
        return self._reference

    # -- checkpoints ---------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        torch.save({"optimizer": self.optimizer.state_dict()}, directory / OPTIMIZER_FILE)
        record = {"name": self.name, "options": dataclasses.asdict(self.options)}
        (directory / POLICY_FILE).write_text(json.dumps(record, indent=2))

    def load(self, path: str | Path) -> None:
        """Restore weights and optimizer moments; hyperparameters stay this policy's options."""
        directory = Path(path)
        optimizer_file = directory / OPTIMIZER_FILE
        if not optimizer_file.is_file():
            raise FileNotFoundError(
                f"{self.name}: {optimizer_file} missing; not a policy checkpoint"
            )
        tokenizer = load_tokenizer(str(directory), self.options)
        if tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise ValueError(f"{self.name}: checkpoint {directory} has a different tokenizer")
        self.model = load_model(str(directory), self.options)
        self.optimizer = self._new_optimizer()
        state = torch.load(optimizer_file, map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group.update(
                lr=self.options.lr, betas=self.options.betas, weight_decay=self.options.weight_decay
            )
