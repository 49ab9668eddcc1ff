"""The evaluation protocol of GRAFT-SPEC §10 (avg@k pass@1 per benchmark, mean ± std over
repeats), used by `graft eval`, periodic evaluation during training and comparison grids:

- `evaluate`: sampling, verification and the per-problem counts (`evaluate(policy, sets)`);
- `results`: what an evaluation measured (`EvalResult`, `BenchmarkResult`, `Sample`);
- `report`: its files (JSON, CSV, Markdown, JSONL samples) and run provenance.
"""
