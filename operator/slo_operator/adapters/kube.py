"""The Kubernetes adapter: the only place that talks to the API server.

Objects are written with server-side apply under one field manager, so the operator owns
exactly the fields it renders and a GitOps tool owning the InferenceService never fights
it. Status goes through the ``/status`` subresource only.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from slo_operator.api.models import GROUP, VERSION
from slo_operator.reconcile.plan import NodeInfo
from slo_operator.reconcile.status import DeploymentObs, PodObs
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT

FIELD_MANAGER = "slo-operator"
log = logging.getLogger(__name__)

PLURALS = {"InferenceService": "inferenceservices", "SLOPolicy": "slopolicies"}


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


def _int_or_none(raw: object) -> int | None:
    try:
        return int(str(raw)) if raw is not None else None
    except ValueError:
        return None


class Kube:
    """Synchronous calls; the reconciler runs them in worker threads."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._dynamic: DynamicClient | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api)  # type: ignore[no-untyped-call]
        return self._dynamic

    # ------------------------------------------------------------------ reads

    def _wire(self, obj: object) -> Any:
        """Typed client models -> the plain wire form (camelCase dicts)."""
        return self.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]

    def get_custom(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURALS[kind], name
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(self._wire(obj))

    def list_custom(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace:
            out = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURALS[kind]
            )
        else:
            out = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURALS[kind])
        return list(self._wire(out).get("items", []))

    def list_nodes(self) -> list[NodeInfo]:
        nodes = []
        for n in self._wire(self.core.list_node()).get("items", []):
            spec, meta = n.get("spec") or {}, n.get("metadata") or {}
            cordoned = bool(spec.get("unschedulable"))
            nodes.append(
                NodeInfo(
                    name=meta["name"],
                    labels=dict(meta.get("labels") or {}),
                    allocatable=dict((n.get("status") or {}).get("allocatable") or {}),
                    schedulable=not cordoned,
                )
            )
        return nodes

    def get_deployment(self, namespace: str, name: str) -> DeploymentObs | None:
        try:
            d = self._wire(self.apps.read_namespaced_deployment(name, namespace))
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        st = d.get("status") or {}
        return DeploymentObs(
            replicas=st.get("replicas") or 0,
            ready_replicas=st.get("readyReplicas") or 0,
            updated_replicas=st.get("updatedReplicas") or 0,
            generation=d["metadata"].get("generation") or 0,
            observed_generation=st.get("observedGeneration") or 0,
        )

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[PodObs]:
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = self._wire(self.core.list_namespaced_pod(namespace, label_selector=label_selector))
        out = []
        for p in pods.get("items", []):
            if p["metadata"].get("deletionTimestamp"):
                continue
            status = p.get("status") or {}
            unsched, msg = False, ""
            for c in status.get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    unsched = c.get("reason") == "Unschedulable"
                    msg = c.get("message") or ""
            raw = (p["metadata"].get("annotations") or {}).get(ANNOTATION_INFLIGHT_LIMIT)
            out.append(PodObs(p["metadata"]["name"], status.get("phase") or "Unknown",
                              unsched, msg, _int_or_none(raw)))
        return out

    # ------------------------------------------------------------------ writes

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply; force, since this manager is the owner of what it renders."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        self.dynamic.server_side_apply(  # type: ignore[no-untyped-call]
            resource,
            body=dict(obj),
            name=obj["metadata"]["name"],
            namespace=obj["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch one pod's metadata (the live-limit annotation); a pod that is gone
        is skipped, since the next pass sees its replacement."""
        try:
            self.core.patch_namespaced_pod(name, namespace, dict(patch))
        except ApiException as e:
            if e.status != 404:
                raise

    def patch_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """Merge-patch the status subresource (never the spec: Git owns it)."""
        # A dict body is sent as application/merge-patch+json by the client.
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURALS[kind], name, {"status": dict(status)}
        )

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
            self.core.create_namespaced_event(meta["namespace"], body)  # type: ignore[arg-type]
        except ApiException as e:
            log.warning("Failed to post event %s on %s: %s", reason, meta["name"], e.reason)
