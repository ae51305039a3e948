"""A model of one vLLM replica: OpenAI-compatible HTTP, vLLM's metrics, a capacity.

It stands in for vLLM wherever a GPU is absent (gateway tests, the end-to-end tests,
the load benchmarks). It serves ``/v1/completions`` and ``/v1/chat/completions`` (JSON
or ``stream=true`` server-sent events), ``/v1/models``, ``/health`` and ``/metrics``
with exactly vLLM 0.32.0's metric families (names, types, labels, buckets).

Service model: a continuous-batching engine. Each engine step takes
``base_ms + per_seq_ms * running + prefill_ms_per_token * prompt_tokens_admitted``;
every running sequence gains one token per step; at most ``max_num_seqs`` run, the rest
wait. So TTFT grows with queueing and inter-token latency grows with batch, like a
real server with a capacity. Defaults come from the H200 Llama-3.1-8B BF16 profile.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from slo_runtime import contract

log = logging.getLogger("slo_runtime.replica")


# --- the step model -------------------------------------------------------------------
@dataclass(frozen=True)
class StepModel:
    base_ms: float = 5.3                 # decode step at batch 1 (weights streamed once)
    per_seq_ms: float = 0.049            # added per running sequence
    prefill_ms_per_token: float = 0.026  # prompt tokens admitted in the step

    def step_ms(self, running: int, prefill_tokens: int = 0) -> float:
        return self.base_ms + self.per_seq_ms * running + \
            self.prefill_ms_per_token * prefill_tokens

    @classmethod
    def from_profile(cls, profile: dict[str, Any], mode: str = "bf16") -> StepModel:
        """Least-squares line through a profile's ``decode_ms[mode]``; prefill per token
        from its largest prefill measurement."""
        pts = sorted((int(b), float(t)) for b, t in profile["decode_ms"][mode].items())
        n = len(pts)
        mx = sum(b for b, _ in pts) / n
        my = sum(t for _, t in pts) / n
        var = sum((b - mx) ** 2 for b, _ in pts)
        slope = sum((b - mx) * (t - my) for b, t in pts) / var if var else 0.0
        pre = profile.get("prefill_ms", {}).get(mode) or {}
        per_tok = 0.0
        if pre:
            tok, ms = max((int(k), float(v)) for k, v in pre.items())
            per_tok = ms / tok
        return cls(base_ms=max(0.0, my - slope * mx), per_seq_ms=max(0.0, slope),
                   prefill_ms_per_token=per_tok)


# --- vLLM 0.32.0 metric families --------------------------------------------------------
TOKENS_BUCKETS = list(contract.TOKENS_BUCKETS)
ITERATION_BUCKETS = list(contract.ITERATION_TOKENS_BUCKETS)
TTFT_BUCKETS = list(contract.TTFT_BUCKETS)
ITL_BUCKETS = list(contract.INTER_TOKEN_BUCKETS)
REQUEST_LATENCY_BUCKETS = list(contract.REQUEST_LATENCY_BUCKETS)
FINISHED_REASONS = list(contract.FINISHED_REASONS)
CACHE_CONFIG_LABELS = [
    "_block_size_resolved", "block_size", "cache_dtype", "cache_hit_alignment_tokens",
    "effective_attention_block_size", "enable_mamba_shared_prefix_checkpoint",
    "enable_prefix_caching", "engine", "gpu_memory_utilization", "hash_block_size",
    "is_attention_free", "kv_cache_dtype_skip_layers", "kv_cache_layout",
    "kv_cache_max_concurrency", "kv_cache_memory_bytes", "kv_cache_size_tokens",
    "kv_offloading_backend", "kv_offloading_size", "kv_sharing_fast_prefill",
    "mamba_block_size", "mamba_cache_dtype", "mamba_cache_mode", "mamba_page_size_padded",
    "mamba_ssm_cache_dtype", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit",
    "replayssm_buffer_len", "skip_page_size_padded", "sliding_window", "swa_bounded_replay",
    "use_kda_recoverssm", "use_replayssm", "user_specified_block_size",
]
EM = ["engine", "model_name"]


class VllmMetrics:
    """vLLM's ``vllm:`` families on a private registry (several replicas per process)."""

    def __init__(self, model_name: str, engine: str = "0", block_size: int = 16,
                 kv_capacity_tokens: int = 0, max_num_seqs: int = 0):
        self.registry = reg = CollectorRegistry()
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        lv = {"engine": engine, "model_name": model_name}

        def c(name: str, doc: str, extra: list[str] | None = None) -> Counter:
            return Counter(name, doc, EM + (extra or []), registry=reg)

        def g(name: str, doc: str, extra: list[str] | None = None) -> Gauge:
            return Gauge(name, doc, EM + (extra or []), registry=reg)

        def h(name: str, doc: str, buckets: list[float]) -> Any:
            return Histogram(name, doc, EM, buckets=buckets, registry=reg).labels(**lv)

        for n in ("estimated_flops_per_gpu", "estimated_read_bytes_per_gpu",
                  "estimated_write_bytes_per_gpu"):
            c(f"vllm:{n}", f"Estimated {n.replace('_', ' ')}.").labels(**lv)
        self.running = g("vllm:num_requests_running", "Requests in model execution batches."
                         ).labels(**lv)
        self.waiting = g("vllm:num_requests_waiting", "Requests waiting to be processed."
                         ).labels(**lv)
        wbr = g("vllm:num_requests_waiting_by_reason", "Waiting requests by reason.",
                ["reason"])
        self.waiting_capacity = wbr.labels(**lv, reason="capacity")
        wbr.labels(**lv, reason="deferred")
        sleep = g("vllm:engine_sleep_state", "Engine sleep state.", ["sleep_state"])
        for s, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            sleep.labels(**lv, sleep_state=s).set(v)
        self.kv_usage = g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent."
                          ).labels(**lv)
        for n in ("prefix_cache_queries", "prefix_cache_hits", "external_prefix_cache_queries",
                  "external_prefix_cache_hits", "mm_cache_queries", "mm_cache_hits"):
            c(f"vllm:{n}", f"{n.replace('_', ' ')} (tokens).").labels(**lv)
        self.preemptions = c("vllm:num_preemptions", "Cumulative preemptions.").labels(**lv)
        self.prompt_tokens = c("vllm:prompt_tokens", "Prefill tokens processed.").labels(**lv)
        pbs = c("vllm:prompt_tokens_by_source", "Prompt tokens by source.", ["source"])
        self.prompt_tokens_local = pbs.labels(**lv, source="local_compute")
        for s in ("local_cache_hit", "external_kv_transfer"):
            pbs.labels(**lv, source=s)
        c("vllm:prompt_tokens_cached", "Cached prompt tokens.").labels(**lv)
        pcs = c("vllm:prompt_tokens_cached_by_source", "Cached prompt tokens by source.",
                ["source"])
        for s in ("device", "host", "p2p", "disk", "external_unspecified"):
            pcs.labels(**lv, source=s)
        self.generation_tokens = c("vllm:generation_tokens", "Generation tokens processed."
                                   ).labels(**lv)
        succ = c("vllm:request_success", "Successfully processed requests.",
                 ["finished_reason"])
        self.success = {r: succ.labels(**lv, finished_reason=r) for r in FINISHED_REASONS}
        rej = Counter("vllm:admission_rejections", "Requests rejected at admission.",
                      ["model_name", "reason"], registry=reg)
        for r in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rej.labels(model_name=model_name, reason=r)
        self.req_prompt_tokens = h("vllm:request_prompt_tokens",
                                   "Prefill tokens per request.", TOKENS_BUCKETS)
        self.req_gen_tokens = h("vllm:request_generation_tokens",
                                "Generation tokens per request.", TOKENS_BUCKETS)
        self.iteration_tokens = h("vllm:iteration_tokens_total", "Tokens per engine step.",
                                  ITERATION_BUCKETS)
        self.max_gen_tokens = h("vllm:request_max_num_generation_tokens",
                                "Maximum generation tokens requested.", TOKENS_BUCKETS)
        self.params_n = h("vllm:request_params_n", "The n request parameter.",
                          [1, 2, 5, 10, 20])
        self.params_max_tokens = h("vllm:request_params_max_tokens",
                                   "The max_tokens request parameter.", TOKENS_BUCKETS)
        self.ttft = h("vllm:time_to_first_token_seconds", "Time to first token.",
                      TTFT_BUCKETS)
        self.itl = h("vllm:inter_token_latency_seconds", "Inter-token latency.", ITL_BUCKETS)
        self.tpot = h("vllm:request_time_per_output_token_seconds",
                      "Time per output token per request.", ITL_BUCKETS)
        self.e2e = h("vllm:e2e_request_latency_seconds", "End-to-end request latency.",
                     REQUEST_LATENCY_BUCKETS)
        self.queue_time = h("vllm:request_queue_time_seconds", "Time spent waiting.",
                            REQUEST_LATENCY_BUCKETS)
        self.inference_time = h("vllm:request_inference_time_seconds",
                                "Time spent running.", REQUEST_LATENCY_BUCKETS)
        self.prefill_time = h("vllm:request_prefill_time_seconds", "Time in prefill.",
                              REQUEST_LATENCY_BUCKETS)
        self.decode_time = h("vllm:request_decode_time_seconds", "Time in decode.",
                             REQUEST_LATENCY_BUCKETS)
        self.req_preemptions = h("vllm:request_num_preemptions",
                                 "Preemptions per request.", [1, 2, 3, 4, 5, 10, 20])
        self.prefill_kv_computed = h("vllm:request_prefill_kv_computed_tokens",
                                     "Prefill tokens computed (not cached) per request.",
                                     TOKENS_BUCKETS)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
                     CACHE_CONFIG_LABELS, registry=reg)
        blocks = kv_capacity_tokens // block_size if block_size else 0
        values = dict.fromkeys(CACHE_CONFIG_LABELS, "None")
        values.update({
            "_block_size_resolved": "True", "block_size": str(block_size),
            "cache_dtype": "auto", "engine": engine, "enable_prefix_caching": "True",
            "gpu_memory_utilization": "0.9", "kv_cache_size_tokens": str(kv_capacity_tokens),
            "num_gpu_blocks": str(blocks), "num_cpu_blocks": "0",
            "kv_cache_max_concurrency": str(max_num_seqs), "is_attention_free": "False",
        })
        info.labels(**values).set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


# --- the engine -------------------------------------------------------------------------
@dataclass
class Request:
    rid: str
    prompt_tokens: int
    max_tokens: int
    arrival: float
    events: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    generated: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_reason: str | None = None


class Engine:
    """Continuous batching on a simulated clock of real sleeps."""

    def __init__(self, model: StepModel, metrics: VllmMetrics, max_num_seqs: int = 256,
                 kv_capacity_tokens: int = 1_000_000,
                 clock: Callable[[], float] = time.monotonic):
        self.model = model
        self.m = metrics
        self.max_num_seqs = max_num_seqs
        self.kv_capacity_tokens = kv_capacity_tokens
        self.clock = clock
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.wake = asyncio.Event()
        self.completed = 0
        self.aborted = 0
        self.steps = 0
        self.max_running_seen = 0
        self.aborted_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, req: Request) -> None:
        self.waiting.append(req)
        self._gauges()
        self.wake.set()

    def abort(self, req: Request) -> None:
        """The client went away: free its slot, count it as vLLM does ('abort')."""
        if req.finished_reason is not None:
            return
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.finished_reason = "abort"
        self.aborted += 1
        self.m.success["abort"].inc()
        self.aborted_event.set()
        self._gauges()

    def _gauges(self) -> None:
        self.m.running.set(len(self.running))
        self.m.waiting.set(len(self.waiting))
        self.m.waiting_capacity.set(len(self.waiting))
        used = sum(r.prompt_tokens + r.generated for r in self.running)
        self.m.kv_usage.set(min(1.0, used / self.kv_capacity_tokens))

    async def _loop(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
            now = self.clock()
            admitted: list[Request] = []
            while self.waiting and len(self.running) < self.max_num_seqs:
                r = self.waiting.popleft()
                r.scheduled_at = now
                self.running.append(r)
                admitted.append(r)
            self.max_running_seen = max(self.max_running_seen, len(self.running))
            self._gauges()
            prefill = sum(r.prompt_tokens for r in admitted)
            batch = list(self.running)
            await asyncio.sleep(self.model.step_ms(len(batch), prefill) / 1e3)
            self.steps += 1
            now = self.clock()
            self.m.iteration_tokens.observe(prefill + len(batch))
            for r in admitted:
                self.m.prompt_tokens.inc(r.prompt_tokens)
                self.m.prompt_tokens_local.inc(r.prompt_tokens)
            for r in batch:
                if r.finished_reason is not None:   # aborted during the step
                    continue
                self._emit(r, now)
            self._gauges()

    def _emit(self, r: Request, now: float) -> None:
        if r.first_token_at is None:
            r.first_token_at = now
            self.m.ttft.observe(now - r.arrival)
        else:
            self.m.itl.observe(now - (r.last_token_at or now))
        r.last_token_at = now
        r.generated += 1
        self.m.generation_tokens.inc()
        r.events.put_nowait(f" tok{r.generated}")
        if r.generated >= r.max_tokens:
            self.running.remove(r)
            r.finished_reason = "length"
            self.completed += 1
            self._finished(r, now)
            r.events.put_nowait(None)

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


# --- HTTP -----------------------------------------------------------------------------
def _error(status: int, message: str, typ: str = "BadRequestError") -> web.Response:
    return web.json_response({"error": {"message": message, "type": typ, "param": None,
                                        "code": status}}, status=status)


def _count_tokens(text: str) -> int:
    return max(1, len(text.split()))


class Replica:
    """The HTTP face of one engine; ``app`` is an aiohttp application."""

    def __init__(self, model_name: str = "model", model: StepModel | None = None,
                 max_num_seqs: int = 256, kv_capacity_tokens: int = 1_000_000,
                 default_max_tokens: int = 16, max_model_len: int = 131072):
        self.model_name = model_name
        self.metrics = VllmMetrics(model_name, kv_capacity_tokens=kv_capacity_tokens,
                                   max_num_seqs=max_num_seqs)
        self.engine = Engine(model or StepModel(), self.metrics, max_num_seqs,
                             kv_capacity_tokens)
        self.default_max_tokens = default_max_tokens
        self.max_model_len = max_model_len
        self.created = int(time.time())
        self._ids = itertools.count()
        app = web.Application()
        app.add_routes([
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.models),
            web.get("/health", self.health),
            web.get("/metrics", self.metrics_handler),
            web.get("/debug/engine", self.debug),
        ])
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        self.app = app

    async def _on_startup(self, app: web.Application) -> None:
        self.engine.start()

    async def _on_cleanup(self, app: web.Application) -> None:
        await self.engine.stop()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": self.created,
            "owned_by": "vllm", "root": self.model_name, "max_model_len": self.max_model_len,
        }]})

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def debug(self, request: web.Request) -> web.Response:
        e = self.engine
        return web.json_response({"running": len(e.running), "waiting": len(e.waiting),
                                  "completed": e.completed, "aborted": e.aborted,
                                  "steps": e.steps, "max_running_seen": e.max_running_seen})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        model = body.get("model", self.model_name)
        if model != self.model_name:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                return _error(400, "messages must be a non-empty list")
            text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
        else:
            prompt = body.get("prompt")
            if prompt is None:
                return _error(400, "prompt is required")
            text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is None:
            max_tokens = self.default_max_tokens
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(400, "max_tokens must be a positive integer")
        stream = bool(body.get("stream", False))
        usage_opt = bool((body.get("stream_options") or {}).get("include_usage"))
        m = self.metrics
        m.params_n.observe(int(body.get("n", 1) or 1))
        m.params_max_tokens.observe(max_tokens)
        m.max_gen_tokens.observe(max_tokens)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        req = Request(rid, _count_tokens(text), max_tokens, self.engine.clock())
        self.engine.submit(req)
        try:
            if stream:
                return await self._stream(request, req, chat, usage_opt)
            return await self._whole(req, chat)
        except BaseException:
            # Client disconnect cancels this handler: the engine must drop the sequence.
            self.engine.abort(req)
            raise

    def _usage(self, req: Request) -> dict[str, int]:
        return {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.generated,
                "total_tokens": req.prompt_tokens + req.generated}

    async def _whole(self, req: Request, chat: bool) -> web.Response:
        parts = []
        while (tok := await req.events.get()) is not None:
            parts.append(tok)
        text = "".join(parts)
        choice: dict[str, Any] = {"index": 0, "logprobs": None,
                                  "finish_reason": req.finished_reason, "stop_reason": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return web.json_response({
            "id": req.rid, "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": self._usage(req)})

    async def _stream(self, request: web.Request, req: Request, chat: bool,
                      usage: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choice: dict[str, Any] | None, extra: dict[str, Any] | None = None) -> bytes:
            d: dict[str, Any] = {"id": req.rid, "object": obj, "created": created,
                                 "model": self.model_name,
                                 "choices": [choice] if choice else []}
            if extra:
                d.update(extra)
            return b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n"

        first = True
        while True:
            tok = await req.events.get()
            if tok is None:
                break
            if chat and first:
                # Like vLLM, the role chunk goes out with the first generated token.
                await resp.write(chunk({"index": 0,
                                        "delta": {"role": "assistant", "content": ""},
                                        "logprobs": None, "finish_reason": None}))
            first = False
            # Only the end-of-stream marker left behind this token: it is the last one.
            last = req.finished_reason is not None and req.events.qsize() == 1
            fin = req.finished_reason if last else None
            if chat:
                c = {"index": 0, "delta": {"content": tok}, "logprobs": None,
                     "finish_reason": fin}
            else:
                c = {"index": 0, "text": tok, "logprobs": None, "finish_reason": fin,
                     "stop_reason": None}
            await resp.write(chunk(c))
        if usage:
            await resp.write(chunk(None, {"usage": self._usage(req)}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def load_step_model(profile_path: str | None, mode: str, **overrides: float | None
                    ) -> StepModel:
    base = StepModel.from_profile(json.loads(Path(profile_path).read_text()), mode) \
        if profile_path else StepModel()
    vals = {k: v for k, v in overrides.items() if v is not None}
    return StepModel(**{**base.__dict__, **vals})
