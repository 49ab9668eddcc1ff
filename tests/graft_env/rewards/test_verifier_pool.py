"""VerifierPool: batching, any-thread use, hard time limit, crash recovery, invariants."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graft_env.rewards import STATUSES, Verdict, VerifierPool, status_counts

TIMEOUT_S = 2.0
# A hang guard, not a speed test: a pool that never kills a job runs past it, a slow or loaded
# machine (kill + reap + IPC take well under a second) does not come near it.
HANG_GUARD_S = 60.0
NUM_WORKERS = 2

CORRECT = ["so \\boxed{0.5}", "\\boxed{27}", "\\boxed{x^2+1}", "\\boxed{(3, \\frac{\\pi}{2})}"]
GOLDS = ["\\frac{1}{2}", "27.0", "x^2+1", "(3, \\frac{\\pi}{2})"]


@pytest.fixture(scope="module")
def pool() -> Iterator[VerifierPool]:
    with VerifierPool(num_workers=NUM_WORKERS, timeout_s=TIMEOUT_S) as shared:
        yield shared


def _time_bound(num_items: int) -> float:
    rounds = -(-num_items // NUM_WORKERS)
    return rounds * TIMEOUT_S + HANG_GUARD_S


def test_batch_is_verified_in_input_order(pool: VerifierPool) -> None:
    wrong = ["\\boxed{0.4}", "\\boxed{28}", "no box here", "\\boxed{\\frac{1}{}}"]
    verdicts = pool.verify_batch(CORRECT + wrong, GOLDS + GOLDS)
    assert [v.reward for v in verdicts] == [1.0] * 4 + [0.0] * 4
    assert [v.status for v in verdicts[4:]] == ["ok", "ok", "no_answer", "parse_error"]
    assert [v.extracted for v in verdicts[:2]] == ["0.5", "27"]


def test_empty_batch(pool: VerifierPool) -> None:
    assert pool.verify_batch([], []) == []


def test_works_from_other_threads_concurrently(pool: VerifierPool) -> None:
    results: dict[int, list[Verdict]] = {}

    def run(thread_index: int) -> None:
        results[thread_index] = pool.verify_batch(CORRECT * 5, GOLDS * 5)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [0, 1, 2]
    for verdicts in results.values():
        assert status_counts(verdicts)["ok"] == 20
        assert all(v.reward == 1.0 for v in verdicts)


def test_batch_is_spread_over_workers() -> None:
    # Each item runs until the parent kills it (0.2 s, far below math-verify's 1 s alarm, so a
    # parent waking late still kills first) and a killed worker is replaced: both workers
    # replaced means each ran one of the two items (on one worker, one would be replaced twice
    # and the other never). No clock is read.
    limit = 0.2
    slow = "\\boxed{9^{9^{9^{9^{9}}}}}"
    with VerifierPool(num_workers=2, timeout_s=limit) as own_pool:
        before = own_pool.worker_pids
        verdicts = own_pool.verify_batch([slow, slow], ["1", "1"])
        after = own_pool.worker_pids
    assert verdicts == [Verdict(0.0, "timeout", slow[7:-1])] * 2
    assert None not in before and set(before).isdisjoint(after)


def test_crashed_worker_scores_error_and_is_replaced() -> None:
    with VerifierPool(num_workers=1, timeout_s=30.0) as own_pool:
        (victim,) = own_pool.worker_pids
        results: list[list[Verdict]] = []
        slow = "\\boxed{9^{9^{9^{9^{9}}}}}"
        thread = threading.Thread(
            target=lambda: results.append(own_pool.verify_batch([slow, "\\boxed{2}"], ["1", "2"]))
        )
        thread.start()
        guard = time.monotonic() + 60.0  # a hang guard: the worker may start slowly when loaded
        # the slow item runs in the only worker once it has reported its extracted answer
        while own_pool.running != [slow[7:-1]] and time.monotonic() < guard:
            time.sleep(0.05)
        assert own_pool.running == [slow[7:-1]]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        thread.join(timeout=120.0)  # a hang guard: a replacement worker starts slowly when loaded
        assert not thread.is_alive()
        assert results[0] == [Verdict(0.0, "error", slow[7:-1]), Verdict(1.0, "ok", "2")]
        assert own_pool.worker_pids != [victim]


# A training script: torch at top level. Forkserver processes import the main module again
# (as __mp_main__) before they run; verifier workers skip it (`_without_main`).
TORCH_SCRIPT = textwrap.dedent(
    r"""
    import json, os, sys
    import torch

    if __name__ == "__mp_main__":  # a process that imported this script again
        with open(os.path.join(sys.argv[1], f"{os.getpid()}.json"), "w") as out:
            out.write("{}")

    if __name__ == "__main__":
        from graft_env.rewards import VerifierPool

        with VerifierPool(num_workers=2) as pool:
            assert pool.verify_batch(["\\boxed{2}"], ["2"])[0].reward == 1.0
            threads = []
            for pid in pool.worker_pids:
                with open(f"/proc/{pid}/status") as status:
                    threads.append(status.read().split("Threads:")[1].split()[0])
        print(json.dumps([os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(), threads]))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc/<pid>/status")
def test_workers_run_one_thread_without_importing_the_script(tmp_path: Path) -> None:
    """Whatever the parent runs with (here the user's 2 threads and OpenMP's spinning default),
    a worker is one of several single-threaded processes sharing the cores with it (numpy's
    OpenBLAS would start a second thread under OMP_NUM_THREADS=2), and it does not import the
    script or its torch again."""
    script = tmp_path / "train.py"
    script.write_text(TORCH_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        env={**env, "OMP_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["2", 2, ["1", "1"]]  # the parent keeps its own settings
    assert not list(tmp_path.glob("*.json"))  # no worker imported the script


def test_closed_pool_refuses_work() -> None:
    own_pool = VerifierPool(num_workers=1)
    own_pool.close()
    own_pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        own_pool.verify_batch(["\\boxed{1}"], ["1"])


@pytest.mark.parametrize(
    ("responses", "golds", "error", "message"),
    [
        (["a", "b"], ["a"], ValueError, "2 responses but 1 golds"),
        (["a", None], ["a", "b"], TypeError, r"responses\[1\] must be str"),
        (["a"], [3], TypeError, r"golds\[0\] must be str"),
    ],
)
def test_bad_batches_are_rejected(
    pool: VerifierPool, responses: list, golds: list, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        pool.verify_batch(responses, golds)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"num_workers": 0}, "num_workers"), ({"timeout_s": -1.0}, "timeout_s")],
)
def test_bad_pool_settings_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VerifierPool(**kwargs)


_LATEX_PIECES = st.sampled_from(
    [
        "\\frac{",
        "}",
        "{",
        "^",
        "_",
        "\\sqrt",
        "\\pi",
        "(",
        ")",
        ",",
        "x",
        "9",
        "1.5",
        "\\\\",
        "\\left(",
        "\\right]",
        "\\boxed{",
        "$",
        "=",
        "\\infty",
        "\\text{",
        " ",
        "%",
        "-",
    ]
)
_LATEX_ISH = st.lists(_LATEX_PIECES, max_size=30).map("".join)
_RESPONSES = st.one_of(
    st.text(max_size=300),
    st.builds(lambda body: "The answer is \\boxed{" + body + "}", _LATEX_ISH),
    st.builds(lambda body: "\\boxed{" + body + "}", st.text(max_size=60)),
)
_GOLDS = st.sampled_from([*GOLDS, "\\text{Evelyn}", "[1, 2)", "\\sqrt{2}"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_RESPONSES, _GOLDS), max_size=6))
def test_arbitrary_text_never_raises_and_respects_the_limit(
    pool: VerifierPool, items: list[tuple[str, str]]
) -> None:
    responses = [response for response, _ in items]
    golds = [gold for _, gold in items]
    start = time.monotonic()
    verdicts = pool.verify_batch(responses, golds)
    assert time.monotonic() - start <= _time_bound(len(items))
    assert len(verdicts) == len(items)
    for verdict in verdicts:
        assert verdict.reward in (0.0, 1.0)
        assert verdict.status in STATUSES
