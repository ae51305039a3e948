"""Wire bodies -> observations, as the watch caches and direct LISTs build them (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from slo_operator.adapters.kube import deployment_obs, node_info, owner_key, pod_obs
from slo_operator.api.cluster import PodObs
from slo_operator.render.names import ANNOTATION_SERVICE_NAME
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT, LABEL_SERVICE

LONG = "chat-" + "y" * 80


@pytest.mark.parametrize(
    ("meta", "want"),
    [
        pytest.param({"labels": {LABEL_SERVICE: "chat"}}, ("ns", "chat"), id="label"),
        pytest.param({"labels": {LABEL_SERVICE: "chat-yyyy-1a2b3c4d"},
                      "annotations": {ANNOTATION_SERVICE_NAME: LONG}}, ("ns", LONG),
                     id="annotation-holds-the-full-name"),
        pytest.param({"labels": {}}, None, id="not-owned"),
    ],
)
def test_owner_key(meta: dict[str, Any], want: tuple[str, str] | None) -> None:
    assert owner_key({"metadata": {"namespace": "ns", **meta}}) == want


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param({"metadata": {"name": "p", "annotations": {ANNOTATION_INFLIGHT_LIMIT: "32"}},
                      "status": {"phase": "Running", "conditions": [
                          {"type": "Ready", "status": "True",
                           "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                     PodObs("p", "Running", inflight_limit=32, ready=True,
                            ready_since=1767225600.0), id="ready-with-limit"),
        pytest.param({"metadata": {"name": "p", "annotations": {ANNOTATION_INFLIGHT_LIMIT: "x"}},
                      "status": {"phase": "Pending", "conditions": [
                          {"type": "PodScheduled", "status": "False",
                           "reason": "Unschedulable", "message": "Insufficient gpu"}]}},
                     PodObs("p", "Pending", True, "Insufficient gpu"),
                     id="unschedulable-and-a-garbled-limit"),
        pytest.param({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
                     None, id="terminating-is-gone"),
    ],
)
def test_pod_obs(body: dict[str, Any], want: PodObs | None) -> None:
    assert pod_obs(body) == want


def test_deployment_and_node() -> None:
    dep = deployment_obs({"metadata": {"generation": 3}, "spec": {"replicas": 4},
                          "status": {"replicas": 4, "readyReplicas": 2, "observedGeneration": 2}})
    assert (dep.spec_replicas, dep.ready_replicas, dep.generation, dep.observed_generation) == (
        4, 2, 3, 2)
    node = node_info({"metadata": {"name": "n", "labels": {"a": "b"}},
                      "spec": {"unschedulable": True},
                      "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    assert not node.schedulable and node.allocatable == {"nvidia.com/gpu": "8"}
