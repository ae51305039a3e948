"""PromQL builders: a bounded number of queries, every user value escaped."""

from __future__ import annotations

import ast
import re

import pytest

from slo_operator.slo import promql
from slo_operator.slo.promql import MAX_QUERIES, build_queries, escape_label_value, regex_value

HOSTILE = [
    'team"} or vector(1) or {a="',
    "back\\slash\\",
    "new\nline",
    'quote"',
    "ctrl\x00\x1b",
    "regex.*|(x)",
    "ünïcode-名前",
]


def test_query_count_is_fixed_for_a_thousand_services() -> None:
    windows = [60.0] * 700 + [300.0] * 200 + [float(w) for w in range(10, 110)]
    plan = build_queries(windows, namespaces=[f"ns-{i}" for i in range(1000)])
    assert len(plan.queries) <= MAX_QUERIES
    assert len({q.name for q in plan.queries}) == len(plan.queries)
    # Many distinct windows are measured at a handful of them.
    assert len(set(plan.windows.values())) <= promql.MAX_WINDOWS
    assert plan.window_label(60) == "60s" and plan.window_label(300) == "300s"


def test_rare_windows_snap_to_the_nearest_measured_one() -> None:
    plan = build_queries([60] * 5 + [300] * 4 + [600] * 3 + [3600] * 2 + [90])
    assert plan.windows[90] == "60s"
    assert plan.window_label(7200) == "3600s"


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_escaped_value_reads_back_exactly_and_cannot_close_the_string(value: str) -> None:
    body = escape_label_value(value)
    # PromQL double-quoted strings use Go escapes; for these characters Python's agree.
    assert ast.literal_eval(f'"{body}"') == value
    assert re.search(r'(?<!\\)(\\\\)*"', body) is None  # no unescaped quote
    assert "\n" not in body


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_regex_value_matches_only_the_literal(value: str) -> None:
    pattern = ast.literal_eval(f'"{regex_value(value)}"')
    assert re.fullmatch(pattern, value, flags=re.DOTALL)
    assert not re.fullmatch(pattern, value + "x", flags=re.DOTALL)


def test_hostile_namespaces_stay_inside_their_matcher() -> None:
    plan = build_queries([60], namespaces=HOSTILE)
    for q in plan.queries:
        # Every quote in the query is escaped or delimits a string; strings stay balanced.
        unescaped = re.findall(r'(?<!\\)(?:\\\\)*"', q.expr)
        assert len(unescaped) % 2 == 0
        assert " or vector(1)" not in re.sub(r'"(?:[^"\\]|\\.)*"', '""', q.expr)


def test_queries_group_by_service_and_prefer_client_visible_latency() -> None:
    plan = build_queries([60])
    by = {q.name: q.expr for q in plan.queries}
    for expr in by.values():
        assert "by (namespace, service" in expr
    assert by["e2e"].index(promql.GATEWAY_E2E) < by["e2e"].index("vllm:e2e_request_latency")
    assert "vllm:gpu_cache_usage_perc" in by["kv"]  # older vLLM name as fallback
    assert "vllm:time_per_output_token_seconds" in by["itl"]


def test_empty_namespace_scope_matches_nothing() -> None:
    plan = build_queries([60], namespaces=[])
    assert all('namespace="-"' in q.expr for q in plan.queries)
