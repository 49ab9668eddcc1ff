"""`graft env`: the versions, CPU kernels and GPUs of this machine, for a bug report.

Python, graft and the libraries a run's numbers depend on (torch, transformers, trl,
accelerate, vLLM where installed), the CPU model with the kernels torch and MKL/oneDNN chose
(`graft_env.policies.cache.kernel_provenance`, the same record a tiny pair's build and an
eval report keep) and each CUDA device torch sees.
"""

from __future__ import annotations

import argparse
import json
import platform
from importlib import metadata
from typing import Any

PACKAGES = ("graft-rlvr", "torch", "transformers", "trl", "accelerate", "vllm")


def add_parser(commands: argparse._SubParsersAction) -> None:
    env = commands.add_parser(
        "env",
        help="versions, CPU kernels and GPUs of this machine, for a bug report",
        description="Print what a bug report needs: Python and library versions, the CPU "
        "and the kernels torch uses on it, and the GPUs torch sees.",
    )
    env.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    env.set_defaults(func=run)


def versions() -> dict[str, str]:
    """Python's and each of `PACKAGES`' installed version ("not installed" if absent)."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def gpus() -> list[str]:
    """Each CUDA device torch sees: name, memory and compute capability."""
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        out.append(
            f"cuda:{index} {props.name}, {props.total_memory / 2**30:.1f} GiB, "
            f"compute capability {props.major}.{props.minor}"
        )
    return out


def report() -> dict[str, Any]:
    """Everything `graft env` prints."""
    import torch

    from graft_env.policies.cache import kernel_provenance

    return {
        **versions(),
        "platform": platform.platform(),
        "kernels": kernel_provenance(),
        "cuda": torch.version.cuda or "none (CPU build)",
        "gpus": gpus(),
    }


def run(args: argparse.Namespace) -> int:
    found = report()
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    kernels = found.pop("kernels")
    gpu_list = found.pop("gpus")
    width = max(map(len, [*found, *kernels, "gpus"]))
    for key, value in {**found, **kernels}.items():
        shown = " ".join(value) if isinstance(value, list) else value
        print(f"{key:<{width}}  {shown}")
    print(f"{'gpus':<{width}}  {'; '.join(gpu_list) or 'none'}")
    return 0
