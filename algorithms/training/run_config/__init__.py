"""Configuration of one training run: YAML in, frozen validated dataclasses out.

A run is fully determined by its `TrainConfig` and seed: which agents (models)
train, on which prompt stream, with which algorithm and sampling settings. The
same dataclasses are built from a YAML file (`load_config`) or from Python, and
`--set key=value` overrides address nested fields with dots (`env.batch_size=16`,
`agents.0.options.lr=1e-5`, `algorithm_options.delta=0.5`).

The dataclasses are the schema: each field's type (with its range, `Positive`, `Share`, ...)
and help text are written once, on the field; `algorithms.storage.yaml_schema` checks data against
them, so every error is one line naming the full key (`env.batch_size: 'abc' is not an
integer`, `agents.0.options.lrr: unknown option; valid: ...`), and prints them (`graft config
show`). The three option sections, `algorithm_options`, `agents.N.options` and `ray`, stay
mappings of what was written (a run's saved config and a grid cell's hash hold no defaults),
and their schema is their option classes (`metadata["options"]`: AlgorithmConfig with each
strategy's options, HFPolicyOptions / LoaderOptions / VLLMEngineOptions, RayOptions), which
`graft config show` lists under them and `_check` checks them against, with the same one-line
errors (`algorithm_options.dleta: unknown option; valid: ...`). What types cannot say (agent
names, the dataset and algorithm names) is checked here too. Validation keeps every value
equal to what YAML gave (an int temperature becomes an equal float): a run directory compares
its saved config with the new one on resume.

Every public name of the package's modules is importable from the package.

Modules:

changes           what a resume may change in a run's config, and the differences of the rest
checks            what types cannot say about a run config, checked before any model loads
resolved          a run's every setting after presets and defaults (resolved_config.yaml)
sections          a run config's sections: agents, prompts, sampling, peer sources, correction
train_config      `TrainConfig`: the run config from YAML or Python, validated
"""

from algorithms.storage.yaml_schema import ConfigError, apply_override, parse_yaml
from algorithms.training.run_config.changes import (
    RESTART_FLAG,
    RESUMABLE_CHANGES,
    Start,
    result_differences,
    without_inert_eval,
)
from algorithms.training.run_config.checks import check_env, check_policy_options
from algorithms.training.run_config.resolved import (
    agent_options,
    flat,
    option_defaults,
    resolved_config,
)
from algorithms.training.run_config.sections import (
    AgentSpec,
    EnvSection,
    LibrarySpec,
    RolloutCorrectionSpec,
    SamplingSpec,
    StoredPeerSpec,
)
from algorithms.training.run_config.train_config import (
    TrainConfig,
    check_library,
    check_stored_source,
    config_from_dict,
    load_config,
    run_library,
)

__all__ = [
    "RESTART_FLAG",
    "RESUMABLE_CHANGES",
    "AgentSpec",
    "ConfigError",
    "EnvSection",
    "LibrarySpec",
    "RolloutCorrectionSpec",
    "SamplingSpec",
    "Start",
    "StoredPeerSpec",
    "TrainConfig",
    "agent_options",
    "apply_override",
    "check_env",
    "check_library",
    "check_policy_options",
    "check_stored_source",
    "config_from_dict",
    "flat",
    "load_config",
    "option_defaults",
    "parse_yaml",
    "resolved_config",
    "result_differences",
    "run_library",
    "without_inert_eval",
]
