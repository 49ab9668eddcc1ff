"""Comparison grids: `graft compare` trains every cell through the one loop, then evaluates
and reports (`benchmarks.commands.compare` is the command).

Modules:

cells             the cells of a grid: which runs, their configs and hashes, their state
claims            which process runs which cell: claims through lock files
grid              the grid file: what to train, on which models, how to evaluate
plots             learning and complementarity curves (PNG)
rehash            one-time move of finished cells to the read-options hash rule, checked first
report            the paper-style table, the compute table and the curves' data
run               every cell through the one training loop, then the harness
"""
