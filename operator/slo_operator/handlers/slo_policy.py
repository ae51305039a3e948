"""kopf handlers for SLOPolicy: validate, bind, and re-plan the services bound to it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.inference_service import refresh
from slo_operator.handlers.setup import context
from slo_operator.reconcile.policy import bound_to, reconcile_policy

RESOURCE = (GROUP, VERSION, "slopolicies")


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_policy(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    for svc in await reconcile_policy(context(memo).kube, body, datetime.now(UTC)):
        await refresh(svc, memo)


@kopf.on.delete(*RESOURCE, optional=True)
async def on_policy_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Services bound to a deleted policy keep running and say that their policy is gone."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    services = context(memo).kube.list_custom("InferenceService", namespace)
    for svc in bound_to(namespace, name, services):
        await refresh(svc, memo)
