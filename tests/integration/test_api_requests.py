"""A periodic pass over unchanged services costs the API server nothing.

The real operator runs with a one-second pass; once its services are steady, the API
server's own request counters (``apiserver_request_total`` on /metrics) must show no
write and no GET or LIST from the operator across several passes: everything it reads
comes from its watch caches, and it applies only what changed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.api.models import GROUP
from tests.integration.operator_support import (
    OperatorProcess,
    chart_operator,
    conditions,
)

pytestmark = pytest.mark.integration
# What the operator reads or writes. Status subresources of pods, deployments and nodes
# are written by kwok and the controller manager, never by the operator.
RESOURCES = {"inferenceservices", "slopolicies", "deployments", "services",
             "poddisruptionbudgets", "pods", "nodes", "events"}
OTHERS_STATUS = {"pods", "deployments", "nodes"}
WRITES = {"APPLY", "PATCH", "POST", "PUT", "DELETE"}
READS = {"GET", "LIST"}
_SAMPLE = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def request_counts(cluster: LocalCluster) -> Counter[tuple[str, str, str]]:
    """(verb, resource, subresource) -> requests served so far, for the operator's kinds."""
    out: Counter[tuple[str, str, str]] = Counter()
    for line in cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        verb, res, sub = labels.get("verb", ""), labels.get("resource", ""), labels.get(
            "subresource", "")
        if res not in RESOURCES or (sub == "status" and res in OTHERS_STATUS):
            continue
        if verb in WRITES or verb in READS:
            out[(verb, res, sub)] += int(float(m["value"]))
    return out


def passes(op: OperatorProcess) -> int:
    found = re.findall(r"Finished periodic pass (\d+): (\d+) objects", op.logs())
    return int(found[-1][0]) if found else 0


@pytest.fixture
def fast_operator(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[OperatorProcess]:
    with chart_operator(cluster, tmp_path_factory.mktemp("counted"), "slo-counted",
                        interval=1.0) as op:
        yield op


def test_a_pass_over_unchanged_services_sends_no_writes_and_no_reads(
    cluster: LocalCluster, namespace: str, fast_operator: OperatorProcess
) -> None:
    docs = [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
             "metadata": {"name": "gold"}, "spec": {"scaling": {"minReplicas": 1}}}]
    for name in ("chat", "code", "summarize"):
        docs.append({"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
                     "metadata": {"name": name},
                     "spec": {"model": {"name": f"org/{name}", "sizeBillions": 8},
                              "hardware": {"gpuProducts": ["H100"]},
                              "sloPolicyRef": {"name": "gold"}}})
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))

    def steady() -> bool:
        items = cluster.kubectl_json("get", "infsvc", "-n", namespace)["items"]
        ready = [s for s in items
                 if conditions(s).get("Ready", {}).get("status") == "True"
                 and conditions(s).get("Progressing", {}).get("status") == "False"]
        pods = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
        limited = [p for p in pods
                   if f"{GROUP}/inflight-limit" in (p["metadata"].get("annotations") or {})]
        return len(ready) == 3 and len(limited) == len(pods) == 3

    cluster.wait_for(steady, timeout=120, desc="three services ready, pods carrying limits")
    # One more pass after steady state settles what the last events triggered.
    start = passes(fast_operator) + 1
    cluster.wait_for(lambda: passes(fast_operator) > start, timeout=30, desc="a settling pass")

    # The API server counts every client's requests. Until the garbage collector watches the
    # new CRD (its discovery resyncs every 30 s), it looks up the InferenceService owners of
    # Deployments with GETs; those stop, while an operator that read would read in every
    # window. So a window with only such GETs is measured again (at most three windows);
    # writes must be zero in every window.
    for attempt in range(3):
        before = request_counts(cluster)
        first = passes(fast_operator)
        cluster.wait_for(lambda first=first: passes(fast_operator) >= first + 5,
                         timeout=60, desc="five periodic passes")
        after = request_counts(cluster)

        delta = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        writes = {k: v for k, v in delta.items() if k[0] in WRITES}
        reads = {k: v for k, v in delta.items() if k[0] in READS}
        assert writes == {}, f"writes during unchanged passes: {writes}"
        owner_lookups = set(reads) <= {("GET", "inferenceservices", "")}
        if not reads or not owner_lookups or attempt == 2:
            break
    assert reads == {}, f"GETs/LISTs during passes (watch caches should serve): {reads}"
    # And the counters do see the operator's requests: the passes' zero is a real zero.
    assert before[("APPLY", "deployments", "")] >= 3
    assert before[("PATCH", "pods", "")] >= 3
    counts = re.findall(r"Finished periodic pass \d+: (\d+) objects", fast_operator.logs())
    assert counts[-5:] == ["0"] * 5
