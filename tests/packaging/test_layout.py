"""The repository's layout: module names that say one thing, and a test tree that mirrors
the three distributions (tests/operator/<package>/test_<module>.py and so on)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tests.support.paths import REPO, TESTS

PACKAGES = {"operator": REPO / "operator" / "slo_operator",
            "runtime": REPO / "runtime" / "slo_runtime",
            "devtools": REPO / "devtools" / "slo_devtools"}
# Each distribution has its own command-line entry point module.
SHARED_NAMES = {"__init__", "__main__", "cli"}
# Tests that check a whole distribution rather than one module.
CROSS_CUTTING = {"test_docstrings", "test_hostile_inputs", "test_docs"}


def _modules(root: Path) -> set[str]:
    """Module paths relative to ``root`` without .py, a package's __init__ as the package."""
    out = set()
    for f in root.rglob("*.py"):
        rel = f.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.add("/".join(parts))
    return out


def test_no_two_modules_share_a_name_across_packages() -> None:
    where = defaultdict(list)
    for dist, root in PACKAGES.items():
        for f in root.rglob("*.py"):
            if f.stem not in SHARED_NAMES:
                where[f.stem].append(f"{dist}:{f.relative_to(root)}")
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes


def test_every_test_module_is_named_for_a_source_module() -> None:
    strays = []
    for dist, root in PACKAGES.items():
        modules = _modules(root)
        for f in (TESTS / dist).rglob("test_*.py"):
            rel = f.relative_to(TESTS / dist)
            stem = f.stem.removeprefix("test_")
            folder = "/".join(rel.parts[:-1])
            candidates = {f"{folder}/{stem}".strip("/"), folder if stem == rel.parts[-2:-1][0]
                          else None} if folder else {stem}
            if f.stem in CROSS_CUTTING or candidates & modules:
                continue
            strays.append(str(f.relative_to(REPO)))
    assert not strays


def test_no_test_file_is_named_for_mutation_testing() -> None:
    assert not [f for f in TESTS.rglob("*.py") if "mutant" in f.name]
