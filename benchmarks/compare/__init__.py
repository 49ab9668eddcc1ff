"""Comparison grids: `graft compare` trains every cell through the one loop, then evaluates
and reports (`benchmarks.commands.compare` is the command).

Modules:

cell_run          one cell: train or resume it, evaluate its models, write its result.json
cells             the cells of a grid: which runs, their configs and hashes, their state
claims            which process runs which cell: claims through lock files
grid              the grid file read and resolved: what to train, on which models, how to evaluate
grid_schema       the grid file's schema (GridFile) and the validated grid (GridSpec)
plots             learning and complementarity curves (PNG)
rehash            one-time move of finished cells to the read-options hash rule, checked first
report            the paper-style table, the compute table and the curves' data
run               `run_grid`: every cell claimed and run, one process or `workers`; results
workers           the grid's worker processes: spawned, output prefixed, stopped with the parent
"""
