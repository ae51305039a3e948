"""Scale to zero: the facts the operator and the activator share (one home for both).

A service whose policy allows scale to zero and that has no Ready replica is routed to the
activator: the operator owns one EndpointSlice per such service, labelled
``kubernetes.io/service-name`` with the service's Kubernetes Service and
``endpointslice.kubernetes.io/managed-by`` :data:`SLICE_MANAGED_BY`, listing the
activator's Ready pods on :data:`ACTIVATOR_PORT_NAME`'s port. kube-proxy merges every slice
of a Service, so the Service keeps its selector and the endpoint controller's slice of the
pods; the operator deletes its slice once a replica is Ready again.

The activator tells the operator that demand exists through one annotation on the
InferenceService, :data:`ANNOTATION_WAKE`, a small JSON document (:class:`Wake`): when the
first request of a wake was held, how many were held, and later when the first one was
served and how long it waited, or when the activator gave up on it. A kopf watch delivers
the annotation's change to the operator at once: no query, no polling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slo_operator.api.models import GROUP
from slo_operator.api.numbers import finite_number

# On the InferenceService: written by the activator, read by the operator.
ANNOTATION_WAKE = f"{GROUP}/wake"
# EndpointSlice labels (Kubernetes' own keys) and the operator's managed-by value; the
# endpoint controller leaves slices of another manager alone.
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGED_BY = f"activator.{GROUP}"
ENDPOINT_CONTROLLER = "endpointslice-controller.k8s.io"
# The label the chart puts on the activator's Service (the endpoint controller copies a
# Service's labels onto its EndpointSlices, so the operator watches only those).
LABEL_COMPONENT = f"{GROUP}/component"
COMPONENT_ACTIVATOR = "activator"
# The port name of an InferenceService's Service (render.objects.build_service): the
# route slice lists the activator under it, and the activator reads the pods' slices by it.
SERVICE_PORT_NAME = "http"
# The activator's serving port: its Service's port name and the default number.
ACTIVATOR_PORT_NAME = "http"
ACTIVATOR_PORT = 8012
# A request may name its InferenceService explicitly (namespace/name), e.g. from a gateway
# in front of several services; otherwise the Host header says it.
SERVICE_HEADER = "X-SLO-Service"
# Defaults of the activator's queue (per service) and of how long it holds a request.
DEFAULT_QUEUE_PER_SERVICE = 100
DEFAULT_WAKE_TIMEOUT_S = 300.0
# A wake already recorded is written again for later arrivals at most this often.
WAKE_UPDATE_INTERVAL_S = 5.0
# Seconds a client is told to wait before retrying when the queue is full (Retry-After).
RETRY_AFTER_S = 5


@dataclass(frozen=True)
class ActivatorEndpoints:
    """The activator's Ready pods as its Service's EndpointSlices list them."""

    addresses: tuple[str, ...] = ()
    port: int = ACTIVATOR_PORT
    address_type: str = "IPv4"


def ready_endpoints(body: Any, port_name: str) -> tuple[tuple[str, ...], int] | None:
    """(the Ready addresses, sorted, and the port named ``port_name``) of one EndpointSlice
    (a plain dict as the API server returns it); None when it lists no such port. An
    endpoint is Ready unless its ``conditions.ready`` is false (unset means ready: the
    API's own rule)."""
    if not isinstance(body, Mapping):
        return None
    port = next((p.get("port") for p in body.get("ports") or ()
                 if isinstance(p, Mapping) and p.get("name") == port_name
                 and isinstance(p.get("port"), int)), None)
    if port is None:
        return None
    addresses = []
    for ep in body.get("endpoints") or ():
        if not isinstance(ep, Mapping) or (ep.get("conditions") or {}).get("ready") is False:
            continue
        addresses += [a for a in ep.get("addresses") or () if isinstance(a, str)]
    return tuple(sorted(set(addresses))), int(port)


def activator_slice_endpoints(body: Any) -> ActivatorEndpoints | None:
    """The Ready addresses and the :data:`ACTIVATOR_PORT_NAME` port of one EndpointSlice
    of the activator's Service; None when it lists no such port."""
    found = ready_endpoints(body, ACTIVATOR_PORT_NAME)
    if found is None:
        return None
    return ActivatorEndpoints(found[0], found[1], str(body.get("addressType") or "IPv4"))


@dataclass(frozen=True)
class Wake:
    """One wake of a service, as the activator records it (times in epoch seconds)."""

    requested_at: float  # the first held request arrived
    held: int = 1  # requests held when it was written
    served_at: float | None = None  # the first held request was forwarded to a pod
    waited_s: float | None = None  # how long that first request waited at the activator
    timed_out_at: float | None = None  # the activator gave up (504) on held requests
    by: str = ""  # the activator pod that wrote it

    def to_annotation(self) -> str:
        doc: dict[str, Any] = {"requestedAt": round(self.requested_at, 3), "held": self.held}
        if self.served_at is not None:
            doc["servedAt"] = round(self.served_at, 3)
        if self.waited_s is not None:
            doc["waitedSeconds"] = round(self.waited_s, 3)
        if self.timed_out_at is not None:
            doc["timedOutAt"] = round(self.timed_out_at, 3)
        if self.by:
            doc["by"] = self.by
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def _time(value: Any) -> float | None:
    v = finite_number(value)
    return v if v is not None and v >= 0 else None


def parse_wake(text: str | None) -> Wake | None:
    """The :class:`Wake` in an annotation's text; None when absent or not one (anybody
    may write an annotation: a malformed one is ignored, never an error)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    requested = _time(doc.get("requestedAt"))
    if requested is None:
        return None
    held = doc.get("held")
    held_n = int(held) if isinstance(held, int) and not isinstance(held, bool) and held > 0 \
        else 1
    by = doc.get("by")
    return Wake(requested_at=requested, held=held_n, served_at=_time(doc.get("servedAt")),
                waited_s=_time(doc.get("waitedSeconds")),
                timed_out_at=_time(doc.get("timedOutAt")),
                by=by[:253] if isinstance(by, str) else "")
