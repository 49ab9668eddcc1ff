"""The vLLM engine settings of a worker group (`algorithms.training.ray.engine_settings`):
derived from the run config, refused in one line naming the key, before any model loads
(pure arithmetic: no vLLM, no torch, no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms.training import memory_plan as mp
from algorithms.training.ray.engine_settings import engine_settings, rank_update_peak
from algorithms.training.run_config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[3]
SMOLLM3 = mp.paper_architecture("HuggingFaceTB/SmolLM3-3B-Base")
QWEN = mp.paper_architecture("Qwen/Qwen3-1.7B-Base")
H200 = 141e9
WORK = mp.Workload(prompt_tokens=1024, response_tokens=4096, minibatch_rows=256)
GPU = {
    "device": "cuda",
    "dtype": "float32",
    "autocast": "bfloat16",
    "gradient_checkpointing": True,
    "max_tokens_per_micro_batch": 32768,
    "logits_chunk_tokens": 4096,
    "rollout_backend": "vllm",
}


def settings(options, ranks=2, max_new_tokens=4096, arch=SMOLLM3, capacity=H200):
    return engine_settings(
        0, options, max_new_tokens, ranks, architecture=arch, work=WORK, capacity=capacity
    )


def test_max_model_len_is_the_prompt_limit_plus_the_response_limit():
    assert settings({}).max_model_len == 2048 + 4096
    assert settings({"vllm_max_prompt_tokens": 512}, max_new_tokens=64).max_model_len == 576
    assert settings({"vllm_max_model_len": 9000}).max_model_len == 9000
    with pytest.raises(ConfigError, match=r"^agents\.0\.options\.vllm_max_model_len: 64 leaves"):
        settings({"vllm_max_model_len": 64}, max_new_tokens=64)


def test_tensor_parallelism_is_the_groups_ranks():
    assert settings({}, ranks=2).tensor_parallel_size == 2
    assert settings({}, ranks=4).llm_kwargs()["tensor_parallel_size"] == 4
    assert settings({"vllm_tensor_parallel_size": 1}, ranks=2).tensor_parallel_size == 1
    with pytest.raises(
        ConfigError, match=r"^agents\.0\.options\.vllm_tensor_parallel_size: 4 is more than"
    ):
        settings({"vllm_tensor_parallel_size": 4}, ranks=2)


def test_sleep_mode_is_on_with_cuda_off_on_cpu_and_refused_on_cpu():
    assert settings(GPU).sleep_mode is True
    assert settings({**GPU, "vllm_sleep_mode": False}).sleep_mode is False
    assert settings({"device": "cpu"}).sleep_mode is False
    with pytest.raises(ConfigError) as error:
        settings({"device": "cpu", "vllm_sleep_mode": True})
    message = str(error.value)
    assert message.startswith("agents.0.options.vllm_sleep_mode: true needs device cuda")
    assert "\n" not in message


def test_cpu_engines_are_not_sized_from_gpu_memory():
    cpu = settings({"device": "cpu", "vllm_gpu_memory_utilization": 0.001})
    assert cpu.gpu_memory_utilization is None and cpu.kv_cache_bytes is None


def test_bad_engine_options_name_the_agents_key():
    with pytest.raises(ConfigError, match=r"^agents\.0\.options\.vllm_sync_bucket_mb: "):
        settings({"vllm_sync_bucket_mb": 0.0})


def test_a_too_small_utilisation_is_one_line_naming_the_key():
    """2 % of an H200 (2.6 GiB) cannot hold SmolLM3's bfloat16 half at tp 2 (2.9 GiB)."""
    with pytest.raises(ConfigError) as error:
        settings({**GPU, "vllm_gpu_memory_utilization": 0.02})
    message = str(error.value)
    assert message.startswith("agents.0.options.vllm_gpu_memory_utilization: 0.02 of ")
    assert "engine's weights (2.86 GiB per GPU at tp 2)" in message and "raise it" in message
    assert "\n" not in message
    # the same share holds Qwen3-1.7B's half (1.6 GiB) with room for KV
    assert settings({**GPU, "vllm_gpu_memory_utilization": 0.02}, arch=QWEN).kv_tokens > 6144


def test_the_kv_cache_is_the_share_left_after_the_engines_weights():
    fit = settings({**GPU, "vllm_gpu_memory_utilization": 0.3})
    weights = SMOLLM3.params * 2 / 2  # bfloat16, half per GPU at tp 2
    assert fit.engine_weight_bytes == pytest.approx(weights)
    assert fit.kv_cache_bytes == pytest.approx(0.3 * H200 - weights)
    # SmolLM3: 36 layers, 4 KV heads of 128 split over 2 GPUs, keys and values in bfloat16
    assert fit.kv_tokens == int((0.3 * H200 - weights) // (2 * 36 * 2 * 128 * 2))


def test_without_sleep_mode_the_engine_must_fit_beside_the_update_peak():
    """0.7 of an H200 fits beside the trainer's resident shards while the engine sleeps
    through the update, not beside the update's peak."""
    options = {**GPU, "vllm_gpu_memory_utilization": 0.7}
    resident, peak = rank_update_peak(mp.plan_policy(SMOLLM3, mp.policy_options(GPU), WORK), 2)
    assert settings(options).trainer_bytes == pytest.approx(resident)
    with pytest.raises(ConfigError) as error:
        settings({**options, "vllm_sleep_mode": False})
    message = str(error.value)
    assert message.startswith("agents.0.options.vllm_gpu_memory_utilization: 0.7 x ")
    assert f"update peak (no sleep mode) {peak / mp.GIB:.2f} GiB per rank" in message
    assert "lower it" in message and "\n" not in message
    # on an 80 GB GPU the engine must sleep even at 0.4 of it
    with pytest.raises(ConfigError, match=r"vllm_gpu_memory_utilization: 0\.4 x"):
        settings(
            {**GPU, "vllm_gpu_memory_utilization": 0.4, "vllm_sleep_mode": False}, capacity=80e9
        )
    assert settings({**GPU, "vllm_gpu_memory_utilization": 0.4}, capacity=80e9).kv_tokens > 6144


def test_a_ranks_share_of_the_trainer_divides_only_the_sharded_state():
    plan = mp.plan_policy(SMOLLM3, mp.policy_options(GPU), WORK)
    one_resident, one_peak = rank_update_peak(plan, 1)
    two_resident, two_peak = rank_update_peak(plan, 2)
    assert one_resident == pytest.approx(plan.persistent_bytes)
    assert two_resident == pytest.approx(plan.persistent_bytes / 2)  # weights and moments
    grads = next(t.bytes for t in plan.phases["update"] if t.name.startswith("grads"))
    # the peak loses half of the state and half of the gradients; activations stay whole
    assert one_peak - two_peak == pytest.approx(plan.persistent_bytes / 2 + grads / 2)
    assert two_peak > two_resident + plan.transient("update") - grads


def test_the_paper_worker_group_configs_derive_their_engines():
    """Both paper worker-group files as written: TP 2, sleep mode, the prompt + response
    limit, and KV for many sequences on an H200."""
    for name in ("paper_smollm3_qwen3.yaml", "paper_smollm3_qwen3_2node.yaml"):
        config = load_config(REPO / "configs" / name)
        work = mp.run_workload(config, 1024)
        for index, agent in enumerate(config.agents):
            options = agent.options
            assert options["rollout_backend"] == "vllm"
            arch = mp.architecture_of(agent.model, f"agents.{index}.model")
            engine = engine_settings(
                index, options, config.sampling.max_new_tokens, 2,
                architecture=arch, work=work, capacity=H200,
            )  # fmt: skip
            assert engine.tensor_parallel_size == 2 and engine.sleep_mode
            assert engine.max_model_len == 2048 + 4096
            assert engine.kv_tokens > 64 * engine.max_model_len


def test_the_group_derives_its_engines_before_any_actor_starts(tmp_path):
    """`make_group_policies`' first check, on this CPU machine: a vLLM agent gets its
    settings, a transformers one none, and `vllm_sleep_mode: true` on CPU is refused."""
    pytest.importorskip("ray")
    from run_configs import small_config

    from algorithms.training.ray.group import check_group_agents

    options = {"rollout_backend": "vllm", "vllm_max_prompt_tokens": 100}
    config = small_config(tmp_path, "grpo", agents=("tiny-a",), agent_options=options)
    [(name, engine)] = check_group_agents(config, 2).items()
    assert name == "tiny-a" and engine.max_model_len == 100 + config.sampling.max_new_tokens
    assert engine.tensor_parallel_size == 2 and not engine.sleep_mode
    assert check_group_agents(small_config(tmp_path, "grpo", agents=("tiny-a",)), 2) == {}
    sleepy = small_config(
        tmp_path, "grpo", agents=("tiny-a",), agent_options={**options, "vllm_sleep_mode": True}
    )
    with pytest.raises(ConfigError, match=r"^agents\.0\.options\.vllm_sleep_mode: true needs"):
        check_group_agents(sleepy, 2)


def test_the_engine_sees_the_groups_gpus_rank_0_first_on_one_node():
    pytest.importorskip("ray")
    from algorithms.training.ray.group import engine_spec

    engine = settings(GPU)
    placed = [{"node_id": "a", "gpu_ids": ["2"]}, {"node_id": "a", "gpu_ids": ["3"]}]
    spec = engine_spec(engine, {"vllm_sync_bucket_mb": 64.0}, placed)
    assert spec["visible_devices"] == "2,3" and spec["sync_bucket_mb"] == 64.0
    assert spec["tensor_parallel_size"] == 2 and spec["enable_sleep_mode"] is True
    cpu = engine_spec(settings({}), {}, [{"node_id": "a", "gpu_ids": []}] * 2)
    assert cpu["visible_devices"] is None and cpu["sync_bucket_mb"] == 512.0
    apart = [{"node_id": "a", "gpu_ids": ["0"]}, {"node_id": "b", "gpu_ids": ["0"]}]
    with pytest.raises(ValueError, match="need their ranks on one node, Ray placed them on 2"):
        engine_spec(engine, {}, apart)
    one = engine_spec(settings({"vllm_tensor_parallel_size": 1}), {}, apart)
    assert one["visible_devices"] == "0"  # tp 1: rank 0's GPU alone
