"""Worker groups (`ray.ranks_per_agent`) on a local CPU Ray cluster, gloo and FSDP2.

The scenario (minutes: every rank is a fresh process importing torch and transformers,
and two cores run four ranks) trains the tiny pair for 3 GRAFT steps with 1 rank per
agent and with 2, then kills a 2-rank run after step 1 and resumes it. Tests assert on
what it saw. The split functions are checked by property tests (fast, by default).
"""

from __future__ import annotations

import numpy as np
import pytest
from group_runs import (
    TWO_RANK_OPTIONS,
    assert_weights_within_adam_noise,
    comparable,
    group_config,
    train,
)
from hypothesis import given
from hypothesis import strategies as st

from algorithms.training.ray.split import (
    balanced_rounds,
    block_seed,
    prompt_blocks,
    rank_spans,
    row_chunks,
)
from graft_env.policies.micro_batches import fixed_size, forward_tokens, padded_size, token_budget


@given(st.integers(0, 200), st.integers(1, 9))
def test_row_chunks_cover_the_rows_in_order_and_balance_them(rows, world):
    chunks = row_chunks(rows, world)
    assert len(chunks) == world
    assert [j for c in chunks for j in c] == list(range(rows))
    assert max(map(len, chunks)) - min(map(len, chunks)) <= 1


@given(st.integers(0, 60), st.integers(1, 9))
def test_prompt_blocks_and_their_seeds_do_not_depend_on_the_ranks(prompts, per_block):
    blocks = prompt_blocks(prompts, per_block)
    assert [j for b in blocks for j in b] == list(range(prompts))
    assert all(1 <= len(b) <= per_block for b in blocks)
    seeds = [block_seed(3, b) for b in range(len(blocks))]
    assert len(set(seeds)) == len(seeds) and seeds == [block_seed(3, b) for b in range(len(seeds))]


@given(st.integers(1, 40), st.sampled_from([None, 1, 2, 3, 5]), st.integers(1, 5))
def test_rank_spans_give_every_rank_as_many_micro_batches_and_every_row_once(rows, size, world):
    spans = fixed_size(rows, size)
    if rows < world:
        with pytest.raises(ValueError, match=f"minibatch 0: {rows} row"):
            rank_spans(spans, world, "minibatch 0")
        return
    per_rank = rank_spans(spans, world, "minibatch 0")
    assert len({len(mine) for mine in per_rank}) == 1
    assert all(span for mine in per_rank for span in mine)
    assert sorted(j for mine in per_rank for span in mine for j in span) == list(range(rows))
    if size is not None and rows % size == 0 and (rows // size) % world == 0:
        assert all(len(span) == size for mine in per_rank for span in mine)


@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=40),
    st.integers(60, 200),
    st.integers(1, 4),
)
def test_rank_spans_of_token_budget_micro_batches_keep_the_budget(lengths, budget, world):
    prompts, responses = [p for p, _ in lengths], [r for _, r in lengths]
    spans = token_budget(prompts, responses, budget, "minibatch 0")
    if len(lengths) < world:
        return
    per_rank = rank_spans(spans, world, "minibatch 0")
    assert sorted(j for mine in per_rank for span in mine for j in span) == list(
        range(len(lengths))
    )
    if len(spans) <= len(lengths) // world * world:  # no merge needed: only halving
        for span in (span for mine in per_rank for span in mine):
            assert padded_size(span, prompts, responses) <= budget


def _round_robin(costs: list[int], world: int) -> list[list[int]]:
    """The dealing before balancing: longest first, item i to rank i % world."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    return [order[rank::world] for rank in range(world)]


def _loads(costs: list[int], dealt: list[list[int]]) -> list[int]:
    return [sum(costs[i] for i in mine) for mine in dealt]


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=48), st.integers(1, 6))
def test_balanced_rounds_spread_is_at_most_round_robins_and_bounded(costs, world):
    costs = costs[: len(costs) // world * world] or [1] * world
    dealt = balanced_rounds(costs, world)
    assert sorted(i for mine in dealt for i in mine) == list(range(len(costs)))
    assert {len(mine) for mine in dealt} == {len(costs) // world}
    loads, before = _loads(costs, dealt), _loads(costs, _round_robin(costs, world))
    assert max(loads) - min(loads) <= max(before) - min(before)
    ranked = sorted(costs, reverse=True)
    rounds = [ranked[start : start + world] for start in range(0, len(costs), world)]
    assert max(loads) - min(loads) <= max(r[0] - r[-1] for r in rounds)
    # forward i of every rank comes from round i: the lockstep cost stays round-robin's
    assert [sorted(costs[mine[i]] for mine in dealt) for i in range(len(rounds))] == [
        sorted(r) for r in rounds
    ]


def test_rank_0_no_longer_gets_the_longer_micro_batch_every_time():
    """Today's dealing gave rank 0 micro-batches 0, 2, ... of the length-sorted list: the
    costliest of every round, 14 vs 12 here; balanced, both ranks run 13."""
    prompts, responses = [1] * 4, [7, 6, 5, 4]

    def cost(span):
        return forward_tokens(span, prompts, responses)

    per_rank = rank_spans([[0], [1], [2], [3]], 2, "minibatch 0", cost)
    assert [sum(cost(span) for span in mine) for mine in per_rank] == [13, 13]
    assert [[cost(span) for span in mine] for mine in per_rank] == [[8, 5], [7, 6]]


def test_fixed_size_micro_batches_run_in_lockstep_by_cost():
    """Fixed-size micro-batches in minibatch order: dealt as they came, rank 0 ran the two
    short ones while rank 1 ran the two long ones (each forward waits for the slower
    rank: 20 + 20 positions in lockstep, loads 8 vs 40); sorted into rounds, 20 + 4, 24 each."""
    prompts, responses = [1] * 8, [1, 1, 9, 9, 1, 1, 9, 9]

    def cost(span):
        return forward_tokens(span, prompts, responses)

    per_rank = rank_spans(fixed_size(8, 2), 2, "minibatch 0", cost)
    lockstep = sum(max(cost(mine[i]) for mine in per_rank) for i in range(2))
    assert lockstep == 24
    assert [sum(map(cost, mine)) for mine in per_rank] == [24, 24]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, tiny_pair_paths):
    import ray

    from algorithms.training.ray import AgentFailure

    root = tmp_path_factory.mktemp("group")
    one = train(group_config(root / "one", tiny_pair_paths, 1, 3), probe=True)
    two = train(group_config(root / "two", tiny_pair_paths, 2, 3, TWO_RANK_OPTIONS), probe=True)
    packed_options = {**TWO_RANK_OPTIONS, "padding_free": True}
    packed = train(group_config(root / "packed", tiny_pair_paths, 2, 1, packed_options), probe=True)
    resumed_config = group_config(root / "resumed", tiny_pair_paths, 2, 3, TWO_RANK_OPTIONS)
    from algorithms.training.loop import Trainer

    first = Trainer(resumed_config)

    def kill_after_step_1(record):
        if record.step == 1:
            ray.kill(first.policies["tiny-b"].ranks[1])

    with pytest.raises(AgentFailure) as failure:
        first.train(on_step=kill_after_step_1)
    resumed = train(resumed_config)
    yield {
        "one": one,
        "two": two,
        "packed": packed,
        "resumed": resumed,
        "failure": failure.value,
    }
    ray.shutdown()


@pytest.mark.slow
def test_two_ranks_give_the_metrics_of_one_rank(scenario):
    one, two = comparable(scenario["one"].rows), comparable(scenario["two"].rows)
    assert [(r["step"], r["agent"]) for r in two] == [(r["step"], r["agent"]) for r in one]
    for a, b in zip(one, two, strict=True):
        assert sorted(a) == sorted(b)
        for key, value in a.items():
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (a["step"], key)
            else:
                assert b[key] == value, (a["step"], key)


def _assert_gradients_of_one_rank(one, other) -> None:
    for agent, (norm, gradients) in one.gradients.items():
        other_norm, theirs = other.gradients[agent]
        assert other_norm == pytest.approx(norm, rel=1e-5)
        assert sorted(theirs) == sorted(gradients) and gradients
        worst = 0.0
        for key, value in gradients.items():
            scale = float(np.abs(value).max())
            assert scale > 0, (agent, key)
            worst = max(worst, float(np.abs(theirs[key] - value).max()) / scale)
            assert np.abs(theirs[key] - value).max() <= 1e-5 * scale, (agent, key)
        print(f"{agent}: grad norm {norm:.6g} vs {other_norm:.6g}; max diff / max grad {worst:.2e}")


@pytest.mark.slow
def test_two_ranks_give_the_gradients_of_one_rank(scenario):
    """Before any optimiser step, on one fixed minibatch: 2 ranks (token-budget micro-batches
    dealt over the ranks, chunked log-probs) sum to the gradient of 1 rank (one pass)."""
    _assert_gradients_of_one_rank(scenario["one"], scenario["two"])


@pytest.mark.slow
def test_two_padding_free_ranks_give_the_gradients_of_one_padded_rank(scenario):
    """The same with `padding_free` on the 2 ranks (packed rows through FSDP2, sdpa's
    block-diagonal mask), against the padded single pass; no padded position ran."""
    _assert_gradients_of_one_rank(scenario["one"], scenario["packed"])
    shares = [v for r in scenario["packed"].rows for k, v in r.items() if "padding_share" in k]
    assert shares and all(share == 0 for share in shares)


@pytest.mark.slow
def test_two_ranks_give_the_weights_of_one_rank(scenario):
    """Adam divides by sqrt(v): where a gradient is ~0, float-order noise moves a weight by
    up to lr per step, so the test bounds each tensor's change, not single elements."""
    assert_weights_within_adam_noise(scenario["one"].weights, scenario["two"].weights)


@pytest.mark.slow
def test_a_killed_rank_stops_the_run_and_the_resumed_run_is_exact(scenario):
    failure = scenario["failure"]
    # whichever rank answers first names the cause: the dead actor, or its peer's gloo error
    assert failure.agent == "tiny-b" and failure.method == "generate"
    two, resumed = scenario["two"], scenario["resumed"]
    assert resumed.ran == [2], "resumed from the checkpoint after step 1, not from scratch"
    assert comparable(resumed.rows) == comparable(two.rows)[-len(resumed.rows) :]
    for agent, weights in two.weights.items():
        for key, value in weights.items():
            np.testing.assert_array_equal(resumed.weights[agent][key], value, err_msg=key)


@pytest.mark.slow
def test_each_rank_is_a_gloo_process_in_its_agents_placement_group(scenario):
    groups = set()
    for infos in scenario["two"].placement.values():
        assert [info["rank"] for info in infos] == [0, 1]
        assert {info["backend"] for info in infos} == {"gloo"}
        assert len({info["placement_group_id"] for info in infos}) == 1
        assert all(info["torch_threads"] == 1 for info in infos)
        groups.add(infos[0]["placement_group_id"])
    assert len(groups) == 2, "each agent has its own placement group"
