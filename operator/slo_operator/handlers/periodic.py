"""One cluster-wide loop that re-runs every reconcile on a fixed period.

A single loop instead of per-object kopf timers: timers would put a finalizer on every
object and cost one task each; the SLO loop queries Prometheus once per signal for all
services at once, which needs all services in one place. Reads come from the watch
caches (kopf indexes), so an unchanged pass sends no request to the API server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.api.observe import ServiceKey
from slo_operator.handlers.indexes import pick_indexes, snapshot
from slo_operator.handlers.inference_service import refresh
from slo_operator.handlers.setup import context
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.loop import observe_and_decide
from slo_operator.reconcile.policy_binding import reconcile_policy

log = logging.getLogger(__name__)


async def run_pass(memo: kopf.Memo) -> int:
    """One pass over every policy and service, from one snapshot of the caches: observe
    all services at once (Prometheus), decide, arbitrate, then apply what changed.
    Returns how many objects it applied or patched (0 for a pass over unchanged services)."""
    ctx = context(memo)
    snap = snapshot(memo.slo_indexes)
    # The loop decides from the newest status (its own memory included), even when the
    # watch cache has not yet delivered what the previous pass wrote.
    snap = replace(snap, services={k: ctx.statuses.latest(v) for k, v in snap.services.items()})
    now = datetime.now(UTC)
    updates = {}
    writes = 0
    if ctx.metrics is not None:
        try:
            updates = await observe_and_decide(ctx.metrics, snap, now)
        except Exception:  # a bug in one pass's decisions must not stop reconciling
            log.exception("Failed the SLO decisions of a pass; services hold")
    pending = 0
    for svc in snap.services.values():
        meta = svc["metadata"]
        key = ServiceKey(meta["namespace"], meta["name"])
        update = updates.get(key)
        try:
            outcome = await refresh(svc, memo, snap, update)
        except Exception:  # one service's failure must not stop the others
            pending += 1
            log.exception("Failed to reconcile InferenceService %s/%s",
                          meta["namespace"], meta["name"])
            continue
        writes += len(outcome.applied)
        pending += bool(outcome.retry_after or outcome.permanent_error)
        if update is not None:
            direction = decision_direction(svc.get("status") or {}, outcome.status)
            METRICS.decisions.labels(direction, update.reason).inc()
    for pol in snap.policies.values():
        start = time.monotonic()
        await reconcile_policy(ctx.kube, pol, now, snap.services.values())
        METRICS.reconciles.labels("SLOPolicy", "ok").inc()
        METRICS.reconcile_duration.labels("SLOPolicy").observe(time.monotonic() - start)
    METRICS.managed.set(len(snap.services))
    METRICS.pending.set(pending)
    return writes


def decision_direction(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What an applied decision did: scale_up, scale_down, batch_up, batch_down or hold."""
    before, after = old.get("desiredReplicas"), new.get("desiredReplicas")
    if isinstance(before, int) and isinstance(after, int) and after != before:
        return "scale_up" if after > before else "scale_down"
    before, after = old.get("batchLimit"), new.get("batchLimit")
    if isinstance(before, int) and isinstance(after, int) and after != before:
        return "batch_up" if after > before else "batch_down"
    return "hold"


async def _loop(memo: kopf.Memo) -> None:
    ctx = context(memo)
    await ctx.ready.wait()
    passes = 0
    while True:
        await asyncio.sleep(ctx.loop.interval)
        try:
            writes = await run_pass(memo)
            passes += 1
            log.info("Finished periodic pass %d: %d objects applied or patched", passes, writes)
        except Exception:  # one failed pass must not stop the loop
            log.exception("Failed a periodic pass")


@kopf.on.startup()
async def start_loop(memo: kopf.Memo, **kwargs: Any) -> None:
    # The indexes are live views: keep them for the loop, which is no kopf handler.
    memo.slo_indexes = pick_indexes(kwargs)
    memo.slo_loop = asyncio.create_task(_loop(memo))


@kopf.on.cleanup()
async def stop_loop(memo: kopf.Memo, **_: Any) -> None:
    task = getattr(memo, "slo_loop", None)
    if task is not None:
        task.cancel()
