"""SLOPolicy and InferenceService edits and deletions while a periodic pass runs.

The real operator (one-second passes, the chart's ClusterRole) reads its signals from
``PromQueryFake``, which can park the queries of a pass: the pass has taken its snapshot of
the caches and waits for its signals. Meanwhile one service's ``spec.replicas.max`` is
lowered (its handler applies the new bound at once, without Prometheus) and another
service is deleted. When the parked pass goes on, it must not apply the old bound (a scale
back up, undone by the next pass) nor write for the deleted service; later passes go on
as usual. (A policy edited meanwhile is the same check, ``caches.superseded``; its handler
decides through Prometheus, whose query threads the parked pass holds, so it is shown one
level down: ``tests/operator/reconcile/test_refresh.py``.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.api.models import GROUP
from slo_operator.api.observe import ServiceKey
from tests.integration.operator_support import (
    chart_operator,
    deployments_of,
    only_deployment,
)
from tests.integration.prom_query_fake import PromQueryFake
from tests.integration.test_api_requests import passes
from tests.operator.reconcile.prom_fake import Load

pytestmark = pytest.mark.integration

WINDOW = "60s"
OVERLOAD = Load(rate=400.0, e2e_s=3.0, ttft_s=1.0, waiting=40, running=200, output_tokens=5)


def _docs(chat_max: int) -> list[dict[str, Any]]:
    policy = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
              "metadata": {"name": "gold"},
              "spec": {"window": WINDOW, "scaling": {"minReplicas": 1, "maxReplicas": 3}}}
    services = [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
                 "metadata": {"name": name},
                 "spec": {"model": {"name": f"org/{name}", "sizeBillions": 8},
                          "hardware": {"gpuProducts": ["H100"]},
                          "replicas": {"max": chat_max if name == "chat" else 3},
                          "sloPolicyRef": {"name": "gold"}}} for name in ("chat", "other")]
    return [policy, *services]


@pytest.fixture
def prom(namespace: str) -> Iterator[PromQueryFake]:
    fake = PromQueryFake({ServiceKey(namespace, n): OVERLOAD for n in ("chat", "other")},
                         window=WINDOW)
    try:
        yield fake
    finally:
        fake.stop()


def test_a_pass_that_waited_through_an_edit_and_a_deletion_writes_neither_back(
    cluster: LocalCluster, namespace: str, prom: PromQueryFake, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The parked queries must outlast the edit and the deletion without timing out: a pass
    # whose queries fail holds every service, which would hide what it would write.
    monkeypatch.setenv("SLO_PROMETHEUS_TIMEOUT", "60")
    with chart_operator(cluster, tmp_path, "slo-edits", interval=1.0,
                        prometheus_url=prom.url) as op:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(_docs(3)))

        def chat() -> dict[str, Any]:
            return only_deployment(cluster, namespace, "chat")

        def chat_replicas() -> list[int]:
            return [d["spec"]["replicas"] for d in deployments_of(cluster, namespace, "chat")]

        cluster.wait_for(lambda: chat_replicas() == [3], timeout=90,
                         desc="chat scaled out to maxReplicas 3")

        with prom.hold():
            cluster.wait_for(lambda: prom.parked > 0, timeout=30,
                             desc="a pass waiting for its signals")
            cluster.kubectl("apply", "-n", namespace, "-f", "-",
                            input=yaml.safe_dump(_docs(2)[1]))
            cluster.wait_for(lambda: chat_replicas() == [2], timeout=30,
                             desc="the edit acted on at once")
            generation = chat()["metadata"]["generation"]
            cluster.kubectl("delete", "infsvc", "-n", namespace, "other", "--wait=true")
            deleted_at = len(op.logs())
            parked_pass = passes(op) + 1
        # The parked pass goes on from its snapshot (chat's max 3, "other" present), then
        # two more passes.
        cluster.wait_for(lambda: passes(op) >= parked_pass + 2, timeout=60,
                         desc="the parked pass and two more")

        after = chat()
        assert after["spec"]["replicas"] == 2
        assert after["metadata"]["generation"] == generation  # never scaled back up
        later = op.logs()[deleted_at:]
        assert not re.search(rf"Applied for InferenceService {namespace}/other\b", later)
        assert "Traceback" not in op.logs()
