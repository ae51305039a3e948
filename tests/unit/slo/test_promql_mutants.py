"""The query budget of a cycle (module docstring of slo.promql: 8 queries, budget 10)."""

from __future__ import annotations

from slo_operator.slo import promql


def test_query_budget() -> None:
    assert promql.MAX_QUERIES == 10
    assert len(promql.QUERY_NAMES) == 8
    assert promql.MAX_WINDOWS == 4
