"""The evaluation protocol of GRAFT-SPEC §10 (avg@k pass@1 per benchmark, mean ± std over
repeats), used by `graft eval`, periodic evaluation during training and comparison grids:

- `evaluate`: sampling, verification and the per-problem counts (`evaluate(policy, sets)`);
- `results`: what an evaluation measured (`EvalResult`, `BenchmarkResult`, `Sample`);
- `report`: its files (JSON, CSV, Markdown, JSONL samples) and run provenance.

Modules:

evaluate          sampling, verification and per-problem counts: avg@k pass@1 per benchmark
protocol          the protocol's sampling defaults (k = 8, T = 0.6, top-p 0.95, 4,096 tokens)
report            result files: JSON, CSV, Markdown, JSONL samples, run provenance
results           what one evaluation measured: samples, per-problem counts, summaries
"""
