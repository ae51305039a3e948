"""With Prometheus on, a pass over settled services writes no status.

The real operator (one-second passes, under the chart's ClusterRole) reads a real
Prometheus that scrapes a replica model for every pod it runs. Once two idle services
have settled at their policy's minimum, the API server's own request counters
(``apiserver_request_total``) must show no status patch, and no write at all, across
several passes: per-pass times (``observed.time``, the law's stamps) never cause a write by
themselves, and the next write is the five-minute heartbeat. Resting at minReplicas is
no problem: its Event is Normal, not a Warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_devtools.devenv.prometheus_server import PrometheusServer
from slo_devtools.devenv.replica_pods import ReplicaHarness
from slo_operator.api.models import GROUP
from slo_operator.reconcile.status import HEARTBEAT_S
from tests.integration.operator_support import chart_operator, conditions, events_for
from tests.integration.test_api_requests import WRITES, passes, request_counts
from tests.support.prometheus import prometheus, prometheus_binary  # noqa: F401

pytestmark = pytest.mark.integration
SERVICES = ("chat", "code")
PASSES = 8  # counted passes, one second apart: far from the heartbeat
STATUS_PATCH = ("PATCH", "inferenceservices", "status")


@pytest.fixture
def replicas(cluster: LocalCluster, namespace: str, prometheus: PrometheusServer,  # noqa: F811
             tmp_path: Path) -> Iterator[ReplicaHarness]:
    """A replica model for every Running pod of the namespace, scraped by ``prometheus``."""
    api = cluster.api_client()
    harness = ReplicaHarness(api, prometheus=prometheus, namespace=namespace,
                             cold_start_s=1.0, workdir=tmp_path / "replicas").start()
    try:
        yield harness
    finally:
        harness.stop()
        api.close()  # type: ignore[no-untyped-call]


def test_settled_services_write_no_status_between_heartbeats(
    cluster: LocalCluster, namespace: str, prometheus: PrometheusServer,  # noqa: F811
    replicas: ReplicaHarness, tmp_path: Path,
) -> None:
    assert PASSES < HEARTBEAT_S
    docs: list[dict[str, Any]] = [{
        "apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy", "metadata": {"name": "gold"},
        "spec": {"window": "10s", "attainmentPeriod": "5m",
                 "scaling": {"minReplicas": 1, "maxReplicas": 2,
                             "scaleDownStabilization": "0s"}}}]
    for name in SERVICES:
        docs.append({"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
                     "metadata": {"name": name},
                     "spec": {"model": {"name": f"org/{name}", "sizeBillions": 8},
                              "hardware": {"gpuProducts": ["H100"]},
                              "sloPolicyRef": {"name": "gold"}}})
    with chart_operator(cluster, tmp_path, "slo-idle-writes", interval=1.0,
                        prometheus_url=prometheus.url) as op:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))

        def settled() -> dict[str, dict[str, Any]] | None:
            items = cluster.kubectl_json("get", "infsvc", "-n", namespace)["items"]
            idle = {}
            for svc in items:
                c, status = conditions(svc), svc.get("status") or {}
                if (c.get("Ready", {}).get("status") == "True"
                        and c.get("Progressing", {}).get("status") == "False"
                        and c.get("MetricsAvailable", {}).get("reason") == "NoTraffic"
                        and (status.get("observed") or {}).get("state") == "NoTraffic"):
                    idle[svc["metadata"]["name"]] = status
            return idle if set(idle) == set(SERVICES) else None

        cluster.wait_for(settled, timeout=90,
                         desc="both services ready, idle, read from Prometheus")
        # Two more passes: the first idle decisions and their memory are written.
        start = passes(op)
        cluster.wait_for(lambda: passes(op) >= start + 2, timeout=30, desc="settling passes")

        before, first = request_counts(cluster), passes(op)
        written = settled()
        cluster.wait_for(lambda: passes(op) >= first + PASSES, timeout=60,
                         desc=f"{PASSES} periodic passes")
        after = request_counts(cluster)
        still = settled()

    writes = {k: after[k] - before[k] for k in after
              if k[0] in WRITES and after[k] != before[k]}
    assert writes == {}, f"writes during {PASSES} passes over settled services: {writes}"
    # The counter does see the operator's status patches: the passes' zero is a real one.
    assert before[STATUS_PATCH] >= len(SERVICES)
    assert written is not None and still is not None
    for name in SERVICES:
        # Nothing rewrote the status, not even the pass's own time.
        assert still[name]["observed"]["time"] == written[name]["observed"]["time"]
        assert still[name]["control"] == written[name]["control"]
        limited = conditions({"status": still[name]})["ScalingLimited"]
        assert (limited["status"], limited["reason"]) == ("True", "TooFewReplicas")
        # Resting at minReplicas is announced, not warned about.
        resting = [e["type"] for e in events_for(cluster, namespace, name)
                   if e["reason"] == "TooFewReplicas"]
        assert resting and set(resting) == {"Normal"}, resting
