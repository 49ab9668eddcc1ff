from graft_env.suggest import did_you_mean


def test_a_near_miss_is_suggested() -> None:
    assert did_you_mean("grpo-n8", ["grpo-n-8", "graft", "hacpo"]) == "; did you mean 'grpo-n-8'?"


def test_nothing_close_suggests_nothing() -> None:
    assert did_you_mean("zzzz", ["grpo-n-8", "graft"]) == ""


def test_two_close_names_are_both_offered() -> None:
    assert did_you_mean("graft-a", ["graft-b", "graft-c", "sgt"]).count("'graft-") == 2
