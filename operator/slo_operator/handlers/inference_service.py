"""kopf handlers for InferenceService and the objects it owns."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.adapters.kube import owner_key
from slo_operator.api.cluster import Snapshot
from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.indexes import snapshot
from slo_operator.handlers.setup import context
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.service import Outcome, reconcile_service
from slo_operator.reconcile.status import SLOUpdate
from slo_runtime.contract import LABEL_MANAGED_BY, MANAGED_BY

log = logging.getLogger(__name__)
RESOURCE = (GROUP, VERSION, "inferenceservices")
KIND = "InferenceService"


async def refresh(body: Mapping[str, Any], memo: kopf.Memo, snap: Snapshot,
                  update: SLOUpdate | None = None) -> Outcome:
    """Reconcile one service under its lock; never raises for spec or dependency problems."""
    ctx = context(memo)
    meta = body["metadata"]
    ctx.ready.set()
    async with ctx.lock(meta["namespace"], meta["name"]):
        # Start from the status this operator last wrote when the cache has not caught up
        # yet, so concurrent triggers never report the same transition twice.
        latest = ctx.statuses.latest(body)
        start = time.monotonic()
        try:
            outcome = await reconcile_service(
                ctx.kube, latest, snap, datetime.now(UTC), ctx.settings, ctx.applied, update
            )
        except Exception as e:
            METRICS.reconciles.labels(KIND, "error").inc()
            METRICS.errors.labels(KIND, type(e).__name__).inc()
            raise
        finally:
            METRICS.reconcile_duration.labels(KIND).observe(time.monotonic() - start)
        METRICS.reconciles.labels(KIND, "ok").inc()
        for ev in outcome.events:
            if ev.type == "Warning":
                METRICS.errors.labels(KIND, ev.reason).inc()
        ctx.statuses.remember(latest, outcome.status)
    if outcome.applied:
        log.info("Applied for InferenceService %s/%s: %s", meta["namespace"], meta["name"],
                 ", ".join(outcome.applied))
    return outcome


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_change(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    outcome = await refresh(dict(body), memo, snapshot(kwargs))
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
    if type is None:
        context(memo).ready.set()
        return  # the initial listing; resume handlers cover it
    key = owner_key(body)
    snap = snapshot(kwargs)
    svc = snap.services.get(key) if key else None
    if svc is not None:
        await refresh(svc, memo, snap)


@kopf.on.delete(*RESOURCE, optional=True)
async def on_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # optional=True: no finalizer; owned objects go with ownerReferences (garbage collector).
    meta = body["metadata"]
    context(memo).forget(meta["namespace"], meta["name"])
    log.info("Deleted InferenceService %s/%s; owned objects are garbage-collected",
             meta["namespace"], meta["name"])
