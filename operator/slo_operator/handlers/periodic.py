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
from typing import Any

import kopf

from slo_operator.handlers.setup import context
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.caches import pick_indexes, snapshot
from slo_operator.reconcile.policy_binding import reconcile_policy
from slo_operator.reconcile.refresh import Reconciler, refresh_services

log = logging.getLogger(__name__)


async def run_pass(memo: kopf.Memo) -> int:
    """One pass over every policy and service, from one snapshot of the caches: observe
    all services at once (Prometheus), decide, arbitrate, then apply what changed.
    Returns how many objects it applied or patched (0 for a pass over unchanged services)."""
    ctx = context(memo)
    r = Reconciler.of(ctx)
    snap = snapshot(memo.slo_indexes)
    done = await refresh_services(r, snap)
    now = r.clock()
    # Policies aggregate their services' SLO state from the statuses just written.
    services = [ctx.statuses.latest(svc) for svc in snap.services.values()]
    for pol in snap.policies.values():
        start = time.monotonic()
        await reconcile_policy(ctx.kube, pol, now, services)
        METRICS.reconciles.labels("SLOPolicy", "ok").inc()
        METRICS.reconcile_duration.labels("SLOPolicy").observe(time.monotonic() - start)
    METRICS.managed.set(len(snap.services))
    METRICS.pending.set(done.pending)
    return done.writes


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
