"""The SLO loop's pass against the real API server, with a fake Prometheus.

The very functions the operator's periodic pass runs (``observe_and_decide`` then
``reconcile_service_sync`` per service) scale the Deployment on overload, post the Events
and status a user reads, and hold everything when Prometheus is gone.
"""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime
from typing import Any

import pytest

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.adapters.kube import Kube
from slo_operator.api.models import GROUP
from slo_operator.api.observe import ServiceKey
from slo_operator.reconcile.loop import observe_and_decide
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from tests.integration.operator_support import (
    chart_operator,
    conditions,
    events_for,
    install_crds,
    only_deployment,
)
from tests.operator.reconcile.prom_fake import FakeMetrics, Load

pytestmark = pytest.mark.integration
OVERLOAD = Load(rate=400.0, e2e_s=3.0, ttft_s=1.0, waiting=40, running=200, output_tokens=5)


def _pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.kubectl_json(
        "get", "pods", "-n", ns, "-l", f"{GROUP}/service=chat")["items"]
    return items


def test_overload_scales_out_and_an_outage_holds(cluster: LocalCluster, namespace: str) -> None:
    install_crds(cluster)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=f"""
apiVersion: {GROUP}/v1alpha1
kind: SLOPolicy
metadata: {{name: gold}}
spec:
  scaling: {{minReplicas: 1, maxReplicas: 3}}
---
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: chat}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100]}}
  sloPolicyRef: {{name: gold}}
""")
    api = cluster.api_client()
    kube, applied, key = Kube(api), AppliedCache(), ServiceKey(namespace, "chat")

    def one_pass(metrics: FakeMetrics | None) -> dict[str, Any]:
        snap, now = kube.read_snapshot(), datetime.now(UTC)
        updates = asyncio.run(observe_and_decide(metrics, snap, now)) if metrics else {}
        out = reconcile_service_sync(kube, snap.services[(namespace, "chat")], snap, now,
                                     Settings(), applied, updates.get(key))
        return out.status

    one_pass(None)
    cluster.wait_for(lambda: [p for p in _pods(cluster, namespace)
                              if p["status"].get("phase") == "Running"],
                     timeout=90, desc="first replica running")
    one_pass(None)

    status = one_pass(FakeMetrics({key: OVERLOAD}))
    dep = only_deployment(cluster, namespace, "chat")
    assert dep["spec"]["replicas"] == status["desiredReplicas"] == 3
    svc = cluster.kubectl_json("get", "infsvc", "-n", namespace, "chat")
    conds = conditions(svc)
    assert conds["SLOCompliant"]["status"] == "False"
    assert conds["MetricsAvailable"]["reason"] == "MetricsFound"
    assert svc["status"]["lastDecisions"][-1]["replicas"] == 3
    assert svc["status"]["observed"]["e2eMs"] > 800
    scaled = [e for e in events_for(cluster, namespace, "chat") if e["reason"] == "Scaled"]
    assert scaled and "from 1 to 3" in scaled[0]["message"]
    cluster.wait_for(lambda: len([p for p in _pods(cluster, namespace)
                                  if p["status"].get("phase") == "Running"]) == 3,
                     timeout=90, desc="three replicas running")
    one_pass(None)  # the watch-cache view of the new pods: live limits set

    uids = {p["metadata"]["uid"] for p in _pods(cluster, namespace)}
    generation = only_deployment(cluster, namespace, "chat")["metadata"]["generation"]
    status = one_pass(FakeMetrics(down=True))
    assert status["desiredReplicas"] == 3
    svc = cluster.kubectl_json("get", "infsvc", "-n", namespace, "chat")
    cond = conditions(svc)["MetricsAvailable"]
    assert (cond["status"], cond["reason"]) == ("False", "MetricsUnavailable")
    assert "holding" in cond["message"]
    warnings = {e["reason"] for e in events_for(cluster, namespace, "chat")
                if e["type"] == "Warning"}
    assert "MetricsUnavailable" in warnings
    assert {p["metadata"]["uid"] for p in _pods(cluster, namespace)} == uids
    assert only_deployment(cluster, namespace, "chat")["metadata"]["generation"] == generation
    api.close()  # type: ignore[no-untyped-call]


def test_the_operator_process_reports_an_unreachable_prometheus(
    cluster: LocalCluster, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The real operator, its loop pointed at a Prometheus that is down: the service is
    deployed, holds its replicas and says why, and the operator keeps running."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with chart_operator(cluster, tmp_path_factory.mktemp("prom-down"), "slo-prom-down",
                        interval=1.0, prometheus_url=dead, log_tail=3000) as op:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=f"""
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: chat}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100]}}
""")

        def unavailable() -> dict[str, Any] | None:
            svc = cluster.kubectl_json("get", "infsvc", "-n", namespace, "chat")
            c = conditions(svc).get("MetricsAvailable")
            return svc if c and c["reason"] == "MetricsUnavailable" else None

        svc = cluster.wait_for(unavailable, timeout=90, desc="MetricsAvailable=False")
        assert svc["status"]["desiredReplicas"] == 1
        assert svc["status"]["observed"]["state"] == "Unavailable"
        assert conditions(svc)["SLOCompliant"]["status"] == "Unknown"
        assert op.proc.poll() is None
