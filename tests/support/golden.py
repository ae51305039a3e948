"""User-facing messages pinned in one golden file per area (``tests/golden/<area>.yaml``).

A test states the case and the message it got; the golden file holds what users read::

    def test_unknown_gpu_is_refused(golden):
        err = ...
        golden.check("engine", "unknown-gpu", str(err))

Review a wording change in the YAML diff, not in hundreds of asserts. After an intended
change, ``SLO_UPDATE_GOLDEN=1 pytest ...`` rewrites the entries the run touched (new ones
are added); without it, a missing or different entry fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"


class Golden:
    def __init__(self) -> None:
        self._files: dict[str, dict[str, str]] = {}
        self._dirty: set[str] = set()
        self.update = os.environ.get("SLO_UPDATE_GOLDEN", "") not in ("", "0")

    def _load(self, area: str) -> dict[str, str]:
        if area not in self._files:
            path = GOLDEN_DIR / f"{area}.yaml"
            data: Any = yaml.safe_load(path.read_text()) if path.exists() else {}
            self._files[area] = dict(data or {})
        return self._files[area]

    def check(self, area: str, case: str, got: str) -> None:
        """``got`` must equal the golden message ``case`` of ``area``."""
        entries = self._load(area)
        if self.update:
            if entries.get(case) != got:
                entries[case] = got
                self._dirty.add(area)
            return
        if case not in entries:
            pytest.fail(f"tests/golden/{area}.yaml has no entry {case!r}; run with "
                        f"SLO_UPDATE_GOLDEN=1 to add it (got {got!r})", pytrace=False)
        assert got == entries[case], f"message {area}/{case} changed"

    def save(self) -> None:
        GOLDEN_DIR.mkdir(exist_ok=True)
        for area in sorted(self._dirty):
            with open(GOLDEN_DIR / f"{area}.yaml", "w") as f:
                yaml.safe_dump(dict(sorted(self._files[area].items())), f, sort_keys=True,
                               allow_unicode=True, width=100)
        self._dirty.clear()


_GOLDEN = Golden()


@pytest.fixture(scope="session")
def golden() -> Any:
    yield _GOLDEN
    _GOLDEN.save()
