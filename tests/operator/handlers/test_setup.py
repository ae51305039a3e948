"""What the handlers remember between triggers: the status they last wrote."""

from __future__ import annotations

import platform
from typing import Any

import pytest

from slo_operator.handlers.setup import StatusMemory, cap_malloc_arenas


def body(rv: str, status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "chat", "resourceVersion": rv},
            "status": status}


def test_a_stale_cache_body_gets_the_status_last_written() -> None:
    mem = StatusMemory()
    old = body("7", {"batchLimit": 64})
    mem.remember(old, {"batchLimit": 32})
    # The watch cache still serves revision 7: the written status is the newer truth.
    assert mem.latest(body("7", {"batchLimit": 64}))["status"] == {"batchLimit": 32}
    # Once the cache holds a newer revision, it wins.
    assert mem.latest(body("8", {"batchLimit": 16}))["status"] == {"batchLimit": 16}


def test_an_unchanged_status_is_not_remembered() -> None:
    mem = StatusMemory()
    mem.remember(body("7", {"batchLimit": 64}), {"batchLimit": 64})
    assert mem.written == {}


def test_malloc_arenas_are_capped_unless_the_environment_sets_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_malloc_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's mallopt only")
    assert cap_malloc_arenas() is True
