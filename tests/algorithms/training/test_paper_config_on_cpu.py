"""configs/paper_smollm3_qwen3.yaml as shipped, on CPU: 2 GRAFT steps of shrunk models
through the real Trainer and the real worker-group code (issue 28, "Done when").

The config is read with `load_config` and changed only by the `--set` overrides a user
would pass (`cpu_overrides`, each with its reason): random-weight SmolLM3 and Qwen3 of the
real vocabularies and layer types (`benchmarks.perf.random_models`, hidden 64, written to
tmp_path) in place of the hub names, CPU and float32, a small batch, 2 steps, a checkpoint
after each. Each agent is the config's worker group of 2 ranks (4 Ray actors, gloo, FSDP2).
By default one Trainer runs both steps (start, generate, the sharded update, DCP
checkpoints): its rows, placement and checkpoint files are checked. Slow: a run is
interrupted after step 1 and resumed by a new Trainer from its checkpoint, so the 2 steps
span two Trainers. Only what holds by construction is asserted, nothing about the weights'
values.

The local Ray cluster has the paper node's 4 GPUs as fake resources (`ray.num_gpus: 4`), so
each rank reserves the paper's bundle (4 CPUs, 1 GPU) and gets its own GPU id and
CUDA_VISIBLE_DEVICES while it computes on the CPU. A user's run refuses that on purpose:
with reserved GPUs and `device: cpu`, `options.check_agent_devices` stops it in
`cluster.make_ray_policies` (GPUs reserved and left idle are a config mistake;
`test_a_users_run_refuses_reserved_gpus_with_cpu_ranks`). `paper_policies` therefore builds
the policies as `make_ray_policies` does for worker groups, minus that one check: the real
`group.make_group_policies`, handed to the real Trainer.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from algorithms.storage.yaml_schema import ConfigError
from algorithms.training.ray.options import check_agent_devices, parse_ray_options
from algorithms.training.ray.placement import rank_bundle, split_group_options
from algorithms.training.run_config import load_config

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "paper_smollm3_qwen3.yaml"
ARCHITECTURES = ("smollm3", "qwen3")  # agents 0 and 1 of the config, in order
SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4)
"""The shrunk width and depth. 4 layers, not 2: SmolLM3's every 4th layer is its NoPE layer
(no rotary embedding), so 4 is the fewest that keep its layer types."""
STEPS = 2


def cpu_overrides(models: list[Path], run_dir: Path, data_dir: Path) -> list[str]:
    """Every change to the shipped config, as `graft train --set` takes them."""
    sets = []
    for index, model in enumerate(models):
        agent = f"agents.{index}"
        sets += [
            f"{agent}.model={model}",  # a shrunk random model of the same architecture: no hub
            f"{agent}.options.device=cpu",  # no GPU here
            f"{agent}.options.autocast=null",  # bf16 autocast is a GPU speed-up; fp32 on CPU
            # the eager HF loop samples: vLLM needs a GPU (or the .ci/vllm build), and a
            # vLLM setting the config may gain applies only with rollout_backend vllm
            f"{agent}.options.rollout_backend=transformers",
            f"{agent}.options.generation_batch_size=2",  # one prompt per block: both ranks sample
        ]
    return [
        *sets,
        "algorithm_options.n=2",  # 2 responses per prompt, not 8
        "env.batch_size=4",  # 4 prompts per step: one per minibatch (num_minibatches: 4 kept)
        f"env.data_dir={data_dir}",  # the MATH train file of this checkout
        "sampling.max_new_tokens=8",  # responses of <= 8 tokens, not 4,096
        f"steps={STEPS}",
        "checkpoint_every=1",  # a checkpoint after step 1, to resume from
        f"run_dir={run_dir}",
        # the local cluster is the paper's node: 4 GPUs (fake: Ray resources, no device)
        # and 16 logical CPUs for the 4 per rank; the ranks' bundles stay the shipped ones
        "ray.num_gpus=4",
        "ray.num_cpus=16",
        "ray.torch_threads=1",  # 4 ranks share this machine's cores
        "ray.placement_timeout_s=120",  # fail in 2 minutes, not 10, if the bundles do not fit
    ]


@pytest.fixture(scope="module")
def shrunk_models(tmp_path_factory) -> list[Path]:
    from benchmarks.perf.random_models import shrunk_config, write_random_model

    root = tmp_path_factory.mktemp("shrunk")
    return [
        write_random_model(root / name, shrunk_config(name, **SIZES), seed=index)
        for index, name in enumerate(ARCHITECTURES)
    ]


def paper_policies(config):
    """`cluster.make_ray_policies`' worker-group path without its `check_agent_devices`,
    which refuses fake GPUs for CPU ranks (the finding): the real `make_group_policies`."""
    from algorithms.training.ray.group import make_group_policies

    layout, section = split_group_options(config.ray)
    return make_group_policies(config, parse_ray_options(section), layout)


class Interrupted(Exception):
    """Stops the first Trainer after step 1, as a killed driver would."""


def placement_rows(policies) -> list[dict]:
    """Each rank's placement map row (`placement.placement_map`: bundle, node, resources)
    and what its `setup` reported (backend, device, threads), agents in order."""
    import ray

    from algorithms.training.ray.placement import placement_map

    groups = [ray.util.get_placement_group(f"graft-{name}") for name in policies]
    rows = placement_map({name: p.ranks for name, p in policies.items()}, groups)
    setups = [info for p in policies.values() for info in p.placement]
    return [{**row, **setup} for row, setup in zip(rows, setups, strict=True)]


def shut_down(trainer) -> None:
    """Every actor of the run killed and its resources freed (`ActorGroup.shutdown`)."""
    next(iter(trainer.policies.values())).group.shutdown()  # one ActorGroup for the run


def to_the_end(config, started: float) -> dict:
    """A Trainer runs the config's steps from its run directory's last checkpoint (all of
    them on a fresh one): its rows, the steps it ran, where its ranks ran."""
    from algorithms.training.loop import Trainer

    trainer = Trainer(config, paper_policies(config))
    print(f"Trainer up (Ray + 4 ranks) at {time.perf_counter() - started:.0f} s")
    placement = placement_rows(trainer.policies)
    for row in placement:
        print({k: row[k] for k in ("agent", "rank", "bundle", "gpu_ids", "cuda_visible_devices")})
    ran = []
    rows = trainer.train(on_step=lambda record: ran.append(record.step))
    shut_down(trainer)
    print(f"steps {ran} done, actors shut down at {time.perf_counter() - started:.0f} s")
    return {"rows": rows, "ran": ran, "placement": placement}


def interrupted_and_resumed(config, started: float) -> dict:
    """A Trainer stopped after step 1, then a new one resumed from its checkpoint
    (`to_the_end`): the second's rows, steps and placement, and the checkpoints the first
    left."""
    from algorithms.training.loop import Trainer

    first = Trainer(config, paper_policies(config))
    print(f"first Trainer up (Ray + 4 ranks) at {time.perf_counter() - started:.0f} s")

    def stop_after_step_1(record):
        raise Interrupted(record.step)

    with pytest.raises(Interrupted):
        first.train(on_step=stop_after_step_1)
    shut_down(first)
    checkpoints = sorted(p.name for p in (Path(config.run_dir) / "checkpoints").iterdir())
    print(f"step 1 done, actors shut down at {time.perf_counter() - started:.0f} s")
    return {**to_the_end(config, started), "checkpoints_after_step_1": checkpoints}


def paper_run(how, shrunk_models, run_dir: Path, data_dir: Path) -> dict:
    """`how(config, started)` on the shrunk config, with the config and `run_dir` added;
    its Ray cluster goes down after it, also when setup or training fails (so the next run
    starts a cluster of its own)."""
    import ray

    started = time.perf_counter()
    try:
        config = load_config(CONFIG, cpu_overrides(shrunk_models, run_dir, data_dir))
        return {**how(config, started), "config": config, "run_dir": run_dir}
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def run(shrunk_models, tmp_path_factory, data_dir) -> dict:
    run_dir = tmp_path_factory.mktemp("paper") / "run"
    return paper_run(to_the_end, shrunk_models, run_dir, data_dir)


@pytest.fixture(scope="module")
def resumed(shrunk_models, tmp_path_factory, data_dir) -> dict:
    run_dir = tmp_path_factory.mktemp("paper-resumed") / "run"
    return paper_run(interrupted_and_resumed, shrunk_models, run_dir, data_dir)


def test_the_overrides_leave_the_paper_layout(shrunk_models, tmp_path, data_dir):
    """What the overrides change is CPU-only: the algorithm, agents, worker-group layout
    and each rank's bundle (4 CPUs, 1 GPU) stay the shipped config's."""
    shipped = load_config(CONFIG)
    ours = load_config(CONFIG, cpu_overrides(shrunk_models, tmp_path, data_dir))
    assert ours.algorithm == shipped.algorithm == "graft"
    assert ours.algorithm_options["num_minibatches"] == shipped.algorithm_options["num_minibatches"]
    assert [a.name for a in ours.agents] == [a.name for a in shipped.agents]
    assert ours.backend == shipped.backend == "ray"
    layout, section = split_group_options(ours.ray)
    shipped_layout, shipped_section = split_group_options(shipped.ray)
    assert layout == shipped_layout and layout.ranks == 2
    options, paper = parse_ray_options(section), parse_ray_options(shipped_section)
    assert options.placement_strategy == paper.placement_strategy == "PACK"
    assert rank_bundle(options, 2) == rank_bundle(paper, 2) == {"CPU": 4.0, "GPU": 1.0}
    assert (options.num_gpus, options.address) == (4, None), "a local cluster of 4 GPUs"
    for model, agent in zip(shrunk_models, ours.agents, strict=True):
        config = json.loads((model / "config.json").read_text())
        assert agent.model == str(model) and config["hidden_size"] == SIZES["hidden_size"]


def test_a_users_run_refuses_reserved_gpus_with_cpu_ranks(shrunk_models, tmp_path, data_dir):
    """The one check `paper_policies` leaves out, and why: a run that reserves GPUs for ranks
    computing on the CPU is refused in one line naming both keys."""
    config = load_config(CONFIG, cpu_overrides(shrunk_models, tmp_path, data_dir))
    _, section = split_group_options(config.ray)
    with pytest.raises(ConfigError, match=r"ray\.num_gpus_per_agent.*agents\.0\.options\.device"):
        check_agent_devices(config.agents, parse_ray_options(section))


def agent_dirs(run) -> list[Path]:
    checkpoints = run["run_dir"] / "checkpoints"
    return [step / a.name for step in sorted(checkpoints.iterdir()) for a in run["config"].agents]


def assert_two_rows_per_agent_of_the_configs_algorithm(run) -> None:
    config, rows = run["config"], run["rows"]
    names = [agent.name for agent in config.agents]
    assert [(r["step"], r["agent"]) for r in rows] == [
        (step, name) for step in range(STEPS) for name in names
    ]
    saved = yaml.safe_load((run["run_dir"] / "config.yaml").read_text())
    assert saved["algorithm"] == config.algorithm == "graft"
    for step in sorted((run["run_dir"] / "checkpoints").iterdir()):
        assert json.loads((step / "state.json").read_text())["algorithm"] == "graft"
    for row in rows:  # the update ran, with the shipped lr and num_minibatches
        assert "update_skipped" not in row
        assert row["lr"] == 1e-6 and row["minibatches"] == 4.0


def assert_two_gloo_ranks_per_agent_in_its_own_placement_group(run) -> None:
    agents, placement = [a.name for a in run["config"].agents], run["placement"]
    assert [(r["agent"], r["rank"], r["bundle"]) for r in placement] == [
        (agent, rank, rank) for agent in agents for rank in (0, 1)
    ]
    for agent in agents:
        ranks = [r for r in placement if r["agent"] == agent]
        assert len({r["placement_group_id"] for r in ranks}) == 1
        assert len({r["node_id"] for r in ranks}) == 1, "PACK: an agent's ranks on one node"
    assert len({r["placement_group_id"] for r in placement}) == 2, "a group per agent"
    for row in placement:
        assert row["backend"] == "gloo" and row["device"] == "cpu"
        assert row["torch_threads"] == 1
        assert row["resources"] == {"CPU": 4.0, "GPU": 1.0}
        assert len(row["gpu_ids"]) == 1 and row["cuda_visible_devices"] == row["gpu_ids"][0]
    gpus = sorted(row["gpu_ids"][0] for row in placement)
    assert gpus == ["0", "1", "2", "3"], "the node's 4 GPUs, one per rank"


def assert_dcp_shards_per_rank_and_an_hf_export(run) -> None:
    checkpoints = run["run_dir"] / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000001", "step_000002"]
    for directory in agent_dirs(run):
        sharded = directory / "sharded"
        assert (sharded / ".metadata").is_file()
        assert sorted(p.name for p in sharded.glob("*.distcp")) == [
            "__0_0.distcp",
            "__1_0.distcp",
        ], "one DCP shard file per rank"
        assert sorted(p.name for p in sharded.glob("rng_rank*.pt")) == [
            "rng_rank0.pt",
            "rng_rank1.pt",
        ]
        for name in ("model.safetensors", "config.json", "tokenizer.json"):
            assert (directory / name).is_file(), f"HF export: {directory / name}"
        assert json.loads((directory / "graft_policy.json").read_text())["ranks"] == 2


def test_two_metrics_rows_per_agent_of_the_configs_algorithm(run):
    assert run["ran"] == [0, 1]
    assert_two_rows_per_agent_of_the_configs_algorithm(run)


def test_each_agent_is_two_gloo_ranks_in_its_own_placement_group(run):
    assert_two_gloo_ranks_per_agent_in_its_own_placement_group(run)


def test_checkpoints_are_dcp_shards_per_rank_and_an_hf_export(run):
    assert_dcp_shards_per_rank_and_an_hf_export(run)


@pytest.mark.slow
def test_the_resumed_run_continues_from_step_1(resumed):
    """The first Trainer left step 1's checkpoint; the second ran step 2 only, from it, on
    ranks placed as the first's, and wrote step 2's checkpoint as the first wrote step 1's."""
    assert resumed["checkpoints_after_step_1"] == ["step_000001"]
    assert resumed["ran"] == [1], "the second Trainer ran the second step only"
    assert [r["step"] for r in resumed["rows"]] == [0, 0, 1, 1], "the first step's rows kept"
    assert_two_rows_per_agent_of_the_configs_algorithm(resumed)
    assert_two_gloo_ranks_per_agent_in_its_own_placement_group(resumed)
    assert_dcp_shards_per_rank_and_an_hf_export(resumed)
