"""The activator against the API server: :class:`KubeRoutes` (watches of the
InferenceServices' Services and of their EndpointSlices) and :class:`KubeWaker` (the wake
annotation).

The ``kubernetes`` client is synchronous: each watch runs in a thread of its own and hands
what it saw to the event loop with ``loop.call_soon_threadsafe``; the annotation write runs
in the default executor. Nothing here blocks the loop.

Only the endpoint controller's slices are read (``endpointslice.kubernetes.io/managed-by``
is its own); it copies a Service's labels onto them, so one label selector picks exactly
the slices of the operator's Services. The operator's slice that routes a service to the
activator carries another manager and is never taken for a Ready replica.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes.client
import kubernetes.watch
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from slo_operator.activator.app import NotFound
from slo_operator.activator.routes import RouteTable, ServiceRoute
from slo_operator.adapters.kube import OWNED_SELECTOR, PLURALS, failure_summary, owner_key
from slo_operator.api.activation import (
    ANNOTATION_WAKE,
    ENDPOINT_CONTROLLER,
    LABEL_SERVICE_NAME,
    LABEL_SLICE_MANAGED_BY,
    SERVICE_PORT_NAME,
    Wake,
    ready_endpoints,
)
from slo_operator.api.models import GROUP, VERSION

log = logging.getLogger(__name__)

SLICE_SELECTOR = f"{OWNED_SELECTOR},{LABEL_SLICE_MANAGED_BY}={ENDPOINT_CONTROLLER}"
WATCH_TIMEOUT_S = 300
RELIST_PAUSE_S = 1.0
# A wake's write that gets no answer in this time fails (and is retried) instead of holding
# the service's later records behind it.
WAKE_WRITE_TIMEOUT_S = 10.0

Address = Callable[[str, int], str]
SliceEntry = tuple[str, str, str, tuple[str, ...]]


def default_address(ip: str, port: int) -> str:
    """The base URL of a pod endpoint."""
    return f"http://[{ip}]:{port}" if ":" in ip else f"http://{ip}:{port}"


def service_route(body: Mapping[str, Any]) -> ServiceRoute | None:
    """An InferenceService's Service as a route; None when it names no InferenceService."""
    meta = body.get("metadata") or {}
    owner = owner_key(body)
    if owner is None or not meta.get("name"):
        return None
    ip = (body.get("spec") or {}).get("clusterIP") or ""
    return ServiceRoute(namespace=owner[0], service=str(meta["name"]), name=owner[1],
                        cluster_ip=str(ip))


def slice_entry(body: Mapping[str, Any], address: Address = default_address
                ) -> SliceEntry | None:
    """(namespace, Service, slice name, base URLs of its Ready endpoints) of one
    EndpointSlice; None when it belongs to no Service. An endpoint is Ready unless its
    ``conditions.ready`` is false (unset means ready: the API's own rule)."""
    meta = body.get("metadata") or {}
    service = (meta.get("labels") or {}).get(LABEL_SERVICE_NAME)
    if not service or not meta.get("name"):
        return None
    found = ready_endpoints(body, SERVICE_PORT_NAME)
    urls = [address(a, found[1]) for a in found[0]] if found else []
    return (str(meta.get("namespace", "")), str(service), str(meta["name"]),
            tuple(sorted(set(urls))))


class KubeRoutes(RouteTable):
    """A :class:`RouteTable` fed by two watches (all namespaces): Services labelled
    ``app.kubernetes.io/managed-by=slo-operator`` and the endpoint controller's slices of
    them. ``address`` turns an endpoint (ip, port) into a base URL."""

    def __init__(self, api: ApiClient, *, address: Address = default_address) -> None:
        super().__init__()
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.discovery = kubernetes.client.DiscoveryV1Api(api)
        self.address = address
        self._stop = threading.Event()
        self._watches: list[kubernetes.watch.Watch] = []
        self._threads: list[threading.Thread] = []
        self._listed: set[str] = set()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the watches; the table changes on ``loop``'s thread."""
        feeds: list[tuple[str, Callable[..., Any], Callable[[list[dict[str, Any]]], None],
                          Callable[[str, dict[str, Any]], None]]] = [
            ("services", self.core.list_service_for_all_namespaces, self._on_services,
             self._service_event),
            ("endpointslices", self.discovery.list_endpoint_slice_for_all_namespaces,
             self._on_slices, self._slice_event),
        ]
        for kind, list_fn, on_list, on_event in feeds:
            selector = OWNED_SELECTOR if kind == "services" else SLICE_SELECTOR
            t = threading.Thread(target=self._watch_forever, name=f"activator-{kind}",
                                 args=(loop, kind, list_fn, selector, on_list, on_event),
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for w in list(self._watches):
            w.stop()  # type: ignore[no-untyped-call]
        for t in self._threads:
            t.join(timeout=5)

    # --- the watch threads -------------------------------------------------------------------
    def _watch_forever(self, loop: asyncio.AbstractEventLoop, kind: str,
                       list_fn: Callable[..., Any], selector: str,
                       on_list: Callable[[list[dict[str, Any]]], None],
                       on_event: Callable[[str, dict[str, Any]], None]) -> None:
        while not self._stop.is_set():
            try:
                res = list_fn(label_selector=selector)
                items = [self._dict(o) for o in res.items]
                loop.call_soon_threadsafe(on_list, items)
                loop.call_soon_threadsafe(self._mark_listed, kind)
                rv = res.metadata.resource_version if res.metadata else None
                w = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                self._watches.append(w)
                try:
                    # The stream resumes from the last version it saw when the server ends
                    # a watch; a stale version (410) ends it with an error: list again.
                    for ev in w.stream(  # type: ignore[no-untyped-call]
                            list_fn, label_selector=selector, resource_version=rv,
                            timeout_seconds=WATCH_TIMEOUT_S):
                        if self._stop.is_set():
                            return
                        typ = str(ev.get("type", ""))
                        if typ in ("ADDED", "MODIFIED", "DELETED"):
                            loop.call_soon_threadsafe(on_event, typ, self._dict(ev["object"]))
                finally:
                    self._watches.remove(w)
            except Exception as e:  # a dropped watch lists again; the activator never dies
                if self._stop.is_set() or loop.is_closed():
                    return
                log.warning("Listing %s again after %s", kind, failure_summary(e))
                self._stop.wait(RELIST_PAUSE_S)

    def _dict(self, obj: Any) -> dict[str, Any]:
        if isinstance(obj, dict):
            return obj
        d: dict[str, Any] = self.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
        return d

    # --- on the loop -------------------------------------------------------------------------
    def _mark_listed(self, kind: str) -> None:
        self._listed.add(kind)
        if self._listed >= {"services", "endpointslices"}:
            self.mark_synced()

    def _on_services(self, items: list[dict[str, Any]]) -> None:
        self.replace_services([r for r in map(service_route, items) if r is not None])

    def _service_event(self, typ: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        route = service_route(body)
        if typ == "DELETED" or route is None:
            self.remove_service(str(meta.get("namespace", "")), str(meta.get("name", "")))
        else:
            self.set_service(route)

    def _on_slices(self, items: list[dict[str, Any]]) -> None:
        self.replace_slices([e for e in (slice_entry(b, self.address) for b in items)
                             if e is not None])

    def _slice_event(self, typ: str, body: dict[str, Any]) -> None:
        entry = slice_entry(body, self.address)
        if entry is None:
            return
        ns, service, name, urls = entry
        if typ == "DELETED":
            self.remove_slice(ns, service, name)
        else:
            self.set_slice(ns, service, name, urls)


class KubeWaker:
    """Writes the wake annotation with a JSON merge patch of the InferenceService's
    metadata (no other field is touched, no conflict with the operator's writes)."""

    def __init__(self, api: ApiClient) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(api)

    async def wake(self, namespace: str, name: str, wake: Wake) -> None:
        await asyncio.to_thread(self._patch, namespace, name, wake)

    def _patch(self, namespace: str, name: str, wake: Wake) -> None:
        body = {"metadata": {"annotations": {ANNOTATION_WAKE: wake.to_annotation()}}}
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURALS["InferenceService"], name, body,
                _content_type="application/merge-patch+json",
                _request_timeout=WAKE_WRITE_TIMEOUT_S)
        except ApiException as e:
            if e.status == 404:
                raise NotFound(f"InferenceService {namespace}/{name}") from e
            raise

