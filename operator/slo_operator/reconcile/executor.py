"""Perform a :class:`ReconcilePlan`'s actions, in order, through the ``KubeWriter``.

The only place a service's reconcile writes. Refusals are handled as they always were:

- an apply the API server refuses is recorded in the ``AppliedCache`` (back-off: 30 s,
  doubling, at most 10 min), and the executor stops there: the actions after it (later
  applies, deletes, pod patches and Events) are dropped and the plan's :class:`Refusal`
  report (Ready False, ``ApplyFailed``, the server's message) is written over the
  planned status (which a plan writes first, ``planner.plan_reconcile``);
- a refusal of the moment (409, 429, 5xx: ``ApiRejected.transient``) is raised: the
  reconcile fails for now and the next pass retries it;
- a refused delete is skipped (retried next pass; the variant keeps serving meanwhile);
- anything else a writer raises propagates to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slo_operator.api.cluster import ApiRejected
from slo_operator.reconcile.actions import (
    Action,
    Apply,
    Delete,
    PatchPodLimit,
    PatchStatus,
    PostEvent,
)
from slo_operator.reconcile.gpu_inventory import Fleet
from slo_operator.reconcile.planner import ReconcilePlan
from slo_operator.reconcile.ports import AppliedCache, KubeWriter
from slo_operator.reconcile.status import EventSpec
from slo_operator.render.objects import live_limit_patch


@dataclass
class Outcome:
    """What the handler should do after a reconcile."""

    status: dict[str, Any]
    retry_after: float | None = None
    permanent_error: str | None = None
    applied: list[str] = field(default_factory=list)  # what was applied, deleted or patched
    events: list[EventSpec] = field(default_factory=list)  # Events posted by this reconcile
    fleet: Fleet | None = None  # the pass's GPUs left for the next service
    # Statuses written and then written over by this reconcile (the decision, before an
    # apply the API server refused): the watch cache may serve them for a while.
    superseded: list[dict[str, Any]] = field(default_factory=list)


def execute(kube: KubeWriter, plan: ReconcilePlan, applied: AppliedCache) -> Outcome:
    """Make the plan's writes in order; returns what was done."""
    stamp = plan.now.timestamp()
    out = Outcome(status=dict(plan.status), retry_after=plan.retry_after,
                  permanent_error=plan.permanent_error, fleet=plan.fleet)
    for i, action in enumerate(plan.actions):
        if isinstance(action, Apply):
            try:
                kube.apply(action.obj)
            except ApiRejected as e:
                # A refusal of the moment (throttled, a conflict, the server failing) is
                # retried at the next pass, not reported as the object's fault nor backed
                # off for 30 s.
                if plan.refusal is None or e.transient:  # every plan with applies has one
                    raise
                message = str(e)
                delay = applied.reject(action.obj, stamp, message)
                rep = plan.refusal.report(message)
                if any(isinstance(a, PatchStatus) for a in plan.actions[:i]):
                    out.superseded.append(dict(plan.status))
                out.status, out.retry_after = dict(rep.status), delay
                for follow in rep.actions:
                    _write(kube, follow, out)
                return out
            applied.remember(action.obj, stamp)
            out.applied.append(f"{action.kind}/{action.name}")
        elif isinstance(action, Delete):
            try:
                kube.delete(action.kind, action.namespace, action.name)
            except ApiRejected:
                continue
            out.applied.append(f"{action.kind}/{action.name} deleted")
        elif isinstance(action, PatchPodLimit):
            kube.patch_pod(action.namespace, action.pod, live_limit_patch(action.limit))
            applied.remember_limit(action.namespace, action.pod, action.limit, stamp)
            out.applied.append(f"Pod/{action.pod} limit={action.limit}")
        else:
            _write(kube, action, out)
    return out


def _write(kube: KubeWriter, action: Action, out: Outcome) -> None:
    if isinstance(action, PatchStatus):
        kube.patch_status(action.kind, action.namespace, action.name, action.status)
    elif isinstance(action, PostEvent):
        kube.event(action.involved.as_body(), action.type, action.reason, action.message,
                   action.time)
        out.events.append(EventSpec(action.type, action.reason, action.message))
    else:  # applies, deletes and pod patches are the executor's own loop's
        raise TypeError(f"not a follow-up write: {action!r}")
