"""A recording stand-in for `vllm` (tests only; put its parent folder first on sys.path).

`LLM` records every call into `EVENTS` with the engine's state at that moment (weights
awake, KV cache awake), keeps the state as vLLM's sleep mode would (sleep drops both; a
wake_up of a tag restores it), answers `generate` with one token per sample (cut by the
length limit), and `collective_rpc` as one worker that loaded everything. With
`$GRAFT_FAKE_VLLM_PIDS` set to a folder, each engine starts real processes, an engine core
(a child of the process that builds the `LLM`) with one worker of its own (a grandchild), as
vLLM's multiprocess engine does, and writes their pids there;
`llm_engine.engine_core.shutdown()` stops both.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

EVENTS: list[tuple[str, bool, bool]] = []  # (call, weights awake, KV cache awake)
TOKEN = 5  # every sample's one token
CORE = """
import pathlib, signal, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
pathlib.Path(sys.argv[1], f"{worker.pid}.pid").write_text("worker")
def stop(*_):
    worker.terminate()
    worker.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(600)
"""


class SamplingParams:
    def __init__(self, **kwargs) -> None:
        self.__dict__.update(kwargs)


class _Core:
    def __init__(self) -> None:
        self.process = None
        folder = os.environ.get("GRAFT_FAKE_VLLM_PIDS")
        if folder:
            # an engine core (a child) that starts a worker (a grandchild), as vLLM's does,
            # and stops it when terminated
            self.process = subprocess.Popen([sys.executable, "-c", CORE, folder])
            (Path(folder) / f"{self.process.pid}.pid").write_text("core")

    def shutdown(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()


class LLM:
    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.weights = self.kv = True
        self._note("LLM")
        self.llm_engine = SimpleNamespace(
            model_config=SimpleNamespace(max_model_len=kwargs["max_model_len"] or 128),
            engine_core=_Core(),
        )

    def _note(self, call: str) -> None:
        EVENTS.append((call, self.weights, self.kv))

    def sleep(self, level: int = 1) -> None:
        self._note(f"sleep({level})")
        self.weights = self.kv = False

    def wake_up(self, tags=None) -> None:
        self._note(f"wake_up({','.join(tags) if tags else 'all'})")
        tags = tags or ["weights", "kv_cache"]
        self.weights = self.weights or "weights" in tags
        self.kv = self.kv or "kv_cache" in tags

    def collective_rpc(self, method: str, args=()):
        self._note(method)
        answers = {"graft_load_weights": [], "graft_scale_logits": 1, "graft_seed": args[:1]}
        return [answers.get(method)]

    def reset_prefix_cache(self) -> None:
        self._note("reset_prefix_cache")

    def generate(self, prompts, params, use_tqdm=False):
        self._note("generate")
        return [
            SimpleNamespace(
                outputs=[
                    SimpleNamespace(
                        index=i,
                        token_ids=[TOKEN],
                        finish_reason="length",
                        logprobs=[{TOKEN: SimpleNamespace(logprob=-0.5)}],
                    )
                    for i in range(p.n)
                ]
            )
            for p in params
        ]
