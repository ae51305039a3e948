"""PromQL for the SLO loop: a fixed set of queries whatever the number of services and
windows, every user value escaped, the queries docs/slo-loop.md prints, and the queries in
the real PromQL engine (promtool)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_operator.slo import promql
from slo_operator.slo.histogram import quantile
from slo_operator.slo.promql import (
    QUERY_NAMES,
    Query,
    QueryPlan,
    any_of,
    build_queries,
    duration,
    escape_label_value,
    plan_windows,
    regex_value,
)
from slo_runtime import contract as c
from tests.operator.slo.test_engine_info import KV_CHANGE, KV_DROPPED, RUNS_PLAN
from tests.support.paths import REPO
from tests.support.tools import promtool

DOC = (REPO / "docs" / "slo-loop.md").read_text()
HOSTILE = [
    'team"} or vector(1) or {a="',
    "back\\slash\\",
    "new\nline",
    'quote"',
    "ctrl\x00\x1b",
    "regex.*|(x)",
    "ünïcode-名前",
]
# Scopes for promtool: a name that would end its string, a backslash, a newline.
PROMTOOL_SCOPES = ['team"} or vector(1) or {a="', "back\\slash", "new\nline", "a"]
INF = float("inf")
HOSTILE_IDS = ["closes-the-matcher", "backslashes", "newline", "quote", "control-characters",
               "regex-metacharacters", "unicode"]


# --- what the docs say ------------------------------------------------------------------


@pytest.mark.parametrize("query", build_queries([60]).queries, ids=lambda q: q.name)
def test_documented_queries_are_the_built_ones(query: Query) -> None:
    assert f"```promql\n{query.expr}\n```" in DOC


def test_the_documented_query_count_and_window_limit_hold_for_a_thousand_services() -> None:
    m = re.search(r"a fixed set of (\d+) PromQL queries", DOC)
    assert m, "docs/slo-loop.md no longer states the number of queries"
    windows = [60.0] * 700 + [300.0] * 200 + [float(w) for w in range(10, 110)]
    plan = build_queries(windows, namespaces=[f"ns-{i}" for i in range(1000)])
    assert len(plan.queries) == int(m[1]) <= promql.MAX_QUERIES
    assert len({q.name for q in plan.queries}) == len(plan.queries)
    # Many distinct windows are measured at a handful of them.
    m = re.search(r"At most (\d+) distinct windows are measured", DOC)
    assert m, "docs/slo-loop.md no longer states the window limit"
    assert len(set(plan.windows.values())) == int(m[1])
    assert plan.window_label(60) == "60s" and plan.window_label(300) == "300s"
    m = re.search(r"at most (\d+) distinct percentiles per query are measured",
                  " ".join(DOC.split()))
    assert m, "docs/slo-loop.md no longer states the percentile limit"
    assert int(m[1]) == promql.MAX_QUANTILES


# --- percentiles --------------------------------------------------------------------------------


def test_each_latency_query_measures_the_percentiles_policies_ask_for() -> None:
    plan = build_queries([60], percentiles={"e2e": [0.99, 0.9, 0.99], "ttft": [0.5]})
    by = {q.name: q.expr for q in plan.queries}
    assert "histogram_quantile(0.99," in by["e2e"] and "histogram_quantile(0.9," in by["e2e"]
    assert "histogram_quantile(0.5," in by["ttft"] and "0.95" not in by["ttft"]
    # A query no policy named reads the API's default percentile.
    assert plan.quantile_label("itl", 0.99) == "0.99" and "histogram_quantile(0.99," in by["itl"]
    assert "histogram_quantile" not in by["decode"]  # the jitter bound needs the buckets


def test_a_rare_percentile_is_read_at_the_nearest_stricter_measured_one() -> None:
    asked = [0.99] * 5 + [0.95] * 4 + [0.9] * 3 + [0.5] * 2 + [0.97, 0.999]
    plan = build_queries([60], percentiles={"e2e": asked})
    assert plan.quantiles["e2e"]["0.97"] == "0.99"
    assert plan.quantile_label("e2e", 0.999) == "0.99"  # none above: the highest measured
    assert plan.quantile_label("e2e", 0.8) == "0.9"  # never asked: the next stricter one
    measured = {v for v in plan.quantiles["e2e"].values()}
    assert measured == {"0.99", "0.95", "0.9", "0.5"}
    e2e = {q.name: q.expr for q in plan.queries}["e2e"]
    assert e2e.count("histogram_quantile(") == promql.MAX_QUANTILES * 2  # two sources


def test_percentiles_that_differ_past_six_digits_are_one_and_nonsense_is_dropped() -> None:
    assert promql.plan_quantiles([0.99, 0.9900000001, 0.0, 1.0, float("nan")]) == {
        "0.99": "0.99"}


# --- the queries ------------------------------------------------------------------------------


def test_queries_carry_the_names_signals_reads_in_order() -> None:
    assert tuple(q.name for q in build_queries([60]).queries) == QUERY_NAMES


def test_queries_group_by_service_and_prefer_client_visible_latency() -> None:
    by = {q.name: q.expr for q in build_queries([60]).queries}
    for expr in by.values():
        assert "by (namespace, service" in expr
    assert by["e2e"].index(promql.GATEWAY_E2E) < by["e2e"].index("vllm:e2e_request_latency")
    assert "vllm:gpu_cache_usage_perc" in by["kv"]  # older vLLM name as fallback
    assert "vllm:time_per_output_token_seconds" in by["itl"]


def test_range_queries_list_windows_shortest_first() -> None:
    """The query text is the same every cycle whatever order the policies came in, and
    reads shortest window first (label values are strings: "300s" sorts before "60s")."""
    plan = build_queries([300, 5, 60, 300])
    assert plan.windows == {300: "300s", 5: "5s", 60: "60s"}
    for q in plan.queries:
        if q.name in ("e2e", "ttft", "itl", "decode", "throughput", "burst"):
            at = [q.expr.index(f'"window", "{w}"') for w in ("5s", "60s", "300s")]
            assert at == sorted(at), q.name


def test_throughput_reads_arrivals_the_prefix_cache_and_prefill_time_by_contract_names() -> None:
    by = {q.name: q.expr for q in build_queries([60]).queries}
    for signal, name in (("arrivals", c.GATEWAY_ARRIVALS + c.COUNTER_SUFFIX),
                         ("prefix_queries", c.PREFIX_CACHE_QUERIES + c.COUNTER_SUFFIX),
                         ("prefix_hits", c.PREFIX_CACHE_HITS + c.COUNTER_SUFFIX),
                         ("prefill_seconds", c.PREFILL_TIME + "_sum"),
                         ("prefills", c.PREFILL_TIME + "_count")):
        assert (f"rate({name}{{namespace!=\"\", service!=\"\"}}[60s])), \"window\", "
                f"\"60s\", \"\", \"\"), \"signal\", \"{signal}\"") in by["throughput"]


@pytest.mark.parametrize(("scrape", "short", "step"), [
    pytest.param(15, "30s", "15s", id="chart-default-scrape"),
    pytest.param(1, "2s", "1s", id="one-second-scrape"),
    pytest.param(0.5, "2s", "1s", id="sub-second-scrape-reads-whole-seconds"),
])
def test_burst_steps_one_scrape_over_two_scrape_rates_in_every_window(
        scrape: float, short: str, step: str) -> None:
    """Each step's rate spans two scrapes (the two samples rate() needs) and the steps are
    one scrape apart, so every increase between consecutive scrapes is seen by a step."""
    plan = build_queries([60, 300, 5], scrape_interval_s=scrape)
    burst = {q.name: q.expr for q in plan.queries}["burst"]
    inner = (f'sum by (namespace, service) (rate({c.GATEWAY_ARRIVALS}_total'
             f'{{namespace!="", service!=""}}[{short}]))')
    assert burst.count(inner) == 3
    for w in ("60s", "300s"):
        assert f'max_over_time({inner}[{w}:{step}]), "window", "{w}"' in burst
    # A window shorter than a step still covers one step.
    five = f"[{max(5, int(step[:-1]))}s:{step}]"
    assert f'max_over_time({inner}{five}), "window", "5s"' in burst


def test_the_default_burst_step_is_the_charts_scrape_interval() -> None:
    values = yaml.safe_load((REPO / "charts" / "slo-operator" / "values.yaml").read_text())
    assert duration(promql.SCRAPE_INTERVAL_S) == values["podMonitor"]["interval"]
    assert build_queries([60]) == build_queries([60], scrape_interval_s=promql.SCRAPE_INTERVAL_S)


# --- windows --------------------------------------------------------------------------------


def test_rare_windows_snap_to_the_nearest_measured_one() -> None:
    plan = build_queries([60] * 5 + [300] * 4 + [600] * 3 + [3600] * 2 + [90])
    assert plan.windows[90] == "60s"
    assert plan.window_label(7200) == "3600s"


def test_equally_common_windows_keep_the_shortest() -> None:
    """Five windows seen once each, four measured: the shortest four, the rest snapped."""
    plan = plan_windows([600, 300, 120, 90, 60])
    assert plan == {600: "300s", 300: "300s", 120: "120s", 90: "90s", 60: "60s"}


def test_window_plan_defaults_and_floors() -> None:
    assert plan_windows([]) == {60: "60s"}
    assert plan_windows([0.4]) == {1: "1s"}
    assert build_queries([]).window_label(60) == "60s"


def test_a_plan_without_windows_reads_at_sixty_seconds() -> None:
    assert QueryPlan(queries=(), windows={}).window_label(30) == "60s"


@pytest.mark.parametrize(("seconds", "want"), [
    pytest.param(0, "1s", id="zero-is-one-second"),
    pytest.param(1, "1s", id="one-second"),
    pytest.param(90, "90s", id="whole-seconds"),
])
def test_duration_is_whole_seconds_at_least_one(seconds: int, want: str) -> None:
    assert duration(seconds) == want


# --- user values in queries -------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
def test_escaped_value_reads_back_exactly_and_cannot_close_the_string(value: str) -> None:
    body = escape_label_value(value)
    # PromQL double-quoted strings use Go escapes; for these characters Python's agree.
    assert ast.literal_eval(f'"{body}"') == value
    assert re.search(r'(?<!\\)(\\\\)*"', body) is None  # no unescaped quote
    assert "\n" not in body


@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
def test_regex_value_matches_only_the_literal(value: str) -> None:
    pattern = ast.literal_eval(f'"{regex_value(value)}"')
    assert re.fullmatch(pattern, value, flags=re.DOTALL)
    assert not re.fullmatch(pattern, value + "x", flags=re.DOTALL)


def test_any_of_is_a_sorted_deduplicated_alternative() -> None:
    assert any_of("service", ["chat", "a.b", "chat"]) == r'service=~"a\\.b|chat"'


def test_hostile_namespaces_stay_inside_their_matcher() -> None:
    plan = build_queries([60], namespaces=HOSTILE)
    for q in plan.queries:
        # Every quote in the query is escaped or delimits a string; strings stay balanced.
        unescaped = re.findall(r'(?<!\\)(?:\\\\)*"', q.expr)
        assert len(unescaped) % 2 == 0
        assert " or vector(1)" not in re.sub(r'"(?:[^"\\]|\\.)*"', '""', q.expr)


def test_namespace_scope_selectors_are_exact() -> None:
    two = build_queries([60], namespaces=["b", "a", "a"])
    for q in two.queries:
        assert '{namespace!="", service!="", namespace=~"a|b"}' in q.expr


def test_empty_namespace_scope_matches_nothing() -> None:
    for q in build_queries([60], namespaces=[]).queries:
        assert '{namespace!="", service!="", namespace="-"}' in q.expr


# --- in the real PromQL engine ------------------------------------------------------------------


def run_promtool(tmp_path: Path, args: list[str], doc: dict[str, Any], name: str) -> str:
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc))
    proc = subprocess.run([str(promtool()), *args, str(f)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_every_query_parses_in_promtool_with_many_windows_and_hostile_scopes(
        tmp_path: Path) -> None:
    plan = build_queries([60, 300, 120, 3600, 90], namespaces=PROMTOOL_SCOPES)
    rules = [{"record": f"slo:q_{q.name}", "expr": q.expr} for q in plan.queries]
    out = run_promtool(tmp_path, ["check", "rules"], {"groups": [{"name": "slo",
                                                                  "rules": rules}]},
                       "rules.yaml")
    assert f"{len(rules)} rules found" in out


def series(name: str, labels: dict[str, str], per_step: float,
           values: str | None = None) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": values or f"0+{per_step}x40"}


def test_queries_return_tagged_per_service_series_in_promtool(tmp_path: Path) -> None:
    """Two pods of one service (gateway and engine views), one pod of another service
    without the gateway; counters grow at fixed rates every 15 s, so each expected rate is
    exact. Pod s-0's arrivals jump by 60 between 450 s and 465 s (4/s for one scrape
    interval), the burst the ``burst`` query must find inside the 60 s window."""
    a0 = {"namespace": "a", "service": "s", "pod": "s-0", "tenant": "a"}
    a1 = {**a0, "pod": "s-1"}
    b0 = {"namespace": "b", "service": "t", "pod": "t-0", "tenant": "b"}
    inputs = []
    for pod in (a0, a1):
        for le, per in (("0.5", 15), ("1.0", 30), ("+Inf", 45)):  # 1, 2, 3 per second
            inputs.append(series("slo_gateway_e2e_request_latency_seconds_bucket",
                                 {**pod, "le": le, "exported_tenant": "x"}, per))
            inputs.append(series("vllm:e2e_request_latency_seconds_bucket",
                                 {**pod, "le": le, "engine": "0", "model_name": "m"}, per))
        inputs.append(series("vllm:request_success_total",
                             {**pod, "engine": "0", "model_name": "m",
                              "finished_reason": "length"}, 15))
        inputs.append(series("vllm:num_requests_running",
                             {**pod, "engine": "0", "model_name": "m"}, 0))
        engine = {**pod, "engine": "0", "model_name": "m"}
        inputs.append(series("vllm:prefix_cache_queries_total", engine, 1500))  # 100/s
        inputs.append(series("vllm:prefix_cache_hits_total", engine, 375))  # 25/s
    arrivals = "slo_gateway_arrivals_total"
    inputs.append(series(arrivals, {**a1, "exported_tenant": "x"}, 15))  # 1/s
    # 1/s up to 450 s, +60 by 465 s, then 1/s again.
    inputs.append(series(arrivals, {**a0, "exported_tenant": "x"}, 0, "0+15x30 510+15x10"))
    inputs.append(series(arrivals, {**a0, "exported_tenant": "y"}, 0))  # a tenant at rest
    for le, per in (("1.0", 15), ("+Inf", 30)):  # 1 and 2 per second
        inputs.append(series("vllm:e2e_request_latency_seconds_bucket",
                             {**b0, "le": le, "engine": "0", "model_name": "m"}, per))
    inputs.append(series("vllm:request_success_total",
                         {**b0, "engine": "0", "model_name": "m",
                          "finished_reason": "stop"}, 30))
    plan = build_queries([60], namespaces=["a", "b", *PROMTOOL_SCOPES],
                         percentiles={"e2e": [0.99, 0.25]})
    q = {x.name: x.expr for x in plan.queries}

    def sample(labels: dict[str, str], value: float) -> dict[str, Any]:
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {"labels": "{" + body + "}", "value": value}

    a, b = {"namespace": "a", "service": "s"}, {"namespace": "b", "service": "t"}
    w = {"window": "60s"}
    # Each service's percentiles as Prometheus computes them, which are what
    # slo.histogram.quantile (the simulator's percentiles) gives for the same bucket rates.
    a_buckets, b_buckets = [(0.5, 2.0), (1.0, 4.0), (INF, 6.0)], [(1.0, 1.0), (INF, 2.0)]
    assert [quantile(p, a_buckets) for p in (0.25, 0.99)] == [0.375, 1.0]
    assert [quantile(p, b_buckets) for p in (0.25, 0.99)] == [0.5, 1.0]
    e2e = [sample({**a, **w, "source": src, "quantile": ql}, v)
           for src in ("gateway", "engine")
           for ql, v in (("0.25", 0.375), ("0.99", 1.0), (promql.COUNT, 6.0))]
    e2e += [sample({**b, **w, "source": "engine", "quantile": ql}, v)
            for ql, v in (("0.25", 0.5), ("0.99", 1.0), (promql.COUNT, 2.0))]
    def throughput(arrivals: float, recent: float) -> list[dict[str, Any]]:
        return [sample({**a, **w, "signal": "requests"}, 2),
                sample({**b, **w, "signal": "requests"}, 2),
                sample({**a, **w, "signal": "arrivals"}, arrivals),
                sample({**a, **w, "signal": promql.ARRIVALS_RECENT}, recent),
                sample({**a, **w, "signal": "prefix_queries"}, 200),
                sample({**a, **w, "signal": "prefix_hits"}, 50)]

    tests = {"fuzzy_compare": True, "tests": [{
        "interval": "15s",
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": q["e2e"], "eval_time": "8m", "exp_samples": e2e},
            # Samples at 435..480 s: s-0 rose 90 over 45 s, extrapolated to 60 s (2/s). The
            # last half window (samples at 465 and 480 s) is past the jump: 1 + 1.
            {"expr": q["throughput"], "eval_time": "8m",
             "exp_samples": throughput(arrivals=2 + 1, recent=1 + 1)},
            # A scrape earlier the last half window holds the jump (60 in 15 s, extrapolated
            # over 30 s: 4/s) while the whole window's mean reads it spread over 60 s.
            {"expr": q["throughput"], "eval_time": "7m45s",
             "exp_samples": throughput(arrivals=2 + 1, recent=4 + 1)},
            # Steps at 435, 450, 465 and 480 s; the one at 465 s holds the jump: 4 + 1.
            {"expr": q["burst"], "eval_time": "8m", "exp_samples": [
                sample({**a, **w}, 4 + 1)]},
            # Before the jump the highest step rate is the steady 1 + 1.
            {"expr": q["burst"], "eval_time": "7m30s", "exp_samples": [
                sample({**a, **w}, 1 + 1)]},
            {"expr": q["running"], "eval_time": "8m", "exp_samples": [
                sample({**a, "stat": "sum"}, 0), sample({**a, "stat": "pods"}, 2),
                sample({**a, "stat": "newest"}, 480)]},
        ],
    }]}
    run_promtool(tmp_path, ["test", "rules"], tests, "test.yaml")


def test_decode_returns_the_first_source_with_samples_per_service_in_promtool(
        tmp_path: Path) -> None:
    """Service s decodes with per-request samples (its per-token rows stay out of the
    reply); service t has the per-request histogram but no request finished in the window,
    so its per-token rows come instead; both with the ``_sum`` pseudo bucket. Samples every
    20 s: a 60 s rate extrapolates its three samples by exactly 1.5, so every rate below
    is exact."""
    req, tok = "vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds"
    s0 = {"namespace": "a", "service": "s", "pod": "s-0", "engine": "0", "model_name": "m"}
    t0 = {**s0, "service": "t", "pod": "t-0"}
    inputs = []
    for pod, req_per in ((s0, 20), (t0, 0)):  # 1/s finished requests for s, none for t
        for le in ("0.02", "+Inf"):
            inputs.append(series(f"{req}_bucket", {**pod, "le": le}, req_per))
            inputs.append(series(f"{tok}_bucket", {**pod, "le": le}, 200))  # 10 tokens/s
        inputs.append(series(f"{req}_sum", pod, 0.25 * req_per / 20))  # 12.5 ms each
        inputs.append(series(f"{tok}_sum", pod, 2.5))  # 12.5 ms each
    expr = {q.name: q.expr for q in build_queries([60], namespaces=["a"]).queries}["decode"]

    def sample(svc: str, src: str, le: str, value: float) -> dict[str, Any]:
        labels = {"namespace": "a", "service": svc, "window": "60s", "source": src, "le": le}
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {"labels": "{" + body + "}", "value": value}

    want = [sample("s", "request", le, 1.0) for le in ("0.02", "+Inf")]
    want.append(sample("s", "request", promql.SUM_LE, 0.0125))
    want += [sample("t", "token", le, 10.0) for le in ("0.02", "+Inf")]
    want.append(sample("t", "token", promql.SUM_LE, 0.125))
    tests = {"tests": [{"interval": "20s", "input_series": inputs, "promql_expr_test": [
        {"expr": expr, "eval_time": "5m", "exp_samples": want}]}]}
    run_promtool(tmp_path, ["test", "rules"], tests, "decode.yaml")


# --- what each pod runs ------------------------------------------------------------------------


def test_the_engine_query_reads_both_runtime_families_per_pod_tagged_apart() -> None:
    expr = {q.name: q.expr for q in build_queries([60]).queries}[promql.ENGINE_QUERY]
    info_by = ", ".join(("namespace", "service", "pod", *c.ENGINE_INFO_LABELS))
    change_by = ", ".join(("namespace", "service", "pod", *c.ENGINE_CHANGE_LABELS))
    assert (f'label_replace(max by ({info_by}) ({c.RUNTIME_ENGINE_INFO}{{namespace!="", '
            f'service!=""}}), "family", "{promql.ENGINE_FAMILY_INFO}", "", "")') in expr
    assert (f'label_replace(max by ({change_by}) ({c.RUNTIME_ENGINE_CHANGE}{{namespace!="", '
            f'service!=""}}), "family", "{promql.ENGINE_FAMILY_CHANGE}", "", "")') in expr
    assert promql.QUERY_NAMES[-1] == promql.ENGINE_QUERY
    assert promql.ENGINE_QUERY not in promql.SIGNAL_QUERY_NAMES


def test_engine_query_returns_each_pods_settings_and_changes_in_promtool(
        tmp_path: Path) -> None:
    """Two pods of one service (one ran the plan, one had its FP8 KV cache dropped), and a
    pod in a namespace outside the operator's scope, which the query leaves out."""
    settings, dropped, kv = RUNS_PLAN, KV_DROPPED, KV_CHANGE
    a0 = {"namespace": "a", "service": "s", "pod": "s-0", "tenant": "a"}
    a1 = {**a0, "pod": "s-1"}
    z0 = {"namespace": "z", "service": "s", "pod": "s-0", "tenant": "z"}
    inputs = [series(c.RUNTIME_ENGINE_INFO, {**a0, **settings}, 0, "1x40"),
              series(c.RUNTIME_ENGINE_INFO, {**a1, **dropped}, 0, "1x40"),
              series(c.RUNTIME_ENGINE_CHANGE, {**a1, **kv}, 0, "1x40"),
              series(c.RUNTIME_ENGINE_INFO, {**z0, **dropped}, 0, "1x40")]
    expr = {q.name: q.expr for q in build_queries([60], namespaces=["a"]).queries}["engine"]

    def sample(labels: dict[str, str], value: float) -> dict[str, Any]:
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {"labels": "{" + body + "}", "value": value}

    pod = {k: v for k, v in a0.items() if k != "tenant"}
    tests = {"tests": [{"interval": "15s", "input_series": inputs, "promql_expr_test": [
        {"expr": expr, "eval_time": "5m", "exp_samples": [
            sample({**pod, **settings, "family": "info"}, 1),
            sample({**pod, "pod": "s-1", **dropped, "family": "info"}, 1),
            sample({**pod, "pod": "s-1", **kv, "family": "change"}, 1)]}]}]}
    run_promtool(tmp_path, ["test", "rules"], tests, "engine.yaml")
