"""kopf handlers for SLOPolicy: validate, bind, and act on the services bound to it."""

from __future__ import annotations

from typing import Any

import kopf

from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.setup import context
from slo_operator.reconcile.caches import snapshot
from slo_operator.reconcile.refresh import Reconciler, policy_changed, policy_removed

RESOURCE = (GROUP, VERSION, "slopolicies")


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def on_policy(body: kopf.Body, memo: kopf.Memo, reason: str | None = None,
                    **kwargs: Any) -> None:
    """A new or edited policy decides for its bound services at once; on resume (an
    operator restart resumes every policy) they are only refreshed, and the periodic pass
    decides, so a restart does not query Prometheus once per policy."""
    ctx = context(memo)
    ctx.ready.set()  # kopf calls handlers only once the indexes are filled
    await policy_changed(Reconciler.of(ctx), dict(body), snapshot(kwargs),
                         decide=reason != kopf.Reason.RESUME)


@kopf.on.delete(*RESOURCE, optional=True)
async def on_policy_deleted(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """Services bound to a deleted policy keep running and say that their policy is gone."""
    meta = body["metadata"]
    await policy_removed(Reconciler.of(context(memo)), meta["namespace"], meta["name"],
                         snapshot(kwargs))
