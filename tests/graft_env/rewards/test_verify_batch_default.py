"""The module-level verify_batch on the shared, lazily created pool."""

import threading

from graft_env.rewards import Verdict, default_pool, verify_batch


def test_module_verify_batch_works_from_a_thread_and_reuses_one_pool() -> None:
    results: list[list[Verdict]] = []
    thread = threading.Thread(
        target=lambda: results.append(
            verify_batch(["\\boxed{0.5}", "\\boxed{3}", "none"], ["\\frac{1}{2}", "4", "1"])
        )
    )
    thread.start()
    thread.join()
    assert results == [
        [Verdict(1.0, "ok", "0.5"), Verdict(0.0, "ok", "3"), Verdict(0.0, "no_answer", None)]
    ]
    assert default_pool() is default_pool()
    assert verify_batch(["\\boxed{27}"], ["27.0"], timeout_s=3.0) == [Verdict(1.0, "ok", "27")]
