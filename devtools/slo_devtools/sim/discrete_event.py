"""A discrete-event model of vLLM replicas serving one or more services.

Each replica is a continuous-batching engine as vLLM's scheduler runs it: every step gives
one token to each decoding sequence and spends what is left of the
``--max-num-batched-tokens`` budget on prompt chunks (chunked prefill, oldest first); the
step takes what :class:`slo_runtime.stepmodel.StepModel` says for that batch, context and
prefill size. Sequences are admitted while fewer than the live limit run and their prompt
fits in the KV cache; when decoding outgrows the cache, the newest sequence is preempted
(recompute: it goes back to the queue and re-prefills prompt and generated tokens).

Speed: steps are simulated in *segments* of identical composition (only the context grows,
linearly, so the segment's duration is an arithmetic series), ending at the next prefill
completion or sequence finish. An arrival routed to a busy replica cuts its segment at
the step in progress. An hour of a two-tenant trace runs in seconds of CPU.

Routing: ``bound`` sends each request at arrival to the ready replica with the fewest
outstanding requests, where it waits (the per-pod gateway's queue when the live limit is
reached); ``central`` holds requests in one queue per service (the gateway's admission)
and hands them to a replica when it has a free slot under the live limit.

Replicas start cold (``StepModel.cold_start_s``), count GPU-seconds from creation, and
drain on scale-down (no new requests; removed when empty). A replica runs with its
service's step model unless it was placed on a GPU pool with its own
(:meth:`Service.set_placement`: mixed fleets).

Long prompts and prefix caching: a prefill chunk also pays attention to the tokens of its
sequence already in the KV cache (earlier chunks, a cached prefix):
``StepModel.step_ms(..., prefill_context=...)``; while one prompt is chunked the context
grows by one chunk a step, so its steps are still an arithmetic series. Each replica keeps
vLLM's automatic prefix cache per conversation (``Request.session``): when a request
finishes, its prompt and output stay in the cache as free, evictable KV blocks (least
recently freed first, whenever running sequences need the room); a later turn of the
conversation admitted on that replica reuses ``min(prefix, cached)`` tokens, in whole
16-token blocks and never the prompt's last token (vLLM recomputes it), and prefills only
the rest. ``prefix_cache_queries`` / ``prefix_cache_hits`` count the tokens looked up and
found at every admission, as vLLM's counters do. A preempted sequence recomputes
everything (its blocks are not kept). With ``prefix_routing`` (the default) bound routing
sends a later turn to the replica holding its conversation's prefix while that replica
admits it at once (no queue, under the live limit), as a prefix-aware router (llm-d's
inference scheduler, vLLM's production-stack router) does; otherwise to the least loaded.

Scale to zero (:class:`Activator`): a service with an activator may run zero replicas. A
request arriving while the service has no Ready replica (at zero, or its replicas still
starting) is held by the activator, as in the cluster (``slo_operator.activator``): in a
bounded queue (full: rejected, the cluster's 429), for at most the timeout counted from
the first held request (then every held request fails, the cluster's 504). The first held
request records a :class:`~slo_operator.api.activation.Wake` (``Service.wake``:
requested_at, held) and later ones update its count at most every
``update_interval_s``; every write calls ``Service.on_wake`` (the operator's watch on the
annotation decides at once). When a replica is Ready every held request is forwarded:
from then on it is an ordinary request whose pod-side latency starts at the forward
(``Req.t``), while ``Req.arrived`` keeps the client's arrival.

Chunked-prefill budget: every replica runs with the ``--max-num-batched-tokens`` its pod
was started with. :meth:`Service.set_budget` changes the Deployment's value: replicas still
starting take it; every ready replica is replaced by a rolling update as the operator
renders it (a new cold replica each, a quarter of them at a time; the old one drains once
its replacement is ready, which starts the next).
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from slo_devtools.sim.traces import Request
from slo_operator.api.activation import (
    DEFAULT_QUEUE_PER_SERVICE,
    DEFAULT_WAKE_TIMEOUT_S,
    WAKE_UPDATE_INTERVAL_S,
    Wake,
)
from slo_operator.render.objects import rollout_surge
from slo_runtime import contract
from slo_runtime.stepmodel import StepModel

# The context whose token-count buckets the replicas export (Llama 3.1's 131,072).
ANSWER_BUCKETS_MAX_LEN = 131_072
# Ground-truth inter-token latency is binned at 0.5 ms up to this many bins (2.5 s).
ITL_BIN_S = 0.0005
ITL_BINS = 5000
# vLLM's prefix cache matches whole KV blocks (``--block-size``, 16 tokens by default).
KV_BLOCK_TOKENS = 16


class Phase(Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    GONE = "gone"


class Req:
    """One request in flight (mutable, slotted for speed)."""

    __slots__ = (
        "admit_at",
        "arrived",
        "d0",
        "done_at",
        "first_at",
        "generated",
        "out_left",
        "output",
        "preemptions",
        "prefill_left",
        "prefix",
        "prompt",
        "session",
        "t",
        "tenant",
        "token",
    )

    def __init__(self, r: Request) -> None:
        self.t = r.t  # reached a pod's gateway (forwarded by the activator if held)
        self.arrived = r.t  # the client sent it
        self.prompt = r.prompt
        self.output = r.output
        self.tenant = r.tenant
        self.session = r.session
        self.prefix = r.prefix
        self.prefill_left = r.prompt
        self.generated = 0
        self.out_left = r.output
        self.first_at = -1.0
        self.admit_at = -1.0
        self.done_at = -1.0
        self.d0 = 0  # decode-step counter when the sequence (re)entered decoding
        self.preemptions = 0
        self.token = 0  # decoding generation: stale heap entries carry an older token


@dataclass
class Histogram:
    """Cumulative Prometheus histogram (upper bounds without +Inf, counts per bucket)."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, v: float, weight: float = 1.0) -> None:
        self.counts[bisect_left(self.bounds, v)] += weight
        self.total += weight
        self.sum += v * weight

    def snapshot(self) -> tuple[tuple[float, ...], float, float]:
        return tuple(self.counts), self.total, self.sum


@dataclass
class Finished:
    """A completed request, for ground-truth window statistics."""

    t: float
    first: float
    done: float
    prompt: int
    output: int
    preemptions: int
    arrived: float = -1.0  # the client sent it (before t when the activator held it)

    @property
    def sent(self) -> float:
        """When the client sent the request (``t`` unless it was held)."""
        return self.arrived if self.arrived >= 0 else self.t


@dataclass(frozen=True)
class Activator:
    """The activator's settings for one service (``slo-operator activator``'s defaults)."""

    queue: int = DEFAULT_QUEUE_PER_SERVICE  # held requests at most; more are rejected (429)
    timeout_s: float = DEFAULT_WAKE_TIMEOUT_S  # from the first held request; then 504
    update_interval_s: float = WAKE_UPDATE_INTERVAL_S  # least time between count updates


@dataclass(frozen=True)
class ColdStart:
    """One wake of a service: the requests the activator held until a Ready replica (or
    the timeout)."""

    requested_at: float  # the first held request arrived
    held: int  # requests held in this wake
    served_at: float | None  # forwarded to a Ready replica (None: timed out)
    timed_out: int = 0  # held requests answered 504


@dataclass(frozen=True)
class Failed:
    """A request the activator answered without a replica: ``429`` (queue full, at once)
    or ``504`` (no Ready replica within the timeout)."""

    arrived: float
    at: float
    status: int


class Replica:
    """One vLLM engine (one pod, ``gpus`` GPUs) on GPU pool ``pool`` with step model
    ``model`` (default: the service's)."""

    def __init__(self, svc: Service, rid: int, now: float, pool: str = "",
                 model: StepModel | None = None) -> None:
        self.svc = svc
        self.rid = rid
        self.pool = pool
        self.model = model or svc.model
        self.budget = svc.budget  # --max-num-batched-tokens this pod was started with
        self.replaces: Replica | None = None  # the old pod a rolling update retires for it
        self.outgoing = False  # replaced by a rolling update: serves until its successor is up
        # Prefix cache: conversation -> tokens kept as free, evictable blocks (oldest first).
        self.cache: dict[int, int] = {}
        self.cached_tokens = 0
        self.created = now
        self.ready_at = now + self.model.cold_start_s
        self.gone_at = -1.0
        self.phase = Phase.STARTING
        self.waiting: deque[Req] = deque()
        self.prefilling: deque[Req] = deque()
        self.heap: list[tuple[int, int, int, Req]] = []  # (finish dstep, seq, token, req)
        self.n_dec = 0
        self.base_ctx = 0  # sum(prompt + generated - d0) over decoding sequences
        self.pref_kv = 0  # prompt tokens of admitted, still prefilling sequences
        self.dstep = 0
        self.decoding_order: list[Req] = []  # admission order, for preemption (newest last)
        # Segment in progress.
        self.seg_start = 0.0
        self.seg_end = 0.0
        self.seg_k = 0
        self.seg_dt0 = 0.0
        self.seg_inc = 0.0
        self.seg_p = 0
        self.version = 0
        self.busy = False
        self.preemptions = 0

    # --- state read by routing and scrapes ----------------------------------------------
    @property
    def running(self) -> int:
        return self.n_dec + len(self.prefilling)

    @property
    def outstanding(self) -> int:
        return self.n_dec + len(self.prefilling) + len(self.waiting)

    def kv_used(self) -> int:
        return self.base_ctx + self.n_dec * self.dstep + self.pref_kv

    def kv_usage(self) -> float:
        cap = self.model.kv_capacity_tokens
        return min(1.0, self.kv_used() / cap) if cap > 0 else 0.0

    def engine_waiting(self) -> int:
        """What ``vllm:num_requests_waiting`` shows: queued inside vLLM, not in the gateway.

        vLLM's own limit is ``--max-num-seqs`` (the ceiling); requests above the live limit
        wait in the pod's gateway, which vLLM does not see.
        """
        if self.svc.limit >= self.svc.max_num_seqs:
            return len(self.waiting)
        return 0

    # --- the engine ------------------------------------------------------------------------
    def _admit(self, now: float) -> None:
        svc = self.svc
        cap = self.model.kv_capacity_tokens
        admitted = False
        while self.waiting and self.running < svc.limit:
            r = self.waiting[0]
            need = r.prompt + r.generated  # KV blocks the sequence holds (cached ones too)
            if cap > 0 and self.kv_used() + need > cap and self.running > 0:
                break
            self.waiting.popleft()
            if r.admit_at < 0:
                r.admit_at = now
            hit = 0
            if r.session >= 0 and self.cache:
                held = self.cache.pop(r.session, 0)
                if held:
                    self.cached_tokens -= held
                    hit = min(held, r.prefix, need - 1) // KV_BLOCK_TOKENS * KV_BLOCK_TOKENS
            r.prefill_left = need - hit
            svc.prefix_queries += need
            svc.prefix_hits += hit
            self.prefilling.append(r)
            self.pref_kv += need
            admitted = True
        if admitted and self.cache:
            self._evict()

    def _evict(self) -> None:
        """Free the least recently cached prefixes until the cache fits the free KV."""
        cap = self.model.kv_capacity_tokens
        if cap <= 0:
            return
        room = cap - self.kv_used()
        cache = self.cache
        while cache and self.cached_tokens > room:
            self.cached_tokens -= cache.pop(next(iter(cache)))

    def _keep_prefix(self, r: Req) -> None:
        """A finished turn's prompt and output stay cached for the conversation's next."""
        tokens = r.prompt + r.output
        old = self.cache.pop(r.session, 0)
        self.cache[r.session] = tokens
        self.cached_tokens += tokens - old
        self.svc.holder[r.session] = self
        self._evict()

    def plan(self, now: float) -> None:
        """Start the next segment at ``now`` (or go idle)."""
        self._admit(now)
        m = self.model
        b = self.n_dec
        ctx = self.base_ctx + b * self.dstep
        p = 0
        if self.prefilling:
            room = self.budget - b
            left = sum(r.prefill_left for r in self.prefilling)
            p = max(0, min(left, room))
        attn = m.prefill_attn_ms_per_token2
        pctx = 0  # earlier tokens of their sequences the step's prompt tokens attend to
        grow = 0  # how much that context grows per step of the segment
        if p > 0:
            first = self.prefilling[0]
            head = first.prefill_left
            k = max(1, (head - 1) // p) if p < head else 1
            if attn > 0:
                if p < head:
                    # Every step of the segment is a chunk of the head's prompt.
                    pctx = first.prompt + first.generated - head
                    grow = p
                else:
                    pctx = self._chunk_context(p)
        elif b > 0:
            k = self.heap[0][0] - self.dstep if self.heap else 1
        else:
            self.busy = False
            return
        if b > 0 and self.heap:
            k = max(1, min(k, self.heap[0][0] - self.dstep))
        cap = m.kv_capacity_tokens
        if b > 0 and cap > 0:
            room_steps = (cap - self.kv_used()) // b
            k = max(1, min(k, room_steps)) if room_steps > 0 else 1
        dt0 = m.step_ms(b, ctx if b else None, p, pctx) / 1e3
        inc = (m.kv_ms_per_token * b + attn * p * grow) / 1e3
        self.seg_start, self.seg_k, self.seg_dt0, self.seg_inc, self.seg_p = now, k, dt0, inc, p
        self.seg_end = now + k * dt0 + inc * k * (k - 1) / 2
        self.busy = True
        self.version += 1
        self.svc.sim.push(self.seg_end, self._end_segment, self.version)

    def _chunk_context(self, p: int) -> int:
        """Mean earlier context, weighted by tokens, of a step's ``p`` prompt tokens taken
        oldest first from the prefilling sequences (the attention term is linear in it)."""
        pairs = 0
        left = p
        for r in self.prefilling:
            use = min(left, r.prefill_left)
            pairs += use * (r.prompt + r.generated - r.prefill_left)
            left -= use
            if left <= 0:
                break
        return round(pairs / p)

    def interrupt(self, now: float) -> None:
        """Something changed (an arrival, a limit): end the segment after the step in
        progress so the scheduler sees it at the next step boundary."""
        if not self.busy:
            self.plan(now)
            return
        if self.seg_k <= 1:
            return
        dt = self.seg_dt0 + self.seg_inc * (self.seg_k - 1) / 2  # mean step
        j = int((now - self.seg_start) / dt) + 1 if dt > 0 else 1
        if j >= self.seg_k:
            return
        k = j
        self.seg_k = k
        self.seg_end = self.seg_start + k * self.seg_dt0 + self.seg_inc * k * (k - 1) / 2
        self.version += 1
        self.svc.sim.push(self.seg_end, self._end_segment, self.version)

    def _end_segment(self, now: float, version: int) -> None:
        if version != self.version:
            return
        svc = self.svc
        k, b, p = self.seg_k, self.n_dec, self.seg_p
        mean_dt = (self.seg_end - self.seg_start) / k
        # Inter-token latency: each decoding sequence got one token per step.
        if b:
            svc.record_itl(mean_dt, b * k, now)
            svc.gen_tokens += b * k
        self.dstep += k
        # Prefill progress, oldest first.
        if p:
            tokens = p * k
            svc.prompt_tokens += tokens
            while tokens > 0 and self.prefilling:
                r = self.prefilling[0]
                use = min(tokens, r.prefill_left)
                r.prefill_left -= use
                tokens -= use
                if r.prefill_left > 0:
                    break
                self.prefilling.popleft()
                self.pref_kv -= r.prompt + r.generated
                self._first_token(r, now)
        # Finished sequences.
        heap = self.heap
        while heap and heap[0][0] <= self.dstep:
            _, _, token, r = heapq.heappop(heap)
            if token != r.token:
                continue
            self._leave_decode(r)
            r.generated = r.output
            self._finish(r, now)
        # Preempt the newest sequences while decoding outgrows the cache.
        cap = self.model.kv_capacity_tokens
        while cap > 0 and self.kv_used() > cap and self.n_dec > 1:
            self._preempt_newest()
        if self.cache:
            self._evict()
        self.busy = False
        if svc.routing == "central":
            svc.pull(self, now)
        if self.phase is Phase.DRAINING and self.outstanding == 0:
            svc.retire(self, now)
            return
        self.plan(now)

    def _first_token(self, r: Req, now: float) -> None:
        if r.first_at < 0:
            r.first_at = now
            self.svc.record_ttft(now - r.t)
            self.svc.record_prefill(now - r.admit_at)
            r.generated = 1
            r.out_left = r.output - 1
            self.svc.gen_tokens += 1
        if r.out_left <= 0:
            self._finish(r, now)
            return
        r.d0 = self.dstep
        r.token += 1
        self.n_dec += 1
        self.base_ctx += r.prompt + r.generated - self.dstep
        self.decoding_order.append(r)
        heapq.heappush(self.heap, (self.dstep + r.out_left, next(self.svc.sim.seq), r.token, r))

    def _leave_decode(self, r: Req) -> None:
        gen_now = r.generated + (self.dstep - r.d0)
        self.n_dec -= 1
        self.base_ctx -= r.prompt + r.generated - r.d0
        r.generated = gen_now
        r.out_left = r.output - gen_now
        self.decoding_order.remove(r)

    def _preempt_newest(self) -> None:
        r = self.decoding_order[-1]
        self._leave_decode(r)
        r.token += 1  # its heap entry is now stale
        r.prefill_left = r.prompt + r.generated
        r.preemptions += 1
        self.preemptions += 1
        self.svc.preemptions += 1
        self.waiting.appendleft(r)

    def _finish(self, r: Req, now: float) -> None:
        r.done_at = now
        self.svc.record_done(r, now)
        if r.session >= 0:
            self._keep_prefix(r)


class Service:
    """One InferenceService: a model, its replicas, its live limit, its metrics."""

    def __init__(self, sim: Simulation, name: str, model: StepModel, *, replicas: int = 1,
                 max_num_seqs: int = 256, limit: int | None = None,
                 max_num_batched_tokens: int = 2048, routing: str = "bound",
                 gpus_per_replica: int = 1, warm: bool = True,
                 prefix_routing: bool = True, activator: Activator | None = None) -> None:
        if routing not in ("bound", "central"):
            raise ValueError(f"routing: must be 'bound' or 'central', got {routing!r}")
        self.sim = sim
        self.name = name
        self.model = model
        self.max_num_seqs = max_num_seqs
        self.limit = min(limit or max_num_seqs, max_num_seqs)
        self.budget = max_num_batched_tokens
        self.budget_changes = 0
        self.rolling: deque[Replica] = deque()  # ready pods a rolling update has yet to replace
        self.routing = routing
        self.prefix_routing = prefix_routing
        self.holder: dict[int, Replica] = {}  # conversation -> replica that cached it last
        self.gpus_per_replica = gpus_per_replica
        self.replicas: list[Replica] = []
        self.retired: list[Replica] = []
        self.central: deque[Req] = deque()
        self._ids = itertools.count()
        self.desired = 0
        # Cumulative metrics, summed over pods: first-token and end-to-end latency from
        # arrival, as the in-pod gateway exports them (its boundaries, the loop's first
        # source), inter-token latency and time per output token as vLLM does.
        self.ttft = Histogram(contract.GATEWAY_TTFT_BUCKETS)
        self.itl = Histogram(contract.INTER_TOKEN_BUCKETS)
        self.e2e = Histogram(contract.GATEWAY_E2E_BUCKETS)
        self.tpot = Histogram(contract.INTER_TOKEN_BUCKETS)
        # Generated tokens per request, on vLLM's boundaries for a model of Llama 3.1's
        # context (they stop at the model's length).
        self.answers = Histogram(contract.tokens_buckets(ANSWER_BUCKETS_MAX_LEN))
        self.requests_done = 0
        self.prompt_tokens = 0
        self.gen_tokens = 0
        self.preemptions = 0
        self.arrivals = 0  # requests arrived (the gateway counts them before admission)
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache
        self.prefix_hits = 0  # of which found cached
        # vLLM's prefill time (scheduled to first token): its histogram's sum and count.
        self.prefill_seconds = 0.0
        self.prefills = 0
        # Ground truth.
        self.finished: list[Finished] = []
        self.itl_bins: dict[int, list[int]] = {}
        self.scale_actions = 0
        self.limit_changes = 0
        self.events: list[tuple[float, int, int]] = []  # (time, desired replicas, limit)
        # Scale to zero: the activator's queue for this service and what it recorded.
        self.activator = activator
        self.held: deque[Req] = deque()
        self.hold_id = 0  # the hold in progress (a timeout event carries its id)
        self.hold_total = 0  # requests held in the hold in progress
        self.wake: Wake | None = None  # the last wake written (the annotation)
        self.on_wake: Callable[[float], None] | None = None  # the operator's watch
        self._wake_written = -math.inf
        self._wake_due = False  # a count update waits for the update interval
        self.cold_starts: list[ColdStart] = []
        self.held_waits: list[float] = []  # seconds each forwarded held request waited
        self.failed: list[Failed] = []
        self.set_replicas(replicas, sim.now, warm=warm)

    # --- metrics ---------------------------------------------------------------------------
    def record_ttft(self, v: float) -> None:
        self.ttft.observe(v)

    def record_prefill(self, v: float) -> None:
        self.prefill_seconds += max(0.0, v)
        self.prefills += 1

    def record_itl(self, v: float, n: int, now: float) -> None:
        self.itl.observe(v, n)
        w = int(now // self.sim.window_s)
        bins = self.itl_bins.get(w)
        if bins is None:
            bins = self.itl_bins[w] = [0] * ITL_BINS
        bins[min(ITL_BINS - 1, int(v / ITL_BIN_S))] += n

    def record_done(self, r: Req, now: float) -> None:
        self.requests_done += 1
        e2e = now - r.t
        self.e2e.observe(e2e)
        if r.output > 1:
            self.tpot.observe((now - r.first_at) / (r.output - 1))
        self.answers.observe(r.output)
        self.finished.append(Finished(r.t, r.first_at, now, r.prompt, r.output, r.preemptions,
                                      r.arrived))

    # --- replicas ----------------------------------------------------------------------------
    def active(self) -> list[Replica]:
        """Starting and ready replicas, less those a rolling update is replacing."""
        return [r for r in self.replicas
                if r.phase in (Phase.STARTING, Phase.READY) and not r.outgoing]

    def ready(self) -> list[Replica]:
        return [r for r in self.replicas if r.phase is Phase.READY]

    def set_replicas(self, n: int, now: float, warm: bool = False) -> None:
        """Scale to ``n`` serving replicas: start cold ones, or cancel starting ones and
        drain the least loaded ready ones."""
        n = max(0, n)
        self._desire(n, now)
        self._scale("", n, now, warm, self.model)

    def set_placement(self, counts: Mapping[str, int], models: Mapping[str, StepModel],
                      now: float, *, desired: int | None = None, warm: bool = False) -> None:
        """Scale each GPU pool's serving replicas to ``counts[pool]`` (new ones run with
        ``models[pool]``) as :meth:`set_replicas` does for one pool; ``desired`` is the total
        the policy asked for (default: the sum; more when some fit no pool yet)."""
        self._desire(max(0, sum(counts.values()) if desired is None else desired), now)
        for pool, n in counts.items():
            self._scale(pool, max(0, n), now, warm, models[pool])

    def _desire(self, n: int, now: float) -> None:
        if n != self.desired:
            if self.replicas or self.retired:
                self.scale_actions += 1
            self.desired = n
            self.events.append((now, n, self.limit))

    def _scale(self, pool: str, n: int, now: float, warm: bool, model: StepModel) -> None:
        act = [r for r in self.active() if r.pool == pool]
        for _ in range(n - len(act)):
            rep = Replica(self, next(self._ids), now, pool, model)
            self.replicas.append(rep)
            if warm:
                rep.ready_at = now
                self._ready(now, rep)
            else:
                self.sim.push(rep.ready_at, self._ready_event, rep)
        extra = len(act) - n
        if extra <= 0:
            return
        for rep in sorted((r for r in act if r.phase is Phase.STARTING),
                          key=lambda r: -r.created)[:extra]:
            self.retire(rep, now)
            extra -= 1
        for rep in sorted((r for r in act if r.phase is Phase.READY),
                          key=lambda r: r.outstanding)[:extra]:
            self._drain(rep, now)

    def _drain(self, rep: Replica, now: float) -> None:
        rep.phase = Phase.DRAINING
        if self.routing == "bound" and rep.waiting:
            # Requests not yet admitted move to a live replica (the gateway re-routes).
            moved = list(rep.waiting)
            rep.waiting.clear()
            for q in moved:
                self.route(q, now)
        if rep.outstanding == 0:
            self.retire(rep, now)

    def start_budget(self, budget: int) -> None:
        """The budget the Deployment was created with: every replica has it already (no
        rollout; for a value chosen before the service ran)."""
        self.budget = max(1, int(budget))
        for rep in self.replicas:
            rep.budget = self.budget

    def set_budget(self, budget: int, now: float) -> None:
        """Change ``--max-num-batched-tokens``: a rolling update as the operator renders it
        (``render.objects.rollout_surge``: a quarter of the replicas at once, none
        unavailable). Replicas still starting take the new value; ready ones get a cold
        successor with it, that many at a time, and each drains once its successor is
        ready, which starts the next."""
        budget = max(1, int(budget))
        if budget == self.budget:
            return
        self.budget = budget
        self.budget_changes += 1
        for rep in self.replicas:
            if rep.phase is Phase.STARTING and not rep.outgoing:
                rep.budget = budget
        self.rolling = deque(rep for rep in self.replicas
                             if rep.phase is Phase.READY and not rep.outgoing
                             and rep.budget != budget)
        in_flight = sum(1 for rep in self.replicas if rep.replaces is not None)
        for _ in range(max(0, rollout_surge(len(self.active())) - in_flight)):
            self._roll_next(now)

    def _roll_next(self, now: float) -> None:
        """Start the cold successor of the next ready pod still on an old budget."""
        while self.rolling:
            rep = self.rolling.popleft()
            if rep.phase is not Phase.READY or rep.outgoing or rep.budget == self.budget:
                continue  # drained by a scale-in meanwhile, or already replaced
            rep.outgoing = True
            new = Replica(self, next(self._ids), now, rep.pool, rep.model)
            new.replaces = rep
            self.replicas.append(new)
            self.sim.push(new.ready_at, self._ready_event, new)
            return

    def _ready_event(self, now: float, rep: Replica) -> None:
        self._ready(now, rep)

    def _ready(self, now: float, rep: Replica) -> None:
        if rep.phase is not Phase.STARTING:
            return
        rep.phase = Phase.READY
        self._end_succession(rep, now)
        if self.held:
            self._forward_held(now)
        if self.routing == "central":
            self.pull(rep, now)
        else:
            # Requests held while no replica was ready reach the engine together, before
            # its first step.
            while self.central:
                self.route(self.central.popleft(), now, kick=False)
        for r in self.ready():
            if not r.busy:
                r.plan(now)

    def _end_succession(self, rep: Replica, now: float) -> None:
        """A rolling update's successor is Ready, or cancelled before it was (the
        Deployment scaled down during the rollout): either way its predecessor drains and
        the roll starts its next successor."""
        old = rep.replaces
        if old is None:
            return
        rep.replaces = None
        if old.phase is Phase.READY:
            self._drain(old, now)
        self._roll_next(now)

    def retire(self, rep: Replica, now: float) -> None:
        self._end_succession(rep, now)
        rep.phase = Phase.GONE
        rep.gone_at = now
        rep.version += 1
        self.replicas.remove(rep)
        self.retired.append(rep)

    def set_limit(self, limit: int, now: float) -> None:
        """Move the live in-flight limit (clamped to ``--max-num-seqs``)."""
        limit = max(1, min(limit, self.max_num_seqs))
        if limit == self.limit:
            return
        self.limit = limit
        self.limit_changes += 1
        self.events.append((now, self.desired, limit))
        for rep in self.ready():
            if self.routing == "central":
                self.pull(rep, now)
            rep.interrupt(now)

    # --- routing -------------------------------------------------------------------------
    def arrive(self, r: Request, now: float) -> None:
        if self.activator is not None and not any(
                rep.phase is Phase.READY for rep in self.replicas):
            self._hold(Req(r), now)
            return
        self.arrivals += 1
        self.route(Req(r), now)

    # --- the activator ---------------------------------------------------------------------
    def _hold(self, q: Req, now: float) -> None:
        """No Ready replica: the activator holds ``q`` (or rejects it, its queue full)."""
        act = self.activator
        assert act is not None
        if len(self.held) >= act.queue:
            self.failed.append(Failed(q.arrived, now, 429))
            return
        first = not self.held
        self.held.append(q)
        self.hold_total += 1
        if first:
            self.hold_id += 1
            self.hold_total = 1
            self.sim.push(now + act.timeout_s, self._hold_timeout, self.hold_id)
            self._write_wake(Wake(requested_at=now, held=1), now)
        elif not self._wake_due:
            self._wake_due = True
            self.sim.push(max(now, self._wake_written + act.update_interval_s),
                          self._wake_update, self.hold_id)

    def _write_wake(self, wake: Wake, now: float) -> None:
        self.wake = wake
        self._wake_written = now
        if self.on_wake is not None:
            # The watch delivers the annotation at once: decide after this event.
            self.sim.push(now, self._deliver_wake, None)

    def _deliver_wake(self, now: float, _: object) -> None:
        if self.on_wake is not None:
            self.on_wake(now)

    def _wake_update(self, now: float, hold_id: int) -> None:
        self._wake_due = False
        if hold_id != self.hold_id or not self.held or self.wake is None:
            return
        if self.wake.held != self.hold_total:
            self._write_wake(replace(self.wake, held=self.hold_total), now)

    def _forward_held(self, now: float) -> None:
        """A replica is Ready: every held request goes to the pods (their gateway's clock
        starts now)."""
        wake = self.wake
        requested = wake.requested_at if wake is not None else self.held[0].arrived
        self.cold_starts.append(ColdStart(requested, self.hold_total, now))
        held, self.held = self.held, deque()
        self.hold_id += 1  # its timeout no longer applies
        for q in held:
            self.held_waits.append(now - q.arrived)
            q.t = now
            self.arrivals += 1
            self.route(q, now, kick=False)
        if wake is not None:
            self._write_wake(replace(wake, held=self.hold_total, served_at=now,
                                     waited_s=now - wake.requested_at), now)

    def _hold_timeout(self, now: float, hold_id: int) -> None:
        if hold_id != self.hold_id or not self.held:
            return
        held, self.held = self.held, deque()
        self.hold_id += 1
        wake = self.wake
        requested = wake.requested_at if wake is not None else held[0].arrived
        self.cold_starts.append(ColdStart(requested, self.hold_total, None, len(held)))
        self.failed.extend(Failed(q.arrived, now, 504) for q in held)
        if wake is not None:
            self._write_wake(replace(wake, held=self.hold_total, timed_out_at=now), now)

    def route(self, q: Req, now: float, kick: bool = True) -> None:
        if self.routing == "central":
            self.central.append(q)
            best = None
            for rep in self.replicas:
                if rep.phase is Phase.READY and rep.outstanding < self.limit and (
                        best is None or rep.outstanding < best.outstanding):
                    best = rep
            if best is not None:
                self.pull(best, now)
                best.interrupt(now)
            return
        if q.session >= 0 and self.prefix_routing:
            held = self.holder.get(q.session)
            # The replica holding the conversation's prefix, while it admits at once.
            if held is not None and held.phase is Phase.READY and not held.waiting and \
                    held.running < self.limit and q.session in held.cache:
                held.waiting.append(q)
                if kick:
                    held.interrupt(now)
                return
        best = None
        for rep in self.replicas:
            if rep.phase is Phase.READY and (best is None or rep.outstanding < best.outstanding):
                best = rep
        if best is None:
            self.central.append(q)  # no endpoint yet: held until a replica is ready
            return
        best.waiting.append(q)
        if kick:
            best.interrupt(now)

    def pull(self, rep: Replica, now: float) -> None:
        """Central queue: hand requests to ``rep`` up to the live limit."""
        if rep.phase is not Phase.READY:
            return
        while self.central and rep.outstanding < self.limit:
            rep.waiting.append(self.central.popleft())

    # --- gauges ----------------------------------------------------------------------------
    def gauges(self) -> tuple[float, float, float, float]:
        """(engine waiting, gateway+engine waiting, running, max KV use) over ready pods."""
        ew = w = run = 0
        kv = 0.0
        for rep in self.replicas:
            if rep.phase is Phase.STARTING:
                continue
            ew += rep.engine_waiting()
            w += len(rep.waiting)
            run += rep.running
            kv = max(kv, rep.kv_usage())
        return float(ew), float(w + len(self.central)), float(run), kv

    def per_replica(self) -> list[tuple[int, int, float]]:
        """(engine waiting, running, KV use) of each ready replica."""
        return [(r.engine_waiting(), r.running, r.kv_usage()) for r in self.replicas
                if r.phase is Phase.READY]

    def outstanding(self) -> int:
        return sum(r.outstanding for r in self.replicas) + len(self.central)

    def gpu_seconds(self, until: float) -> float:
        return sum(self.gpu_seconds_by_pool(until).values())

    def gpu_seconds_by_pool(self, until: float) -> dict[str, float]:
        """GPU-seconds of every replica up to ``until``, by the GPU pool it ran on."""
        out: dict[str, float] = {}
        for rep in self.replicas + self.retired:
            end = rep.gone_at if rep.gone_at >= 0 else until
            out[rep.pool] = out.get(rep.pool, 0.0) + max(0.0, min(end, until) - rep.created)
        return {pool: s * self.gpus_per_replica for pool, s in out.items()}


class Simulation:
    """The event loop: arrivals, replica segments, readiness and periodic callbacks."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.now = 0.0
        self.window_s = window_s
        self.seq = itertools.count()
        self._heap: list[tuple[float, int, Callable[..., None], object]] = []
        self.services: dict[str, Service] = {}

    def push(self, t: float, fn: Callable[..., None], arg: object) -> None:
        heapq.heappush(self._heap, (t, next(self.seq), fn, arg))

    def every(self, period: float, fn: Callable[[float], None], start: float = 0.0) -> None:
        """Call ``fn(now)`` every ``period`` seconds from ``start``."""
        def tick(now: float, _: object) -> None:
            fn(now)
            self.push(now + period, tick, None)
        self.push(start, tick, None)

    def run(self, requests: Sequence[Request], route: Callable[[Request], Service],
            until: float, progress: Callable[[float], None] | None = None) -> None:
        """Replay ``requests`` (sorted by time) until ``until`` seconds."""
        heap = self._heap
        i, n = 0, len(requests)
        next_progress = 0.0
        while True:
            t_arr = requests[i].t if i < n else float("inf")
            t_evt = heap[0][0] if heap else float("inf")
            t = min(t_arr, t_evt)
            if t > until or t == float("inf"):
                break
            self.now = t
            if t_arr <= t_evt:
                r = requests[i]
                i += 1
                route(r).arrive(r, t)
            else:
                _, _, fn, arg = heapq.heappop(heap)
                fn(t, arg)
            if progress is not None and t >= next_progress:
                progress(t)
                next_progress = t + 60.0
        self.now = until
