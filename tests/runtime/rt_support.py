"""Helpers for the runtime tests: real loopback servers (no HTTP mocks), waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from slo_devtools.replica.server import LinearSteps, Replica
from slo_runtime.gateway import Gateway, GatewayConfig
from slo_runtime.proxy import start_site
from tests.support.paths import FIXTURES, REPO

FIXTURES_VLLM = FIXTURES / "vllm"
CALIBRATION = FIXTURES / "calibration"
# The measured node profiles: one home, the operator's package data.
PROFILES = REPO / "operator" / "slo_operator" / "data" / "profiles"


async def wait_until(cond: Callable[[], bool], timeout: float = 10.0,
                     interval: float = 0.005) -> None:
    """Await a condition (polling the event loop), failing after ``timeout``."""
    async def _poll() -> None:
        while not cond():
            await asyncio.sleep(interval)
    await asyncio.wait_for(_poll(), timeout)


class Servers:
    def __init__(self) -> None:
        self.runners: list[web.AppRunner] = []

    async def serve(self, app: web.Application) -> str:
        runner, port = await start_site(app, "127.0.0.1", 0)
        self.runners.append(runner)
        return f"http://127.0.0.1:{port}"

    async def replica(self, **kw: Any) -> tuple[Replica, str]:
        steps = kw.pop("steps", LinearSteps(base_ms=2.0, per_seq_ms=0.0,
                                          prefill_ms_per_token=0.0))
        rep = Replica(kw.pop("model_name", "m"), steps, **kw)
        return rep, await self.serve(rep.app)

    async def gateway(self, upstream: str, **kw: Any) -> tuple[Gateway, str]:
        gw = Gateway(GatewayConfig(upstream=upstream, **kw))
        return gw, await self.serve(gw.app)

    async def close(self) -> None:
        for r in reversed(self.runners):
            await r.cleanup()


Waiter = Callable[[Callable[[], bool]], Awaitable[None]]
