"""The vLLM rollout backend: same `generate` contract, log-probs equal to the transformers
scorer's, and the engine following the trainer's weights after every update and load.

Tests marked `vllm` need vLLM and run in their own virtualenv (`.ci/vllm`):
    python -m pytest -m vllm tests/graft_env/policies/test_vllm_policy.py -p no:cacheprovider -s
(`-s` shows the measured log-prob differences). An engine takes about a minute to
start on 2 CPU cores, so each model's policy is built once for the module. The
unmarked tests check option handling and the missing-vLLM error in any environment.
"""

from __future__ import annotations

import copy
import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from run_configs import small_config

import algorithms
from algorithms.training.loop import Trainer, make_policies
from graft_env.policies import Generation, SamplingParams, load_policy
from graft_env.policies.engine.llm import policy_gpu
from graft_env.policies.engine.staging import WeightStager, open_buffer, slot_view, sync_group
from graft_env.policies.forward import response_logprobs
from graft_env.policies.vllm_policy import VLLMPolicy
from graft_env.schema import OptionError
from graft_env.types import TrainBatch, TrainSequence

TOLERANCE = 1e-4  # fp32: vLLM's paged-attention forward vs the transformers training forward
PROBLEMS = ["Compute 12 + 35.", "Compute 7 * 8.", "Compute 12 + 35."]  # one prompt twice


def _run_config(run_dir):
    """One GRPO step on tiny-a with vLLM rollouts, as a user's run config says it."""
    options = {"rollout_backend": "vllm", "lr": 1e-3}
    return small_config(run_dir, "grpo", agents=("tiny-a",), agent_options=options, steps=1)


@pytest.fixture(scope="module")
def tiny_a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMPolicy]:
    """tiny-a (GPT-NeoX; vLLM serves it through its Transformers backend), built from a
    run config's agent options, as `graft train` builds it."""
    config = _run_config(tmp_path_factory.mktemp("run") / "grpo")
    policy = make_policies(config)["tiny-a"]
    yield policy
    policy.close()


@pytest.fixture(scope="module")
def hot_tiny_b() -> Iterator[VLLMPolicy]:
    """tiny-b (Llama; vLLM's own implementation) with log-prob temperature 2."""
    policy = load_policy("tiny-b", rollout_backend="vllm", temperature=2.0)
    yield policy
    policy.close()


def _flatten(prompts: list[str], groups: list[list[Generation]]):
    return [(prompt, gen) for prompt, group in zip(prompts, groups, strict=True) for gen in group]


def _differences(
    policy: VLLMPolicy, prompts: list[str], groups: list[list[Generation]], label: str = ""
) -> np.ndarray:
    """|engine log-prob - transformers scorer log-prob| over every sampled token
    (printed under `label`, for the record)."""
    pairs = _flatten(prompts, groups)
    scored = policy.score_tokens([p for p, _ in pairs], [g.token_ids for _, g in pairs])
    diff = np.concatenate(
        [np.abs(gen.logprobs - s) for (_, gen), s in zip(pairs, scored, strict=True)]
    )
    if label:
        print(f"\n{label}: {diff.size} tokens, max |diff| {diff.max():.2e}, mean {diff.mean():.2e}")
    return diff


def _check_agreement(policy: VLLMPolicy, sampling: SamplingParams, label: str) -> None:
    prompts = [policy.format_prompt(p) for p in PROBLEMS]
    groups = policy.generate(prompts, 4, sampling)
    assert _differences(policy, prompts, groups, label).max() < TOLERANCE


@pytest.mark.vllm
def test_generate_returns_the_contract_and_is_seeded(tiny_a):
    prompts = [tiny_a.format_prompt(p) for p in PROBLEMS]
    hot = SamplingParams(temperature=2.0, max_new_tokens=24, seed=5)
    first = tiny_a.generate(prompts, 4, hot)
    assert [len(group) for group in first] == [4, 4, 4]
    for _, gen in _flatten(prompts, first):
        assert 1 <= len(gen.token_ids) <= 24
        assert gen.logprobs.dtype == np.float32 and np.all(gen.logprobs <= 0)
        assert gen.text == tiny_a.decode_response(gen.token_ids)
        if gen.finish_reason == "stop":
            assert gen.token_ids[-1] == tiny_a.eos_id
            assert tiny_a.eos_id not in gen.token_ids[:-1]
        else:
            assert len(gen.token_ids) == 24 and tiny_a.eos_id not in gen.token_ids

    def ids(groups):
        return [[g.token_ids for g in group] for group in groups]

    assert ids(tiny_a.generate(prompts, 4, hot)) == ids(first)
    other_seed = SamplingParams(temperature=2.0, max_new_tokens=24, seed=6)
    assert ids(tiny_a.generate(prompts, 4, other_seed)) != ids(first)
    assert ids(first)[0] != ids(first)[2]  # the same prompt twice is sampled independently


@pytest.mark.vllm
def test_greedy_decoding_matches_transformers(tiny_a):
    prompts = [tiny_a.format_prompt(p) for p in PROBLEMS[:2]]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    from_vllm = tiny_a.generate(prompts, 1, greedy)
    from_transformers = super(VLLMPolicy, tiny_a).generate(prompts, 1, greedy)
    assert [g[0].token_ids for g in from_vllm] == [g[0].token_ids for g in from_transformers]


@pytest.mark.vllm
def test_logprobs_agree_with_the_transformers_scorer(tiny_a):
    _check_agreement(tiny_a, SamplingParams(max_new_tokens=48, seed=3), "tiny-a, T=1")


@pytest.mark.vllm
def test_logprobs_use_the_policy_temperature_not_the_sampling_one(hot_tiny_b):
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=48, seed=3)
    _check_agreement(hot_tiny_b, sampling, "tiny-b, policy T=2, sampling T=0.7 top-p 0.9")


@pytest.mark.vllm
def test_a_sync_sends_only_the_changed_block_and_the_engine_follows(hot_tiny_b):
    """vLLM reloads (and on CPU repacks) only the layers sent; the others keep theirs."""
    hot_tiny_b.sync_weights()  # the first sync sends everything
    with torch.no_grad():
        for parameter in hot_tiny_b.model.model.layers[1].parameters():
            parameter.mul_(1.1)
    prompts = [hot_tiny_b.format_prompt(p) for p in PROBLEMS]
    sampling = SamplingParams(max_new_tokens=48, seed=3)
    stale = hot_tiny_b.generate(prompts, 4, sampling)
    assert _differences(hot_tiny_b, prompts, stale).max() > 10 * TOLERANCE  # the block matters
    state = hot_tiny_b.model.state_dict()
    block = [name for name in state if name.startswith("model.layers.1.")]
    assert hot_tiny_b.sync_weights() == (len(block), len(state) - len(block))
    _check_agreement(hot_tiny_b, sampling, "tiny-b after a one-block sync")


def _train_batch(policy: VLLMPolicy, prompts: list[str], groups) -> TrainBatch:
    sequences = [
        TrainSequence(p, g.token_ids, g.logprobs, advantage=1.0 if i % 2 else -1.0)
        for p, group in enumerate(groups)
        for i, g in enumerate(group)
    ]
    return TrainBatch(policy.name, prompts, sequences, [list(range(len(sequences)))])


@pytest.mark.vllm
def test_update_loads_the_new_weights_into_the_engine(tiny_a):
    prompts = [tiny_a.format_prompt(p) for p in PROBLEMS[:2]]
    sampling = SamplingParams(max_new_tokens=32, seed=8)
    before = copy.deepcopy(tiny_a.model)
    batch = _train_batch(tiny_a, prompts, tiny_a.generate(prompts, 4, sampling))
    metrics = tiny_a.update(batch, algorithms.make("grpo").loss)
    assert metrics["time/weight_sync"] > 0
    assert tiny_a.sync_weights() == (0, len(tiny_a.model.state_dict()))  # nothing changed since
    groups = tiny_a.generate(prompts, 4, sampling)
    assert _differences(tiny_a, prompts, groups).max() < TOLERANCE  # follows the new weights
    pairs = _flatten(prompts, groups)
    with torch.no_grad():
        old = response_logprobs(
            before,
            [tiny_a.encode_prompt(p) for p, _ in pairs],
            [g.token_ids for _, g in pairs],
            pad_id=tiny_a.pad_id,
            temperature=tiny_a.temperature,
        ).logprobs.numpy()
    moved = max(
        np.abs(g.logprobs - old[row, : len(g.logprobs)]).max() for row, (_, g) in enumerate(pairs)
    )
    assert moved > 10 * TOLERANCE  # ... and no longer the old ones


@pytest.mark.vllm
def test_load_puts_the_checkpoint_weights_into_the_engine(tiny_a, tmp_path):
    prompts = [tiny_a.format_prompt(p) for p in PROBLEMS[:2]]
    sampling = SamplingParams(max_new_tokens=32, seed=9)
    tiny_a.save(tmp_path / "checkpoint")
    saved = tiny_a.generate(prompts, 4, sampling)
    tiny_a.update(_train_batch(tiny_a, prompts, saved), algorithms.make("grpo").loss)
    assert _differences(tiny_a, prompts, saved).max() > 10 * TOLERANCE  # weights moved on
    tiny_a.load(tmp_path / "checkpoint")
    restored = tiny_a.generate(prompts, 4, sampling)
    assert [[g.token_ids for g in group] for group in restored] == [
        [g.token_ids for g in group] for group in saved
    ]
    assert _differences(tiny_a, prompts, restored).max() < TOLERANCE


@pytest.mark.vllm
def test_one_grpo_step_of_the_loop_with_vllm_rollouts(tiny_a, tmp_path):
    config = _run_config(tmp_path / "grpo")
    before = {k: v.clone() for k, v in tiny_a.model.state_dict().items()}
    [row] = Trainer(config, policies={"tiny-a": tiny_a}).train()
    assert row["agent"] == "tiny-a" and np.isfinite(row["loss"]) and row["tokens"] > 0
    assert row["time/weight_sync"] > 0
    after = tiny_a.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    _check_agreement(tiny_a, SamplingParams(max_new_tokens=32, seed=4), "tiny-a after GRPO step")


@pytest.mark.vllm
def test_real_smollm2_logprobs_agree_and_follow_an_update():
    policy = load_policy("smollm2-135m", rollout_backend="vllm", lr=1e-4)
    try:
        prompts = [policy.format_prompt(p) for p in PROBLEMS[:2]]
        sampling = SamplingParams(max_new_tokens=24, seed=1)
        groups = policy.generate(prompts, 2, sampling)
        assert _differences(policy, prompts, groups, "smollm2-135m").max() < TOLERANCE
        policy.update(_train_batch(policy, prompts, groups), algorithms.make("grpo").loss)
        groups = policy.generate(prompts, 2, sampling)
        after = _differences(policy, prompts, groups, "smollm2-135m after an update")
        assert after.max() < TOLERANCE
    finally:
        policy.close()


@pytest.mark.vllm
def test_generation_is_checked_against_the_engines_max_model_len():
    """The engine's limit, not the HF model's 512 positions, bounds a rollout."""
    policy = load_policy("tiny-a", rollout_backend="vllm", vllm_max_model_len=64)
    try:
        assert policy.max_model_len == 64 and policy.max_positions == 512
        prompt = policy.format_prompt(PROBLEMS[0])
        room = 64 - len(policy.encode_prompt(prompt))
        fits = policy.generate([prompt], 1, SamplingParams(max_new_tokens=room, seed=0))
        assert len(fits[0][0].token_ids) <= room
        with pytest.raises(
            ValueError,
            match=r"prompt 0 \+ max_new_tokens needs 65 positions, the vLLM engine serves 64",
        ):
            policy.generate([prompt], 1, SamplingParams(max_new_tokens=room + 1, seed=0))
    finally:
        policy.close()


def test_vllm_options_are_checked_before_any_model_loads(tmp_path):
    with pytest.raises(ValueError, match="unknown rollout_backend 'vlm'"):
        load_policy(tmp_path / "nowhere", rollout_backend="vlm")
    with pytest.raises(TypeError, match=r"need rollout_backend='vllm'"):
        load_policy(tmp_path / "nowhere", vllm_kv_cache_gib=2)
    with pytest.raises(TypeError, match=r"unknown vLLM engine option\(s\) \['vllm_kv_cache'\]"):
        load_policy(tmp_path / "nowhere", rollout_backend="vllm", vllm_kv_cache=2)
    with pytest.raises(TypeError, match=r"unknown policy option\(s\) \['kv_cache_gib'\]"):
        load_policy(tmp_path / "nowhere", rollout_backend="vllm", kv_cache_gib=2)
    with pytest.raises(ValueError, match=r"^VLLMEngineOptions\.kv_cache_gib: 0 must be > 0$"):
        load_policy(tmp_path / "nowhere", rollout_backend="vllm", vllm_kv_cache_gib=0)


def test_missing_vllm_names_the_extra_to_install(model_dirs, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # what an environment without vLLM sees
    with pytest.raises(ImportError, match="install the vllm extra"):
        load_policy(model_dirs["llama"], rollout_backend="vllm")


def _engine_view(stager: WeightStager) -> dict[str, torch.Tensor]:
    """What the engine reads: the staging buffer opened from its handle, sliced by slot."""
    buffer = open_buffer(stager.handles, torch.device("cpu"))
    return {name: slot_view(buffer, slot).clone() for name, slot in stager.slots.items()}


def test_staging_casts_floats_to_the_engine_dtype_and_leaves_integers():
    """Under mixed precision the float32 master weights travel as the engine's bfloat16."""
    state = {"w": torch.randn(3, 4), "ids": torch.arange(5)}
    stager = WeightStager(state, torch.bfloat16)
    try:
        stager.stage(state)
        seen = _engine_view(stager)
        assert seen["w"].dtype == torch.bfloat16 and seen["ids"].dtype == torch.int64
        assert torch.equal(seen["w"], state["w"].to(torch.bfloat16))
        assert torch.equal(seen["ids"], state["ids"])
    finally:
        stager.unlink()


def test_staging_sends_only_changed_blocks_whole_and_tied_tensors_once():
    layer = torch.nn.Linear(4, 4)
    model = torch.nn.ModuleDict(
        {
            "embed": torch.nn.Embedding(6, 4),
            "layers": torch.nn.ModuleList([layer, copy.deepcopy(layer)]),
        }
    )
    model["head"] = torch.nn.Linear(4, 6, bias=False)
    model["head"].weight = model["embed"].weight  # tied, as SmolLM2's lm_head
    state = model.state_dict()
    stager = WeightStager(state)
    try:
        sent, skipped = stager.stage(state)
        assert [slot[0] for slot in sent] == [
            "embed.weight",
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "layers.1.bias",
        ]
        assert skipped == 1  # head.weight is embed.weight
        assert stager.stage(model.state_dict()) == ([], 6)  # nothing changed
        with torch.no_grad():
            model["layers"][1].bias.add_(1.0)  # in place, as an optimizer step writes
        sent, skipped = stager.stage(model.state_dict())
        assert [slot[0] for slot in sent] == ["layers.1.weight", "layers.1.bias"]  # the block
        assert skipped == 4
        assert torch.equal(_engine_view(stager)["layers.1.bias"], model["layers"][1].bias)
        model.load_state_dict(state | {"embed.weight": torch.zeros(6, 4)})  # copies in place
        assert "embed.weight" in [slot[0] for slot in stager.stage(model.state_dict())[0]]
        assert not stager.fits({"embed.weight": torch.zeros(7, 4)})
    finally:
        stager.unlink()


def test_the_staging_file_goes_at_unlink_or_collection_and_opened_buffers_keep_it():
    state = {"w": torch.arange(4.0)}
    stager = WeightStager(state)
    stager.stage(state)
    opened = open_buffer(stager.handles, torch.device("cpu"))
    stager.unlink()
    assert not Path(stager.handles["cpu"][1]).exists()
    assert torch.equal(slot_view(opened, stager.slots["w"]), state["w"])
    path = Path(WeightStager(state).handles["cpu"][1])
    gc.collect()
    assert not path.exists()


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("model.layers.3.self_attn.q_proj.weight", "model.layers.3"),
        ("gpt_neox.layers.12.mlp.dense_h_to_4h.bias", "gpt_neox.layers.12"),
        ("model.norm.weight", "model.norm"),
        ("lm_head.weight", "lm_head"),
        ("scale", "scale"),
    ],
)
def test_a_sync_group_is_the_block_or_else_the_module(name, group):
    assert sync_group(name) == group


@pytest.mark.parametrize(
    ("device", "visible", "gpu"),
    [
        ("cpu", None, None),
        ("cpu", "0,1", None),
        ("cuda", None, "0"),
        ("cuda:2", None, "2"),
        ("cuda:1", "4,GPU-5f2e", "GPU-5f2e"),  # the entry, in whatever form it is written
        ("cuda", "3,1", "3"),
        ("cuda:1", " 6 , 7 ", "7"),
    ],
)
def test_a_single_process_engine_sees_the_policy_gpu_only(device, visible, gpu):
    """A policy on cuda:N starts its engine on that physical GPU, not the process's first
    (where its staging buffer's UUID would not be found at the first sync)."""
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert policy_gpu(device, 1, environ) == gpu


def test_a_single_process_engine_refuses_a_gpu_it_cannot_see_and_tp_on_cuda():
    with pytest.raises(OptionError, match=r"^HFPolicyOptions\.device: cuda:2 is not among the 2"):
        policy_gpu("cuda:2", 1, {"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(OptionError, match=r"^VLLMEngineOptions\.tensor_parallel_size: 2 needs"):
        policy_gpu("cuda:0", 2, {})
    assert policy_gpu("cpu", 2, {}) is None  # CPU workers share the one shared-memory file
