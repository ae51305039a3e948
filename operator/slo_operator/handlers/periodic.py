"""One cluster-wide loop that re-runs every reconcile on a fixed period.

A single loop instead of per-object kopf timers: timers would put a finalizer on every
object and cost one task each; the SLO loop queries Prometheus once per signal for all
services at once, which needs all services in one place. Reads come from the watch
caches (kopf indexes), so an unchanged pass sends no request to the API server.

The loop is no kopf handler, so kopf's peering does not stop it: it follows kopf's pause
itself (``Context.gate``). While a peer of higher priority acts, no pass runs; a pass in
flight when the pause comes is cancelled and its writes are refused from that moment
(:class:`GatedWriter`). After a resume, or after this process was stalled for longer
than the peering lifetime (a peer may have acted meanwhile), the loop forgets what it
wrote and skips a pass, so that the next one decides from caches kopf has re-listed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import kopf

from slo_operator.adapters.kube import failure_summary, from_api, transient
from slo_operator.api.observe import ServiceKey
from slo_operator.handlers.setup import PeeringGate, context, release_freed_memory
from slo_operator.monitoring.operator_metrics import METRICS
from slo_operator.reconcile.caches import live_view, pick_indexes, snapshot, superseded
from slo_operator.reconcile.policy_binding import reconcile_policy
from slo_operator.reconcile.ports import KubeWriter
from slo_operator.reconcile.refresh import refresh_services
from slo_operator.reconcile.tenancy import Tenancy
from slo_operator.settings import OperatorSettings

log = logging.getLogger(__name__)

# After a resume, the least time before the next pass: kopf re-lists every watched kind
# when it resumes (kopf/_cogs/clients/watching.py, streaming_block then continuous_watch)
# and tells no one when the listing is indexed, so the loop gives it at least this long
# (and one interval) before it snapshots the caches again.
RESUME_SETTLE_S = 2.0


def keepalive_period(lifetime: int) -> float:
    """The longest kopf waits between a replica's keep-alives: ``min(lifetime,
    max(1, lifetime - randint(5, 10)))`` (kopf/_core/engines/peering.py, keepalive())."""
    return float(min(lifetime, max(1, lifetime - 5)))


def settle_time(config: OperatorSettings) -> float:
    """How long after a resume the loop waits before its next pass.

    Long enough for kopf's re-listing, and, with peering, for one keep-alive of a live
    peer of higher priority: kopf sometimes resumes a replica while that peer lives (a
    peer that was stopped and continues first reads its own stale keep-alive from the
    backlog of its watch, takes itself for dead and removes its entry), and pauses it
    again at the peer's next keep-alive. Such a resume never gets to a pass.
    """
    settle = max(config.interval, RESUME_SETTLE_S)
    if config.peering:
        settle = max(settle, keepalive_period(config.peering_lifetime))
    return settle


class Paused(BaseException):
    """A write the periodic pass attempted after kopf paused this replica.

    A BaseException, like ``asyncio.CancelledError``: the pass's per-service
    ``except Exception`` must not count it as one service's failure and go on to the next.
    """


class GatedWriter:
    """The pass's writer: every write first checks that kopf still lets this replica act.

    The writes run in worker threads (``asyncio.to_thread`` in ``reconcile.service`` and
    ``reconcile.policy_binding``), which cancelling the pass's task does not stop; this
    check does, at the next write. A request already sent when the pause comes completes.
    The writer admits writes only in the acting period it was made in: a thread of a
    cancelled pass that is still running after a quick pause and resume writes nothing.
    """

    def __init__(self, kube: KubeWriter, gate: PeeringGate) -> None:
        self.kube = kube
        self.gate = gate
        self.term = gate.resumes

    def _admit(self) -> None:
        if not self.gate.is_acting() or self.gate.resumes != self.term:
            METRICS.pass_writes.labels("refused").inc()
            raise Paused("kopf paused this replica; the periodic pass writes nothing more")
        METRICS.pass_writes.labels("sent").inc()

    def apply(self, obj: Mapping[str, Any]) -> None:
        self._admit()
        self.kube.apply(obj)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self._admit()
        self.kube.delete(kind, namespace, name)

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._admit()
        self.kube.patch_pod(namespace, name, patch)

    def patch_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self._admit()
        self.kube.patch_status(kind, namespace, name, status)

    def event(self, involved: Mapping[str, Any], event_type: str, reason: str, message: str,
              now: datetime) -> None:
        self._admit()
        self.kube.event(involved, event_type, reason, message, now)


async def run_pass(memo: kopf.Memo, kube: KubeWriter | None = None) -> int:
    """One pass over every policy and service, from one snapshot of the caches: observe
    all services at once (Prometheus), decide, arbitrate, then apply what changed.
    ``kube``: the writer (default: the context's). Returns how many objects it applied or
    patched (0 for a pass over unchanged services)."""
    ctx = context(memo)
    r = ctx.reconciler()
    if kube is not None:
        r = replace(r, kube=kube)
    snap = snapshot(memo.slo_indexes)
    live = memo.slo_indexes

    def stale(key: ServiceKey) -> bool:
        k = (key.namespace, key.name)
        return superseded(snap, *live_view(live, k), k)

    done = await refresh_services(r, snap, stale=stale)
    now = r.clock()
    # Policies aggregate their services' SLO state from the statuses just written.
    services = [ctx.statuses.latest(svc) for svc in snap.services.values()]
    tenancy = Tenancy.of(snap, r.settings.require_tenants)
    for pol in snap.policies.values():
        start = time.monotonic()
        try:
            await reconcile_policy(r.kube, pol, now, services, tenancy)
        except Exception as e:  # one policy's failed write must not stop the others
            METRICS.reconciles.labels("SLOPolicy", "error").inc()
            meta = pol["metadata"]
            if transient(e):
                log.warning("Failed to update SLOPolicy %s/%s for now (retried next pass): "
                            "%s", meta["namespace"], meta["name"], failure_summary(e))
            elif from_api(e):
                log.error("Failed to update SLOPolicy %s/%s (retried next pass): %s",
                          meta["namespace"], meta["name"], failure_summary(e))
            else:
                log.exception("Failed to update SLOPolicy %s/%s", meta["namespace"],
                              meta["name"])
            continue
        METRICS.reconciles.labels("SLOPolicy", "ok").inc()
        METRICS.reconcile_duration.labels("SLOPolicy").observe(time.monotonic() - start)
    METRICS.managed.set(len(snap.services))
    METRICS.pending.set(done.pending)
    return done.writes


async def run_gated_pass(memo: kopf.Memo) -> int | None:
    """One pass that stops at kopf's pause: its writes are refused from that moment and
    its task is cancelled. Returns the pass's writes, or None when the pause cut it short."""
    ctx = context(memo)
    gate = ctx.gate
    work = asyncio.create_task(run_pass(memo, GatedWriter(ctx.kube, gate)))
    pause = asyncio.create_task(gate.paused.wait())
    try:
        await asyncio.wait({work, pause}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        pause.cancel()
        if not work.done():
            work.cancel()
    try:
        return await work
    except (asyncio.CancelledError, Paused):
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the loop itself is being stopped, not just this pass
        return None


def stalled(config: OperatorSettings, overrun: float) -> bool:
    """A sleep that overran by more than the peering lifetime: peers took this replica for
    dead (a stopped or starved process), and one of them may have acted meanwhile, while
    kopf here saw no pause at all."""
    return bool(config.peering) and overrun > config.peering_lifetime


async def _loop(memo: kopf.Memo) -> None:
    ctx = context(memo)
    await ctx.ready.wait()
    gate, config = ctx.gate, ctx.config
    seen, passes = gate.resumes, 0
    while True:
        slept = time.monotonic()
        await asyncio.sleep(config.interval)
        overrun = time.monotonic() - slept - config.interval
        if not gate.is_acting():
            log.info("Paused periodic passes: kopf paused this replica in favour of a peer")
            await gate.acting.wait()
        if gate.resumes != seen or stalled(config, overrun):
            why = ("kopf resumed this replica" if gate.resumes != seen
                   else f"this process stalled for {overrun + config.interval:.0f}s")
            seen = gate.resumes
            ctx.forget_writes()
            log.info("Skipping a periodic pass (%s): the next one reads caches kopf has "
                     "refreshed", why)
            await asyncio.sleep(max(0.0, settle_time(config) - config.interval))
            continue
        try:
            writes = await run_gated_pass(memo)
        except Exception:  # one failed pass must not stop the loop
            METRICS.passes.labels("error").inc()
            log.exception("Failed a periodic pass")
            continue
        if writes is None:
            METRICS.passes.labels("cancelled").inc()
            log.info("Cancelled a periodic pass: kopf paused this replica")
            continue
        passes += 1
        METRICS.passes.labels("ok").inc()
        await asyncio.to_thread(release_freed_memory)
        log.info("Finished periodic pass %d: %d objects applied or patched", passes, writes)


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
