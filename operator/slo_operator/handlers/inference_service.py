"""kopf handlers for InferenceService and the objects it owns."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from slo_operator.adapters.kube import owner_key
from slo_operator.api.activation import ANNOTATION_WAKE
from slo_operator.api.models import GROUP, VERSION
from slo_operator.api.observe import ServiceKey
from slo_operator.handlers.setup import context, retried_when_transient
from slo_operator.reconcile.caches import pick_indexes, snapshot
from slo_operator.reconcile.refresh import Reconciler, refresh, refresh_services
from slo_runtime.contract import LABEL_MANAGED_BY, MANAGED_BY

log = logging.getLogger(__name__)
RESOURCE = (GROUP, VERSION, "inferenceservices")


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_change(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    ctx = context(memo)
    ctx.ready.set()  # kopf calls handlers only once the indexes are filled
    # At most --workers creations at a time hold a snapshot (every service's entry): a
    # cold start's 1,000 creations, each with its own while queued for a thread, held a
    # snapshot per creation at once.
    async with ctx.creating:
        with retried_when_transient("The API server refused for now"):
            outcome = await refresh(Reconciler.of(ctx), dict(body), snapshot(kwargs))
    if outcome.permanent_error:
        # Invalid specs wait for a spec change; retrying would only crash-loop.
        raise kopf.PermanentError(outcome.permanent_error)
    if outcome.retry_after:
        raise kopf.TemporaryError("Waiting for dependencies", delay=outcome.retry_after)


@kopf.on.event("apps", "v1", "deployments", labels={LABEL_MANAGED_BY: MANAGED_BY})
@kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def on_owned(body: kopf.Body, memo: kopf.Memo, type: str | None, **kwargs: Any) -> None:
    """Owned objects changed (pods scheduled, replicas ready): have the owner's status
    refreshed from the caches (no GET of the owner), in a batch with every other owner
    whose objects changed meanwhile (``OwnerRefresher``); returns at once."""
    ctx = context(memo)
    ctx.ready.set()
    if type is None:
        return  # the initial listing; resume handlers cover it
    key = owner_key(body)
    if key is None or not kwargs["service_index"].get(key):
        return
    r = Reconciler.of(ctx)
    indexes = pick_indexes(kwargs)  # live views: the batch reads them when it starts

    async def batch(keys: list[ServiceKey]) -> None:
        if ctx.gate.is_acting():  # a peer acts meanwhile; kopf resumes every service
            await refresh_services(r, snapshot(indexes), keys, decide=False)

    ctx.owners.ask(ServiceKey(*key), batch)


@kopf.on.field(*RESOURCE, field=("metadata", "annotations", ANNOTATION_WAKE))
async def on_wake(body: kopf.Body, memo: kopf.Memo, new: Any, **kwargs: Any) -> None:
    """The activator recorded a wake (a request held for a service at zero, served, or
    given up on): decide for this service now instead of at the next pass, so the cold
    start does not wait for the interval."""
    ctx = context(memo)
    ctx.ready.set()
    if new is None or not ctx.gate.is_acting():
        return
    meta = body["metadata"]
    with retried_when_transient("The API server refused for now"):
        await refresh_services(Reconciler.of(ctx), snapshot(kwargs),
                               [ServiceKey(meta["namespace"], meta["name"])])


@kopf.on.delete(*RESOURCE, optional=True)
async def on_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # optional=True: no finalizer; owned objects go with ownerReferences (garbage collector).
    meta = body["metadata"]
    context(memo).forget(meta["namespace"], meta["name"])
    log.info("Deleted InferenceService %s/%s; owned objects are garbage-collected",
             meta["namespace"], meta["name"])
