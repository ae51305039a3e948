"""Watch caches: kopf indexes of the objects the operator reads.

Every handler and the periodic pass read these in-memory views (kept current by kopf's
watches), so a pass over unchanged services sends the API server no GETs and no LISTs.
kopf fills every index from its initial listing before it calls any handler.
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
    service_deployments,
)
from slo_operator.api.cluster import DeploymentObs, NodeInfo, ObjKey, PodObs, Snapshot
from slo_operator.api.models import GROUP, VERSION
from slo_operator.control.prices import PRICES_LABEL
from slo_runtime.contract import LABEL_MANAGED_BY, MANAGED_BY

OWNED = {LABEL_MANAGED_BY: MANAGED_BY}
INDEX_NAMES = ("service_index", "policy_index", "deployment_index", "pod_index", "node_index",
               "price_index")


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    # A detached copy: kopf's body views change under the caller.
    return copy.deepcopy(dict(body))


@kopf.index(GROUP, VERSION, "inferenceservices")
def service_index(body: kopf.Body, **_: Any) -> dict[ObjKey, dict[str, Any]]:
    return {obj_key(body): _plain(body)}


@kopf.index(GROUP, VERSION, "slopolicies")
def policy_index(body: kopf.Body, **_: Any) -> dict[ObjKey, dict[str, Any]]:
    return {obj_key(body): _plain(body)}


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
    )


def pick_indexes(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The index objects among a handler's kwargs (live views, safe to keep)."""
    return {name: kwargs[name] for name in INDEX_NAMES}
