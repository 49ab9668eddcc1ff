"""`benchmarks.perf.policy_throughput --levers`: each decoding lever runs through the real
`HFPolicy.generate` and is compared with the plain policy on the same rows."""

from __future__ import annotations

import json

import pytest

from benchmarks.perf import policy_throughput


def test_every_lever_is_measured_against_the_plain_policy(tmp_path):
    out = tmp_path / "levers.json"
    options = "--prompts 2 --n 2 --max-new-tokens 4 --repeats 1 --threads 1 --rounds 2"
    levers = "--levers packed,bf16,inference_mode --top-p 0.9"
    policy_throughput.main([*f"{options} {levers}".split(), "--json", str(out)])
    levers = json.loads(out.read_text())["levers"]
    assert list(levers) == ["plain", "packed", "bf16", "inference_mode"]
    assert levers["plain"]["speedup_range"] == [1.0, 1.0]
    assert all(row["tokens_per_s"] > 0 for row in levers.values())
    # no_grad -> inference_mode changes no number; oneDNN's GEMM only rounds differently
    assert levers["inference_mode"]["same_tokens"]
    assert levers["inference_mode"]["max_logprob_shift"] == 0.0
    assert levers["packed"]["same_rows"] == [4, 4] and levers["packed"]["same_tokens"]
    assert 0.0 < levers["packed"]["max_logprob_shift"] < 1e-4


def test_an_unknown_lever_is_refused(capsys):
    with pytest.raises(SystemExit, match="2"):
        policy_throughput.main(["--levers", "packed,warp"])
    assert "unknown lever(s) ['warp']" in capsys.readouterr().err
