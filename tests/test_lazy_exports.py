"""graft_env.lazy: package names load on first use and are cached."""

import sys
import types

import pytest

from graft_env.lazy import lazy_exports


def test_a_name_loads_from_its_module_on_first_use_and_is_cached(monkeypatch):
    package = types.ModuleType("fake_package")
    monkeypatch.setitem(sys.modules, "fake_package", package)
    package.__getattr__ = lazy_exports("fake_package", {"dumps": "json"})
    assert "dumps" not in vars(package)
    import json

    assert package.dumps is json.dumps
    assert vars(package)["dumps"] is json.dumps  # cached: no second lookup
    with pytest.raises(AttributeError, match="module 'fake_package' has no attribute 'loads'"):
        getattr(package, "loads")  # noqa: B009 (the attribute access is the test)
