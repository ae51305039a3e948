"""Watch caches: kopf indexes of the objects the operator reads.

Every handler and the periodic pass read these in-memory views (kept current by kopf's
watches), so a pass over unchanged services sends the API server no GETs and no LISTs.
kopf fills every index from its initial listing before it calls any handler; the
functions' names are ``reconcile.caches.INDEX_NAMES``, and ``reconcile.caches.snapshot``
reads them into one :class:`Snapshot`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kopf

from slo_operator.adapters.kube import (
    deployment_obs,
    node_info,
    obj_key,
    owner_key,
    pod_obs,
    price_data,
)
from slo_operator.api.activation import (
    ANNOTATION_WAKE,
    COMPONENT_ACTIVATOR,
    LABEL_COMPONENT,
    LABEL_SERVICE_NAME,
    LABEL_SLICE_MANAGED_BY,
    SLICE_MANAGED_BY,
    ActivatorEndpoints,
    activator_slice_endpoints,
)
from slo_operator.api.cluster import DeploymentObs, NodeInfo, ObjKey, PodObs
from slo_operator.api.models import GROUP, VERSION
from slo_operator.control.prices import PRICES_LABEL
from slo_runtime.contract import LABEL_MANAGED_BY, MANAGED_BY

OWNED = {LABEL_MANAGED_BY: MANAGED_BY}


# What the operator reads of its own resources' metadata: the name and namespace, the uid
# (owner references, Events) and the generation (observedGeneration, conditions).
KEPT_METADATA = ("name", "namespace", "uid", "generation")
# Status keys that are kopf's, not the operator's (``settings.persistence`` in
# ``handlers.setup.configure``): no status model reads them.
KOPF_STATUS = "kopf"


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """A detached copy of an InferenceService or SLOPolicy holding only what the operator
    reads: apiVersion, kind, the metadata in :data:`KEPT_METADATA`, spec, and status
    without kopf's bookkeeping. Left out: managedFields (one entry per field manager,
    rewritten by every write), labels, annotations but the activator's wake (kubectl's
    last-applied copy of the whole object among them) and ``status.kopf``, which at
    1,000 services would be most of what the cache holds (docs/scale.md)."""
    meta = body.get("metadata") or {}
    out: dict[str, Any] = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta},
    }
    # The one annotation the operator reads: the activator's wake (scale to zero).
    wake = (meta.get("annotations") or {}).get(ANNOTATION_WAKE)
    if wake is not None:
        out["metadata"]["annotations"] = {ANNOTATION_WAKE: str(wake)}
    if "spec" in body:
        # A detached copy: kopf's body views change under the caller.
        out["spec"] = copy.deepcopy(body["spec"])
    status = body.get("status")
    if isinstance(status, Mapping):
        out["status"] = copy.deepcopy({k: v for k, v in status.items() if k != KOPF_STATUS})
    elif status is not None:
        out["status"] = copy.deepcopy(status)
    return out


@kopf.index(GROUP, VERSION, "inferenceservices")
def service_index(body: kopf.Body, **_: Any) -> dict[ObjKey, dict[str, Any]]:
    return {obj_key(body): slim(body)}


@kopf.index(GROUP, VERSION, "slopolicies")
def policy_index(body: kopf.Body, **_: Any) -> dict[ObjKey, dict[str, Any]]:
    return {obj_key(body): slim(body)}


@kopf.index(GROUP, VERSION, "tenants")
def tenant_index(body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {str(body["metadata"]["name"]): slim(body)}


@kopf.index("", "v1", "namespaces")
def namespace_index(body: kopf.Body, **_: Any) -> dict[str, dict[str, str]]:
    """Namespace labels, for Tenants' namespace selectors."""
    return {str(body["metadata"]["name"]): dict(body["metadata"].get("labels") or {})}


@kopf.index("apps", "v1", "deployments", labels=OWNED)
def deployment_index(body: kopf.Body, **_: Any) -> dict[ObjKey, DeploymentObs] | None:
    key = owner_key(body)
    return {key: deployment_obs(body)} if key else None


@kopf.index("", "v1", "pods", labels=OWNED)
def pod_index(body: kopf.Body, **_: Any) -> dict[ObjKey, PodObs] | None:
    key, obs = owner_key(body), pod_obs(body)
    return {key: obs} if key and obs else None


@kopf.index("", "v1", "nodes")
def node_index(body: kopf.Body, **_: Any) -> dict[str, NodeInfo]:
    return {"nodes": node_info(body)}


@kopf.index("", "v1", "configmaps", labels={PRICES_LABEL: "true"})
def price_index(body: kopf.Body, **_: Any) -> dict[str, tuple[str, dict[str, str]]]:
    return {"prices": price_data(body)}


ENDPOINT_SLICES = ("discovery.k8s.io", "v1", "endpointslices")


@kopf.index(*ENDPOINT_SLICES, labels={LABEL_COMPONENT: COMPONENT_ACTIVATOR})
def activator_index(body: kopf.Body, **_: Any) -> dict[ObjKey, ActivatorEndpoints] | None:
    """The activator's Ready endpoints per activator Service (the endpoint controller's
    slices of a Service carrying the chart's component label)."""
    meta = body.get("metadata") or {}
    svc = (meta.get("labels") or {}).get(LABEL_SERVICE_NAME)
    eps = activator_slice_endpoints(dict(body))
    return {(str(meta.get("namespace", "")), str(svc)): eps} if svc and eps else None


@kopf.index(*ENDPOINT_SLICES, labels={LABEL_SLICE_MANAGED_BY: SLICE_MANAGED_BY})
def route_index(body: kopf.Body, **_: Any) -> dict[ObjKey, str] | None:
    """The operator's route slices (a service sent to the activator) by owner."""
    key = owner_key(body)
    return {key: str(body["metadata"]["name"])} if key else None
