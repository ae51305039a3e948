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


def test_a_newer_revision_with_the_old_status_gets_the_status_last_written() -> None:
    mem = StatusMemory()
    mem.remember(body("7", {"desiredReplicas": 0}), {"desiredReplicas": 1})
    # Another writer's change (an annotation) reached the cache before the status write.
    assert mem.latest(body("8", {"desiredReplicas": 0}))["status"] == {"desiredReplicas": 1}
    # The write arrives (as the API server stored it): the cache wins from then on.
    assert mem.latest(body("9", {"desiredReplicas": 1, "x": 1}))["status"] == {
        "desiredReplicas": 1, "x": 1}


def test_a_second_write_keeps_every_status_the_cache_may_still_serve_from_before_it(
        ) -> None:
    mem = StatusMemory()
    mem.remember(body("7", {"desiredReplicas": 0}), {"desiredReplicas": 1})
    # The second write starts from the first (the cache holds the status as written).
    mem.remember(body("8", {"desiredReplicas": 1}), {"desiredReplicas": 2})
    for stale in ({"desiredReplicas": 0}, {"desiredReplicas": 1}):
        assert mem.latest(body("9", stale))["status"] == {"desiredReplicas": 2}
    assert mem.latest(body("10", {"desiredReplicas": 2, "x": 1}))["status"] == {
        "desiredReplicas": 2, "x": 1}


def test_a_write_over_a_status_the_cache_has_moved_past_forgets_the_older_ones() -> None:
    mem = StatusMemory()
    mem.remember(body("7", {"desiredReplicas": 0}), {"desiredReplicas": 1})
    mem.remember(body("9", {"desiredReplicas": 1, "x": 1}), {"desiredReplicas": 2})
    assert mem.latest(body("10", {"desiredReplicas": 0}))["status"] == {"desiredReplicas": 0}


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


def test_a_refusal_of_the_moment_in_a_handler_becomes_kopfs_temporary_error() -> None:
    import kopf
    from kubernetes.client.exceptions import ApiException

    from slo_operator.api.cluster import ApiRejected
    from slo_operator.handlers.setup import retried_when_transient

    throttled = ApiException(status=429, reason="Too Many Requests")
    throttled.headers = {"Retry-After": "2"}
    with pytest.raises(kopf.TemporaryError) as raised, retried_when_transient("busy"):
        raise throttled
    assert raised.value.delay == 2.0 and "HTTP 429" in str(raised.value)
    # Any other answer is retried after a minute, still without a traceback; a bug is
    # raised as it is.
    with pytest.raises(kopf.TemporaryError) as refused, retried_when_transient("busy"):
        raise ApiRejected("Service", "chat", 422, "bad port")
    assert refused.value.delay == 60.0
    with pytest.raises(ValueError), retried_when_transient("busy"):
        raise ValueError("a bug")
