"""One cluster-wide loop that re-runs every reconcile on a fixed period.

A single loop instead of per-object kopf timers: timers would put a finalizer on every
object and cost one task each; the SLO loop will also query Prometheus once per signal
for all services at once, which needs all services in one place.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime
from typing import Any

import kopf

from slo_operator.handlers.inference_service import refresh
from slo_operator.handlers.setup import context
from slo_operator.reconcile.policy import reconcile_policy

log = logging.getLogger(__name__)
INTERVAL = float(os.environ.get("SLO_RECONCILE_INTERVAL", "20"))


async def _cycle(memo: kopf.Memo) -> None:
    ctx = context(memo)
    # One LIST of services serves every policy's binding and every service's reconcile.
    services = await asyncio.to_thread(ctx.kube.list_custom, "InferenceService")
    for pol in await asyncio.to_thread(ctx.kube.list_custom, "SLOPolicy"):
        await reconcile_policy(ctx.kube, pol, datetime.now(UTC), services)
    nodes = await asyncio.to_thread(ctx.kube.list_nodes)
    for svc in services:
        await refresh(svc, memo, nodes)


async def _loop(memo: kopf.Memo) -> None:
    while True:
        await asyncio.sleep(INTERVAL)
        try:
            await _cycle(memo)
        except Exception:  # one failed cycle must not stop the loop
            log.exception("Failed a periodic reconcile cycle")


@kopf.on.startup()
async def start_loop(memo: kopf.Memo, **_: Any) -> None:
    memo.slo_loop = asyncio.create_task(_loop(memo))


@kopf.on.cleanup()
async def stop_loop(memo: kopf.Memo, **_: Any) -> None:
    task = getattr(memo, "slo_loop", None)
    if task is not None:
        task.cancel()
