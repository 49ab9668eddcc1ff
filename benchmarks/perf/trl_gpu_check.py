"""The TRL path on one GPU: two tiny TRL trainers exchanging live, and one TRL-hosted GRAFT
step at the paper's shapes, each stage under its own time budget (8 minutes in all).

For a single-GPU machine that has torch, transformers and accelerate but no internet, no
vLLM and no Ray. Besides those (and their own dependencies) it imports the checkout and
what importing `algorithms.library.trl_live` pulls in, `WHEELS` (measured: a fresh
interpreter's modules after that import, less what torch, transformers and accelerate
require). Where there is internet, with the GPU machine's Python version, fetch them into
a folder that travels with the checkout; there, install them from it:

    python benchmarks/perf/trl_gpu_check.py --wheels --python 3.11   # prints both commands:
    pip download --dest wheels/ --no-deps --only-binary=:all: --python-version 311 \\
        --implementation cp --platform manylinux_2_28_x86_64 ... trl==1.16.0 ...
    pip install --no-index --find-links wheels/ trl==1.16.0 datasets==5.2.0 ...

(`--wheels` runs by path, before anything is installed.) Then, from the checkout:

    PYTHONPATH=. python -m benchmarks.perf.trl_gpu_check --out trl_gpu_check/

Each stage runs in child processes, killed at the stage's budget: a stage past it is
recorded as timed out and the next one starts. `OUT/results.json` is rewritten after each
stage (and holds the children's per-step records so far):

live  (a) two `LiveGRPOTrainer` agents of random tiny Qwen3 models (a real tokenizer where
      one is on disk, `Qwen/Qwen3-1.7B-Base` from the Hugging Face cache, else a character
      tokenizer built here), one process each on the same GPU, bf16 autocast, 3 generation
      batches of 8 prompts x 4 sampled responses, meeting in a channel folder. A scripted
      0/1 reward (each agent solves one problem, twice per group) makes a group move both
      ways every step, so sampling, the gather, the exchange, peer scoring, the splice and
      the update all run on the GPU; per step: seconds and `exchange/*` counts.
step  (b) one generation batch of a `LiveGRPOTrainer` on a random-weight Qwen3-1.7B
      (`QWEN3_1_7B`, vocabulary 151,936, float32 weights, bf16 autocast, activation
      checkpointing, lr 1e-6): 2 prompts x 8 responses of 4,096 tokens after 256 prompt
      tokens, one group per optimiser step (2 steps; 8 x 4,096 = 32,768 response tokens per
      micro-batch, the paper configs' max_tokens_per_micro_batch), the peer's group of
      prompt 0 moved in from a record in the channel (scored, spliced). Responses are fixed
      token ids in place of sampling (4,096 tokens of a random model would take minutes);
      what is measured is the generation batch's scoring and exchange, then the update:
      update tokens/s (prompt + response tokens trained / update seconds) and peak memory.

--smoke runs both stages on CPU at tiny shapes (about a minute; what CI runs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TRL_VERSION = "1.16.0"
WHEELS = (
    f"trl=={TRL_VERSION}",
    "datasets==5.2.0",
    "dill==0.4.1",
    "multiprocess==0.70.19",
    "pandas==3.1.1",
    "pyarrow==26.0.1",
    "python-dateutil==4.0.0",
    "tzdata==2026.6",
    "xxhash==4.1.0",
    "gymnasium==1.4.0",
    "cloudpickle==3.1.3",
    "farama-notifications==0.0.6",
    "pettingzoo==1.27.0",
    "math-verify==0.9.0",
    "latex2sympy2-extended==1.11.0",
    "antlr4-python3-runtime==4.13.2",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
)
"""The distributions beyond torch, transformers and accelerate (and what they require), at
the versions this check ran with. pydantic's four are also transformers 5's dependencies;
they are listed because older transformers releases do not bring them."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
"""x86-64 Linux with glibc >= 2.28; pip download takes only the tags named."""
BUDGETS = {"live": 180.0, "step": 270.0}
"""Seconds per stage (imports, model set-up and training): 7.5 minutes with the parent's
own, the rest of the 8."""
SMOKE_BUDGETS = {"live": 90.0, "step": 60.0}
QWEN3_1_7B = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
"""Qwen/Qwen3-1.7B-Base's config.json sizes (the paper's second model)."""
TINY_QWEN3 = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    tie_word_embeddings=True,
)
STEP_SHAPES = {
    "paper": dict(prompts=2, n=8, prompt_tokens=256, response_tokens=4096, vocab=151936),
    "smoke": dict(prompts=2, n=4, prompt_tokens=16, response_tokens=32, vocab=2048),
}
AGENTS = ("tiny-a", "tiny-b")
SOLVES = {"tiny-a": 0, "tiny-b": 1}  # the problem each live agent's reward solves twice
SPECIAL = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
LIVE_PROMPTS, LIVE_N, CHUNKS = 8, 4, 2
RECEIVER, PEER = "qwen3-1.7b", "peer"


def wheel_commands(python: str) -> tuple[str, str]:
    """The `pip download` command (for Python `python`, e.g. "3.11") and the offline install."""
    names = " ".join(WHEELS)
    version = python.replace(".", "")
    download = (
        "pip download --dest wheels/ --no-deps --only-binary=:all: "
        f"--python-version {version} --implementation cp "
        f"{' '.join(f'--platform {tag}' for tag in PLATFORMS)} {names}"
    )
    return download, f"pip install --no-index --find-links wheels/ {names}"


def missing_wheels() -> list[str]:
    """The `WHEELS` not installed here: TRL at exactly its version (its hooks are private),
    the others at any version (a newer release than the listed one serves as well)."""
    from importlib import metadata

    missing = []
    for wheel in WHEELS:
        name, version = wheel.split("==")
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            found = None
        if found is None or (name == "trl" and found != version):
            missing.append(wheel if found is None else f"{wheel} (found {found})")
    return missing


# --- the parent: stages under budgets -------------------------------------------------


def write_json(path: Path, data: dict[str, Any]) -> None:
    """`data` to `path`, atomically (a reader never sees half a file)."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    partial.replace(path)


def child_command(stage: str, out: Path, options: argparse.Namespace, agent: str) -> list[str]:
    """This script as one of `stage`'s child processes."""
    command = ["-m", "benchmarks.perf.trl_gpu_check", "--child", stage, "--agent", agent]
    command += ["--out", str(out), "--device", options.device, "--threads", str(options.threads)]
    return [sys.executable, *command, *(["--smoke"] if options.smoke else [])]


def run_stage(stage: str, budget: float, out: Path, options: argparse.Namespace) -> dict:
    """Run `stage`'s children until all exit or `budget` seconds pass (then kill them), and
    return its record: status (ok / failed / timed out), seconds, and the children's."""
    agents = AGENTS if stage == "live" else (RECEIVER,)
    root = Path(__file__).resolve().parents[2]
    paths = [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    start = time.monotonic()
    processes = {}
    for agent in agents:
        log = (out / f"{stage}-{agent}.log").open("w")
        processes[agent] = subprocess.Popen(
            child_command(stage, out, options, agent), cwd=root, env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
    status = "ok"
    while any(p.poll() is None for p in processes.values()):
        if time.monotonic() - start > budget:
            status = "timed out"
            break
        if any(p.poll() not in (None, 0) for p in processes.values()):
            status = "failed"  # one agent stopped: its peers would only wait
            break
        time.sleep(0.5)
    for process in processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    codes = {agent: p.returncode for agent, p in processes.items()}
    if status == "ok" and any(codes.values()):
        status = "failed"
    record: dict[str, Any] = {
        "status": status, "seconds": round(time.monotonic() - start, 1), "budget_s": budget,
        "exit_codes": codes, "children": {},
    }  # fmt: skip
    for agent in agents:
        result = out / f"{stage}-{agent}.json"
        child = json.loads(result.read_text()) if result.is_file() else {}
        if codes[agent]:
            lines = (out / f"{stage}-{agent}.log").read_text(errors="replace").splitlines()
            child["log_tail"] = lines[-15:]
        record["children"][agent] = child
    return record


def run_stages(options: argparse.Namespace) -> dict:
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "smoke": options.smoke, "device": options.device, "python": sys.version.split()[0],
        "stages": {},
    }  # fmt: skip
    budgets = SMOKE_BUDGETS if options.smoke else BUDGETS
    for stage in options.stages:
        print(f"{stage}: running (budget {budgets[stage]:.0f} s)", flush=True)
        record = run_stage(stage, budgets[stage], out, options)
        results["stages"][stage] = record
        write_json(out / "results.json", results)
        print(f"{stage}: {record['status']} in {record['seconds']} s", flush=True)
        for agent, child in record["children"].items():
            print(f"  {agent}: {child.get('summary', child.get('log_tail', ['no result'])[-1])}")
    print(f"results: {out / 'results.json'}")
    return results


# --- the children ----------------------------------------------------------------------


class Progress:
    """A child's record, rewritten to OUT/STAGE-AGENT.json at each update."""

    def __init__(self, path: Path, **fields: Any) -> None:
        self.path, self.data = path, {"steps": [], **fields}
        self.write()

    def write(self) -> None:
        write_json(self.path, self.data)


def versions(device: Any) -> dict[str, str]:
    import accelerate
    import torch
    import transformers
    import trl

    found = {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "accelerate": accelerate.__version__, "trl": trl.__version__,
    }  # fmt: skip
    if device.type == "cuda":
        found["gpu"] = torch.cuda.get_device_name(device)
        found["cuda"] = str(torch.version.cuda)
    return found


def word_tokenizer(size: int) -> Any:
    """A word-level tokenizer over `size` ids: `t<i>` is id i (4 <= i < size) after <pad>,
    <s>, </s> and <unk>, so a text of k words is k tokens and ids round-trip exactly."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {**SPECIAL, **{f"t{i}": i for i in range(len(SPECIAL), size)}}
    model = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=model, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
        unk_token="<unk>",
    )  # fmt: skip


def live_tokenizer() -> tuple[Any, str]:
    """Qwen3's tokenizer where the Hugging Face cache holds it, else the character tokenizer
    of `trl_workload` (built here); and which."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            "Qwen/Qwen3-1.7B-Base", local_files_only=True
        ), "Qwen/Qwen3-1.7B-Base (cached)"
    except OSError:
        from benchmarks.perf.trl_workload import char_tokenizer

        return char_tokenizer(), "character tokenizer (built here)"


def qwen3(fields: dict[str, Any], tokenizer: Any, seed: int, device: Any) -> Any:
    """A random-weight float32 Qwen3 of `fields`, initialised on `device` from `seed`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    ids = {
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }  # fmt: skip
    torch.manual_seed(seed)
    with torch.device(device):
        return Qwen3ForCausalLM(Qwen3Config(**{**fields, **ids}))


def grpo_config(out: Path, device: Any, **options: Any) -> Any:
    """Eq.10's TRL settings (bnpo, one micro-batch per optimiser step, beta 0, the project's
    clip radii), bf16 autocast on a GPU."""
    from trl import GRPOConfig

    settings = {
        "output_dir": str(out), "gradient_accumulation_steps": 1, "steps_per_generation": CHUNKS,
        "temperature": 1.0, "beta": 0.0, "loss_type": "bnpo", "epsilon": 0.2,
        "epsilon_high": 0.28, "use_cpu": device.type == "cpu", "bf16": device.type == "cuda",
        "report_to": "none", "save_strategy": "no", "disable_tqdm": True, "logging_steps": 1,
        "seed": 0, **options,
    }  # fmt: skip
    return GRPOConfig(**settings)


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(device: Any) -> dict[str, float]:
    """Peak GPU memory allocated and reserved (GiB), or on CPU the resident high-water mark."""
    import torch

    if device.type == "cuda":
        return {
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / 2**30, 2),
        }
    return {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def live_child(options: argparse.Namespace, device: Any, progress: Progress) -> None:
    """Stage (a): one agent of the live pair."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from algorithms.library.trl_live import LiveGRPOTrainer

    agent, out = options.agent, Path(options.out)
    tokenizer, which = live_tokenizer()
    progress.data["tokenizer"] = which
    problems = [f"What is {k} + {2 * k + 1}?" for k in range(LIVE_PROMPTS)]
    rows = [
        {"prompt": f"Problem: {p}\nAnswer:", "problem": p, "answer": str(3 * k + 1)}
        for k, p in enumerate(problems)
    ]
    solved = problems[SOLVES[agent]]

    def scripted_reward(completions: list, problem: list, **_: Any) -> list[float]:
        """1 for the first two responses of the agent's solved problem's group, else 0 (TRL
        passes a process's rows group by group)."""
        return [float(p == solved and i % LIVE_N < 2) for i, p in enumerate(problem)]

    model = qwen3({**TINY_QWEN3, "vocab_size": len(tokenizer)}, tokenizer, SOLVES[agent], device)
    args = grpo_config(
        out / f"live-{agent}", device, num_generations=LIVE_N,
        per_device_train_batch_size=LIVE_PROMPTS * LIVE_N // CHUNKS,
        max_completion_length=32 if options.smoke else 64, learning_rate=1e-4,
        max_steps=CHUNKS * (2 if options.smoke else 3),
    )  # fmt: skip
    marks = {"start": 0.0}

    class Record(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            synchronize(device)
            marks["start"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            progress.data["steps"].append(
                {
                    "step": state.global_step,
                    "seconds": round(time.perf_counter() - marks["start"], 3),
                }
            )
            progress.write()

        def on_log(self, args, state, control, logs=None, **kwargs):
            counts = {k: v for k, v in (logs or {}).items() if k.startswith("exchange/")}
            if counts and progress.data["steps"]:
                progress.data["steps"][-1].update(counts)
                progress.write()

    trainer = LiveGRPOTrainer(
        model=model, reward_funcs=scripted_reward, args=args,
        train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[Record()],
        agent=agent, agents=list(AGENTS), channel=str(out / "live-channel"), timeout=60,
    )  # fmt: skip
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer.train()
    progress.data.update(peak_memory(device))
    moved = [s.get("exchange/used_groups") for s in progress.data["steps"]]
    progress.data["summary"] = (
        f"{len(progress.data['steps'])} steps, groups received per generation batch "
        f"{[m for m in moved if m is not None]}, {which}"
    )


def peer_record(shape: dict[str, int], keys: list[str], problems: list[str], rng: Any) -> Any:
    """The peer's record of the step: random responses of full length, two correct on
    prompt 0 (which the receiver fails), log-probs of a uniform sampler, and the group
    advantages the exchange reads."""
    import numpy as np

    import algorithms
    from graft_env.types import AgentRollouts

    n, length, vocab = shape["n"], shape["response_tokens"], shape["vocab"]
    ids = [[rng.integers(len(SPECIAL), vocab, length).tolist() for _ in range(n)] for _ in keys]
    texts = [[" ".join(f"t{i}" for i in row) for row in group] for group in ids]
    rewards = np.zeros((len(keys), n))
    rewards[0, :2] = 1.0
    rollouts = AgentRollouts(
        PEER, keys, problems, texts, ids,
        [[np.full(length, -np.log(vocab)) for _ in range(n)] for _ in keys],
        [["length"] * n for _ in keys], rewards,
    )  # fmt: skip
    algorithm = algorithms.make("graft", n=n, adv_eps=1e-4, adv_ddof=1)
    algorithm.compute_advantages({PEER: rollouts})
    return rollouts


def step_child(options: argparse.Namespace, device: Any, progress: Progress) -> None:
    """Stage (b): one TRL-hosted GRAFT generation batch at the paper's shapes."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from algorithms.library.channel import Channel, StepRecord
    from algorithms.library.format import prompt_key
    from algorithms.library.trl_live import LiveGRPOTrainer

    out = Path(options.out)
    shape = STEP_SHAPES["smoke" if options.smoke else "paper"]
    n, vocab = shape["n"], shape["vocab"]
    progress.data["shape"] = {**shape, "model": "tiny Qwen3" if options.smoke else "Qwen3-1.7B"}
    rng = np.random.default_rng(0)
    tokenizer = word_tokenizer(vocab)

    def words(count: int) -> list[int]:
        return rng.integers(len(SPECIAL), vocab, count).tolist()

    problems = [
        " ".join(f"t{i}" for i in words(shape["prompt_tokens"])) for _ in range(shape["prompts"])
    ]
    own = {p: [words(shape["response_tokens"]) for _ in range(n)] for p in problems}
    keys = [prompt_key(p) for p in problems]
    channel = out / "step-channel"
    Channel(channel, [RECEIVER, PEER], timeout=1).publish(
        StepRecord(PEER, 0, peer_record(shape, keys, problems, rng))
    )
    fields = TINY_QWEN3 if options.smoke else QWEN3_1_7B
    model = qwen3({**fields, "vocab_size": vocab}, tokenizer, 0, device)
    progress.data["parameters"] = sum(p.numel() for p in model.parameters())
    timing: dict[str, list[float]] = {"prepare": [], "tokens": []}

    class FixedResponses(LiveGRPOTrainer):
        """The receiver, its responses fixed token ids (no sampling); times the generation
        batch's preparation (TRL's scoring, the gather, the exchange, peer scoring, splice)
        and counts each micro-batch's tokens."""

        def _generate_single_turn(self, prompt_ids, *_):
            texts = [self._tokenizer.decode(ids) for ids in prompt_ids]
            return [own[text][row % n] for row, text in enumerate(texts)], None

        def _generate_and_score_completions(self, inputs):
            synchronize(device)
            start = time.perf_counter()
            batch = super()._generate_and_score_completions(inputs)
            synchronize(device)
            timing["prepare"].append(time.perf_counter() - start)
            return batch

        def _prepare_inputs(self, generation_batch):
            chunk = super()._prepare_inputs(generation_batch)
            mask = chunk["completion_mask"].sum() + chunk["prompt_mask"].sum()
            timing["tokens"].append(float(mask))
            return chunk

    marks = {"start": 0.0}

    class Record(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            synchronize(device)
            marks["start"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            seconds = time.perf_counter() - marks["start"]
            prepare = sum(timing["prepare"]) if state.global_step == 1 else 0.0
            tokens = timing["tokens"][-1]
            progress.data["steps"].append(
                {"step": state.global_step, "seconds": round(seconds, 3),
                 "prepare_seconds": round(prepare, 3), "tokens": tokens,
                 "update_tokens_per_s": round(tokens / (seconds - prepare), 1),
                 **peak_memory(device)}
            )  # fmt: skip
            progress.write()

        def on_log(self, args, state, control, logs=None, **kwargs):
            counts = {k: v for k, v in (logs or {}).items() if k.startswith("exchange/")}
            if counts and progress.data["steps"]:
                progress.data["steps"][-1].update(counts)
                progress.write()

    rows = [{"prompt": p, "problem": p, "answer": "0"} for p in problems]
    args = grpo_config(
        out / "step-receiver", device, num_generations=n, per_device_train_batch_size=n,
        max_completion_length=shape["response_tokens"], learning_rate=1e-6,
        max_steps=CHUNKS, shuffle_dataset=False, gradient_checkpointing=not options.smoke,
    )  # fmt: skip

    def scripted_reward(completions: list, problem: list, **_: Any) -> list[float]:
        """1 for the first two responses of prompt 1, else 0: prompt 1 moves to the peer and,
        balanced with it, the peer's prompt 0 to the receiver."""
        return [float(p == problems[1] and i % n < 2) for i, p in enumerate(problem)]

    trainer = FixedResponses(
        model=model, reward_funcs=scripted_reward, args=args,
        train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[Record()],
        agent=RECEIVER, agents=[RECEIVER, PEER], channel=str(channel), timeout=10,
        graft_options={"delta": 0.0},
    )  # fmt: skip
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer.train()
    steps = progress.data["steps"]
    update = sum(s["seconds"] - s["prepare_seconds"] for s in steps)
    tokens = sum(s["tokens"] for s in steps)
    progress.data.update(
        update_seconds=round(update, 3), update_tokens=tokens,
        update_tokens_per_s=round(tokens / update, 1),
        prepare_seconds=round(sum(timing["prepare"]), 3),
        **peak_memory(device),
    )  # fmt: skip
    memory = ", ".join(f"{k} {v}" for k, v in peak_memory(device).items())
    progress.data["summary"] = (
        f"update {tokens / update:,.0f} tokens/s ({tokens:,.0f} tokens in {update:.2f} s), "
        f"batch preparation {sum(timing['prepare']):.2f} s, {memory}, peer groups received "
        f"{steps[0].get('exchange/used_groups') if steps else None}"
    )


def run_child(options: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(options.threads)
    device = torch.device(options.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("trl_gpu_check: no CUDA device here (--smoke runs the CPU check)")
    stage = options.child
    path = Path(options.out) / f"{stage}-{options.agent}.json"
    progress = Progress(path, agent=options.agent, versions=versions(device))
    start = time.perf_counter()
    (live_child if stage == "live" else step_child)(options, device, progress)
    progress.data["child_seconds"] = round(time.perf_counter() - start, 1)
    progress.write()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="trl_gpu_check", help="folder of results.json and logs")
    parser.add_argument("--smoke", action="store_true", help="both stages on CPU, tiny shapes")
    parser.add_argument("--device", default="cuda", help="torch device (--smoke: cpu)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument(
        "--stages", nargs="+", choices=tuple(BUDGETS), default=list(BUDGETS), help="which stages"
    )
    parser.add_argument("--wheels", action="store_true", help="print the pip commands and exit")
    parser.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                        help="--wheels: the GPU machine's Python version")  # fmt: skip
    parser.add_argument("--child", choices=tuple(BUDGETS), help=argparse.SUPPRESS)
    parser.add_argument("--agent", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.smoke:
        options.device = "cpu"
    if options.wheels:
        print("\n".join(wheel_commands(options.python)))
        return
    missing = missing_wheels()
    if missing:
        raise SystemExit(
            f"trl_gpu_check: not installed: {', '.join(missing)} "
            f"(python benchmarks/perf/trl_gpu_check.py --wheels prints the pip commands)"
        )
    if options.child:
        run_child(options)
        return
    run_stages(options)


if __name__ == "__main__":
    main()
