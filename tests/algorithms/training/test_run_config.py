"""Run configs: YAML in, validated dataclasses out, clear errors naming the field."""

from pathlib import Path

import pytest

from algorithms.core.rollout_correction import MAX_LOGPROB_GAP
from algorithms.storage.yaml_schema import parse_yaml, schema_lines
from algorithms.training.run_config import ConfigError, TrainConfig, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[3]
BASE = {"agents": [{"name": "a", "model": "tiny-a"}, {"name": "b", "model": "tiny-b"}]}


def test_shipped_configs_load_and_validate():
    paths = sorted((REPO / "configs").glob("*.yaml"))
    assert paths, "no configs shipped"
    for path in paths:
        config = load_config(path)
        assert config.agents and config.steps >= 1, path


def test_overrides_reach_nested_fields_and_parse_values():
    config = config_from_dict(
        BASE,
        [
            "env.batch_size=3",
            "agents.1.options.lr=1e-5",
            "algorithm_options.delta=0.5",
            "algorithm=graft-no-compat",
        ],
    )
    assert config.env.batch_size == 3
    assert config.agents[1].options == {"lr": 1e-5}
    assert config.algorithm_options == {"delta": 0.5}
    assert config.algorithm == "graft-no-compat"


def test_unknown_keys_are_named_with_the_valid_ones():
    with pytest.raises(ConfigError, match=r"^env\.batchsize: unknown key; valid: batch_size, "):
        config_from_dict({**BASE, "env": {"batchsize": 4}})
    with pytest.raises(ConfigError, match=r"^stepz: unknown key; valid: agents, algorithm, "):
        config_from_dict(BASE, ["stepz=3"])
    unknown_option = r"^agents\.0\.options\.lrr: unknown option; valid: .*\blr\b"
    with pytest.raises(ConfigError, match=unknown_option):
        config_from_dict(BASE, ["agents.0.options.lrr=1e-5"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("steps=ten", "steps: 'ten' is not an integer"),
        ("env.batch_size=abc", "env.batch_size: 'abc' is not an integer"),
        ("env.batch_size=2.5", "env.batch_size: 2.5 is not an integer"),
        ("env.batch_size=true", "env.batch_size: True is not an integer"),
        ("seed=-1", "seed: -1 must be >= 0"),
        ("sampling.top_p=1.5", "sampling.top_p: 1.5 must be <= 1"),
        ("sampling.temperature=hot", "sampling.temperature: 'hot' is not a number"),
        ("agents.0.options.lr=-1", "agents.0.options.lr: -1 must be >= 0"),
        ("agents.1.options.lr=fast", "agents.1.options.lr: 'fast' is not a number"),
        ("backend=slurm", "backend: 'slurm' is not one of 'local', 'ray'"),
        ("progress=maybe", "progress: 'maybe' is not true or false"),
        ("agents.0.name=7", "agents.0.name: 7 is not a string"),
        ("eval.k=many", "eval.k: 'many' is not an integer"),
        ("env.dataset=math5000", "env.dataset: unknown dataset 'math5000'; valid: "),
        ("algorithm=grpoo", "algorithm: unknown algorithm 'grpoo'"),
        ("algorithm_options.dleta=0.5", "algorithm_options.dleta: unknown option; valid: n, "),
        ("algorithm_options.n=1", "algorithm_options.n: 1 must be >= 2"),
        ("algorithm_options.delta=1.5", "algorithm_options.delta: 1.5 must be < 1"),
        ("algorithm_options.exchange=magic", "algorithm_options.exchange: 'magic' is not one of"),
        (
            "algorithm_options.pooled=maybe",
            "algorithm_options.pooled: 'maybe' is not true or false",
        ),
        ("algorithm_options.sgt_coef=0.5", "algorithm_options.sgt_coef: 0.5 must be 0.1 unless"),
        ("agents.1.options.dtype=int8", "agents.1.options.dtype: 'int8' is not one of 'float32'"),
        ("agents.0.options.betas=[0.9, 1.5]", r"agents.0.options.betas.1: 1.5 must be < 1"),
        ("agents.0.options.vllm_max_num_seqs=0", "agents.0.options.vllm_max_num_seqs: 0 must be"),
        ("agents.0.options.rollout_backend=tpu", "agents.0.options.rollout_backend: 'tpu' is not"),
        ("agents.0.options.tiny_seed=-1", "agents.0.options.tiny_seed: -1 must be >= 0"),
        (
            "agents.0.options.max_tokens_per_micro_batch=128",  # = sampling.max_new_tokens
            "agents.0.options.max_tokens_per_micro_batch: 128 leaves no room for a prompt",
        ),
        ("ray.adress=auto", "ray.adress: unknown option; valid: address, num_cpus, "),
        ("ray.num_cpus=0", "ray.num_cpus: 0 must be >= 1"),
        ("ray.placement_strategy=pack", "ray.placement_strategy: 'pack' is not one of 'PACK'"),
    ],
)
def test_every_bad_value_is_one_line_naming_its_full_key(override, message):
    with pytest.raises(ConfigError, match="^" + message) as caught:
        config_from_dict(BASE, [override])
    assert "\n" not in str(caught.value)


def test_a_config_that_is_not_a_mapping_says_so():
    with pytest.raises(ConfigError, match=r"^config: expected a mapping, got list"):
        config_from_dict([BASE])
    with pytest.raises(ConfigError, match=r"^agents: expected a list, got str"):
        config_from_dict({"agents": "tiny-a"})
    with pytest.raises(ConfigError, match=r"^agents\.0\.model: missing \(required\)"):
        config_from_dict({"agents": [{"name": "a"}]})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("steps: 3\nenv: {batch_size: 4\n", r"run\.yaml:3:1: YAML syntax error: "),
        ("steps: 3\nenv:\n\tbatch_size: 4\n", r"run\.yaml:3:1: YAML syntax error: .*tab"),
        ("- steps: 3\n", r"run\.yaml: expected a mapping at the top level, got a list"),
    ],
)
def test_broken_yaml_names_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert "<unicode string>" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_broken_override_value_names_the_key():
    with pytest.raises(ConfigError, match=r"^--set env\.batch_size: YAML syntax error"):
        config_from_dict(BASE, ["env.batch_size=[4"])


def test_a_directory_is_not_a_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"is a directory, not a YAML file"):
        load_config(tmp_path)


def test_the_schema_lists_every_key_with_its_type_default_and_help():
    lines = schema_lines(TrainConfig)
    text = "\n".join(lines)
    for key in ("agents.N.name", "env.batch_size", "sampling.top_p", "seed", "threads", "eval.k"):
        assert any(line.split()[0] == key for line in lines), key
    batch = next(line for line in lines if line.split()[0] == "env.batch_size")
    assert "int >= 1" in batch and "default 8" in batch and "prompts per step" in batch
    assert "agents.N.options" in text and "algorithm_options" in text


def test_shipped_configs_keep_their_plain_data():
    """A run directory compares its saved config with the new one on resume: validation must
    not change a value's type (an int lr read as 1.0 is equal, a tuple/list swap is not)."""
    for path in sorted((REPO / "configs").glob("*.yaml")):
        data = parse_yaml(path.read_text())
        plain = load_config(path).to_dict()
        for key, value in data.items():
            assert plain[key] == value or isinstance(value, dict), (path, key)


PAIR1 = ["", "_80gb", "_ray"]  # configs/paper_smollm3_qwen3{suffix}.yaml
# What may differ between the pair-1 files, and only that: where the run goes and how it is laid
# out (run_dir, backend, ray; each agent's device), where the weights come from, how rollouts
# are sampled (HF generate or vLLM and its settings) and the memory knobs (checkpointing, batch
# and micro-batch sizes, logits chunks). Every other value, defaults included, must be equal.
LAYOUT_KEYS = {"run_dir", "backend", "ray"}
AGENT_LAYOUT_OPTIONS = {
    "device",
    "local_files_only",
    "rollout_backend",
    "vllm_enforce_eager",
    "vllm_kv_cache_gib",
    "vllm_gpu_memory_utilization",
    "gradient_checkpointing",
    "generation_batch_size",
    "score_batch_size",
    "max_tokens_per_micro_batch",
    "logits_chunk_tokens",
}
PAPER_AGENT_OPTIONS = {"lr", "betas", "weight_decay", "grad_clip", "dtype", "autocast"}


def _paper_run(path: Path) -> dict[str, object]:
    """The config's values by full key (agents.1.options.lr), less the layout keys."""
    flat = _flat(load_config(path).to_dict())
    return {key: value for key, value in flat.items() if not _layout_key(key)}


def _flat(value: object, key: str = "") -> dict[str, object]:
    if isinstance(value, dict) and value:
        items = list(value.items())
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        items = list(enumerate(value))
    else:
        return {key: value}
    flat: dict[str, object] = {}
    for part, item in items:
        flat.update(_flat(item, f"{key}.{part}" if key else str(part)))
    return flat


def _layout_key(key: str) -> bool:
    parts = key.split(".")
    if parts[0] in LAYOUT_KEYS:
        return True
    is_option = len(parts) > 3 and parts[0] == "agents" and parts[2] == "options"
    return is_option and parts[3] in AGENT_LAYOUT_OPTIONS


def test_the_pair1_paper_files_describe_the_same_run():
    """The three pair-1 files repeat the paper's hyperparameters: a value changed in one file
    only (an lr, the seed, the batch) would make its run another experiment."""
    paths = [REPO / "configs" / f"paper_smollm3_qwen3{suffix}.yaml" for suffix in PAIR1]
    runs = {path.name: _paper_run(path) for path in paths}
    reference_name, reference = next(iter(runs.items()))
    for index in (0, 1):
        for option in PAPER_AGENT_OPTIONS:
            assert f"agents.{index}.options.{option}" in reference, (index, option)
    for name, run in runs.items():
        for key in run.keys() | reference.keys():
            assert key in run and key in reference, f"{name}: {key} in one file only"
            assert run[key] == reference[key], f"{name}: {key} differs from {reference_name}"


def test_every_paper_config_stops_on_an_engine_trainer_log_prob_gap():
    """Each paper run rescores its own responses and stops above the argued bound, so an
    engine sampling from other weights than the trainer's cannot train silently; `monitor`
    keeps the paper's update unchanged."""
    for path in sorted((REPO / "configs").glob("paper_*.yaml")):
        spec = load_config(path).rollout_correction
        assert spec is not None and spec.mode == "monitor", path.name
        assert spec.max_logprob_gap == MAX_LOGPROB_GAP, path.name


def test_bad_values_name_the_field():
    with pytest.raises(ConfigError, match=r"env\.batch_size"):
        config_from_dict(BASE, ["env.batch_size=0"])
    with pytest.raises(ConfigError, match="names must be unique"):
        config_from_dict({"agents": [{"name": "a", "model": "x"}] * 2})
    with pytest.raises(ConfigError, match="not a valid list index"):
        config_from_dict(BASE, ["agents.5=3"])
    with pytest.raises(ConfigError, match="key=value"):
        config_from_dict(BASE, ["steps"])


def test_half_precision_weights_at_a_vanishing_lr_are_refused_before_loading():
    """bf16 weights at the default lr 1e-6 would not train (policies.precision): the config
    names the agent's options; mixed precision and a large enough lr pass."""
    with pytest.raises(ConfigError, match=r"agents\.1\.options: dtype='bfloat16' with lr=1e-06"):
        config_from_dict(BASE, ["agents.1.options.dtype=bfloat16"])
    config_from_dict(BASE, ["agents.1.options.dtype=bfloat16", "agents.1.options.lr=1e-4"])
    config_from_dict(BASE, ["agents.1.options.autocast=bfloat16"])
    with pytest.raises(ConfigError, match=r"agents\.0\.options\.lr: 'fast' is not a number"):
        config_from_dict(BASE, ["agents.0.options.dtype=float16", "agents.0.options.lr=fast"])


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_round_trip_through_plain_data():
    config = config_from_dict(BASE, ["steps=7"])
    assert config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "0 must be >= 1"),
        ("-1", "-1 must be >= 1"),
        ("two", "'two' is not an integer"),
        ("1.5", "1.5 is not an integer"),
        ("true", "True is not an integer"),
    ],
)
def test_threads_must_be_a_whole_number_of_at_least_one(value, message):
    with pytest.raises(ConfigError, match=rf"^threads: {message}"):
        config_from_dict(BASE, [f"threads={value}"])


def test_threads_are_unset_by_default_and_settable():
    assert config_from_dict(BASE).threads is None
    assert config_from_dict(BASE, ["threads=3"]).threads == 3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rollout_correction.mode=clip", "rollout_correction.mode: 'clip' is not one of"),
        ("rollout_correction.level=geometric", "rollout_correction.level: 'geometric' is not"),
        ("rollout_correction.cap=1", "rollout_correction.cap: 1 must be > 1"),
        ("rollout_correction.cap=0.5", "rollout_correction.cap: 0.5 must be > 1"),
        ("rollout_correction.cap=.inf", "rollout_correction.cap: "),
        ("rollout_correction.cap=big", "rollout_correction.cap: 'big' is not a number"),
        ("rollout_correction.max_logprob_gap=0", "rollout_correction.max_logprob_gap: 0 "),
        ("rollout_correction.max_logprob_gap=-1", "rollout_correction.max_logprob_gap: -1 "),
        ("rollout_correction.capp=3", "rollout_correction.capp: unknown"),
        ("rollout_correction=on", "rollout_correction: "),
    ],
)
def test_a_bad_rollout_correction_is_one_line_naming_its_key(override, message):
    with pytest.raises(ConfigError, match="^" + message) as caught:
        config_from_dict(BASE, [override])
    assert "\n" not in str(caught.value)


def test_rollout_correction_is_off_by_default_and_then_absent_from_the_saved_form():
    """Absent while unset (as `library`), so every saved config.yaml and grid cell hash made
    before the option existed is unchanged; set, it is saved whole and reads back equal."""
    off = config_from_dict(BASE)
    assert off.rollout_correction is None and "rollout_correction" not in off.to_dict()
    on = config_from_dict(BASE, ["rollout_correction={}"])
    spec = on.rollout_correction
    assert (spec.mode, spec.level, spec.cap) == ("truncate", "token", 2.0)
    saved = {"mode": "truncate", "level": "token", "cap": 2.0, "max_logprob_gap": None}
    assert on.to_dict()["rollout_correction"] == saved
    changed = ["rollout_correction.mode=mask", "rollout_correction.level=sequence"]
    masked = config_from_dict(BASE, [*changed, "rollout_correction.cap=3"])
    assert config_from_dict(masked.to_dict()) == masked
    bounded = config_from_dict(BASE, ["rollout_correction.max_logprob_gap=0.1"])
    assert bounded.rollout_correction.max_logprob_gap == 0.1
    assert config_from_dict(bounded.to_dict()) == bounded
    assert masked.rollout_correction.cap == 3 and masked.rollout_correction.mode == "mask"
