"""The Kubernetes adapter: the only place that talks to the API server.

Objects are written with server-side apply under one field manager, so the operator owns
exactly the fields it renders and a GitOps tool owning the InferenceService never fights
it. Status goes through the ``/status`` subresource only.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import kubernetes.dynamic.exceptions
import urllib3
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from slo_operator.api.cluster import (
    ApiRejected,
    DeploymentObs,
    NodeInfo,
    ObjKey,
    PodObs,
    Snapshot,
    transient_status,
)
from slo_operator.api.conditions import epoch_seconds
from slo_operator.api.models import GROUP, VERSION
from slo_operator.control.prices import PRICES_LABEL
from slo_operator.render.names import ANNOTATION_SERVICE_NAME
from slo_runtime.contract import (
    ANNOTATION_INFLIGHT_LIMIT,
    LABEL_GPU,
    LABEL_MANAGED_BY,
    LABEL_SERVICE,
    LABEL_VARIANT,
    MANAGED_BY,
)

FIELD_MANAGER = "slo-operator"
log = logging.getLogger(__name__)

PLURALS = {"InferenceService": "inferenceservices", "SLOPolicy": "slopolicies",
           "Tenant": "tenants"}
# The API versions of the kinds the operator deletes (retired variants, a pool turned off).
DELETE_API_VERSIONS = {"Deployment": "apps/v1",
                       "InferencePool": "inference.networking.k8s.io/v1",
                       "PrometheusRule": "monitoring.coreos.com/v1"}
# Seconds an answer of API discovery (is an optional CRD installed?) is kept: a CRD
# installed or removed shows within a minute, at one small GET a minute per kind asked.
DISCOVERY_TTL_S = 60.0
# For writes whose reply nothing reads (a pod's patched annotation, an Event): the client
# hands back the raw urllib3 reply instead of building typed models from it (a whole
# V1Pod per patch: about 5 % of the operator's CPU at 1,000 services, docs/scale.md).
# A refusal still raises ApiException with its status and reason
# (kubernetes/client/api_client.py, ApiClient._call_with_legacy_options).
UNREAD: dict[str, Any] = {"_preload_content": False}


def _discard(reply: Any) -> None:
    """Read an unread reply to its end and hand its connection back to the pool."""
    reply.read()
    reply.release_conn()
OWNED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"


def load_api_client(kubeconfig: str | None = None) -> ApiClient:
    """In-cluster config when running in a pod, else the kubeconfig."""
    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return ApiClient()
        except config.ConfigException:
            pass
    cfg = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, client_configuration=cfg
    )
    return ApiClient(cfg)


# ------------------------------------------------------------ wire bodies -> observations
# Pure conversions shared by the watch caches (kopf indexes) and direct LISTs.


def _int_or_none(raw: object) -> int | None:
    try:
        return int(str(raw)) if raw is not None else None
    except ValueError:
        return None


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    """A Node's labels, allocatable resources and cordon state."""
    spec, meta = body.get("spec") or {}, body.get("metadata") or {}
    return NodeInfo(
        name=str(meta.get("name", "")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        allocatable={str(k): str(v) for k, v in
                     ((body.get("status") or {}).get("allocatable") or {}).items()},
        schedulable=not bool(spec.get("unschedulable")),
    )


def deployment_obs(body: Mapping[str, Any]) -> DeploymentObs:
    """The replica counts and generations of an owned Deployment."""
    st, meta = body.get("status") or {}, body.get("metadata") or {}
    return DeploymentObs(
        replicas=st.get("replicas") or 0,
        ready_replicas=st.get("readyReplicas") or 0,
        updated_replicas=st.get("updatedReplicas") or 0,
        generation=meta.get("generation") or 0,
        observed_generation=st.get("observedGeneration") or 0,
        spec_replicas=(body.get("spec") or {}).get("replicas"),
        name=str(meta.get("name", "")),
        variant=str((meta.get("labels") or {}).get(LABEL_VARIANT, "")),
    )


def _pod_gpus(body: Mapping[str, Any]) -> tuple[str, int]:
    """The GPU resource (GPUs, MIG slices or shared GPUs) the pod's containers ask for,
    and how many."""
    name, total = "", 0
    for c in (body.get("spec") or {}).get("containers") or []:
        for res, qty in ((c.get("resources") or {}).get("limits") or {}).items():
            if "/" in res and any(t in res for t in ("gpu", "mig-", "gaudi")):
                name = name or str(res)
                total += _int_or_none(qty) or 0
    return name, total


def pod_obs(body: Mapping[str, Any]) -> PodObs | None:
    """An owned pod's scheduling, readiness and live limit; None once it is terminating."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    if meta.get("deletionTimestamp"):
        return None
    unsched, msg, ready, since = False, "", False, None
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            unsched = c.get("reason") == "Unschedulable"
            msg = c.get("message") or ""
        if c.get("type") == "Ready" and c.get("status") == "True":
            ready, since = True, epoch_seconds(c.get("lastTransitionTime"))
    raw = (meta.get("annotations") or {}).get(ANNOTATION_INFLIGHT_LIMIT)
    labels = meta.get("labels") or {}
    resource, gpus = _pod_gpus(body)
    return PodObs(str(meta.get("name", "")), status.get("phase") or "Unknown", unsched, msg,
                  _int_or_none(raw), ready, since, variant=str(labels.get(LABEL_VARIANT, "")),
                  gpu_product=str(labels.get(LABEL_GPU, "")), gpus=gpus,
                  gpu_resource=resource, node=str((body.get("spec") or {}).get("nodeName") or ""))


def price_data(body: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """A price-list ConfigMap as ("namespace/name", its data as strings)."""
    meta = body.get("metadata") or {}
    return (f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            {str(k): str(v) for k, v in (body.get("data") or {}).items()})


def service_deployments(
    variants: Mapping[ObjKey, Mapping[str, DeploymentObs]],
) -> dict[ObjKey, DeploymentObs]:
    """Each service's variants summed into one view (rollout conditions, the SLO loop)."""
    out = {}
    for key, by_variant in variants.items():
        total = DeploymentObs.total([by_variant[v] for v in sorted(by_variant)])
        if total is not None:
            out[key] = total
    return out


def owner_key(body: Mapping[str, Any]) -> ObjKey | None:
    """(namespace, service) of an owned object: the full name from its annotation (label
    values are cut to 63 characters with a hash), else from its service label."""
    meta = body.get("metadata") or {}
    owner = (meta.get("annotations") or {}).get(ANNOTATION_SERVICE_NAME) or (
        meta.get("labels") or {}).get(LABEL_SERVICE)
    return (str(meta.get("namespace", "")), str(owner)) if owner else None


def transient(e: BaseException) -> bool:
    """Whether ``e`` is a refusal of the moment that the next attempt may not meet: 409,
    429 or 5xx from the API server, or no answer at all (connection refused or dropped,
    a timeout); logged as one line and retried, never reported as the object's fault."""
    if isinstance(e, ApiRejected):
        return e.transient
    if isinstance(e, ApiException):
        return transient_status(int(e.status or 0))
    return isinstance(e, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def from_api(e: BaseException) -> bool:
    """Whether ``e`` is the API server's answer (any HTTP status: a 403 right after an API
    server restart, while its authorizer warms up, say) or its silence, rather than a bug
    of the operator: logged as one line, never with a traceback."""
    return transient(e) or isinstance(
        e, ApiException | ApiRejected | kubernetes.dynamic.exceptions.DynamicApiError)


def retry_after(e: BaseException, default: float = 5.0) -> float:
    """Seconds to wait before retrying after ``e``: the API server's ``Retry-After`` when it
    sent one (at most 60), else ``default``."""
    cause: BaseException | None = e
    headers: Any = None
    while cause is not None and not headers:  # ApiRejected carries the client's error
        headers = getattr(cause, "headers", None)
        cause = cause.__cause__
    headers = headers or {}
    try:
        value = float(headers.get("Retry-After", default))
    except (TypeError, ValueError):
        return default
    return min(max(value, 0.5), 60.0)


def failure_summary(e: BaseException) -> str:
    """One line for a log: the status and reason, or the exception's name and message."""
    if isinstance(e, ApiException):
        return f"HTTP {e.status} {e.reason}"
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def api_message(e: ApiException) -> str:
    """The API server's message from an error reply (a Status object), else its reason."""
    try:
        body = json.loads(e.body) if e.body else {}
    except (TypeError, ValueError):
        body = {}
    msg = body.get("message") if isinstance(body, dict) else None
    return str(msg or f"{e.status} {e.reason}")[:1024]


def obj_key(body: Mapping[str, Any]) -> ObjKey:
    """(namespace, name) of an object."""
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


class Kube:
    """Synchronous calls; callers on the event loop run them in worker threads."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._dynamic: DynamicClient | None = None
        self._served: dict[tuple[str, str], tuple[bool, float]] = {}

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api)  # type: ignore[no-untyped-call]
        return self._dynamic

    # ------------------------------------------------------------------ reads

    def _wire(self, obj: object) -> Any:
        """Typed client models -> the plain wire form (camelCase dicts)."""
        return self.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]

    def list_custom(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace:
            out = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURALS[kind]
            )
        else:
            out = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURALS[kind])
        return list(self._wire(out).get("items", []))

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[PodObs]:
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = self._wire(self.core.list_namespaced_pod(namespace, label_selector=label_selector))
        return [o for o in (pod_obs(p) for p in pods.get("items", [])) if o is not None]

    def read_snapshot(self) -> Snapshot:
        """One LIST per kind, cluster-wide: what the watch caches hold, read directly
        (for tools and tests that run a reconcile without the operator's caches)."""
        variants: dict[ObjKey, dict[str, DeploymentObs]] = {}
        dep_list = self._wire(self.apps.list_deployment_for_all_namespaces(
            label_selector=OWNED_SELECTOR))
        for d in dep_list.get("items", []):
            key = owner_key(d)
            if key:
                dep = deployment_obs(d)
                variants.setdefault(key, {})[dep.variant] = dep
        pods: dict[ObjKey, list[PodObs]] = {}
        pod_list = self._wire(self.core.list_pod_for_all_namespaces(
            label_selector=OWNED_SELECTOR))
        for p in pod_list.get("items", []):
            key, obs = owner_key(p), pod_obs(p)
            if key and obs:
                pods.setdefault(key, []).append(obs)
        nodes = [node_info(n) for n in self._wire(self.core.list_node()).get("items", [])]
        prices = dict(price_data(c) for c in self._wire(
            self.core.list_config_map_for_all_namespaces(
                label_selector=f"{PRICES_LABEL}=true")).get("items", []))
        return Snapshot(
            services={obj_key(s): s for s in self.list_custom("InferenceService")},
            policies={obj_key(p): p for p in self.list_custom("SLOPolicy")},
            deployments=service_deployments(variants),
            variant_deployments=variants,
            pods=pods,
            nodes=nodes,
            prices=prices or None,
            tenants={t["metadata"]["name"]: t for t in self._tenants()},
            namespace_labels={
                n["metadata"]["name"]: dict(n["metadata"].get("labels") or {})
                for n in self._wire(self.core.list_namespace()).get("items", [])},
        )

    def _tenants(self) -> list[dict[str, Any]]:
        """Every Tenant; none where the Tenant CRD is not installed (an upgrade that kept
        the older CRDs: Helm installs a chart's CRDs but never upgrades them)."""
        try:
            return self.list_custom("Tenant")
        except ApiException as e:
            if e.status != 404:
                raise
            return []

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves ``kind`` in ``api_version`` (an optional CRD is
        installed), from API discovery (``GET /apis/<group>/<version>``, which every
        authenticated user may read), kept for ``DISCOVERY_TTL_S``. A failed lookup
        other than 404 keeps the last answer (False before any)."""
        key, now = (api_version, kind), time.monotonic()
        cached = self._served.get(key)
        if cached is not None and now - cached[1] < DISCOVERY_TTL_S:
            return cached[0]
        group, _, version = api_version.rpartition("/")
        try:
            found = self._wire(self.custom.get_api_resources(group, version))
            served = any(r.get("kind") == kind for r in (found or {}).get("resources") or [])
        except ApiException as e:
            if e.status != 404:
                log.warning("API discovery of %s failed: %s", api_version, e.reason)
                return cached[0] if cached is not None else False
            served = False
        self._served[key] = (served, now)
        return served

    # ------------------------------------------------------------------ writes

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply; force, since this manager is the owner of what it renders.
        A refusal (422 invalid, 409, 403, 5xx) raises ``ApiRejected`` with the API
        server's own message, which names the offending field."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            self.dynamic.server_side_apply(  # type: ignore[no-untyped-call]
                resource,
                body=dict(obj),
                name=obj["metadata"]["name"],
                namespace=obj["metadata"].get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )
        except ApiException as e:
            raise ApiRejected(str(obj["kind"]), str(obj["metadata"]["name"]),
                              int(e.status or 0), api_message(e)) from e

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete one owned object (a Deployment of a variant no pool offers any more);
        one already gone is fine."""
        try:
            resource = self.dynamic.resources.get(
                api_version=DELETE_API_VERSIONS.get(kind, "v1"), kind=kind)
        except ResourceNotFoundError:
            return  # the kind is not served (its CRD is gone): nothing of it is left
        try:
            self.dynamic.delete(  # type: ignore[no-untyped-call]
                resource, name=name, namespace=namespace)
        except ApiException as e:
            if e.status != 404:
                raise ApiRejected(kind, name, int(e.status or 0), api_message(e)) from e

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch one pod's metadata (the live-limit annotation); a pod that is gone
        is skipped, since the next pass sees its replacement."""
        try:
            _discard(self.core.patch_namespaced_pod(name, namespace, dict(patch), **UNREAD))
        except ApiException as e:
            if e.status != 404:
                raise

    def patch_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """Merge-patch the status subresource (never the spec: Git owns it). An object
        deleted meanwhile (its namespace being deleted, say) is skipped: it has no status
        left to explain, and its deletion event clears what the operator keeps of it."""
        # A dict body is sent as application/merge-patch+json by the client.
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURALS[kind], name, {"status": dict(status)}
            )
        except ApiException as e:
            if e.status != 404:
                raise
            log.debug("Skipped the status of %s %s/%s: deleted", kind, namespace, name)

    def event(
        self,
        involved: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        now: datetime,
    ) -> None:
        """A core/v1 Event on the object; failures are logged, never raised."""
        meta = involved["metadata"]
        ts = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "generateName": f"{meta['name']}.",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": f"{FIELD_MANAGER}-{uuid.getnode():x}",
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            _discard(self.core.create_namespaced_event(
                meta["namespace"], body, **UNREAD))  # type: ignore[arg-type]
        except ApiException as e:
            log.warning("Failed to post event %s on %s: %s", reason, meta["name"], e.reason)
