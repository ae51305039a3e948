"""kopf handlers for InferenceService and the objects it owns."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.setup import context
from slo_operator.reconcile.plan import NodeInfo
from slo_operator.reconcile.service import Outcome, reconcile_service
from slo_operator.render.objects import LABEL_SERVICE, MANAGED_BY

log = logging.getLogger(__name__)
RESOURCE = (GROUP, VERSION, "inferenceservices")


async def refresh(
    body: Mapping[str, Any], memo: kopf.Memo, nodes: Sequence[NodeInfo] | None = None
) -> Outcome:
    """Reconcile one service under its lock; never raises for spec or dependency problems."""
    ctx = context(memo)
    meta = body["metadata"]
    async with ctx.lock(meta["namespace"], meta["name"]):
        outcome = await reconcile_service(
            ctx.kube, body, datetime.now(UTC), ctx.settings, nodes
        )
    if outcome.applied:
        # Debug: the periodic pass re-applies unchanged objects (a no-op for the server).
        log.debug("Reconciled InferenceService %s/%s: applied %s", meta["namespace"],
                 meta["name"], ", ".join(outcome.applied))
    return outcome


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_change(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    outcome = await refresh(body, memo)
    if outcome.permanent_error:
        # Invalid specs wait for a spec change; retrying would only crash-loop.
        raise kopf.PermanentError(outcome.permanent_error)
    if outcome.retry_after:
        raise kopf.TemporaryError("Waiting for dependencies", delay=outcome.retry_after)


@kopf.on.event("apps", "v1", "deployments", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
@kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
async def on_owned(body: kopf.Body, memo: kopf.Memo, type: str | None, **_: Any) -> None:
    """Owned objects changed (pods scheduled, replicas ready): refresh the owner's status."""
    if type is None:
        return  # the initial listing; resume handlers cover it
    meta = body["metadata"]
    owner = (meta.get("labels") or {}).get(LABEL_SERVICE)
    if not owner:
        return
    svc = context(memo).kube.get_custom("InferenceService", meta["namespace"], owner)
    if svc is not None:
        await refresh(svc, memo)


@kopf.on.delete(*RESOURCE, optional=True)
async def on_deleted(body: kopf.Body, **_: Any) -> None:
    # optional=True: no finalizer; owned objects go with ownerReferences (garbage collector).
    meta = body["metadata"]
    log.info("Deleted InferenceService %s/%s; owned objects are garbage-collected",
             meta["namespace"], meta["name"])
