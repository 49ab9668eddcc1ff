"""graft-library: a receiver on its own data order rescues all-fail prompts with the library's
groups (graft-stored's gate, weights and update), re-verifies them, and logs their ages."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging

import numpy as np
import pytest
from library_runs import run_config

import algorithms
from algorithms.library import LIBRARY_AGENT, build_library, read_library
from algorithms.library.format import LibraryError, write_library
from algorithms.training.loop import Trainer
from algorithms.training.run_config import ConfigError, result_differences

RECEIVER_SEED = 4  # a third data order; the peers' are 1 and 2


def test_receiver_rescues_all_fail_prompts_from_the_library(tmp_path, peer_runs, caplog):
    """Certain on any CPU: the receiver answers with one token (no `\\boxed{}` answer fits), so
    every prompt is all-fail, and whatever the peers' groups are, the groups used, rescued
    and their ages are counted from the library and the transfers themselves."""
    build_library(peer_runs, tmp_path / "lib")
    library = read_library(tmp_path / "lib")
    last_step = {source: max(g.step for g in library if g.source == source) for source in
                 {g.source for g in library}}  # fmt: skip
    config = run_config(
        tmp_path / "receiver",
        "graft-library",
        "tiny-b",
        RECEIVER_SEED,
        steps=2,
        library={"path": str(tmp_path / "lib")},
        sampling={"max_new_tokens": 1},
    )
    records = []
    trainer = Trainer(config)
    rows = trainer.train(on_step=records.append)
    logged = [json.loads(line) for line in (tmp_path / "receiver" / "metrics.jsonl").open()]
    assert [r["step"] for r in logged] == [0, 1] and logged == rows

    used = 0
    for record, row in zip(records, rows, strict=True):
        own = record.rollouts["tiny-b"]
        transfers = record.transfers["tiny-b"]
        assert not own.k.any()
        assert row["library/all_fail_prompts"] == len(own.k)
        usable = {g.problem for g in library if 0 < g.k < 4}
        problems = [p.problem for p in trainer.env.batch_problems(record.step)]
        assert sorted(g.prompt_index for g in transfers) == [
            i for i, problem in enumerate(problems) if problem in usable
        ]
        assert row["library/used_groups"] == len(transfers)
        assert row[f"exchange/{LIBRARY_AGENT}->tiny-b/prompts"] == len(transfers)
        ages = []
        for group in transfers:
            problem = trainer.env.batch_problems(record.step)[group.prompt_index].problem
            # the latest written group of this prompt that Eq.4 can take (1 <= k < n)
            candidates = [
                g for g in library if g.problem == problem and 0 < g.k < 4
            ]  # stored rewards: this run re-verified them unchanged
            latest = max(candidates, key=lambda g: g.generated_at)
            assert own.k[group.prompt_index] == 0
            assert group.source == LIBRARY_AGENT and group.texts == latest.texts
            ages.append(last_step[latest.source] - latest.step)  # within its source run
        assert row["library/reward_changed_on_reverify"] == 0
        if transfers:
            assert row["library/age_steps/mean"] == pytest.approx(np.mean(ages))
            assert row["library/age_steps/min"] >= 0
            assert 0 < row["library/age_hours/max"] < 1
            admitted = row[f"exchange/{LIBRARY_AGENT}->tiny-b/admitted"]
            assert row["batch/peer_sequences"] == admitted
            shares = [v for k, v in row.items() if k.endswith("/admitted_share")]
            assert shares and all(0 <= s <= 1 for s in shares)
            assert row["library/age_hours_lt1/admitted"] == admitted
        used += len(transfers)
        rescued = sum(bool(np.any(g.weights > 0)) for g in transfers)
        assert row["library/rescued_prompts"] == rescued
    assert used >= 1, "no prompt of the receiver's batches has a library group Eq.4 can take"


def test_stored_rewards_are_re_verified_when_the_library_is_read(tmp_path, peer_runs):
    build_library(peer_runs, tmp_path / "lib")
    flipped = [
        dataclasses.replace(g, rewards=1.0 - g.rewards) for g in read_library(tmp_path / "lib")
    ]
    write_library(flipped, tmp_path / "wrong", append=False)
    config = run_config(
        tmp_path / "receiver",
        "graft-library",
        "tiny-b",
        RECEIVER_SEED,
        steps=1,
        library={"path": str(tmp_path / "wrong")},
    )
    trainer = Trainer(config)
    trainer.open()
    record = trainer.run_step()
    row = record.metrics["tiny-b"]
    assert row["library/groups_verified"] > 0
    assert row["library/reward_changed_on_reverify"] == 4 * row["library/groups_verified"]
    truth = {g.group_id: g.rewards for g in read_library(tmp_path / "lib")}
    peer = record.rollouts[LIBRARY_AGENT]
    for group in record.transfers["tiny-b"]:
        texts = peer.texts[group.prompt_index]
        original = next(g for g in flipped if g.texts == texts)
        np.testing.assert_array_equal(peer.rewards[group.prompt_index], truth[original.group_id])


def test_graft_library_is_graft_stored_reading_a_library():
    assert algorithms.preset("graft-library") == algorithms.preset("graft-stored")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"library": {"path": "lib", "choose": "model"}}, r"library.model: None must be set"),
        ({"library": {"path": "lib", "model": "tiny-a"}}, r"exactly when library.choose"),
        (
            {"library": {"path": "lib"}, "stored_peer": {"run_dir": "r", "agent": "tiny-a"}},
            r"library: set stored_peer .* or library, not both",
        ),
        ({"library": {"path": "lib", "choose": "oldest"}}, r"library.choose"),
    ],
)
def test_library_settings_are_checked_with_the_config(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        run_config(tmp_path / "r", "graft-library", "tiny-b", 0, steps=1, **changes)
    with pytest.raises(ConfigError, match=r"'library' is the library's name in a run"):
        run_config(tmp_path / "r", "graft-library", "library", 0, steps=1, library={"path": "x"})


def test_an_unusable_library_or_selection_is_refused_before_training(tmp_path, peer_runs):
    build_library(peer_runs, tmp_path / "lib")
    library = {"path": str(tmp_path / "lib")}

    def trainer(**changes):
        return Trainer(run_config(tmp_path / "r", "graft-library", "tiny-b", 0, steps=1, **changes))

    with pytest.raises(
        LibraryError,
        match=r"none of its 36 groups is usable by this run \(36 of another size than n=8 "
        r"\(n=4: 36\), 0 of problems not in this run's dataset\)",
    ):
        trainer(library=library, options={"n": 8})
    with pytest.raises(
        LibraryError, match=r"none of its 36 groups .*36 of other models than tiny-b"
    ):
        trainer(library={**library, "choose": "model", "model": "tiny-b"})
    with pytest.raises(LibraryError, match="selection='random_prompts' draws prompts without"):
        trainer(library=library, options={"selection": "random_prompts"})
    with pytest.raises(ConfigError, match="needs stored_peer or library set"):
        trainer()


def test_configs_without_a_library_keep_their_recorded_form(tmp_path):
    # config.yaml of runs (and compare cells' hashes) recorded before `library` existed
    plain = run_config(tmp_path / "r", "grpo", "tiny-b", 0, steps=1)
    assert "library" not in plain.to_dict()
    with_library = run_config(
        tmp_path / "r", "graft-library", "tiny-b", 0, steps=1, library={"path": "lib"}
    )
    recorded = with_library.to_dict()["library"]
    assert recorded == {"path": "lib", "choose": "most_recent", "model": None}
    assert result_differences(plain.to_dict(), with_library.to_dict()) == [
        "algorithm: 'grpo' -> 'graft-library'",
        f"library: (unset) -> {recorded!r}",
    ]


def test_a_run_says_at_its_start_which_groups_it_can_use(tmp_path, peer_runs, caplog):
    build_library(peer_runs, tmp_path / "lib")
    groups = read_library(tmp_path / "lib")
    per_response = ("texts", "token_ids", "logprobs", "logprob_origins", "finish_reasons")
    doubled = [
        dataclasses.replace(
            g,
            group_id=g.group_id + "x2",
            **{name: getattr(g, name) * 2 for name in (*per_response, "statuses")},
            rewards=np.tile(g.rewards, 2),
        )
        for g in groups[:3]
    ]  # an 8-response group, as a 2-epoch log without step column imports
    elsewhere = dataclasses.replace(groups[0], group_id="other", key="0" * 64, problem="Other.")
    write_library([*doubled, elsewhere], tmp_path / "lib", append=True)
    config = run_config(
        tmp_path / "r",
        "graft-library",
        "tiny-b",
        0,
        steps=1,
        library={"path": str(tmp_path / "lib")},
    )
    caplog.set_level(logging.INFO, logger="algorithms.training.loop")
    Trainer(config)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("library ")]
    assert lines == [
        f"library {tmp_path / 'lib'}: 36 of its 40 groups are usable by this run (3 of another "
        "size than n=4 (n=8: 3), 1 of problems not in this run's dataset)"
    ]


def test_a_resume_refuses_a_library_that_changed_since(tmp_path, peer_runs):
    build_library(peer_runs[:1], tmp_path / "lib")

    def config(steps):
        return run_config(
            tmp_path / "receiver",
            "graft-library",
            "tiny-b",
            RECEIVER_SEED,
            steps=steps,
            library={"path": str(tmp_path / "lib")},
        )

    Trainer(config(1)).train()
    Trainer(config(2)).train()  # unchanged: resumes
    trained_on = hashlib.sha256((tmp_path / "lib" / "_MANIFEST.json").read_bytes()).hexdigest()
    build_library(peer_runs[1:], tmp_path / "lib", append=True)  # newer groups: other choices
    with pytest.raises(ConfigError) as error:
        Trainer(config(3)).train()
    message = str(error.value)
    assert "\n" not in message
    checkpoint = tmp_path / "receiver" / "checkpoints" / "step_000002"
    recorded = json.loads((checkpoint / "state.json").read_text())["library_manifest_sha256"]
    now = hashlib.sha256((tmp_path / "lib" / "_MANIFEST.json").read_bytes()).hexdigest()
    assert recorded == trained_on != now
    assert message == (
        f"{tmp_path / 'receiver'}: checkpoint {checkpoint} was trained on library "
        f"{tmp_path / 'lib'} when its manifest's SHA-256 was {recorded}; it is {now} now (an "
        "--append since?), which changes the groups the run gets: resume with the library as "
        "it was, or choose another run_dir"
    )
