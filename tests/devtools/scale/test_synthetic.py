"""The synthetic vLLM series: names, labels and values the operator's queries read."""

from __future__ import annotations

import json
from pathlib import Path

from slo_devtools.scale import synthetic
from slo_devtools.scale.benchmark import parse_metrics, total
from slo_operator.slo import promql
from slo_runtime import contract as c

SVC = synthetic.ServiceSeries("ns-a", "chat", "team-a", ("chat-0", "chat-1"))


def test_uniform_cdf() -> None:
    assert synthetic.uniform_cdf(0.1, 0.2, 0.4) == 0.0
    assert synthetic.uniform_cdf(0.5, 0.25, 0.75) == 0.5
    assert synthetic.uniform_cdf(0.5, 0.2, 0.4) == 1.0


def test_every_series_carries_the_labels_the_queries_group_by() -> None:
    text = synthetic.render(synthetic.all_lines([SVC], rate=2.0), elapsed=10.0)
    samples = parse_metrics(text)
    assert len(samples) == 2 * synthetic.series_per_pod()
    for _, labels, _ in samples:
        assert {"namespace", "service", "pod", "tenant"} <= set(labels)
        assert (labels["namespace"], labels["service"], labels["tenant"]) == (
            "ns-a", "chat", "team-a")
    names = {n for n, _, _ in samples}
    # Every family an operator query reads in its engine (vLLM) variant.
    for family in (c.E2E_LATENCY, c.TTFT, c.INTER_TOKEN_LATENCY, c.TIME_PER_OUTPUT_TOKEN):
        assert {f"{family}_bucket", f"{family}_sum", f"{family}_count"} <= names
    for _, counter in promql.THROUGHPUT_SIGNALS:
        assert counter in names
    assert {c.NUM_REQUESTS_RUNNING, c.NUM_REQUESTS_WAITING, c.KV_CACHE_USAGE} <= names


def test_counters_grow_with_time_and_buckets_are_cumulative() -> None:
    lines = synthetic.all_lines([SVC], rate=2.0)
    at10 = parse_metrics(synthetic.render(lines, 10.0))
    at20 = parse_metrics(synthetic.render(lines, 20.0))
    ok = c.REQUEST_SUCCESS + c.COUNTER_SUFFIX
    assert total(at10, ok, pod="chat-0") == 20.0
    assert total(at20, ok, pod="chat-0") == 40.0
    assert total(at20, c.KV_CACHE_USAGE) == total(at10, c.KV_CACHE_USAGE) == 0.2
    buckets = [(float(labels["le"]), v) for n, labels, v in at10
               if n == f"{c.E2E_LATENCY}_bucket" and labels["pod"] == "chat-0"]
    values = [v for _, v in sorted(buckets)]
    assert values == sorted(values) and values[-1] == 20.0
    # Latencies sit inside the default objective (e2e 800 ms at P99).
    assert max(synthetic.E2E_RANGE) < 0.8 and max(synthetic.TTFT_RANGE) < 0.3


def test_spec_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    synthetic.write_spec(path, [SVC])
    assert synthetic.load_spec(json.loads(path.read_text())) == [SVC]


def test_arrivals_match_completions_and_a_quarter_of_prompt_tokens_hit_the_prefix_cache(
        ) -> None:
    samples = parse_metrics(synthetic.render(synthetic.all_lines([SVC], rate=2.0), 10.0))
    arrivals = c.GATEWAY_ARRIVALS + c.COUNTER_SUFFIX
    assert total(samples, arrivals, pod="chat-0") == total(
        samples, c.REQUEST_SUCCESS + c.COUNTER_SUFFIX, pod="chat-0") == 20.0
    # The gateway's series carries no engine labels, as the real gateway's.
    assert all("engine" not in labels for n, labels, _ in samples if n == arrivals)
    queries = total(samples, c.PREFIX_CACHE_QUERIES + c.COUNTER_SUFFIX)
    assert queries == total(samples, c.PROMPT_TOKENS + c.COUNTER_SUFFIX) == 8000.0
    assert total(samples, c.PREFIX_CACHE_HITS + c.COUNTER_SUFFIX) == 0.25 * queries
