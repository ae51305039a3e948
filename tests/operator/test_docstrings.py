"""Every public function and class of the pure packages says what it does."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

PURE_PACKAGES = (
    "slo_operator.api",
    "slo_operator.slo",
    "slo_operator.hardware",
    "slo_operator.engine",
    "slo_operator.control",
)


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    mods = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        mods.append(importlib.import_module(info.name))
    return mods


def _own_docstring(obj: object) -> str | None:
    """The docstring written on ``obj``, not one inherited or generated for it."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
        # dataclasses (and NamedTuple) make up "Name(field: type, ...)" when none is written.
        if doc and dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
            return None
        if doc and issubclass(obj, tuple) and doc.startswith(f"{obj.__name__}("):
            return None
        return doc if isinstance(doc, str) else None
    doc = inspect.unwrap(obj).__doc__  # type: ignore[arg-type]
    return doc if isinstance(doc, str) else None


def _public_definitions(mod: ModuleType) -> list[tuple[str, object]]:
    out = []
    for name, obj in vars(mod).items():
        if name.startswith("_"):
            continue
        target = inspect.unwrap(obj) if callable(obj) else obj
        if not (inspect.isclass(target) or inspect.isfunction(target)):
            continue
        if getattr(target, "__module__", None) != mod.__name__:
            continue  # imported here, defined (and checked) elsewhere
        out.append((f"{mod.__name__}.{name}", obj))
    return out


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_public_functions_and_classes_have_a_docstring(package: str) -> None:
    definitions = [d for mod in _modules(package) for d in _public_definitions(mod)]
    assert definitions, f"no public definitions found in {package}"
    missing = []
    for qualname, obj in definitions:
        doc = _own_docstring(obj)
        if not doc or not doc.strip().splitlines()[0].strip():
            missing.append(qualname)
    assert not missing, "public definitions without a docstring:\n  " + "\n  ".join(missing)


def test_the_check_sees_a_missing_docstring() -> None:
    mod = ModuleType("probe")

    @dataclasses.dataclass
    class Bare:
        x: int

    def bare() -> None:
        pass

    def documented() -> None:
        """Do something."""

    for obj in (Bare, bare, documented):
        obj.__module__ = "probe"
        setattr(mod, obj.__name__, obj)
    found = {name: _own_docstring(obj) for name, obj in _public_definitions(mod)}
    assert found == {"probe.Bare": None, "probe.bare": None, "probe.documented": "Do something."}
