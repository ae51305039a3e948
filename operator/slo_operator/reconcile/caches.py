"""One consistent read of the watch caches (kopf indexes) as a :class:`Snapshot`.

``handlers.indexes`` registers the indexes under the names in :data:`INDEX_NAMES`; every
handler and the periodic pass build their snapshot here, below the handlers, so no handler
module needs another one's helpers for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slo_operator.adapters.kube import service_deployments
from slo_operator.api.activation import ActivatorEndpoints
from slo_operator.api.cluster import DeploymentObs, ObjKey, Snapshot

# The kopf index functions' names: kopf hands each index to handlers under its name.
INDEX_NAMES = ("service_index", "policy_index", "deployment_index", "pod_index", "node_index",
               "price_index", "tenant_index", "namespace_index", "activator_index",
               "route_index")


def _one(index: Mapping[Any, Any]) -> dict[Any, Any]:
    return {k: next(iter(store)) for k, store in index.items() if len(store)}


def snapshot(indexes: Mapping[str, Any]) -> Snapshot:
    """One consistent, detached read of the caches (handler kwargs or the stored indexes)."""
    variants: dict[ObjKey, dict[str, DeploymentObs]] = {}
    for key, store in indexes["deployment_index"].items():
        for obs in store:
            variants.setdefault(key, {})[obs.variant] = obs
    prices = dict(indexes["price_index"].get("prices", ()))
    return Snapshot(
        services=_one(indexes["service_index"]),
        policies=_one(indexes["policy_index"]),
        deployments=service_deployments(variants),
        variant_deployments=variants,
        prices=prices or None,
        pods={k: tuple(store) for k, store in indexes["pod_index"].items()},
        nodes=tuple(indexes["node_index"].get("nodes", ())),
        tenants=_one(indexes["tenant_index"]),
        namespace_labels=_one(indexes["namespace_index"]),
        activators=_activators(indexes["activator_index"]),
        routes=_one(indexes["route_index"]),
    )


def _activators(index: Mapping[Any, Any]) -> dict[ObjKey, ActivatorEndpoints]:
    """One view per activator Service over its slices (a Service may have several)."""
    out: dict[ObjKey, ActivatorEndpoints] = {}
    for key, store in index.items():
        slices = list(store)
        if slices:
            out[key] = ActivatorEndpoints(
                tuple(sorted({a for s in slices for a in s.addresses})), slices[0].port,
                slices[0].address_type)
    return out


def _revision(body: Mapping[str, Any] | None) -> tuple[Any, Any] | None:
    meta = (body or {}).get("metadata") or {}
    return (meta.get("uid"), meta.get("generation")) if body is not None else None


def superseded(snap: Snapshot, live_service: Mapping[str, Any] | None,
               live_policy: Mapping[str, Any] | None, key: ObjKey) -> bool:
    """Whether the caches now hold another revision of service ``key`` or of the policy it
    names than ``snap`` does: deleted, recreated, or its spec edited since (pure). A pass
    planned from ``snap`` writes nothing for such a service: its own handler reconciles
    the new revision (a policy edit decides for its services at once), and the next pass
    decides from it."""
    then = snap.services.get(key)
    if live_service is None or then is None or _revision(then) != _revision(live_service):
        return True
    ref = ((live_service.get("spec") or {}).get("sloPolicyRef") or {}).get("name")
    if not ref:
        return False
    return _revision(snap.policy(key[0], ref)) != _revision(live_policy)


def live_view(indexes: Mapping[str, Any], key: ObjKey
              ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The service ``key`` and the policy it names as the caches hold them now."""
    def one(index: Mapping[Any, Any], k: Any) -> Mapping[str, Any] | None:
        store = index.get(k)
        return next(iter(store), None) if store else None

    svc = one(indexes["service_index"], key)
    ref = (((svc or {}).get("spec") or {}).get("sloPolicyRef") or {}).get("name")
    return svc, one(indexes["policy_index"], (key[0], ref)) if ref else None


def pick_indexes(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The index objects among a handler's kwargs (live views, safe to keep)."""
    return {name: kwargs[name] for name in INDEX_NAMES}
