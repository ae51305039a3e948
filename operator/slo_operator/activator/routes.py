"""What the activator knows of the cluster: the InferenceServices' Kubernetes Services
(name, ClusterIP) and the Ready pod endpoints of each, kept on the event loop.

:class:`RouteTable` is fed by whoever watches the cluster (``activator.apiserver``) or by a test,
always on the event loop's thread; it answers the activator's questions without I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slo_operator.api.cluster import ObjKey


@dataclass(frozen=True)
class ServiceRoute:
    """One InferenceService's Kubernetes Service."""

    namespace: str
    service: str  # the Kubernetes Service's name
    name: str  # the InferenceService's full name
    cluster_ip: str = ""

    @property
    def key(self) -> ObjKey:
        return (self.namespace, self.name)


class RouteTable:
    """Services and their Ready endpoints; :meth:`settled` wakes waiters on every change.

    Implements the activator's ``Routes`` protocol (``slo_operator.activator.app``)."""

    def __init__(self) -> None:
        self._by_service: dict[tuple[str, str], ServiceRoute] = {}
        self._by_key: dict[ObjKey, ServiceRoute] = {}
        self._by_ip: dict[str, ServiceRoute] = {}
        # (namespace, Kubernetes Service) -> slice name -> endpoint URLs
        self._slices: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
        self._waiters: dict[ObjKey, list[asyncio.Future[None]]] = {}
        self._synced = False

    # --- what the activator asks ---------------------------------------------------------
    @property
    def synced(self) -> bool:
        """Whether the first full listing arrived (before it, nothing is known)."""
        return self._synced

    def by_name(self, namespace: str, name: str) -> ObjKey | None:
        """The InferenceService ``namespace/name`` when its Service is known."""
        route = self._by_key.get((namespace, name))
        return route.key if route else None

    def by_service(self, namespace: str, service: str) -> ObjKey | None:
        """The InferenceService behind the Kubernetes Service ``service`` of ``namespace``."""
        route = self._by_service.get((namespace, service))
        return route.key if route else None

    def by_cluster_ip(self, ip: str) -> ObjKey | None:
        """The InferenceService whose Service has the ClusterIP ``ip``."""
        route = self._by_ip.get(ip)
        return route.key if route else None

    def endpoints(self, key: ObjKey) -> Sequence[str]:
        """Base URLs of the service's Ready pods (sorted; empty when none or unknown)."""
        route = self._by_key.get(key)
        if route is None:
            return ()
        slices = self._slices.get((route.namespace, route.service)) or {}
        return tuple(sorted({u for urls in slices.values() for u in urls}))

    async def settled(self, key: ObjKey) -> None:
        """Return once the service has a Ready endpoint or is gone (no longer known)."""
        while self._by_key.get(key) is not None and not self.endpoints(key):
            fut = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(key, []).append(fut)
            try:
                await fut
            finally:
                waiters = self._waiters.get(key)
                if waiters and fut in waiters:
                    waiters.remove(fut)
                if not waiters:
                    self._waiters.pop(key, None)

    # --- what the watches feed (on the loop's thread) -------------------------------------
    def set_service(self, route: ServiceRoute) -> None:
        old = self._by_service.get((route.namespace, route.service))
        if old is not None:
            self._forget(old)
        self._by_service[(route.namespace, route.service)] = route
        self._by_key[route.key] = route
        if route.cluster_ip and route.cluster_ip != "None":
            self._by_ip[route.cluster_ip] = route
        self._changed([route.key])

    def remove_service(self, namespace: str, service: str) -> None:
        old = self._by_service.pop((namespace, service), None)
        if old is not None:
            self._forget(old)
            self._changed([old.key])

    def replace_services(self, routes: Iterable[ServiceRoute]) -> None:
        """A full listing: what it lacks is gone."""
        keep = {(r.namespace, r.service): r for r in routes}
        for ns, svc in [k for k in self._by_service if k not in keep]:
            self.remove_service(ns, svc)
        for route in keep.values():
            if self._by_service.get((route.namespace, route.service)) != route:
                self.set_service(route)

    def set_slice(self, namespace: str, service: str, slice_name: str,
                  urls: Sequence[str]) -> None:
        self._slices.setdefault((namespace, service), {})[slice_name] = tuple(urls)
        self._service_changed(namespace, service)

    def remove_slice(self, namespace: str, service: str, slice_name: str) -> None:
        slices = self._slices.get((namespace, service))
        if slices is not None and slices.pop(slice_name, None) is not None:
            if not slices:
                del self._slices[(namespace, service)]
            self._service_changed(namespace, service)

    def replace_slices(self, slices: Iterable[tuple[str, str, str, Sequence[str]]]) -> None:
        """A full listing of (namespace, service, slice name, URLs): what it lacks is gone."""
        old = self._slices
        self._slices = {}
        for ns, svc, name, urls in slices:
            self._slices.setdefault((ns, svc), {})[name] = tuple(urls)
        for ns, svc in {*old, *self._slices}:
            self._service_changed(ns, svc)

    def mark_synced(self) -> None:
        self._synced = True

    # --- internals ------------------------------------------------------------------------
    def _forget(self, route: ServiceRoute) -> None:
        if self._by_key.get(route.key) == route:
            del self._by_key[route.key]
        if route.cluster_ip and self._by_ip.get(route.cluster_ip) == route:
            del self._by_ip[route.cluster_ip]

    def _service_changed(self, namespace: str, service: str) -> None:
        route = self._by_service.get((namespace, service))
        if route is not None:
            self._changed([route.key])

    def _changed(self, keys: Iterable[ObjKey]) -> None:
        for key in keys:
            for fut in self._waiters.get(key, ()):
                if not fut.done():
                    fut.set_result(None)
