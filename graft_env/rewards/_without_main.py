"""Imported by the verifier pool's fork server: verifier workers skip the main module.

Why: under forkserver (and spawn) a new process imports the program's main module again,
as ``__mp_main__``, before it runs, so that what was defined there can be unpickled. A
verifier worker needs nothing from it (its target is `_worker.worker_main`), and that
import is what broke a script without an ``if __name__ == "__main__":`` guard (every
worker ran the script again up to its first verify, which started a pool inside the
worker: ~110 lines of tracebacks, then an error), code read from stdin (no file to import
again: ``<stdin>``), and cost every worker, each replacement of a timed-out one included,
the script's top-level imports (torch: seconds).

The fork server prepares each new process with `multiprocessing.spawn.prepare` (the
parent's sys.path, working directory, main module); from here on it leaves out the main
module for processes named `_worker.WORKER_NAME` only, so whatever else uses the same fork
server still gets it.
"""

from multiprocessing import spawn

from graft_env.rewards._worker import WORKER_NAME

_MAIN_KEYS = ("init_main_from_name", "init_main_from_path")
_prepare = spawn.prepare


def _prepare_without_main(data: dict) -> None:
    if data.get("name") == WORKER_NAME:
        data = {key: value for key, value in data.items() if key not in _MAIN_KEYS}
    _prepare(data)


spawn.prepare = _prepare_without_main
