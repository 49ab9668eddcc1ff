"""The TRL-comparison workload builder and the report arithmetic (no `trl` needed)."""

from __future__ import annotations

import string

import pytest
import torch

from benchmarks.perf.trl_sides import RunResult
from benchmarks.perf.trl_workload import (
    WorkloadSpec,
    advantage,
    build_workload,
    char_tokenizer,
    compare,
    tiny_llama,
)
from benchmarks.perf.vs_trl import comparisons, format_report, phase_split
from graft_env.policies import HFPolicy


def test_char_tokenizer_is_one_token_per_character_and_round_trips():
    tokenizer = char_tokenizer()
    text = "Compute 86 + 78.\n\nLet's think \\boxed{164} ~|`"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text
    assert len(tokenizer) == 3 + len(string.printable) - 4  # specials + printable minus \t\r\v\f
    assert len({tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}) == 3
    [unknown] = tokenizer("é", add_special_tokens=False)["input_ids"]
    assert unknown == tokenizer.unk_token_id


def test_tiny_llama_has_the_issue_shape_and_depends_only_on_its_seed():
    tokenizer = char_tokenizer()
    before = torch.random.get_rng_state()
    model = tiny_llama(tokenizer, seed=3)
    assert torch.equal(torch.random.get_rng_state(), before)  # caller's RNG untouched
    config = model.config
    shape = (
        config.num_hidden_layers,
        config.hidden_size,
        config.num_attention_heads,
        config.intermediate_size,
    )
    assert shape == (4, 128, 4, 384)
    assert config.vocab_size == len(tokenizer)
    same, other = tiny_llama(tokenizer, seed=3), tiny_llama(tokenizer, seed=4)
    for a, b in zip(model.parameters(), same.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not all(
        torch.equal(a, c) for a, c in zip(model.parameters(), other.parameters(), strict=True)
    )


def test_workload_prompts_are_what_our_policy_and_a_plain_tokenizer_see(tmp_path):
    workload = build_workload(tmp_path / "model")
    assert len(workload.prompts) == len(workload.problems) == WorkloadSpec().prompts == 16
    assert len(set(workload.prompts)) == 16
    policy = HFPolicy(workload.model_dir)
    assert [policy.format_prompt(p.problem) for p in workload.problems] == list(workload.prompts)
    for prompt in workload.prompts:  # TRL tokenises plain prompts with tokenizer(text=...)
        assert policy.encode_prompt(prompt) == policy.tokenizer(text=prompt)["input_ids"]
    assert all(prompt.endswith("\\boxed{}.\n") for prompt in workload.prompts)


def test_advantage_is_above_one_when_the_candidate_is_better():
    assert advantage(2.0, 1.0, lower_is_better=True) == 2.0  # half the seconds
    assert advantage(100.0, 300.0, lower_is_better=False) == 3.0  # three times the rate
    with pytest.raises(ValueError, match="positive"):
        advantage(0.0, 1.0, lower_is_better=True)


def test_compare_uses_pooled_medians_and_per_pair_run_medians():
    baseline = [[4.0, 6.0, 5.0], [8.0, 8.0, 9.0]]
    candidate = [[2.0, 2.0, 3.0], [2.0, 4.0, 4.0]]
    row = compare("seconds", baseline, candidate, lower_is_better=True)
    assert row.baseline_median == 7.0  # median of 4 5 6 8 8 9
    assert row.candidate_median == 2.5  # median of 2 2 2 3 4 4
    assert row.advantage == pytest.approx(7.0 / 2.5)
    assert row.pair_advantages == pytest.approx((5.0 / 2.0, 8.0 / 4.0))


@pytest.mark.parametrize(
    ("baseline", "candidate", "match"),
    [
        ([[1.0]], [[1.0], [2.0]], "same non-zero number"),
        ([], [], "same non-zero"),
        ([[1.0]], [[]], "run"),
    ],
)
def test_compare_rejects_unpaired_or_empty_runs(baseline, candidate, match):
    with pytest.raises(ValueError, match=match):
        compare("seconds", baseline, candidate, lower_is_better=True)


def _run(seconds, tokens, peak_mib, start_mib=100):
    result = RunResult(start_rss=start_mib * 2**20, peak_rss=peak_mib * 2**20)
    for s, t in zip(seconds, tokens, strict=True):
        result.add(s, generated=t, trained=t, slots=2 * t, rollout=s / 2, verify=0.0, update=s / 4)
    return result


def test_report_figures_from_run_results():
    trl = [_run([2.0, 2.0], [400, 400], peak_mib=900), _run([3.0, 3.0], [600, 600], peak_mib=1000)]
    ours = [_run([1.0, 1.0], [400, 400], peak_mib=600), _run([1.0, 1.0], [300, 300], peak_mib=500)]
    rows = {row.name: row for row in comparisons(trl, ours)}
    assert rows["seconds per step"].advantage == pytest.approx(2.5 / 1.0)
    assert rows["seconds per step"].pair_advantages == pytest.approx((2.0, 3.0))
    # rates per second of their own phase: rollout = step / 2, update = step / 4 here
    assert rows["generated tokens/s (rollout)"].baseline_median == pytest.approx(400.0)
    assert rows["generated tokens/s (rollout)"].candidate_median == pytest.approx(700.0)
    assert rows["trained tokens/s (update)"].candidate_median == pytest.approx(1400.0)
    assert rows["trained slots/s (padded)"].candidate_median == pytest.approx(2800.0)
    assert rows["peak RSS MiB"].advantage == pytest.approx(950 / 550)
    assert rows["peak - start RSS MiB"].candidate_median == pytest.approx(450.0)
    split = phase_split(ours)
    assert split["step"] == 1.0 and split["rollout"] == 0.5 and split["other"] == 0.25
    text = format_report(list(rows.values()), {"ours": split}, None)
    assert "seconds per step" in text and "2.50x" in text
