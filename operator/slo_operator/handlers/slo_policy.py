"""kopf handlers for SLOPolicy: validate, bind, and re-plan the services bound to it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.indexes import snapshot
from slo_operator.handlers.inference_service import refresh
from slo_operator.handlers.setup import context
from slo_operator.reconcile.policy_binding import bound_to, reconcile_policy

RESOURCE = (GROUP, VERSION, "slopolicies")


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_policy(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    context(memo).ready.set()  # kopf calls handlers only once the indexes are filled
    snap = snapshot(kwargs)
    # The cache may not hold this very revision yet: the handler's body is the newest.
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    snap = replace(snap, policies={**snap.policies, key: dict(body)})
    bound = await reconcile_policy(context(memo).kube, dict(body), datetime.now(UTC),
                                   snap.services.values())
    for svc in bound:
        await refresh(svc, memo, snap)


@kopf.on.delete(*RESOURCE, optional=True)
async def on_policy_deleted(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """Services bound to a deleted policy keep running and say that their policy is gone."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    snap = snapshot(kwargs)
    snap = replace(snap, policies={k: v for k, v in snap.policies.items()
                                   if k != (namespace, name)})
    for svc in bound_to(namespace, name, snap.services.values()):
        await refresh(svc, memo, snap)
