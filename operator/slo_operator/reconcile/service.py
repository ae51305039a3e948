"""Reconcile one InferenceService: plan (pure), then act.

Every trigger (create, resume, spec change, owned-object change, the periodic pass) runs
this same function: ``planner.plan_reconcile`` decides from the cached :class:`Snapshot`
what to write, ``executor.execute`` writes it through the small ``KubeWriter`` protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from slo_operator.api.cluster import Snapshot
from slo_operator.reconcile.executor import Outcome, execute
from slo_operator.reconcile.gpu_inventory import Fleet
from slo_operator.reconcile.planner import Settings, desired_replicas, plan_reconcile
from slo_operator.reconcile.ports import AppliedCache, KubeWriter
from slo_operator.reconcile.status import SLOUpdate

__all__ = ["Outcome", "Settings", "desired_replicas", "reconcile_service",
           "reconcile_service_sync"]


def reconcile_service_sync(
    kube: KubeWriter,
    body: Mapping[str, Any],
    snap: Snapshot,
    now: datetime,
    settings: Settings,
    applied: AppliedCache | None = None,
    update: SLOUpdate | None = None,
    fleet: Fleet | None = None,
) -> Outcome:
    """One reconcile of ``body`` against the cached ``snap``; blocking (run in a thread).

    ``update``: what the SLO loop decided this pass (replicas, batch limit, signals,
    conditions); without one, replicas and the limit hold their last decided values.
    ``fleet``: the pass's free GPUs so far (surveyed from ``snap`` when None); the outcome
    carries it on with this service's new replicas taken out.
    """
    applied = applied if applied is not None else AppliedCache()
    plan = plan_reconcile(body, snap, now, settings, applied, update, fleet)
    return execute(kube, plan, applied)


async def reconcile_service(
    kube: KubeWriter,
    body: Mapping[str, Any],
    snap: Snapshot,
    now: datetime,
    settings: Settings,
    applied: AppliedCache | None = None,
    update: SLOUpdate | None = None,
    fleet: Fleet | None = None,
) -> Outcome:
    """The kubernetes client is synchronous: run the reconcile in a worker thread."""
    return await asyncio.to_thread(
        reconcile_service_sync, kube, body, snap, now, settings, applied, update, fleet
    )
