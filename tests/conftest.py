"""Fixtures every test folder shares: hypothesis's profiles, where the real benchmark files are,
one torch thread
(tiny models run much faster on one thread when the 2 cores are shared), and for the
evaluation and comparison tests a tiny random-init policy, a scripted Policy test double
and the shared verifier pool.

Every checkout has the read-only benchmark files at `../shared/data` next to the
project root (see that folder's README); `$GRAFT_DATA_DIR` points elsewhere, and `graft data
fetch` writes them where the loaders look too. A test that needs them takes the `data_dir`
fixture, which skips it, saying why, when they are absent; with GRAFT_REQUIRE_DATA=1 (CI) it
fails instead, so a run that lost its data cannot pass on skips. No test reads the network:
the Hugging Face Hub is set offline for the session (models and datasets). The tiny
model is built like tests/graft_env/policies/conftest.py does (random init, saved to a
temporary directory, loaded through the real HFPolicy path) but with room for a real
MATH500 prompt (1,024 positions).

Hypothesis runs derandomized by default (profile "default"): each test draws the examples its
own source fixes, no database replays old failures and no deadline or health check reads the
clock, so `python -m pytest -q` gives one verdict per commit on any machine. Profile
"explore" draws new examples from `--hypothesis-seed` (.ci/run passes one derived from the
commit and prints it): `python -m pytest -q -m "hypothesis and not slow and not vllm"
--hypothesis-profile=explore --hypothesis-seed=N` reruns a failure found there (the seed also
heads a run's report without -q).
"""

from __future__ import annotations

import os

# Before transformers, huggingface_hub or datasets is imported: they read these once.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import subprocess
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

from graft_env.data import DatasetError, Problem
from graft_env.data.benchmarks import BENCHMARKS
from graft_env.data.files import find_data_dir, how_to_get_data
from graft_env.policies import Generation, HFPolicy, HFPolicyOptions, SamplingParams
from graft_env.policies.tiny.models import TinyShape, build_model
from graft_env.policies.tiny.tokenizer import CHATML_STYLE, train_tokenizer
from graft_env.rewards import VerifierPool, default_pool

_NO_CLOCK = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("default", derandomize=True, database=None, **_NO_CLOCK)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True, **_NO_CLOCK)
settings.load_profile("default")


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed", None)
    return f"hypothesis: profile {settings.get_current_profile_name()}, seed {seed}"


REQUIRE_DATA_ENV = "GRAFT_REQUIRE_DATA"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data directory the loaders find (`graft_env.data.files.find_data_dir`), with every
    benchmark file; else the test is skipped with the reason (failed under
    GRAFT_REQUIRE_DATA=1)."""
    try:
        path = find_data_dir()
    except DatasetError as error:
        return _no_data(str(error))
    if path is None:
        return _no_data(f"no benchmark data directory: {how_to_get_data()}")
    missing = [name for b in BENCHMARKS for name in b.files.values() if not (path / name).is_file()]
    if missing:
        return _no_data(f"benchmark data at {path} lacks {', '.join(missing)}")
    return path


def _no_data(reason: str) -> Path:
    if os.environ.get(REQUIRE_DATA_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_DATA_ENV}=1: data tests must not skip)")
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


CORPUS = [
    f"What is {a} + {b}? {a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}."
    for a in range(0, 60, 3)
    for b in range(0, 60, 7)
]
SHAPE = TinyShape(hidden=32, layers=2, heads=2, max_positions=1024)
WRONG_ANSWER = "-987654321"

Script = Callable[[int, int, int], str]
"""`script(problem_index, call, sample_index) -> "right" | "wrong" | "none"`."""


class ScriptedPolicy:
    """The sampling half of the Policy protocol with answers fixed by a script.

    A legitimate test double for the metric arithmetic: `generate` returns real
    `Generation` objects whose text is the gold answer boxed ("right"), a wrong number
    boxed ("wrong") or no boxed answer ("none"), chosen by `script(problem_index, call,
    sample_index)`, where `call` counts earlier generate calls that included that prompt
    (so repeat r of an evaluation sees call == r). Every sampling seed is recorded.
    """

    temperature = 1.0

    def __init__(self, problems: Sequence[Problem], script: Script, name: str = "scripted"):
        self.name = name
        self.script = script
        self.index = {self.format_prompt(p.problem): i for i, p in enumerate(problems)}
        self.golds = [p.answer for p in problems]
        self.calls: Counter[str] = Counter()
        self.seeds: list[int] = []

    def format_prompt(self, problem: str) -> str:
        return f"Question: {problem}\nAnswer:"

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams
    ) -> list[list[Generation]]:
        self.seeds.append(sampling.seed)
        groups = []
        for prompt in prompts:
            problem_index, call = self.index[prompt], self.calls[prompt]
            self.calls[prompt] += 1
            texts = {
                "right": f"So the answer is \\boxed{{{self.golds[problem_index]}}}.",
                "wrong": f"So the answer is \\boxed{{{WRONG_ANSWER}}}.",
                "none": "I could not finish.",
            }
            groups.append(
                [
                    self._generation(texts[self.script(problem_index, call, sample)])
                    for sample in range(n)
                ]
            )
        return groups

    @staticmethod
    def _generation(text: str) -> Generation:
        token_ids = [ord(char) for char in text]
        return Generation(text, token_ids, np.zeros(len(token_ids), np.float32), "stop")


def handmade_problems(prefix: str, answers: Sequence[str]) -> list[Problem]:
    return [
        Problem(
            id=f"{prefix}/{i}", problem=f"Problem {prefix} {i}: find x.", answer=a, dataset=prefix
        )
        for i, a in enumerate(answers)
    ]


@pytest.fixture(scope="session")
def verifier() -> VerifierPool:
    """The process-wide pool: `graft eval` uses it too, so the tests start workers once."""
    return default_pool()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-eval-model")
    tokenizer = train_tokenizer(CORPUS, CHATML_STYLE)
    model = build_model(
        "llama", len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id, SHAPE, seed=3
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_dir: Path) -> HFPolicy:
    return HFPolicy(tiny_model_dir, options=HFPolicyOptions(generation_batch_size=16))


@pytest.fixture(scope="session")
def scripted() -> type[ScriptedPolicy]:
    """The `ScriptedPolicy` class (test modules cannot import from a conftest)."""
    return ScriptedPolicy


@pytest.fixture(scope="session")
def handmade() -> Callable[[str, Sequence[str]], list[Problem]]:
    """`handmade(prefix, answers)`: one hand-made Problem per gold answer."""
    return handmade_problems


@pytest.fixture
def live_pid():
    """The pid of a live process on this host (not this one), dead after `kill()` (a cell
    lock's holder in the compare tests)."""
    process = subprocess.Popen(["sleep", "60"])

    def kill() -> None:
        process.kill()
        process.wait()

    yield process.pid, kill
    kill()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say up front when the first model test will build the tiny pair: pytest captures the
    builder's own progress, so otherwise the run is silent for minutes."""
    from graft_env.policies import default_cache_dir
    from graft_env.policies.tiny import TinyPairConfig, cache_key
    from graft_env.policies.tiny.build import COMPLETE_FILE

    config = TinyPairConfig()
    target = default_cache_dir() / f"{config.name}-{cache_key(config, 0)}"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not (target / COMPLETE_FILE).is_file():
        reporter.write_line(
            f"the tiny pair is not built yet ({target}): the first test that needs it builds "
            "it, about 5-10 min on 2 quiet cores (longer beside other work), silently"
        )


@pytest.fixture
def registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strategies, their options and registry entries a test registers stay in that test."""
    import algorithms.config
    import algorithms.exchange.base
    import algorithms.presets  # the entries, registered before they are copied
    import algorithms.registry

    for module, name in [
        (algorithms.exchange.base, "_STRATEGIES"),
        (algorithms.config, "_STRATEGY_OPTIONS"),
        (algorithms.config, "_STRATEGY_CHECKS"),
        (algorithms.registry, "_PRESETS"),
    ]:
        monkeypatch.setattr(module, name, dict(getattr(module, name)))
