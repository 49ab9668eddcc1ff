"""The evaluation protocol of GRAFT-SPEC §10 (avg@k pass@1 per benchmark, mean ± std over
repeats), used by `graft eval`, periodic evaluation during training and comparison grids:

- `evaluate`: the protocol's entry point (`evaluate(policy, sets)`); its sets fitted to the
  model's context and counted (`tally`), sampled and verified batch by batch (`batches`);
- `results`: what an evaluation measured (`EvalResult`, `BenchmarkResult`, `Sample`);
- `report`: its files (JSON, CSV, Markdown, JSONL samples) and run provenance.

Modules:

batches           each batch's generate call and seed, verification beside sampling, in order
evaluate          the protocol's entry point: avg@k pass@1 per benchmark, checked inputs
protocol          the protocol's sampling defaults (k = 8, T = 0.6, top-p 0.95, 4,096 tokens)
report            result files: JSON, CSV, Markdown, JSONL samples, run provenance
results           what one evaluation measured: samples, per-problem counts, summaries
tally             one benchmark while it runs: the prompts that fit, their budgets, counts so far
"""
