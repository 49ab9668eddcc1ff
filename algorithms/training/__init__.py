"""The common multi-agent training loop and the machinery of a run.

    from algorithms.training import Trainer, load_config
    Trainer(load_config("configs/tiny_pair_graft.yaml")).train()

Modules:

checkpoint        checkpoints that are complete or detectably not
eval_settings     `EvalSettings`: how evaluation samples and which problems it draws
loop              `Trainer`: the common multi-agent loop (rollout, verify, exchange, update)
metric_docs       what each logged metric means: the docs site's metrics page
metrics           per-step metrics and the metrics.jsonl log
periodic_eval     evaluation during training and the best checkpoint per agent
progress          the terminal progress bar of a run
ray/              the Ray backend: one actor per agent behind the Policy protocol
resume            what a run directory, checkpoint or stored peer must agree with to be used
run_config/       `TrainConfig`: the YAML run config, its sections and checks, validated
run_dir           run directories: checked first, the marker, --fresh, --restart, run.log
run_summary       the end-of-run summary `graft train` prints
step              what one step produces (`StepRecord`) and its Trainer-free phases
tensorboard_sink  the TensorBoard mirror: one writer per agent, s/w histograms, samples
wandb_sink        the optional Weights & Biases mirror of metrics.jsonl
"""

from graft_env.lazy import lazy_exports

_EXPORTS = {
    "Trainer": "algorithms.training.loop",
    "TrainConfig": "algorithms.training.run_config",
    "load_config": "algorithms.training.run_config",
    "EvalSettings": "algorithms.training.eval_settings",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
