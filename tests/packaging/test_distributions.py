"""The three distributions stay apart: what ``pip install ./runtime ./operator`` brings (the
operator image's contents) never includes the development tools' dependencies, and the
in-pod runtime needs nothing beyond what it declares."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, distribution

import pytest
from packaging.requirements import Requirement

# Only slo-devtools may bring these (the demo's plots and live view, the dev cluster's PKI,
# the test tools).
DEVTOOLS_ONLY = {"matplotlib", "rich", "cryptography", "pytest", "hypothesis", "mypy", "ruff"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str) -> set[str]:
    """Every distribution ``root`` pulls in (installed requirements, markers evaluated,
    extras not requested left out)."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(req.name)
    return seen


@pytest.mark.parametrize("dist", ["slo-operator", "slo-runtime"])
def test_controller_distributions_pull_in_no_development_tool(dist: str) -> None:
    assert not closure(dist) & DEVTOOLS_ONLY


def test_operator_depends_on_the_runtime_of_the_same_version() -> None:
    assert "slo-runtime" in closure("slo-operator")
    assert "slo-operator" not in closure("slo-runtime")


def test_devtools_bring_the_demo_and_dev_cluster_dependencies() -> None:
    assert {"matplotlib", "rich", "cryptography", "slo-operator"} <= closure("slo-devtools")
