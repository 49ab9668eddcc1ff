"""Where built-in models are built and kept (the tiny pair, the testbed, converted real
models), what a built model is (`weights_sha256`) and what it was built with
(`kernel_provenance`): a module of its own, free of torch at import, because `graft --help`
and config checks resolve model names without loading a model."""

from __future__ import annotations

import hashlib
import os
import platform
import re
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin")  # what transformers saves a model's weights as


def default_cache_dir() -> Path:
    """`$GRAFT_CACHE_DIR`, else `~/.cache/graft`."""
    return Path(os.environ.get("GRAFT_CACHE_DIR") or Path.home() / ".cache" / "graft")


def portable_path(path: str | Path) -> str:
    """`path` as a committed result may record it: an absolute path under the cache directory
    as `$GRAFT_CACHE_DIR/...`, under the temporary directory as `$TMPDIR/...`, otherwise as
    given (no machine's absolute cache or scratch path lands in docs/results). A relative path
    is kept as given: it names no machine's directory, wherever the working directory is."""
    import tempfile

    if not Path(path).is_absolute():
        return str(path)
    resolved = Path(path).resolve()
    roots = {"$GRAFT_CACHE_DIR": default_cache_dir(), "$TMPDIR": Path(tempfile.gettempdir())}
    for name, root in roots.items():
        if resolved.is_relative_to(root.resolve()):
            return f"{name}/{resolved.relative_to(root.resolve()).as_posix()}"
    return str(path)


def weights_sha256(model_dir: str | Path) -> str:
    """SHA-256 (hex) of a saved model's weights, read from the files themselves (so it also
    identifies a build whose build.json predates a recorded digest): of its one weight file
    (`model.safetensors`: what `sha256sum` prints), or, for a sharded model, of the lines
    "<file sha256>  <name>" of its `*.safetensors` / `*.bin` files in name order. The same
    build key gives other weights on another CPU or thread count; this says which weights a
    result came from. A directory without weight files is a one-line error naming it."""
    directory = Path(model_dir)
    files = sorted(p for p in directory.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{directory}: no weight files (*.safetensors, *.bin) to hash")
    digests = [_file_sha256(path) for path in files]
    if len(files) == 1:
        return digests[0]
    lines = "".join(f"{d}  {p.name}\n" for d, p in zip(digests, files, strict=True))
    return hashlib.sha256(lines.encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
SIMD_FLAGS = re.compile(r"^(avx.*|amx.*|fma|f16c|sse4_2)$")  # what float kernels dispatch on


def kernel_provenance() -> dict[str, Any]:
    """What this machine's float kernels are: CPU model and SIMD flags (/proc/cpuinfo), the
    kernel path torch chose (`torch.backends.cpu.get_cpu_capability()`), torch, oneDNN and
    MKL versions, whether oneDNN is enabled, and the kernel variables set. The same build
    key gives other weights where these differ (`.ci/run` tests a second pair built under
    `ATEN_CPU_CAPABILITY=avx2`). Loads torch."""
    import torch

    config = torch.__config__.show()
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v([\w.]+)", config)
    mkl = re.search(r"Math Kernel Library Version ([\w.-]+)", config)
    return {
        **_cpu_info(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "onednn": onednn.group(1) if onednn else None,
        "mkl": mkl.group(1) if mkl else None,
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "kernel_env": {name: os.environ[name] for name in KERNEL_ENV if name in os.environ},
    }


def _cpu_info() -> dict[str, Any]:
    """CPU model and SIMD flags from /proc/cpuinfo (Linux); the platform's name elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {"cpu": platform.processor() or platform.machine(), "cpu_flags": None}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    flags = sorted(f for f in fields.get("flags", "").split() if SIMD_FLAGS.match(f))
    return {"cpu": fields.get("model name", platform.machine()), "cpu_flags": flags}
