"""PromQL builder edges: the query names signals reads, exact selectors, window planning."""

from __future__ import annotations

import dataclasses

import pytest

from slo_operator.slo.promql import (
    QUERY_NAMES,
    Query,
    QueryPlan,
    any_of,
    build_queries,
    duration,
    plan_windows,
)


def test_queries_carry_the_names_signals_reads_in_order() -> None:
    assert tuple(q.name for q in build_queries([60]).queries) == QUERY_NAMES


def test_namespace_scope_selectors_are_exact() -> None:
    empty = build_queries([60], namespaces=[])
    two = build_queries([60], namespaces=["b", "a", "a"])
    for q in empty.queries:
        assert '{namespace!="", service!="", namespace="-"}' in q.expr
    for q in two.queries:
        assert '{namespace!="", service!="", namespace=~"a|b"}' in q.expr


def test_any_of_is_a_sorted_deduplicated_alternative() -> None:
    assert any_of("service", ["chat", "a.b", "chat"]) == r'service=~"a\\.b|chat"'


@pytest.mark.parametrize(("seconds", "want"), [(0, "1s"), (1, "1s"), (90, "90s")])
def test_duration_is_whole_seconds_at_least_one(seconds: int, want: str) -> None:
    assert duration(seconds) == want


def test_window_plan_defaults_and_floors() -> None:
    assert plan_windows([]) == {60: "60s"}
    assert plan_windows([0.4]) == {1: "1s"}
    assert build_queries([]).window_label(60) == "60s"


def test_equally_common_windows_keep_the_shortest() -> None:
    """Five windows seen once each, four measured: the shortest four, the rest snapped."""
    plan = plan_windows([600, 300, 120, 90, 60])
    assert plan == {600: "300s", 300: "300s", 120: "120s", 90: "90s", 60: "60s"}


def test_a_plan_without_windows_reads_at_sixty_seconds() -> None:
    assert QueryPlan(queries=(), windows={}).window_label(30) == "60s"


def test_queries_and_plans_are_immutable() -> None:
    plan = build_queries([60])
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.queries[0].expr = ""  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.windows = {}  # type: ignore[misc]
    assert isinstance(plan.queries[0], Query)
