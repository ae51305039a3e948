"""The query budget of a cycle (module docstring of slo.promql: 8 queries, budget 10)."""

from __future__ import annotations

from slo_operator.slo import promql


def test_query_budget() -> None:
    assert promql.MAX_QUERIES == 10
    assert len(promql.QUERY_NAMES) == 8
    assert promql.MAX_WINDOWS == 4


def test_range_queries_list_windows_shortest_first() -> None:
    """The query text is the same every cycle whatever order the policies came in, and
    reads shortest window first (label values are strings: "300s" sorts before "60s")."""
    plan = promql.build_queries([300, 5, 60, 300])
    assert plan.windows == {300: "300s", 5: "5s", 60: "60s"}
    for q in plan.queries:
        if q.name in ("e2e", "ttft", "itl", "decode", "throughput"):
            at = [q.expr.index(f'"window", "{w}"') for w in ("5s", "60s", "300s")]
            assert at == sorted(at), q.name
