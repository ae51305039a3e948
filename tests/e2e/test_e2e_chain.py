"""The chain the SLO loop stands on: pods -> replica models -> Prometheus -> vllm: series.

A service's pods become replicas (one per Running pod), Prometheus scrapes each with the
pod's labels, and load through the replicas shows up as ``vllm:`` series grouped by
(namespace, service): the exact shape of the operator's queries.
"""

from __future__ import annotations

from typing import Any

import pytest

from slo_devtools.devenv.loadgen import constant_rate
from tests.e2e.e2e_support import E2E, GROUP, run_load

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
            "metadata": {"name": name}, "spec": spec}


def service(name: str, policy_name: str, *, products: tuple[str, ...] = ("H100",),
            replicas: tuple[int, int] = (1, 4), **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "sizeBillions": 8,
                               "maxModelLen": 4096},
                     "hardware": {"gpuProducts": list(products)},
                     "sloPolicyRef": {"name": policy_name},
                     "replicas": {"min": replicas[0], "max": replicas[1]}, **spec}}


def scalar(result: list[dict[str, Any]]) -> float:
    return float(result[0]["value"][1]) if result else float("nan")


def test_pods_become_scraped_replicas_and_load_becomes_vllm_series(e2e: E2E,
                                                                     namespace: str) -> None:
    e2e.apply(namespace, policy("steady", scaling={"minReplicas": 2, "maxReplicas": 2}),
              service("chat", "steady", replicas=(2, 2)))
    reps = e2e.harness.wait_replicas(namespace, "chat", 2, timeout=90)
    pods = {p["metadata"]["name"]: p for p in e2e.pods(namespace, "chat")}
    assert {r.pod for r in reps} == set(pods)
    assert all("H100" in r.gpu for r in reps), reps    # the node's GPU decides the step model

    # Two endpoints per pod (gateway /metrics, vLLM /engine/metrics), the pod's labels on each.
    up = e2e.prometheus.wait_target_up({"namespace": namespace, "service": "chat"}, count=4,
                                       timeout=30)
    for t in up:
        pod = pods[t["labels"]["pod"]]
        assert t["labels"]["tenant"] == pod["metadata"]["labels"][f"{GROUP}/tenant"]
    assert {t["scrapePool"] for t in up} == {"slo-pods"}

    res = run_load(e2e, namespace, "chat", constant_rate(rate=8, duration_s=3, prompt=200,
                                                          output=16))
    assert len(res.ok) == 24, res.summary()
    assert {r.endpoint for r in res.ok} == {r.url for r in reps}      # round-robin

    sel = f'namespace="{namespace}",service="chat"'
    q = f"sum by (namespace, service) (vllm:e2e_request_latency_seconds_count{{{sel}}})"
    e2e.cluster.wait_for(lambda: scalar(e2e.prometheus.query(q)) == 24, timeout=30,
                         desc="24 finished requests in Prometheus")
    series = e2e.prometheus.query(q)
    assert [s["metric"] for s in series] == [{"namespace": namespace, "service": "chat"}]
    # Per pod, as the gateway saw it (its own histogram) and as the engine did.
    gw = f"sum by (pod) (slo_gateway_e2e_request_latency_seconds_count{{{sel}}})"
    e2e.cluster.wait_for(
        lambda: sorted(scalar([s]) for s in e2e.prometheus.query(gw)) == [12.0, 12.0],
        timeout=30, desc="12 requests per pod in the gateways' histograms")
    tokens = e2e.prometheus.query(
        f"sum by (namespace, service) (vllm:generation_tokens_total{{{sel}}})")
    assert scalar(tokens) == 24 * 16
    assert e2e.prometheus.query(
        f"count by (namespace, service) (vllm:num_requests_running{{{sel}}})")[0]["value"][1] \
        == "2"
