"""Trace replay against the replicas' HTTP endpoints, as clients of a Service would load them.

A workload is any sequence of requests with an arrival time ``t`` (seconds from the trace
start), a ``prompt`` and an ``output`` length in tokens: the traces of
``slo_devtools.sim.traces`` (Azure 2023 code and conversation, ServeGen days, the ramp)
fit as they are. :func:`replay` sends each request at ``t / speed`` seconds after the
start (``speed`` is the time-compression factor, reported in the result) to the next
endpoint of the service in round-robin order, re-reading the endpoint list on every
request so that scale-out and scale-in take effect at once, as a Service's endpoints do.
Requests are OpenAI completions (``prompt`` as token IDs, ``max_tokens`` = output
length), streamed or not; the client records queueing-free latencies: time to first
byte of a token (TTFT, streaming only), the gaps between streamed tokens and end to end.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp


class TraceRequest(Protocol):
    """What a workload's request must have (``slo_devtools.sim.traces.Request`` has it)."""

    @property
    def t(self) -> float: ...

    @property
    def prompt(self) -> int: ...

    @property
    def output(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Record:
    """One request as the client saw it (times in seconds of the replay clock)."""

    sent: float                 # when it was sent, from the replay start
    endpoint: str
    prompt: int
    output: int
    status: int                 # HTTP status; 0 = no endpoint, -1 = connection error
    ttft: float | None          # first token (streaming), seconds after sending
    e2e: float | None           # whole response, seconds after sending
    tokens: int = 0
    gaps: tuple[float, ...] = ()  # seconds between consecutive streamed tokens (streaming)


@dataclass
class LoadResult:
    speed: float
    records: list[Record] = field(default_factory=list)

    @property
    def ok(self) -> list[Record]:
        return [r for r in self.records if r.status == 200]

    def percentile(self, what: str, q: float) -> float | None:
        """The q-quantile (0..1, nearest rank) of ``ttft`` or ``e2e`` over successes."""
        vals: list[float] = sorted(v for r in self.ok if (v := getattr(r, what)) is not None)
        if not vals:
            return None
        return vals[min(len(vals) - 1, max(0, math.ceil(q * len(vals)) - 1))]

    def summary(self) -> dict[str, float | int | None]:
        return {"requests": len(self.records), "ok": len(self.ok),
                "errors": sum(r.status != 200 for r in self.records),
                "speed": self.speed,
                "ttft_p50_s": self.percentile("ttft", 0.5),
                "ttft_p95_s": self.percentile("ttft", 0.95),
                "e2e_p50_s": self.percentile("e2e", 0.5),
                "e2e_p99_s": self.percentile("e2e", 0.99)}


@dataclass(frozen=True)
class LoadSpec:
    model: str | None = None        # None: the replica's served model (field omitted)
    speed: float = 1.0              # trace seconds per replay second
    stream: bool = True
    max_prompt: int = 8192          # longer prompts are cut (the replicas' context)
    max_output: int = 2048
    timeout_s: float = 600.0
    tenant_header: str | None = None   # sent as X-Tenant with this value


class RoundRobin:
    """The next endpoint of a changing list, fairly: a Service's load balancing."""

    def __init__(self, endpoints: Callable[[], Sequence[str]]) -> None:
        self.endpoints = endpoints
        self._n = itertools.count()

    def next(self) -> str | None:
        eps = list(self.endpoints())
        if not eps:
            return None
        return eps[next(self._n) % len(eps)]


async def _one(session: aiohttp.ClientSession, url: str, req: TraceRequest, spec: LoadSpec,
               start: float, result: LoadResult) -> None:
    prompt = max(1, min(int(req.prompt), spec.max_prompt))
    output = max(1, min(int(req.output), spec.max_output))
    body: dict[str, object] = {"prompt": list(range(prompt)), "max_tokens": output,
                               "stream": spec.stream}
    if spec.model is not None:
        body["model"] = spec.model
    headers = {"X-Tenant": spec.tenant_header} if spec.tenant_header else {}
    sent = time.monotonic()
    ttft: float | None = None
    tokens = 0
    gaps: list[float] = []
    last = 0.0
    try:
        async with session.post(url + "/v1/completions", json=body, headers=headers) as r:
            if spec.stream and r.status == 200:
                async for line in r.content:
                    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                        continue
                    now = time.monotonic()
                    if ttft is None:
                        ttft = now - sent
                    else:
                        gaps.append(now - last)
                    last = now
                    tokens += 1
            else:
                doc = await r.read()
                if r.status == 200:
                    tokens = int(json.loads(doc)["usage"]["completion_tokens"])
            status = r.status
    except (aiohttp.ClientError, OSError, TimeoutError):
        status = -1
    done = time.monotonic()
    result.records.append(Record(sent - start, url, prompt, output, status, ttft,
                                 done - sent if status == 200 else None, tokens, tuple(gaps)))


async def replay(requests: Sequence[TraceRequest], endpoints: Callable[[], Sequence[str]],
                 spec: LoadSpec | None = None, *, duration_s: float | None = None,
                 stop: asyncio.Event | None = None) -> LoadResult:
    """Send ``requests`` at their (compressed) times; wait for the answers.

    ``duration_s`` (replay seconds) or ``stop`` end the sending early; answers still
    outstanding are awaited.
    """
    spec = spec or LoadSpec()
    if spec.speed <= 0:
        raise ValueError(f"speed: must be > 0, got {spec.speed}")
    result = LoadResult(spec.speed)
    rr = RoundRobin(endpoints)
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        start = time.monotonic()
        for req in sorted(requests, key=lambda r: r.t):
            at = req.t / spec.speed
            if duration_s is not None and at > duration_s:
                break
            delay = start + at - time.monotonic()
            if stop is not None:
                if stop.is_set():
                    break
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, delay))
                    break
                except TimeoutError:
                    pass
            elif delay > 0:
                await asyncio.sleep(delay)
            url = rr.next()
            if url is None:
                result.records.append(Record(time.monotonic() - start, "", req.prompt,
                                             req.output, 0, None, None))
                continue
            task = asyncio.create_task(_one(session, url, req, spec, start, result))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
    result.records.sort(key=lambda r: r.sent)
    return result


@dataclass(frozen=True, slots=True)
class Arrival:
    """A synthetic request (for load steps in tests): the same shape as a trace's."""

    t: float
    prompt: int
    output: int
    tenant: str = ""


def constant_rate(rate: float, duration_s: float, prompt: int, output: int,
                  start: float = 0.0) -> list[Arrival]:
    """Evenly spaced arrivals at ``rate`` per second (a deterministic load step)."""
    if rate <= 0:
        return []
    n = int(rate * duration_s)
    return [Arrival(start + i / rate, prompt, output) for i in range(n)]
