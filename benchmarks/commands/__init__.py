"""The `graft` job subcommands, one module each: `graft X` runs `benchmarks.commands.X`
(`graft config` is small enough to live in `benchmarks.cli`; what `graft config show`
prints is `config_show`'s).
Each has `add_parser(subparsers)`; `benchmarks.cli` imports only the one named.

Modules:

compare           `graft compare`: run a comparison grid and report it
config_show       `graft config show`: the config schema by section and strategy, wrapped
data              `graft data`: list, inspect and download the datasets
env               `graft env`: the versions, CPU kernels and GPUs of this machine, for a bug report
eval              `graft eval`: evaluate one model on the benchmarks
library           `graft library`: build, import into and inspect trajectory libraries
plot              `graft plot`: the learning curves and exchange funnel of one run, as PNG
train             `graft train`: run (or resume) a training run from a YAML config
"""
