"""Wire bodies -> observations, as the watch caches and direct LISTs build them (pure);
which API failures are retried soon."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from slo_operator.adapters.kube import (
    deployment_obs,
    failure_summary,
    from_api,
    node_info,
    owner_key,
    pod_obs,
    retry_after,
    transient,
)
from slo_operator.api.cluster import ApiRejected, PodObs
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


def _api_error(status: int, headers: dict[str, str] | None = None) -> ApiException:
    e = ApiException(status=status, reason="Reason")
    e.headers = headers or {}
    return e


@pytest.mark.parametrize(("error", "retried"), [
    pytest.param(_api_error(409), True, id="conflict"),
    pytest.param(_api_error(429), True, id="throttled"),
    pytest.param(_api_error(500), True, id="server-error"),
    pytest.param(_api_error(503), True, id="unavailable"),
    pytest.param(_api_error(404), False, id="not-found"),
    pytest.param(_api_error(422), False, id="invalid"),
    pytest.param(_api_error(403), False, id="forbidden"),
    pytest.param(ApiRejected("Service", "chat", 429, "slow down"), True, id="rejected-429"),
    pytest.param(ApiRejected("Service", "chat", 422, "bad port"), False, id="rejected-422"),
    pytest.param(urllib3.exceptions.MaxRetryError(None, "/", "refused"), True, id="no-answer"),
    pytest.param(urllib3.exceptions.ProtocolError("dropped"), True, id="dropped"),
    pytest.param(ConnectionRefusedError(), True, id="refused"),
    pytest.param(ValueError("a bug"), False, id="a-bug"),
])
def test_which_failures_are_retried_soon_rather_than_reported(error: BaseException,
                                                              retried: bool) -> None:
    assert transient(error) is retried
    # Every one of them but the bug is an answer (or the silence) of the API server:
    # logged as one line, never with a traceback.
    assert from_api(error) is (not isinstance(error, ValueError))


def test_the_retry_waits_what_the_api_server_asks_within_bounds() -> None:
    def rejected(headers: dict[str, str]) -> ApiRejected:
        try:
            raise ApiRejected("Service", "chat", 429, "slow") from _api_error(429, headers)
        except ApiRejected as e:
            return e

    assert retry_after(rejected({"Retry-After": "3"})) == 3.0
    assert retry_after(_api_error(429, {"Retry-After": "2"})) == 2.0
    assert retry_after(rejected({})) == 5.0
    assert retry_after(rejected({"Retry-After": "9999"})) == 60.0
    assert retry_after(rejected({"Retry-After": "soon"})) == 5.0
    assert failure_summary(_api_error(429)) == "HTTP 429 Reason"
