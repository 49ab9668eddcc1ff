"""The resolved config holds every option a run uses (a preset's and the defaults' values
beside what was written), and its flat form keeps every key for TensorBoard's hparams."""

from __future__ import annotations

from pathlib import Path

from run_configs import small_config

import algorithms
from algorithms.training.run_config import config_from_dict, flat, resolved_config


def test_every_option_is_resolved_for_the_backend_the_run_uses():
    config = small_config(Path("runs/x"), "hacpo", agent_options={"rollout_backend": "vllm"})
    resolved = resolved_config(config, algorithms.make("hacpo", n=4).config)
    options = resolved["algorithm_options"]
    assert options["eps_high"] == 0.0004 and options["ratio"] == "sequence"  # hacpo's preset
    assert options["n"] == 4 and options["delta"] == 0.8  # as written; the default
    agent = resolved["agents"][0]["options"]
    assert agent["rollout_backend"] == "vllm" and agent["vllm_max_num_seqs"] == 256
    assert agent["lr"] == 1e-6 and "ray" not in agent
    assert resolved["ray"] == {}  # a local run has no Ray options
    ray_run = config_from_dict({**small_config(Path("runs/y"), "grpo").to_dict(), "backend": "ray"})
    ray = resolved_config(ray_run, algorithms.make("grpo").config)["ray"]
    assert ray["placement_strategy"] == "PACK" and ray["runtime_env"] == {}


def test_the_flat_form_keeps_every_key():
    nested = {"a": {}, "b": [], "c": {"d": [1, {"e": None}]}, "f": "text"}
    assert flat(nested) == {"a": {}, "b": [], "c.d.0": 1, "c.d.1.e": None, "f": "text"}
