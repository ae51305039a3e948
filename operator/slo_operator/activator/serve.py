"""``slo-operator activator``: the watches, the HTTP service, and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from kubernetes.client import ApiClient

from slo_operator.activator.apiserver import KubeRoutes, KubeWaker
from slo_operator.activator.app import Activator, ActivatorConfig
from slo_runtime.proxy import start_site

log = logging.getLogger(__name__)


async def serve(api: ApiClient, config: ActivatorConfig, host: str, port: int,
                stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (by default: until SIGTERM or SIGINT)."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    routes = KubeRoutes(api)
    routes.start(loop)
    activator = Activator(routes, KubeWaker(api), config)
    runner, bound = await start_site(activator.app, host, port)
    log.info("Activator listening on %s:%d (queue %d per service, timeout %g s)", host, bound,
             config.queue_per_service, config.timeout_s)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await asyncio.to_thread(routes.stop)
