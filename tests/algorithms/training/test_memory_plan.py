"""The memory plan (`algorithms.training.memory_plan`): its arithmetic's properties, its
one-line refusals, and `graft plan` on the shipped paper configs (no model loads)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from algorithms.training import memory_check
from algorithms.training import memory_plan as mp
from algorithms.training.run_config import load_config
from benchmarks import cli
from graft_env.policies.options import HFPolicyOptions

REPO = Path(__file__).resolve().parents[3]
QWEN = mp.paper_architecture("Qwen/Qwen3-1.7B-Base")
PAPER = sorted(path.name for path in (REPO / "configs").glob("paper_*.yaml"))


def plan(options: HFPolicyOptions, prompt: int = 512, response: int = 4096, rows: int = 256):
    return mp.plan_policy(QWEN, options, mp.Workload(prompt, response, rows))


def test_paper_shapes_count_their_published_parameters():
    assert QWEN.params == pytest.approx(1.72e9, rel=0.01)  # Qwen3-1.7B, tied embeddings
    assert mp.paper_architecture("HuggingFaceTB/SmolLM3-3B-Base").params == pytest.approx(
        3.08e9, rel=0.01
    )


def test_the_parameter_count_is_the_built_models(tmp_path):
    """Architecture.params equals a transformers model built from the same config."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen3Config(
        vocab_size=1000, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())
    assert mp.Architecture.from_config(config.to_dict()).params == built


@given(
    st.integers(1, 8192), st.integers(1, 8192), st.integers(1, 2**16), st.booleans(), st.booleans()
)
def test_more_tokens_never_need_less_memory(response, extra, budget, checkpointing, autocast):
    options = HFPolicyOptions(
        gradient_checkpointing=checkpointing,
        autocast="bfloat16" if autocast else None,
        max_tokens_per_micro_batch=budget,
    )
    for phase in mp.PHASES:
        shorter = plan(options, response=response).transient(phase)
        assert plan(options, response=response + extra).transient(phase) >= shorter
        larger = dataclasses.replace(options, max_tokens_per_micro_batch=budget + extra)
        assert plan(larger, response=response).transient(phase) >= shorter


@given(st.integers(1, 16384), st.integers(1, 8192), st.integers(1, 64))
def test_chunking_bounds_the_logits_whatever_the_response_length(chunk, response, rows):
    options = HFPolicyOptions(logits_chunk_tokens=chunk, micro_batch_size=rows)
    bound = chunk * QWEN.vocab_size * (4 + 4 * mp.LOGITS_COPIES["update"])
    terms = plan(options, response=response).phases["update"]
    (logits,) = [term for term in terms if term.name == "log-prob logits"]
    assert logits.bytes <= bound
    assert logits.bytes == pytest.approx(
        min(chunk, rows * response) * QWEN.vocab_size * (4 + 4 * mp.LOGITS_COPIES["update"])
    )


def test_checkpointing_saves_activations():
    on, off = HFPolicyOptions(gradient_checkpointing=True), HFPolicyOptions()
    assert plan(on).transient("update") < plan(off).transient("update")
    assert plan(on).activations_without_checkpointing == plan(off).activations_without_checkpointing


def test_an_oversized_config_is_refused_in_one_line_naming_the_knob(capsys):
    config = REPO / "configs" / "paper_smollm3_qwen3_local.yaml"
    argv = ["plan", str(config), "--gpu-memory", "80", "--gpus", "4"]
    budget = "agents.1.options.max_tokens_per_micro_batch=524288"
    assert cli.main([*argv, "--set", budget]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error
    assert error.startswith("graft plan: error: agents.1.options.max_tokens_per_micro_batch: ")
    assert "qwen3-1.7b needs" in error
    chunk = "agents.0.options.logits_chunk_tokens=1000000"
    assert cli.main([*argv, "--set", chunk]) == 2
    assert "agents.0.options.logits_chunk_tokens: " in capsys.readouterr().err


def test_a_budget_below_one_row_is_refused_naming_it(capsys):
    config = REPO / "configs" / "paper_smollm3_qwen3_local.yaml"
    small = "agents.0.options.max_tokens_per_micro_batch=4500"  # > max_new_tokens, < one row
    assert cli.main(["plan", str(config), "--gpu-memory", "141", "--set", small]) == 2
    error = capsys.readouterr().err
    assert "agents.0.options.max_tokens_per_micro_batch: 4500 is below one row" in error


def test_without_a_gpu_plan_asks_for_its_memory(capsys, monkeypatch):
    monkeypatch.setattr(mp, "found_gpus", lambda: (0.0, 0))
    config = REPO / "configs" / "paper_smollm3_qwen3_local.yaml"
    assert cli.main(["plan", str(config)]) == 2
    assert "--gpu-memory: no GPU found" in capsys.readouterr().err
    assert memory_check.check_before_launch(load_config(config)) == []  # graft train on CPU


@pytest.mark.parametrize("name", PAPER)
@pytest.mark.parametrize("gib", [141, 80])
def test_the_paper_configs_fit_their_gpus(name, gib, capsys):
    assert cli.main(["plan", str(REPO / "configs" / name), "--gpu-memory", str(gib)]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" not in out and out.count(": fits") >= 2


def test_ray_actors_without_gpus_are_not_planned_on_a_gpu_machine():
    """`ray.num_gpus_per_agent` defaults to 0 (the ray: section's own default): CPU actors,
    nothing to plan, so a GPU machine does not refuse a CPU Ray config."""
    config = load_config(REPO / "configs" / "tiny_pair_graft.yaml", ["backend=ray"])
    work = mp.run_workload(config, 128)
    assert mp.plan_run(config, work, capacity=80 * 2**30, gpus=1) == []


def _gpu_tables(out: str) -> dict[str, dict[str, dict[str, float]]]:
    """Each worker-group agent's per-GPU lifecycle table from `graft plan`: row -> phase -> GiB."""
    tables, lines = {}, out.splitlines()
    for at, line in enumerate(lines):
        if ": each of its " not in line:
            continue
        phases = lines[at + 1].split()[1:]
        phases = [p for p in " ".join(phases).replace("wake weights", "wake_weights")
                  .replace("wake kv", "wake_kv").split()]  # fmt: skip
        rows = {}
        for body in lines[at + 2 :]:
            if not body.startswith("    ") or body.startswith("    ("):
                break
            name, cells = body[4:38].strip(), body[38:].split()
            rows[name] = {
                p: 0.0 if c == "-" else float(c) for p, c in zip(phases, cells, strict=True)
            }
        tables[line.split(":")[0].strip()] = rows
    return tables


@pytest.mark.parametrize("name", ["paper_smollm3_qwen3.yaml", "paper_smollm3_qwen3_2node.yaml"])
@pytest.mark.parametrize("gib", [141, 80, 70])
def test_plan_estimates_the_step_of_the_paper_layout(name, gib, capsys):
    """`graft plan` on the worker-group configs (1 node, 2 nodes): the per-phase step estimate
    with both rollout backends, its target line, and each agent's GPU through the engine
    lifecycle, which fits at 141, 80 and 70 GiB."""
    config = REPO / "configs" / name
    assert cli.main(["plan", str(config), "--gpu-memory", str(gib), "--gpus", "4"]) == 0
    out = capsys.readouterr().out
    kind = "h200" if gib >= 100 else "h100-80gb"
    assert f"step estimate on {kind}" in out
    for row in (
        "rollout, eager transformers",
        "rollout, vLLM (TP=GPUs)",
        "  update ",
        "  scoring ",
    ):
        assert row in out
    assert out.count("the target (<= 1.5 x 4 min = 6 min)") == 2
    tables = _gpu_tables(out)
    assert list(tables) == ["smollm3-3b", "qwen3-1.7b"]
    for rows in tables.values():
        phases = list(rows["total"])
        assert phases == ["load", "generate", "score", "update", "wake_weights", "sync", "wake_kv"]
        assert all(0 < v < gib - 2 for v in rows["total"].values())
        assert rows["vLLM KV cache"]["score"] == rows["vLLM KV cache"]["update"] == 0
    assert out.count("GiB usable per GPU, in generate: fits") == 2


def test_plan_shards_the_state_only_for_worker_groups(capsys):
    """One actor per agent (no ray.ranks_per_agent): each agent computes on 1 GPU, unsharded,
    and the step takes the slower agent; the local backend's agents take turns (longer), each
    on a GPU of its own (`device: cuda` would put both, and both engines, on cuda:0)."""
    config = str(REPO / "configs" / "paper_smollm3_qwen3.yaml")
    argv = ["plan", config, "--gpu-memory", "141", "--gpus", "4"]
    totals = {}
    for backend in ("ray", "local"):
        extra = ["--set", "ray.ranks_per_agent=null", "--set", f"backend={backend}"]
        extra += ["--set", "agents.1.options.device=cuda:1"] if backend == "local" else []
        assert cli.main([*argv, *extra]) == 0
        out = capsys.readouterr().out
        assert "smollm3-3b, 1 GPU(s)" in out and ", 2 GPU(s)" not in out
        (total,) = [line for line in out.splitlines() if line.startswith("  total (")]
        totals[backend] = float(total.split(": ")[1].split(" s")[0])
    assert totals["local"] > totals["ray"]


@pytest.mark.parametrize(
    ("name", "group"),
    [("paper_smollm3_qwen3.yaml", True), ("paper_smollm3_qwen3_2node.yaml", True),
     ("paper_smollm3_qwen3_local.yaml", False), ("paper_smollm3_qwen3_ray.yaml", False)],
)  # fmt: skip
def test_plan_labels_the_unsharded_tables_of_a_worker_group(name, group, capsys):
    """A worker group's per-device tables size one unsharded process per agent, not the
    run's layout: a heading and each verdict say so, before the per-GPU FSDP2 table; one
    process per agent (local, or one Ray actor) is that layout, and its tables say nothing."""
    config = str(REPO / "configs" / name)
    assert cli.main(["plan", config, "--gpu-memory", "141", "--gpus", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    heading = [i for i, line in enumerate(lines) if "unsharded: not this run's layout" in line]
    verdicts = [line for line in lines if line.startswith("  peak ") and "per GPU" not in line]
    compact = [i for i, line in enumerate(lines) if line.startswith("  GiB per GPU (FSDP2")]
    sharded = [i for i, line in enumerate(lines) if line.startswith("per GPU of each worker")]
    assert len(verdicts) == 2
    if not group:
        assert heading == [] and sharded == [] and len(compact) == 1
        assert all(line.endswith("GiB: fits") for line in verdicts)
        return
    assert compact == [] and len(sharded) == 1
    (at,) = heading
    assert "its 2 FSDP2 ranks per agent" in lines[at] and at < sharded[0]
    assert lines[at + 1].startswith("actor 0: cuda")  # right above the unsharded tables
    suffix = "fits unsharded on one GPU; this run shards each agent over 2 GPUs"
    assert all(suffix in line for line in verdicts)


def test_plan_sizes_the_vllm_engine_from_its_gpu_memory_share(capsys):
    """The engine preallocates `vllm_gpu_memory_utilization` x the GPU whatever the rows (A5):
    0.3 instead of the shipped 0.5 lowers both the memory while generating and the KV cache by
    0.2 x 141 GiB per GPU; a fixed `vllm_kv_cache_gib` is the KV cache itself."""
    config = str(REPO / "configs" / "paper_smollm3_qwen3.yaml")
    argv = ["plan", config, "--gpu-memory", "141", "--gpus", "4"]
    tables = {}
    for name, value in (("gpu_memory_utilization", 0.5), ("gpu_memory_utilization", 0.3),
                        ("kv_cache_gib", 12.0)):  # fmt: skip
        sets = [f"agents.{i}.options.vllm_{name}={value}" for i in (0, 1)]
        assert cli.main([*argv, *(arg for s in sets for arg in ("--set", s))]) == 0
        tables[value] = _gpu_tables(capsys.readouterr().out)
    for agent in ("smollm3-3b", "qwen3-1.7b"):
        five, three, fixed = (tables[v][agent] for v in (0.5, 0.3, 12.0))
        gen = five["total"]["generate"] - three["total"]["generate"]
        assert gen == pytest.approx(0.2 * 141, abs=0.15)
        kv = five["vLLM KV cache"]["generate"] - three["vLLM KV cache"]["generate"]
        assert kv == pytest.approx(0.2 * 141, abs=0.15)
        assert fixed["vLLM KV cache"]["generate"] == 12.0
        assert fixed["total"]["generate"] < three["total"]["generate"]


def test_a_worker_group_is_refused_on_its_sharded_per_gpu_memory(capsys, monkeypatch):
    """`ray.ranks_per_agent` 2: `graft plan` and `graft train`'s check judge one GPU of each
    agent through the engine lifecycle, not the unsharded tables: 70 GiB GPUs fit (75.6 GiB
    unsharded); 40 GiB, or an engine kept awake (no sleep mode) beside the update, is
    refused in one line naming the per-GPU figure, the agent, the phase and the knob."""
    config = REPO / "configs" / "paper_smollm3_qwen3.yaml"
    argv = ["plan", str(config), "--gpus", "4", "--gpu-memory"]
    assert cli.main([*argv, "70"]) == 0
    assert "DOES NOT FIT unsharded" in capsys.readouterr().out  # the tables still say so
    assert cli.main([*argv, "40"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error
    assert error.startswith("graft plan: error: agents.0.options.max_tokens_per_micro_batch: ")
    assert "smollm3-3b needs 50.7 GiB per GPU on actor 0: cuda x 2 FSDP2 ranks" in error
    assert "(38.0 GiB usable) in update" in error
    kv = "agents.1.options.vllm_kv_cache_gib=60"  # the engine's share: the sampling peak
    assert cli.main([*argv, "70", "--set", kv]) == 2
    error = capsys.readouterr().err
    assert "agents.1.options.vllm_kv_cache_gib: qwen3-1.7b needs" in error
    assert "in generate, vLLM KV cache 60.0 GiB" in error
    awake = [  # without sleep mode the engine's fixed KV stays beside the update
        *("--set", "agents.0.options.vllm_sleep_mode=false"),
        *("--set", "agents.0.options.vllm_gpu_memory_utilization=0.1"),
        *("--set", "agents.0.options.vllm_kv_cache_gib=15"),
    ]
    assert cli.main([*argv, "70", *awake]) == 2
    error = capsys.readouterr().err
    assert "agents.0.options.vllm_kv_cache_gib: smollm3-3b needs" in error
    assert "in update, vLLM KV cache 15.0 GiB" in error
    loaded = load_config(config)
    monkeypatch.setattr(mp, "found_gpus", lambda: (70.0 * mp.GIB, 4))
    assert len(memory_check.check_before_launch(loaded)) == 2  # graft train launches
    monkeypatch.setattr(mp, "found_gpus", lambda: (40.0 * mp.GIB, 4))
    with pytest.raises(ValueError, match=r"needs 50\.7 GiB per GPU on actor 0"):
        memory_check.check_before_launch(loaded)


def test_graft_train_logs_a_worker_groups_plan_as_unsharded(caplog, monkeypatch):
    """The launch log's per-device peaks are the unsharded tables: for a worker group it says
    so (the check that let it launch judged each GPU, sharded)."""
    from algorithms.training import loop

    class Launched(Exception):
        pass

    def trainer(config):
        raise Launched

    monkeypatch.setattr(mp, "found_gpus", lambda: (70.0 * mp.GIB, 4))
    monkeypatch.setattr(loop, "Trainer", trainer)
    config = str(REPO / "configs" / "paper_smollm3_qwen3.yaml")
    with caplog.at_level("INFO"), pytest.raises(Launched):
        cli.main(["train", "--config", config])
    assert "unsharded; this run shards each over 2 GPUs" in caplog.text


def test_plan_reads_no_benchmark_data(capsys, monkeypatch, tmp_path):
    """The paper config trains on MATH: `graft plan` sizes it without reading a file (a data
    directory that does not exist would stop any read)."""
    monkeypatch.setenv("GRAFT_DATA_DIR", str(tmp_path / "no-data"))
    config = REPO / "configs" / "paper_smollm3_qwen3.yaml"
    assert cli.main(["plan", str(config), "--gpu-memory", "141"]) == 0, capsys.readouterr().err
