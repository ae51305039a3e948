"""The trace replay of the demo: one load generator per service, in a background thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slo_devtools.demo import truth
from slo_devtools.devenv.loadgen import LoadResult, LoadSpec, replay
from slo_devtools.sim.traces import Trace

# A request that has no answer after this long counts as failed.
REQUEST_TIMEOUT_S = 60.0
# How long stopping waits for answers in flight (after the cool-down there are none; on
# Ctrl-C the user is waiting).
STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class Target:
    service: str  # namespace/name
    model: str  # served model name the replicas answer to
    trace: Trace  # already time-compressed: request times are replay seconds
    endpoints: Callable[[], Sequence[str]]  # the service's ready replicas, re-read per request


class Replay:
    """Send every target's trace to its service's replicas until done or stopped."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self.targets = list(targets)
        self.results: dict[str, LoadResult] = {}
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-replay", daemon=True)

    def start(self) -> Replay:
        self._thread.start()
        self._started.wait(timeout=10)
        return self

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        """Stop sending; wait briefly for answers in flight (the replicas stop next, which
        ends any request still open)."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported by the demo, never a silent dead thread
            self.error = e

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()

        async def one(t: Target) -> None:
            # The trace is already compressed, so the generator's own factor is 1. Streamed,
            # so the client sees each request's first token and token gaps (ground truth).
            spec = LoadSpec(model=t.model, speed=1.0, stream=True,
                            timeout_s=REQUEST_TIMEOUT_S)
            self.results[t.service] = await replay(t.trace.requests, t.endpoints, spec,
                                                   stop=self._stop)

        await asyncio.gather(*(one(t) for t in self.targets))

    def client_summary(self, goals: Mapping[str, truth.Goal] | None = None
                       ) -> Mapping[str, dict[str, Any]]:
        """Per service: requests sent, answered, failed, client-side latencies and, for a
        service in ``goals``, its SLO windows judged from those latencies."""
        out: dict[str, dict[str, Any]] = {}
        for svc, r in self.results.items():
            out[svc] = dict(r.summary())
            if goals and svc in goals:
                out[svc]["windows"] = truth.summary(
                    truth.client_windows(r.records, goals[svc]), goals[svc])
        return out
