"""kopf handlers for InferenceService and the Deployments it owns."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.setup import context
from slo_operator.reconcile.service import reconcile_service
from slo_operator.render.objects import LABEL_SERVICE, MANAGED_BY

log = logging.getLogger(__name__)
RESOURCE = (GROUP, VERSION, "inferenceservices")


async def _run(body: kopf.Body, memo: kopf.Memo) -> dict[str, Any]:
    ctx = context(memo)
    meta = body["metadata"]
    async with ctx.lock(meta["namespace"], meta["name"]):
        outcome = await reconcile_service(ctx.kube, body, datetime.now(UTC), ctx.settings)
    if outcome.applied:
        log.info("Reconciled InferenceService %s/%s: applied %s", meta["namespace"],
                 meta["name"], ", ".join(outcome.applied))
    if outcome.permanent_error:
        # Invalid specs wait for a spec change; retrying would only crash-loop.
        raise kopf.PermanentError(outcome.permanent_error)
    if outcome.retry_after:
        raise kopf.TemporaryError("Waiting for dependencies", delay=outcome.retry_after)
    return {}


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_change(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await _run(body, memo)


@kopf.on.event("apps", "v1", "deployments", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
@kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
async def on_owned(body: kopf.Body, memo: kopf.Memo, type: str | None, **_: Any) -> None:
    """Owned objects changed (pods scheduled, replicas ready): refresh the owner's status."""
    if type is None:
        return  # initial listing; resume handlers cover it
    ctx = context(memo)
    meta = body["metadata"]
    owner = (meta.get("labels") or {}).get(LABEL_SERVICE)
    if not owner:
        return
    svc = ctx.kube.get_custom("InferenceService", meta["namespace"], owner)
    if svc is None:
        return
    try:
        await _run(kopf.Body(svc), memo)
    except (kopf.PermanentError, kopf.TemporaryError):
        pass
