"""`worker_group_device_check`'s rank: what one rank of an agent's worker group does, with or
without Ray, and the checkpoint round on it (save, move, load, compare bitwise).

`make_rank` gives `RankWorker` (rank 0 of 1) where Ray imports, else `DirectRank`, which calls
what `RankWorker`'s methods call; `set_up` is `RankWorker.setup` without its Ray placement.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from algorithms.training.memory_plan import GIB
from graft_env.types import TrainBatch


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


def cuda_rng(device: str) -> Any:
    """The CUDA generator's state on `device` (None off CUDA)."""
    import torch

    return torch.cuda.get_rng_state().clone() if device.startswith("cuda") else None


def checkpoint_round(rank: Any, policy: Any, batch: TrainBatch, directory: Path) -> dict:
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
