"""The product harness, and the measurement scripts in `benchmarks.perf`.

Here: the `graft` command line (`cli`) and its subcommands (`commands/`: train, eval,
compare, library; the evaluation itself is `graft_env.eval`), the comparison grids behind
`graft compare` (`compare/`), the pre-registered studies' reports (`study/`), and in
`perf/` the scripts that measure speed and memory and feed the docs' measured figures,
indexed in that package's docstring.

A report runs as ``python -m benchmarks.study.<name>`` and a script as
``python -m benchmarks.perf.<name>``; either imports this package first: so this is where
the OpenMP defaults (one thread, passive waiting) are set, before any script imports torch
(`graft_env.threads` says why; a user's own settings win).

Modules:

cli               the `graft` command line: one entry point, one subcommand per job
commands/         the job subcommands: `graft X` is `commands/X.py` (config, data: in cli)
configs/          a link to the checkout's configs/, so the wheel ships them (config_files)
compare/          comparison grids behind `graft compare`: grid, cells, claims, reports, plots
config_files      the shipped run configs and grids (package data) and how --config finds them
perf/             the measurement scripts behind the docs' performance figures
reference         the generated docs: the README's registry table, the configuration reference
study/            the pre-registered studies' reports: statistics, plots, verdicts
"""

from graft_env.threads import process_defaults

process_defaults()
