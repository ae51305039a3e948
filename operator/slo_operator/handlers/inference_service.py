"""kopf handlers for InferenceService and the objects it owns."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from slo_operator.adapters.kube import owner_key
from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.setup import context
from slo_operator.reconcile.caches import snapshot
from slo_operator.reconcile.refresh import Reconciler, refresh
from slo_runtime.contract import LABEL_MANAGED_BY, MANAGED_BY

log = logging.getLogger(__name__)
RESOURCE = (GROUP, VERSION, "inferenceservices")


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_change(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    ctx = context(memo)
    ctx.ready.set()  # kopf calls handlers only once the indexes are filled
    outcome = await refresh(Reconciler.of(ctx), dict(body), snapshot(kwargs))
    if outcome.permanent_error:
        # Invalid specs wait for a spec change; retrying would only crash-loop.
        raise kopf.PermanentError(outcome.permanent_error)
    if outcome.retry_after:
        raise kopf.TemporaryError("Waiting for dependencies", delay=outcome.retry_after)


@kopf.on.event("apps", "v1", "deployments", labels={LABEL_MANAGED_BY: MANAGED_BY})
@kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def on_owned(body: kopf.Body, memo: kopf.Memo, type: str | None, **kwargs: Any) -> None:
    """Owned objects changed (pods scheduled, replicas ready): refresh the owner's status
    from the caches (no GET of the owner)."""
    ctx = context(memo)
    ctx.ready.set()
    if type is None:
        return  # the initial listing; resume handlers cover it
    key = owner_key(body)
    snap = snapshot(kwargs)
    svc = snap.services.get(key) if key else None
    if svc is not None:
        await refresh(Reconciler.of(ctx), svc, snap)


@kopf.on.delete(*RESOURCE, optional=True)
async def on_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # optional=True: no finalizer; owned objects go with ownerReferences (garbage collector).
    meta = body["metadata"]
    context(memo).forget(meta["namespace"], meta["name"])
    log.info("Deleted InferenceService %s/%s; owned objects are garbage-collected",
             meta["namespace"], meta["name"])
