"""kopf handlers for SLOPolicy: validate, bind, act on the services bound to it, and keep
its PrometheusRule (``--manage-alert-rules``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.api.models import GROUP, VERSION
from slo_operator.handlers.setup import context, retried_when_transient
from slo_operator.reconcile.alert_rules import AlertRules, remove_policy, sync_policy
from slo_operator.reconcile.caches import snapshot
from slo_operator.reconcile.refresh import Reconciler, policy_changed, policy_removed

RESOURCE = (GROUP, VERSION, "slopolicies")


def alert_rules(memo: Any) -> AlertRules:
    """The managed alert rules' state, made from the operator's settings on first use."""
    state: AlertRules | None = getattr(memo, "slo_alerts", None)
    if state is None:
        config = context(memo).config
        state = memo.slo_alerts = AlertRules(config.manage_alert_rules, config.alert_labels)
    return state


@kopf.on.event(*RESOURCE)
async def on_policy_event(body: kopf.Body, memo: kopf.Memo, type: str | None = None,
                          **_: Any) -> None:
    """Every change of a policy, its status included (the periodic pass records the bound
    services there, which the rules select), brings its PrometheusRule up to date; a
    deleted policy's is deleted. Runs before the change handlers of the same event."""
    state = alert_rules(memo)
    if not state.enabled:
        return
    ctx, meta = context(memo), body["metadata"]
    if type == "DELETED":
        await asyncio.to_thread(remove_policy, ctx.kube, state, ctx.applied,
                                meta["namespace"], meta["name"])
    elif not meta.get("deletionTimestamp"):
        await asyncio.to_thread(sync_policy, ctx.kube, ctx.kube, state, ctx.applied,
                                dict(body), datetime.now(UTC))


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
    # The body this event brought may predate the AlertRulesReady just written for it.
    with retried_when_transient("The API server refused for now"):
        await policy_changed(Reconciler.of(ctx), alert_rules(memo).latest(body),
                             snapshot(kwargs), decide=reason != kopf.Reason.RESUME)


@kopf.on.delete(*RESOURCE, optional=True)
async def on_policy_deleted(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """Services bound to a deleted policy keep running and say that their policy is gone."""
    meta, ctx = body["metadata"], context(memo)
    await asyncio.to_thread(remove_policy, ctx.kube, alert_rules(memo), ctx.applied,
                            meta["namespace"], meta["name"])
    await policy_removed(Reconciler.of(ctx), meta["namespace"], meta["name"],
                         snapshot(kwargs))
