"""The worker group's rank code on one GPU: FSDP2 at world size 1, the sharded checkpoint and
the update at the paper's token counts, on a Qwen3-1.7B-shaped model with random weights.

What runs is one rank of an agent's worker group (issue 28 item 5): the process group
(nccl on CUDA, gloo on CPU, world size 1), the policy loaded by `load_policy` and sharded
by `fsdp.shard` (`fully_shard` per decoder layer and the root, `MixedPrecisionPolicy` bf16 /
fp32 reduce on CUDA), AdamW over the shards, exactly as `rank.RankWorker.setup` does it
(its Ray-only part, `placement`, is left out: no Ray cluster is needed); then the rank's own
methods: `RankWorker.update` (`sharded_update`: token-budget micro-batches, chunked
log-probs, gradient checkpointing), `score` and `generate` on the gathered model, `save`
and `load` (`sharded_checkpoint`: DCP shards, RNG, HF export). Where `ray` is not
installed (`rank.py` imports it), the same functions are called directly, one call each,
as `RankWorker`'s methods call them; `"driver"` in the results says which ran.

Stages, each with seconds and peak memory (CUDA allocator peak; on CPU the resident
high-water mark) beside the memory plan's prediction for that phase
(`memory_plan.plan_policy`, the sharded terms divided by the world size:
`step_time.gpu_memory.per_gpu_bytes`):

1. `warm_up`: a small update (AdamW's moments exist afterwards, kernels are loaded);
2. `update_peak`: one minibatch of 8 prompts x 8 responses of 4,096 tokens (512-token
   prompts): every micro-batch at the 32,768-token budget, the plan's update peak;
3. `update_paper`: one of the paper's minibatches, 32 prompts x 8 (prompts 80-200 tokens,
   responses of mean ~800, 15 % cut at 4,096: the length mix of `step_time.workload.LengthMix`),
   with `padding_share`; x 4 minibatches it is the step's update, printed beside
   `step_time.phases.update_s` for one GPU;
4. `score`: 16 peer rows of 4,096 tokens scored (re-tokenised text) on the gathered model;
5. `generate`: 8 prompts x 2 samples of up to 32 tokens on the gathered model;
6. `checkpoint`: `save`, a further update (weights and moments move) and draws from the CPU
   (and on CUDA the CUDA) generator, `load`; every model and optimizer tensor and the CPU
   RNG state must equal what was saved (bitwise).

`--smoke` runs the same stages on CPU with gloo at a toy size (Qwen3 layer structure,
hidden 64, 2 layers, a 2,048-token vocabulary, responses of <= 24 tokens); that is what
tests/benchmarks/test_worker_group_device_check.py runs. **The GPU path has not run**: no
GPU was lent to the session that wrote this. Expected on one H200 (from the step estimate's
measured 122 TFLOP/s, not measured here): about 4 minutes, mostly the two paper-sized updates
(~45-50 s each) and the ~27 GB checkpoint written and read. Needs torch, transformers and the
project's pure-Python dependencies; no vLLM, no Ray (with Ray installed the rank's own
`RankWorker` methods run; without it `DirectRank`), no download. The policy options are the
Qwen3 agent's of configs/paper_smollm3_qwen3.yaml (`options_for`: only the device, the
micro-batch budget, the logits chunk, transformers sampling and local files are set here).

Results go to `--out`: results.json and summary.txt, written before every stage (the stage
about to run is marked `running_since_s`) and after it, so a run killed mid-stage keeps what
ran. The time budget: a stage is skipped, with every stage after it (listed as skipped, exit
status 1), when the seconds spent so far plus its expected seconds (`expected_seconds`, in
results.json under settings.expected_s: a 20 s floor per stage, 3 x the step estimate's
update for the two updates, file bytes at an assumed 0.5 GB/s disk and the checkpoint's host
snapshots at 2 GB/s; for Qwen3-1.7B: build 34, setup 34, updates 164 and 149, checkpoint
147 s) pass `--time-budget-s` (420 s). What that bounds, honestly: the check cannot stop a
stage that has started, so the run ends by 420 s after its stages' clock starts only if each
stage stays within its expected seconds; a stage that runs longer overshoots by its excess,
and the process start (imports, CUDA init) comes on top. The device's 600 s per-call limit
leaves 180 s for both; past it the run is killed and the files show the stage it was in.
A checkpoint that does not come back bitwise (or draws that did not move the RNG) is an
error (exit status 1). On CUDA the CUDA generator is compared too and reported apart:
`sharded_checkpoint` saves the CPU generator only, so summary.txt states as a FINDING that
load does not restore it (expected; not checked on a GPU).

    python -m benchmarks.perf.worker_group_device_check --out docs/results/worker_group_h200
    python -m benchmarks.perf.worker_group_device_check --smoke --out /tmp/wg-smoke
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.training.memory_plan import GIB, Architecture, Workload, plan_policy
from algorithms.training.step_time.anchors import GPUS
from algorithms.training.step_time.gpu_memory import per_gpu_bytes
from algorithms.training.step_time.phases import update_s
from algorithms.training.step_time.workload import Agent, LengthMix, StepWorkload
from graft_env.types import TrainBatch, TrainSequence

MODEL = "Qwen/Qwen3-1.7B-Base"
SMOKE_FIELDS = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=2048,
    tie_word_embeddings=True,
)
"""`--smoke`'s Qwen3: its layer structure (q/k norms, GQA, tied head), a toy width."""


@dataclass(frozen=True)
class Size:
    """The stages' token counts."""

    peak_prompts: int
    peak_prompt_tokens: int
    peak_response_tokens: int
    paper_prompts: int
    peer_rows: int
    generate_prompts: int
    generate_tokens: int
    budget: int
    chunk: int
    mix: LengthMix
    n: int = 8
    warm_rows: int = 8
    warm_tokens: int = 64


FULL = Size(8, 512, 4096, 32, 16, 8, 32, 32768, 4096, LengthMix())
SMOKE = Size(
    2, 8, 24, 2, 4, 2, 4, 128, 16, LengthMix(prompt_tokens=8, cap=24, median=6), warm_tokens=8
)


PAPER_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "paper_smollm3_qwen3.yaml"
PAPER_AGENT = "qwen3-1.7b"
NOT_HERE = ("rollout_backend", "local_files_only")
"""Options this script sets itself: the trainer samples (no vLLM here), no download."""


def options_for(size: Size, device: str) -> dict[str, Any]:
    """The Qwen3 agent's policy options as `PAPER_CONFIG` gives them (lr, betas, weight decay,
    grad clip, precision, checkpointing, batch sizes), on CPU too (bf16 autocast; FSDP2
    keeps full precision there: `fsdp.mixed_precision`). Overridden: the device, the
    micro-batch budget and the logits chunk (the size's), sampling with transformers (no
    `vllm_` options), local files only."""
    from algorithms.training.run_config import load_config
    from graft_env.policies.options import OPTION_PREFIX

    config = load_config(PAPER_CONFIG)
    (agent,) = [a for a in config.agents if a.name == PAPER_AGENT]
    options = {
        key: value
        for key, value in agent.options.items()
        if not key.startswith(OPTION_PREFIX) and key not in NOT_HERE
    }
    return {
        **options,
        "device": device,
        "max_tokens_per_micro_batch": size.budget,
        "logits_chunk_tokens": size.chunk,
        "local_files_only": True,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class DirectRank:
    """What `RankWorker`'s methods call, for a machine without Ray (rank.py imports it)."""

    def __init__(self) -> None:
        self.policy: Any = None
        self.algorithm: Any = None

    def update(self, batch: TrainBatch) -> dict[str, float]:
        from algorithms.training.ray.sharded_update import sharded_update

        return sharded_update(self.policy, batch, self.algorithm.loss)

    def score(self, prompts, responses, finish_reasons) -> list:
        import torch

        from algorithms.training.ray.fsdp import gathered

        with torch.no_grad(), gathered(self.policy.model):
            return self.policy.score(prompts, responses, finish_reasons)

    def generate(self, blocks, n, sampling) -> list:
        import dataclasses

        import torch

        from algorithms.training.ray.fsdp import gathered

        with torch.no_grad(), gathered(self.policy.model):
            return [
                self.policy.generate(prompts, n, dataclasses.replace(sampling, seed=seed))
                for prompts, seed in blocks
            ]

    def save(self, path: str) -> None:
        from algorithms.training.ray import sharded_checkpoint

        Path(path).mkdir(parents=True, exist_ok=True)
        sharded_checkpoint.save(self.policy, Path(path))

    def load(self, path: str) -> None:
        from algorithms.training.ray import sharded_checkpoint

        sharded_checkpoint.load(self.policy, Path(path))


def make_rank(threads: int, direct: bool) -> tuple[Any, str]:
    """A `RankWorker` (rank 0 of 1) when Ray imports, else `DirectRank`."""
    if not direct:
        try:
            from algorithms.training.ray.rank import RankWorker
        except ImportError:
            pass
        else:
            return RankWorker(0, 1, threads), "RankWorker"
    return DirectRank(), "DirectRank (no ray)"


def set_up(rank: Any, directory: Path, options: dict[str, Any]) -> dict[str, Any]:
    """`RankWorker.setup`'s steps without its Ray placement: process group, policy, FSDP2
    shards, AdamW."""
    import torch
    import torch.distributed as dist

    import algorithms
    from algorithms.training.ray.fsdp import sharded_policy

    cuda = options["device"].startswith("cuda")
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=1,
    )
    rank.algorithm = algorithms.make("grpo")
    rank.policy = sharded_policy(str(directory), options)
    return {"backend": dist.get_backend(), "world_size": dist.get_world_size()}


def exact_batch(
    vocab: int, prompts: int, n: int, prompt_tokens: int, response_tokens: int, seed: int
) -> TrainBatch:
    """`random_models.grpo_batch`: every row exactly `prompt_tokens` + `response_tokens`."""
    from benchmarks.perf.random_models import grpo_batch

    return grpo_batch(vocab, prompts, n, prompt_tokens, response_tokens, seed=seed)


def mix_batch(vocab: int, prompts: int, n: int, mix: LengthMix, seed: int) -> TrainBatch:
    """`prompts` x `n` random responses of the paper's length mix (A1, `LengthMix`):
    prompts of 80-200 tokens (scaled to the mix's prompt length), `cut_share` of the
    responses at the cap, the rest log-normal; advantages +-0.5; one minibatch."""
    rng = np.random.default_rng(seed)
    low, high = max(2, mix.prompt_tokens * 80 // 140), max(3, mix.prompt_tokens * 200 // 140)
    texts = [
        " ".join(["<s>", *(f"t{i}" for i in rng.integers(4, vocab, int(length) - 1))])
        for length in rng.integers(low, high, prompts)
    ]
    rows = prompts * n
    lengths = np.minimum(
        rng.lognormal(np.log(mix.median), mix.sigma, rows).astype(int) + 1, mix.cap
    )
    lengths[rng.random(rows) < mix.cut_share] = mix.cap
    sequences = [
        TrainSequence(
            j // n,
            [int(i) for i in rng.integers(4, vocab, int(length))],
            np.full(int(length), -np.log(vocab)),
            advantage=float(j % 2) - 0.5,
        )
        for j, length in enumerate(lengths)
    ]
    return TrainBatch("random", texts, sequences, [list(range(rows))])


def snapshot(policy: Any) -> dict[str, Any]:
    """Every model and optimizer tensor (this rank's shard) and the CPU RNG state (the one
    `sharded_checkpoint` saves), on the CPU."""
    import torch
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    def local(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: local(v) for k, v in value.items()}
        if isinstance(value, torch.Tensor):
            tensor = value.to_local() if hasattr(value, "to_local") else value
            return tensor.detach().to("cpu", copy=True)
        return value

    return {
        "model": local(get_model_state_dict(policy.model)),
        "optimizer": local(get_optimizer_state_dict(policy.model, policy.optimizer)),
        "rng": torch.get_rng_state().clone(),
    }


def differences(before: Any, after: Any, where: str = "") -> list[str]:
    """Paths of tensors (or values) that are not bitwise equal."""
    import torch

    if isinstance(before, dict):
        keys = set(before) | set(after)
        return [d for k in sorted(keys, key=str) for d in differences(
            before.get(k), after.get(k), f"{where}/{k}"
        )]  # fmt: skip
    if isinstance(before, torch.Tensor):
        same = isinstance(after, torch.Tensor) and before.shape == after.shape
        return [] if same and torch.equal(before, after) else [where]
    return [] if before == after else [where]


STAGE_FLOOR_S = 20.0
"""Every stage's fixed allowance (allocator warm-up, kernel loads, small copies)."""
UPDATE_MARGIN = 3.0
"""An update stage is expected to take up to this many times `step_time.phases.update_s`."""
DISK_BYTES_PER_S = 0.5e9
"""Assumed scratch-disk bandwidth, read or write (low on purpose: network-backed disks)."""
HOST_BYTES_PER_S = 2e9
"""Assumed device-to-host copy rate of the checkpoint stage's snapshots (pageable)."""


def expected_seconds(arch: Architecture, options: dict[str, Any], size: Size) -> dict[str, float]:
    """Each stage's conservative duration (the time budget's per-stage bound): the floor,
    plus UPDATE_MARGIN x the step estimate for the updates, plus the bytes of the files and
    copies at the assumed disk and host bandwidths. The checkpoint stage: its DCP shards
    (fp32 weights + 2 AdamW moments = 12 bytes per parameter) and the HF export (4) written,
    the shards read back, three host snapshots of weights and moments (12 each)."""
    params = arch.params
    update = {
        "update_peak": _estimate_s(arch, options, size, peak=True),
        "update_paper": _estimate_s(arch, options, size, peak=False),
    }
    disk = {"build": 4 * params, "setup": 4 * params, "checkpoint": (16 + 12) * params}
    host = {"checkpoint": 3 * 12 * params}
    stages = ("build", "setup", "warm_up", "update_peak", "update_paper", "score", "generate",
              "checkpoint")  # fmt: skip
    return {
        name: STAGE_FLOOR_S
        + UPDATE_MARGIN * update.get(name, 0.0)
        + disk.get(name, 0.0) / DISK_BYTES_PER_S
        + host.get(name, 0.0) / HOST_BYTES_PER_S
        for name in stages
    }


class Stages:
    """Runs the stages, timing each and recording its peak memory beside the plan; a stage
    whose expected seconds would end past `--time-budget-s` is skipped (with the rest)."""

    def __init__(
        self, args: argparse.Namespace, results: dict, expected: dict[str, float] | None = None
    ) -> None:
        self.args, self.results = args, results
        self.expected = expected or {}
        self.started = time.perf_counter()

    def write(self) -> None:
        """results.json and summary.txt as they stand (before and after every stage)."""
        out = self.args.out
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "results.json").write_text(json.dumps(self.results, indent=2))
            (out / "summary.txt").write_text("\n".join(summary_lines(self.results)) + "\n")

    def run(self, name: str, fn: Callable[[], dict], plan_bytes: float | None = None) -> dict:
        from benchmarks.perf.common import synchronize
        from benchmarks.perf.random_models import peak_bytes, reset_peak

        device, budget = self.args.device, self.args.time_budget_s
        elapsed, expected = time.perf_counter() - self.started, self.expected.get(name, 0.0)
        if self.results.get("skipped") or elapsed + expected > budget:  # keep what ran
            record = {
                "skipped": f"{elapsed:.0f} s + expected {expected:.0f} s > --time-budget-s "
                f"{budget:g}",
                "peak_gib": math.nan,
            }
            self.results.setdefault("skipped", []).append(name)
            self.results["stages"][name] = record
            self.write()
            return record
        print(f"[{name}]", flush=True)
        self.results["stages"][name] = {"running_since_s": elapsed, "peak_gib": math.nan}
        self.write()  # a run killed in this stage still leaves what ran before it
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        reset_peak(device)
        started = time.perf_counter()
        try:
            record = fn()
            synchronize(device)
            record["seconds"] = time.perf_counter() - started
        except Exception as err:  # record it; the later stages still tell something
            record = {"error": f"{type(err).__name__}: {err}"}
            self.results.setdefault("errors", []).append(f"{name}: {record['error']}")
            print(f"ERROR {name}: {record['error']}", flush=True)
        record["peak_gib"] = peak_bytes(device) / GIB
        if plan_bytes is not None:
            record["plan_gib"] = plan_bytes / GIB
            record["plan_over_measured"] = plan_bytes / max(peak_bytes(device), 1)
        self.results["stages"][name] = record
        self.write()
        return record


def plan_for(arch: Architecture, options: dict[str, Any], work: Workload) -> dict[str, float]:
    """The memory plan's bytes per phase on one rank of a 1-rank group."""
    from graft_env.policies.options import HFPolicyOptions

    return per_gpu_bytes(plan_policy(arch, HFPolicyOptions.from_kwargs(**options), work), 1)


def check(args: argparse.Namespace) -> dict:
    import torch
    import transformers

    from benchmarks.perf.random_models import config_of, paper_config, write_random_model

    size = SMOKE if args.smoke else FULL
    config = config_of("Qwen3Config", SMOKE_FIELDS) if args.smoke else paper_config(MODEL)
    arch = Architecture.from_config(config.to_dict())
    options = options_for(size, args.device)
    rank, driver = make_rank(args.threads, args.direct)
    results: dict = {
        "environment": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        },
        "settings": {
            "model": MODEL if not args.smoke else "qwen3 (smoke size)",
            "parameters": arch.params,
            "options": options,
            "size": asdict(size),
            "driver": driver,
        },
        "stages": {},
    }
    results["settings"]["expected_s"] = expected = expected_seconds(arch, options, size)
    stages = Stages(args, results, expected)
    scratch = Path(tempfile.mkdtemp(prefix="wg-device-check-", dir=args.scratch))
    try:
        run_stages(stages, rank, arch, config, options, size, scratch, write_random_model)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(scratch, ignore_errors=True)
    results["total_s"] = sum(s.get("seconds", 0.0) for s in results["stages"].values())
    stages.write()
    return results


def run_stages(stages, rank, arch, config, options, size: Size, scratch: Path, write) -> None:
    from graft_env.policies import SamplingParams

    args, vocab, n = stages.args, arch.vocab_size, size.n
    directory = scratch / "model"
    stages.run(
        "build",
        lambda: {"path": str(write(directory, config, seed=0, device=args.device))},
    )
    setup = stages.run("setup", lambda: set_up(rank, directory, options))
    if "seconds" not in setup:
        return
    policy = rank.policy

    def update(batch: TrainBatch) -> Callable[[], dict]:
        def go() -> dict:
            metrics = rank.update(batch)
            return {
                "rows": len(batch.sequences),
                "response_tokens": int(metrics["tokens"]),
                "padding_share": metrics.get("padding_share"),
                "loss": metrics["loss"],
                "grad_norm": metrics.get("grad_norm"),
            }

        return go

    warm = exact_batch(vocab, 1, size.warm_rows, 8, size.warm_tokens, seed=1)
    stages.run("warm_up", update(warm))

    peak = exact_batch(
        vocab, size.peak_prompts, n, size.peak_prompt_tokens, size.peak_response_tokens, seed=2
    )
    peak_work = Workload(size.peak_prompt_tokens, size.peak_response_tokens, len(peak.sequences))
    record = stages.run("update_peak", update(peak), plan_for(arch, options, peak_work)["update"])
    _rate(record, peak)

    paper = mix_batch(vocab, size.paper_prompts, n, size.mix, seed=3)
    longest_prompt = max(len(text.split()) for text in paper.prompts)
    paper_work = Workload(longest_prompt, size.mix.cap, len(paper.sequences))
    record = stages.run(
        "update_paper", update(paper), plan_for(arch, options, paper_work)["update"]
    )
    _rate(record, paper)
    if "seconds" in record:
        _beside_estimate(record, arch, options, size)

    peers = peak.sequences[: size.peer_rows]
    texts = [" ".join(f"t{i}" for i in seq.response_token_ids) for seq in peers]
    prompts = [peak.prompts[seq.prompt_index] for seq in peers]
    score_work = Workload(size.peak_prompt_tokens, size.peak_response_tokens, len(peers))

    def score() -> dict:
        scored = rank.score(prompts, texts, ["length"] * len(texts))
        lengths = [len(item.token_ids) for item in scored]
        finite = all(np.isfinite(item.logprobs).all() for item in scored)
        return {"rows": len(scored), "tokens": sum(lengths), "finite": bool(finite)}

    stages.run("score", score, plan_for(arch, options, score_work)["score"])

    def generate() -> dict:
        sampling = SamplingParams(max_new_tokens=size.generate_tokens, seed=0)
        blocks = [(list(peak.prompts[: size.generate_prompts]), 0)]
        groups = rank.generate(blocks, 2, sampling)[0]
        tokens = sum(len(g.token_ids) for group in groups for g in group)
        return {"sequences": sum(map(len, groups)), "tokens": tokens}

    gen_work = Workload(size.peak_prompt_tokens, size.generate_tokens, 1)
    stages.run("generate", generate, plan_for(arch, options, gen_work)["generate"])
    saved = stages.run(
        "checkpoint", lambda: _checkpoint(rank, policy, warm, scratch / "checkpoint")
    )
    if saved.get("equal_after_load") is False or saved.get("rng_moved_before_load") is False:
        stages.results.setdefault("errors", []).append(
            "checkpoint: not bitwise equal after load, or the draws did not move the RNG"
        )


def _rate(record: dict, batch: TrainBatch) -> None:
    if "seconds" in record:
        tokens = sum(len(s.response_token_ids) for s in batch.sequences)
        record["response_tokens_per_s"] = tokens / record["seconds"]


def _estimate_s(arch: Architecture, options: dict, size: Size, peak: bool) -> float:
    """The step estimate's update (A3) on one H200 of one minibatch: the paper mix's
    (`update_paper`) or every row at the peak stage's exact lengths (`update_peak`)."""
    from graft_env.policies.options import HFPolicyOptions

    hf = HFPolicyOptions.from_kwargs(**options)
    if peak:
        mix = LengthMix(
            prompt_tokens=size.peak_prompt_tokens, cap=size.peak_response_tokens, cut_share=1.0
        )
        work = StepWorkload(prompts=size.peak_prompts, num_minibatches=1, padding=1.0, mix=mix)
    else:
        work = StepWorkload(prompts=size.paper_prompts, num_minibatches=1, mix=size.mix)
    return update_s(Agent("measured", arch, hf, gpus=1, group=True), GPUS["h200"], work)


def _beside_estimate(record: dict, arch: Architecture, options: dict, size: Size) -> None:
    """The step estimate's update of one minibatch on one GPU (A3), beside the measured one."""
    estimate = _estimate_s(arch, options, size, peak=False)
    record["estimate_s"] = estimate
    record["estimate_over_measured"] = estimate / record["seconds"]


def cuda_rng(device: str) -> Any:
    """The CUDA generator's state on `device` (None off CUDA)."""
    import torch

    return torch.cuda.get_rng_state().clone() if device.startswith("cuda") else None


def _checkpoint(rank: Any, policy: Any, batch: TrainBatch, directory: Path) -> dict:
    """save; move the weights and moments with an update and the RNGs with draws; load;
    compare with the saved (bitwise). On CUDA the CUDA generator is compared too, and
    reported apart: `sharded_checkpoint` saves the CPU generator only."""
    import torch

    device = str(policy.device)
    saved_state, saved_cuda = snapshot(policy), cuda_rng(device)
    started = time.perf_counter()
    rank.save(str(directory))
    save_s = time.perf_counter() - started
    rank.update(batch)
    torch.rand(16)  # the CPU generator moves: a load that does not restore it is seen
    if saved_cuda is not None:
        torch.rand(16, device=device)
    changed = differences(saved_state, snapshot(policy))  # what the update and draws moved
    started = time.perf_counter()
    rank.load(str(directory))
    load_s = time.perf_counter() - started
    different = differences(saved_state, snapshot(policy))
    size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    record = {
        "save_s": save_s,
        "load_s": load_s,
        "checkpoint_gib": size / GIB,
        "tensors_changed_by_the_update": len(changed),
        "rng_moved_before_load": "/rng" in changed,
        "equal_after_load": not different,
        "different_after_load": different[:10],
    }
    if saved_cuda is not None:
        record["cuda_rng_equal_after_load"] = torch.equal(saved_cuda, cuda_rng(device))
    return record


def summary_lines(results: dict) -> list[str]:
    settings = results["settings"]
    lines = [
        f"{settings['model']}: {settings['parameters']:,} parameters, "
        f"{results['environment']['device']}, torch {results['environment']['torch']}, "
        f"transformers {results['environment']['transformers']}, driver {settings['driver']}",
        f"{'stage':<14}{'seconds':>9}{'peak GiB':>10}{'plan GiB':>10}{'plan/meas':>10}  notes",
    ]
    for name, r in results["stages"].items():
        notes = {
            k: v
            for k, v in r.items()
            if k not in ("seconds", "peak_gib", "plan_gib", "plan_over_measured", "path")
        }
        plan = f"{r['plan_gib']:>10.2f}{r['plan_over_measured']:>10.2f}" if "plan_gib" in r else ""
        shown = ", ".join(f"{k} {_fmt(v)}" for k, v in notes.items())
        lines.append(
            f"{name:<14}{r.get('seconds', math.nan):>9.2f}{r['peak_gib']:>10.2f}{plan:<20}  {shown}"
        )
    cuda = results["stages"].get("checkpoint", {}).get("cuda_rng_equal_after_load")
    if cuda is False:
        lines.append(
            "FINDING: load does not restore the CUDA RNG: sharded_checkpoint saves "
            "torch.get_rng_state() (the CPU generator) only, so CUDA draws after a resume "
            "do not continue the saved stream"
        )
    elif cuda is True:
        lines.append("CUDA RNG equal after load")
    for error in results.get("errors", []):
        lines.append(f"ERROR {error}")
    if results.get("skipped"):
        lines.append(f"SKIPPED (time budget): {', '.join(results['skipped'])}")
    return lines


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.perf.common import add_threads_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="toy size on CPU with gloo")
    parser.add_argument("--direct", action="store_true", help="without RankWorker (no Ray)")
    parser.add_argument("--out", type=Path, default=None, help="results.json, summary.txt")
    parser.add_argument("--scratch", type=Path, default=None, help="model and checkpoint dir")
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=420.0,
        help="skip a stage whose expected seconds would end past this many seconds (default "
        "420; see the module docstring for the bound)",
    )
    add_threads_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.device = "cpu"
    import torch

    torch.set_num_threads(args.threads)
    results = check(args)
    lines = summary_lines(results)
    print("\n".join(lines))
    if args.out is not None:
        (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    return 1 if results.get("errors") or results.get("skipped") else 0


if __name__ == "__main__":
    raise SystemExit(main())
