"""The end-to-end stack, started once per module: Prometheus scraping every second, the
replica harness (one gateway + replica model per Running pod, registered in Prometheus),
and the operator as a process under the chart's role, reading that Prometheus.

Time is compressed where the loop allows it: 1 s scrapes, a 2 s operator pass, short SLO
windows and stabilization in the tests' policies, replicas ready 1 s after their pod runs
(instead of about a minute). Step times are NOT compressed: the operator's capacity model
and the replicas must agree on what one GPU can do, so load is made heavy with long prompts
(prefill-bound), which are cheap to send from this 2-core machine.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_devtools.devenv.loadgen import LoadResult, LoadSpec, TraceRequest, replay
from slo_devtools.devenv.prometheus_server import PrometheusServer
from slo_devtools.devenv.replica_pods import ReplicaHarness
from slo_operator.api.models import GROUP
from tests.integration.operator_support import (
    OPERATOR_NS,
    OperatorProcess,
    bind_role,
    chart_cluster_role,
    ensure_namespace,
    install_crds,
)

__all__ = ["E2E", "GROUP", "e2e", "run_load"]

RECONCILE_INTERVAL_S = 2.0
COLD_START_S = 1.0
STEP_SPEED = 1.0


@dataclass
class E2E:
    cluster: LocalCluster
    prometheus: PrometheusServer
    harness: ReplicaHarness
    operator: OperatorProcess

    def apply(self, namespace: str, *objs: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "-n", namespace, "-f", "-",
                             input=yaml.safe_dump_all(objs))

    def isvc(self, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.cluster.kubectl_json("get", "infsvc", "-n", namespace, name)
        return obj

    def pods(self, namespace: str, service: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.cluster.kubectl_json(
            "get", "pods", "-n", namespace, "-l", f"{GROUP}/service={service}")["items"]
        return items


@pytest.fixture(scope="module")
def e2e(cluster: LocalCluster, prometheus_binary: tuple[Path, str],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    install_crds(cluster)
    ensure_namespace(cluster, OPERATOR_NS)
    workdir = tmp_path_factory.mktemp("e2e")
    prom = PrometheusServer(workdir / "prometheus", scrape_interval="1s").start()
    api = cluster.api_client()
    harness = ReplicaHarness(api, prometheus=prom, speed=STEP_SPEED, cold_start_s=COLD_START_S,
                             workdir=workdir / "replicas").start()
    kubeconfig = bind_role(cluster, chart_cluster_role(cluster), OPERATOR_NS, "slo-operator")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLO_PROMETHEUS_URL", prom.url)
        op = OperatorProcess(kubeconfig, workdir / "operator.log",
                             interval=RECONCILE_INTERVAL_S)
    try:
        cluster.wait_for(op.healthy, timeout=60, desc="operator liveness endpoint")
        yield E2E(cluster, prom, harness, op)
    finally:
        op.stop()
        harness.stop()
        api.close()  # type: ignore[no-untyped-call]
        prom.stop()
        print(f"\n--- operator log (tail) ---\n{op.logs()[-8000:]}")
        if os.environ.get("SLO_E2E_KEEP_PROMETHEUS_LOG"):
            print((workdir / "prometheus" / "prometheus.log").read_text()[-4000:])


def run_load(e: E2E, namespace: str, service: str, requests: Sequence[TraceRequest],
             speed: float = 1.0, stream: bool = True) -> LoadResult:
    """Replay ``requests`` against the service's live replicas (round-robin)."""
    return asyncio.run(replay(requests, lambda: e.harness.endpoints(namespace, service),
                              LoadSpec(speed=speed, stream=stream)))
