"""The worker group's bucketed weight sync (`algorithms.training.ray.weight_sync`): the
buckets' plan, and on 2 gloo ranks of a tiny FSDP2-sharded Llama that the buckets together
are the full weights while the sync holds one bucket and one gathered tensor at a time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from algorithms.training.ray.weight_sync import bucket_bytes, plan_buckets, sync_buckets
from graft_env.policies.engine.staging import slot_view, sync_group

LIMIT = 40 * 2**10  # 40 KiB: a decoder block of the model below is 82 KiB in float32


def tiny_llama() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def test_buckets_keep_blocks_whole_and_in_order():
    f32, bf16 = torch.float32, torch.bfloat16
    specs = [
        ("model.embed_tokens.weight", (100, 8), bf16),  # 1,600 bytes
        ("model.layers.0.q.weight", (8, 8), bf16),  # 128
        ("model.layers.0.k.weight", (8, 8), bf16),
        ("model.layers.1.q.weight", (8, 8), bf16),
        ("model.layers.1.k.weight", (8, 8), bf16),
        ("model.layers.2.q.weight", (30, 30), f32),  # 3,600: over the limit alone
        ("model.norm.weight", (8,), bf16),
    ]
    buckets = plan_buckets(specs, limit_bytes=2000)
    names = [[slot[0] for slot in bucket] for bucket in buckets]
    assert names == [
        ["model.embed_tokens.weight", "model.layers.0.q.weight", "model.layers.0.k.weight"],
        ["model.layers.1.q.weight", "model.layers.1.k.weight"],
        ["model.layers.2.q.weight"],
        ["model.norm.weight"],
    ]
    assert [bucket_bytes(b) for b in buckets] == [1600 + 128 + 128, 256, 3648, 64]
    assert buckets[0][1] == ("model.layers.0.q.weight", "bfloat16", [8, 8], 1600)
    for bucket in buckets:  # one block never spans two buckets
        groups = [sync_group(slot[0]) for slot in bucket]
        assert all(g not in {sync_group(s[0]) for b in buckets if b is not bucket for s in b}
                   for g in groups)  # fmt: skip


def _rank(rank: int, world: int, rendezvous: str, out: str, dtype_name: str) -> None:
    from algorithms.training.ray.fsdp import shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
    model = tiny_llama()
    shard(model, torch.device("cpu"))
    # change every shard after sharding (as an update would): expected = 2 x initial + i
    with torch.no_grad():
        for index, (_, param) in enumerate(model.named_parameters()):
            param.to_local().mul_(2).add_(index)
    received, buffers, sizes = {}, set(), []

    def staging(nbytes: int) -> torch.Tensor:
        sizes.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    def load(slots) -> None:  # the engine's side: read the bucket out of the buffer
        buffers.add(buffer_of[0].data_ptr())
        for slot in slots:
            assert slot[0] not in received
            received[slot[0]] = slot_view(buffer_of[0], slot).clone()

    buffer_of: list[torch.Tensor] = []

    def staging_kept(nbytes: int) -> torch.Tensor:
        buffer_of.append(staging(nbytes))
        return buffer_of[0]

    owner = rank == 0
    stats = sync_buckets(
        model, getattr(torch, dtype_name), LIMIT, owner=owner,
        staging=staging_kept if owner else None, load=load if owner else None,
    )  # fmt: skip
    if owner:
        torch.save({"received": received, "stats": vars(stats), "buffers": len(buffers),
                    "sizes": sizes}, out)  # fmt: skip
    dist.barrier()  # no rank leaves (and removes the rendezvous file) while one still works
    dist.destroy_process_group()


def _spawn(tmp_path: Path, dtype_name: str) -> dict:
    out = tmp_path / f"{dtype_name}.pt"
    rendezvous = f"file://{tmp_path / ('rendezvous-' + dtype_name)}"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(
        _rank, args=(2, rendezvous, str(out), dtype_name), nprocs=2, start_method="spawn"
    )
    return torch.load(out)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_buckets_from_two_ranks_are_the_full_weights_one_bucket_at_a_time(tmp_path, dtype_name):
    result = _spawn(tmp_path, dtype_name)
    model = tiny_llama()
    with torch.no_grad():
        expected = {
            name: (param * 2 + index).to(getattr(torch, dtype_name))
            for index, (name, param) in enumerate(model.named_parameters())
        }
    received = result["received"]
    assert list(received) == list(expected)  # every tensor once, tied lm_head not twice
    for name, tensor in expected.items():
        assert torch.equal(received[name], tensor), name
    stats = result["stats"]
    params = dict(model.named_parameters())
    full_bytes = sum(p.numel() * p.element_size() for p in params.values())
    largest = max(p.numel() * p.element_size() for p in params.values())
    block = sum(
        p.numel() * getattr(torch, dtype_name).itemsize
        for n, p in params.items()
        if n.startswith("model.layers.0.")
    )
    assert stats["buckets"] > 4 and result["buffers"] == 1  # one buffer, reused
    assert result["sizes"] == [stats["staging_bytes"]]
    # the buffer is one bucket: the limit, or one decoder block when a block is larger
    assert stats["staging_bytes"] <= max(LIMIT, block) + 64 * len(params)
    # gathered float32 tensors alive at once: exactly one (the largest, the embeddings)
    assert stats["peak_gathered_bytes"] == largest
    assert stats["staging_bytes"] + stats["peak_gathered_bytes"] < full_bytes / 2
    print(f"\n{dtype_name}: model {full_bytes} B, {stats}")
