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
from slo_operator.api.cluster import DeploymentObs, NodeInfo, ObjKey, PodObs
from slo_operator.api.models import GROUP, VERSION
from slo_operator.control.prices import PRICES_LABEL
from slo_runtime.contract import LABEL_MANAGED_BY, MANAGED_BY

OWNED = {LABEL_MANAGED_BY: MANAGED_BY}


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
