"""A worker group's checkpoint: `torch.distributed.checkpoint` shards plus an HF export.

`save(policy, directory)` (collective: every rank calls it) writes

- `sharded/`: the model and AdamW state through DCP (`get_model_state_dict`,
  `get_optimizer_state_dict`), each rank its own shard, and `sharded/rng_rank<r>.pt`,
  each rank's torch RNG state;
- the HF-format model (config, safetensors weights, tokenizer) and `graft_policy.json`,
  gathered to rank 0 (`full_state_dict=True, cpu_offload=True`), so `graft eval`, a
  local-backend policy or another tool reads the checkpoint as a model directory.

`load` restores the shards and the RNG exactly; the hyperparameters stay this policy's
options, as `HFPolicy.load` keeps them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from graft_env.policies import HFPolicy
from graft_env.policies.hf import POLICY_FILE
from graft_env.policies.loading import load_tokenizer

SHARDED_DIR = "sharded"


def _rng_file(directory: Path, rank: int) -> Path:
    return directory / SHARDED_DIR / f"rng_rank{rank}.pt"


def _state(policy: HFPolicy) -> dict:
    return {
        "model": get_model_state_dict(policy.model),
        "optimizer": get_optimizer_state_dict(policy.model, policy.optimizer),
    }


def save(policy: HFPolicy, directory: Path) -> None:
    """Write the shards, this rank's RNG and (rank 0) the HF export; every rank calls it."""
    rank = dist.get_rank()
    dcp.save(_state(policy), checkpoint_id=directory / SHARDED_DIR)
    torch.save(torch.get_rng_state(), _rng_file(directory, rank))
    full = get_model_state_dict(
        policy.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if rank == 0:
        policy.model.save_pretrained(directory, state_dict=full)
        policy.tokenizer.save_pretrained(directory)
        record = {
            "name": policy.name,
            "options": dataclasses.asdict(policy.options),
            "ranks": dist.get_world_size(),
        }
        (directory / POLICY_FILE).write_text(json.dumps(record, indent=2))
    dist.barrier()


def load(policy: HFPolicy, directory: Path) -> None:
    """Restore what `save` wrote into this rank's shards; every rank calls it."""
    rng_file = _rng_file(directory, dist.get_rank())
    if not (directory / SHARDED_DIR / ".metadata").is_file() or not rng_file.is_file():
        raise FileNotFoundError(
            f"{policy.name}: {directory} has no sharded checkpoint for rank "
            f"{dist.get_rank()} ({rng_file} or {SHARDED_DIR}/.metadata missing)"
        )
    if load_tokenizer(str(directory), policy.options).get_vocab() != policy.tokenizer.get_vocab():
        raise ValueError(f"{policy.name}: checkpoint {directory} has a different tokenizer")
    state = _state(policy)
    dcp.load(state, checkpoint_id=directory / SHARDED_DIR)
    set_model_state_dict(policy.model, state["model"])
    set_optimizer_state_dict(policy.model, policy.optimizer, state["optimizer"])
    options = policy.options
    for group in policy.optimizer.param_groups:
        group.update(lr=options.lr, betas=options.betas, weight_decay=options.weight_decay)
    torch.set_rng_state(torch.load(rng_file, weights_only=True))
