"""A simulated vLLM engine: the V1 scheduler's continuous batching on a real clock.

Each step the scheduler picks tokens the way vLLM 0.32.0's does, under a token budget
(``--max-num-batched-tokens``) and a sequence cap (``--max-num-seqs``):

1. running requests first, in admission order: one token for a decoding sequence, the
   next chunk of its prompt for one still prefilling (chunked prefill), each needing KV
   blocks for what it computes; when the KV cache is full the most recently admitted
   running request is preempted (its blocks freed, recomputed later from the start, as
   vLLM's recompute preemption does) and counted in ``vllm:num_preemptions``;
2. then waiting requests in arrival order while sequences, budget and KV blocks allow
   (a waiting request never preempts).

The step then takes ``steps.step_ms(decode_batch, context_tokens, prefill_tokens)``
(the shared :mod:`slo_runtime.stepmodel`, or :class:`LinearSteps` in tests) of real
time, and every request whose computed tokens caught up with its sequence samples one
token. Latencies are measured on the wall clock, so what a client sees and what the
metrics say agree.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from slo_devtools.replica.exposition import VllmMetrics


class Steps(Protocol):
    """Anything that prices an engine step in milliseconds."""

    def step_ms(self, decode_batch: int, context_tokens: int | None = None,
                prefill_tokens: int = 0) -> float: ...


@dataclass(frozen=True)
class LinearSteps:
    """A step of ``base_ms + per_seq_ms * sequences + prefill_ms_per_token * prompt
    tokens``: simple, exact numbers for tests of the machinery around the engine."""

    base_ms: float = 5.3
    per_seq_ms: float = 0.049
    prefill_ms_per_token: float = 0.026

    def step_ms(self, decode_batch: int, context_tokens: int | None = None,
                prefill_tokens: int = 0) -> float:
        return self.base_ms + self.per_seq_ms * decode_batch + \
            self.prefill_ms_per_token * prefill_tokens


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_capacity_tokens: int = 1_000_000
    block_size: int = 16


@dataclass(eq=False)
class Request:
    rid: str
    prompt_tokens: int
    max_tokens: int
    arrival: float
    stream: bool = True
    events: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    generated: int = 0
    computed: int = 0              # tokens whose KV is in the cache
    blocks: int = 0
    preemptions: int = 0
    prompt_counted: bool = False
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_reason: str | None = None

    @property
    def todo(self) -> int:
        """Tokens to compute before the next one can be sampled."""
        return self.prompt_tokens + self.generated - self.computed


class Engine:
    """Continuous batching with chunked prefill, a KV cache and preemption."""

    def __init__(self, steps: Steps, metrics: VllmMetrics, config: EngineConfig | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.steps = steps
        self.m = metrics
        self.cfg = config or EngineConfig()
        self.total_blocks = max(1, self.cfg.kv_capacity_tokens // self.cfg.block_size)
        self.used_blocks = 0
        self.clock = clock
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.wake = asyncio.Event()
        self.completed = 0
        self.aborted = 0
        self.preempted = 0
        self.step_count = 0
        self.max_running_seen = 0
        self.aborted_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # lifecycle
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # requests
    def submit(self, req: Request) -> None:
        self.waiting.append(req)
        self._gauges()
        self.wake.set()

    def abort(self, req: Request) -> None:
        """The client went away: free its slot and blocks, count it as vLLM does."""
        if req.finished_reason is not None:
            return
        if req in self.running:
            self.running.remove(req)
            self._free(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.finished_reason = "abort"
        self.aborted += 1
        self.m.success["abort"].inc()
        self.aborted_event.set()
        req.done.set()
        self._gauges()

    # KV blocks
    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.cfg.block_size)

    def _grow(self, req: Request, tokens: int) -> bool:
        need = self._blocks_for(req.computed + tokens) - req.blocks
        if need <= 0:
            return True
        if self.used_blocks + need > self.total_blocks:
            return False
        self.used_blocks += need
        req.blocks += need
        return True

    def _free(self, req: Request) -> None:
        self.used_blocks -= req.blocks
        req.blocks = 0

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self._free(req)
        req.computed = 0
        req.preemptions += 1
        self.preempted += 1
        self.m.preemptions.inc()
        self.waiting.appendleft(req)

    def _gauges(self) -> None:
        self.m.running.set(len(self.running))
        self.m.waiting.set(len(self.waiting))
        self.m.waiting_capacity.set(len(self.waiting))
        self.m.kv_usage.set(min(1.0, self.used_blocks / self.total_blocks))

    # scheduling
    def schedule(self) -> list[tuple[Request, int]]:
        """One step's work: (request, tokens to compute) pairs. Mutates queues and KV."""
        budget = self.cfg.max_num_batched_tokens
        out: list[tuple[Request, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.todo, budget)
            while not self._grow(req, n):
                victim = self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            else:
                out.append((req, n))
                budget -= n
                i += 1
                continue
            break           # the request itself was preempted: nothing after it runs
        now = self.clock()
        # Like vLLM, no admissions in a step that had to preempt: the cache is full.
        while not preempted and self.waiting and budget > 0 \
                and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            n = min(req.todo, budget)
            if not self._grow(req, n):
                break
            self.waiting.popleft()
            if req.scheduled_at is None:
                req.scheduled_at = now
            self.running.append(req)
            out.append((req, n))
            budget -= n
        self.max_running_seen = max(self.max_running_seen, len(self.running))
        return out

    def step_cost_ms(self, work: list[tuple[Request, int]]) -> float:
        decode = prefill = context = 0
        for req, n in work:
            if req.todo == 1 and req.computed > 0:
                decode += 1
                context += req.computed + 1
            else:
                prefill += n
        return self.steps.step_ms(decode, context, prefill)

    async def _loop(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
            work = self.schedule()
            self._gauges()
            if not work:
                # Nothing fits (a prompt larger than the whole cache): drop it as vLLM
                # would refuse it, rather than spin.
                if self.waiting and not self.running:
                    self._reject(self.waiting.popleft())
                    continue
                await asyncio.sleep(0.001)
                continue
            await asyncio.sleep(self.step_cost_ms(work) / 1e3)
            self.step_count += 1
            now = self.clock()
            self.m.iteration_tokens.observe(sum(n for _, n in work))
            for req, n in work:
                if req.finished_reason is not None or req not in self.running:
                    continue        # aborted or preempted during the step
                req.computed += n
                if not req.prompt_counted and req.computed >= req.prompt_tokens:
                    req.prompt_counted = True
                    self.m.prompt_tokens.inc(req.prompt_tokens)
                    self.m.prompt_tokens_local.inc(req.prompt_tokens)
                if req.todo == 0:
                    self._emit(req, now)
            self._gauges()

    def _reject(self, req: Request) -> None:
        req.finished_reason = "error"
        self.m.success["error"].inc()
        req.done.set()
        if req.stream:
            req.events.put_nowait(None)

    def _emit(self, r: Request, now: float) -> None:
        if r.first_token_at is None:
            r.first_token_at = now
            self.m.ttft.observe(now - r.arrival)
        else:
            self.m.itl.observe(now - (r.last_token_at or now))
        r.last_token_at = now
        r.generated += 1
        self.m.generation_tokens.inc()
        if r.stream:
            r.events.put_nowait(f" tok{r.generated}")
        if r.generated >= r.max_tokens:
            self.running.remove(r)
            self._free(r)
            r.finished_reason = "length"
            self.completed += 1
            self._finished(r, now)
            if r.stream:
                r.events.put_nowait(None)
            r.done.set()

    def _finished(self, r: Request, now: float) -> None:
        m = self.m
        m.success["length"].inc()
        m.e2e.observe(now - r.arrival)
        sched = r.scheduled_at or r.arrival
        first = r.first_token_at or now
        m.queue_time.observe(sched - r.arrival)
        m.inference_time.observe(now - sched)
        m.prefill_time.observe(first - sched)
        m.decode_time.observe(now - first)
        if r.generated > 1:
            m.tpot.observe((now - first) / (r.generated - 1))
        m.req_prompt_tokens.observe(r.prompt_tokens)
        m.req_gen_tokens.observe(r.generated)
        m.prefill_kv_computed.observe(r.prompt_tokens)
        m.req_preemptions.observe(r.preemptions)
