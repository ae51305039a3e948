"""Weighted fair admission: at most ``limit`` requests in flight, per-tenant queues.

Pure asyncio, no I/O: waiting requests are futures granted in stride-scheduling order, and
the limit can move at any time without interrupting running requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

# A tenant's queue bound when the gateway is given none (its config default too).
DEFAULT_MAX_QUEUE = 4096


class QueueFull(Exception):
    """A tenant's queue is at its bound: the request is refused, not queued."""


@dataclass
class _Tenant:
    weight: float
    queue: deque[asyncio.Future[None]] = field(default_factory=deque)
    vpass: float = 0.0   # stride-scheduling pass: virtual time this tenant has consumed


class FairAdmission:
    """At most ``limit`` requests in flight; waiting requests leave their tenants' queues
    in weighted-fair order (stride scheduling: each grant advances the tenant's pass by
    1/weight; the smallest pass goes next; a tenant returning from idle starts at the
    current virtual time, so idleness earns no burst credit)."""

    def __init__(self, limit: int, weights: dict[str, float] | None = None,
                 default_weight: float = 1.0, max_queue: int = DEFAULT_MAX_QUEUE):
        self.limit = limit
        self.in_flight = 0
        self.vtime = 0.0
        self.max_queue = max_queue
        self.default_weight = default_weight
        self.tenants: dict[str, _Tenant] = {
            t: _Tenant(w) for t, w in (weights or {}).items()}

    def _tenant(self, name: str) -> _Tenant:
        t = self.tenants.get(name)
        if t is None:
            t = self.tenants[name] = _Tenant(self.default_weight)
        return t

    def queued(self, name: str | None = None) -> int:
        if name is not None:
            t = self.tenants.get(name)
            return sum(not f.done() for f in t.queue) if t else 0
        return sum(self.queued(n) for n in self.tenants)

    def set_limit(self, limit: int) -> None:
        # Lowering the limit never interrupts running requests; it only withholds grants
        # until enough of them have finished.
        self.limit = limit
        self._dispatch()

    def _grant(self, name: str, t: _Tenant) -> None:
        self.vtime = max(self.vtime, t.vpass)
        t.vpass = max(t.vpass, self.vtime) + 1.0 / t.weight
        self.in_flight += 1

    def try_acquire(self, name: str) -> bool:
        """Grant at once when nothing waits and a slot is free."""
        t = self._tenant(name)
        if self.in_flight < self.limit and not any(
                q.queue for q in self.tenants.values()):
            t.vpass = max(t.vpass, self.vtime)
            self._grant(name, t)
            return True
        return False

    async def acquire(self, name: str, timeout: float | None = None) -> None:
        if self.try_acquire(name):
            return
        t = self._tenant(name)
        if len(t.queue) >= self.max_queue:
            raise QueueFull(name)
        if not t.queue:
            t.vpass = max(t.vpass, self.vtime)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        t.queue.append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except (asyncio.CancelledError, TimeoutError):
            if fut.done() and not fut.cancelled():
                self.release()         # granted in the same instant it was abandoned
            else:
                fut.cancel()
                with contextlib.suppress(ValueError):
                    t.queue.remove(fut)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        while self.in_flight < self.limit:
            best: tuple[float, str] | None = None
            for name, t in self.tenants.items():
                while t.queue and t.queue[0].done():   # abandoned waiters
                    t.queue.popleft()
                if t.queue and (best is None or (t.vpass, name) < best):
                    best = (t.vpass, name)
            if best is None:
                return
            t = self.tenants[best[1]]
            fut = t.queue.popleft()
            self._grant(best[1], t)
            fut.set_result(None)
