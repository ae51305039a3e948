"""A model of one vLLM replica: OpenAI-compatible HTTP, vLLM's metrics, a capacity.

It stands in for vLLM wherever a GPU is absent (gateway tests, the end-to-end tests,
the demo, the load benchmarks). It serves ``/v1/completions`` and
``/v1/chat/completions`` (JSON or ``stream=true`` server-sent events), ``/v1/models``,
``/health`` and ``/metrics`` with exactly vLLM 0.32.0's metric families
(:mod:`slo_devtools.replica.exposition`). Requests run through a simulated engine
(:mod:`slo_devtools.replica.batcher`: continuous batching, chunked prefill, KV cache with
preemption) whose step times come from the shared step model
(:mod:`slo_runtime.stepmodel`, calibrated from a node profile).

Until ``cold_start_s`` has passed after start-up every endpoint answers 503, as vLLM is
not serving while it loads weights and captures graphs: probes fail and scrapes count as
down.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from slo_devtools.replica.batcher import Engine, EngineConfig, LinearSteps, Request, Steps
from slo_devtools.replica.exposition import VllmMetrics
from slo_runtime import contract
from slo_runtime.stepmodel import StepModel

log = logging.getLogger("slo_devtools.replica.server")

__all__ = ["EngineConfig", "LinearSteps", "Replica", "load_steps"]


# --- HTTP -----------------------------------------------------------------------------
def _error(status: int, message: str, typ: str = "BadRequestError") -> web.Response:
    return web.json_response({"error": {"message": message, "type": typ, "param": None,
                                        "code": status}}, status=status)


def _count_tokens(text: str) -> int:
    return max(1, len(text.split()))


class Replica:
    """The HTTP face of one engine; ``app`` is an aiohttp application."""

    def __init__(self, model_name: str = "model", steps: Steps | None = None,
                 max_num_seqs: int = 256, kv_capacity_tokens: int = 1_000_000,
                 default_max_tokens: int = 16, max_model_len: int = 131072, *,
                 max_num_batched_tokens: int = 8192, cold_start_s: float = 0.0,
                 kv_cache_dtype: str = "auto"):
        self.model_name = model_name
        cfg = EngineConfig(max_num_seqs=max_num_seqs,
                           max_num_batched_tokens=max_num_batched_tokens,
                           kv_capacity_tokens=kv_capacity_tokens)
        self.metrics = VllmMetrics(model_name, block_size=cfg.block_size,
                                   kv_capacity_tokens=kv_capacity_tokens,
                                   max_num_seqs=max_num_seqs, cache_dtype=kv_cache_dtype,
                                   max_model_len=max_model_len)
        self.engine = Engine(steps or LinearSteps(), self.metrics, cfg)
        self.default_max_tokens = default_max_tokens
        self.max_model_len = max_model_len
        self.cold_start_s = cold_start_s
        self.ready_at = float("inf")
        self.created = int(time.time())
        self._ids = itertools.count()
        app = web.Application(middlewares=[self._cold_start])
        app.add_routes([
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.models),
            web.get(contract.HEALTH_PATH, self.health),
            web.get("/metrics", self.metrics_handler),
            web.get("/debug/engine", self.debug),
        ])
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        self.app = app

    async def _on_startup(self, app: web.Application) -> None:
        self.ready_at = time.monotonic() + self.cold_start_s
        self.engine.start()

    @property
    def ready(self) -> bool:
        return time.monotonic() >= self.ready_at

    @web.middleware
    async def _cold_start(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not self.ready:
            return _error(503, "the engine is starting", "ServiceUnavailable")
        resp: web.StreamResponse = await handler(request)
        return resp

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
                                  "steps": e.step_count, "preempted": e.preempted,
                                  "kv_blocks_used": e.used_blocks,
                                  "max_running_seen": e.max_running_seen})

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
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                # Token IDs, as the OpenAI API allows: one token each.
                text = " ".join("t" for _ in prompt)
            else:
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
        prompt_tokens = _count_tokens(text)
        req = Request(rid, prompt_tokens, max_tokens, self.engine.clock(), stream=stream)
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
        await req.done.wait()
        if req.finished_reason == "error":
            return _error(400, "the prompt does not fit the KV cache")
        text = "".join(f" tok{i}" for i in range(1, req.generated + 1))
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


def load_steps(profile_path: str | None, precision: str = "bf16", *,
               kv_cache_dtype: str = "auto", speed: float = 1.0,
               **linear: float | None) -> Steps:
    """Step times from a profile JSON (the shared step model), else a linear model whose
    coefficients may be given; ``speed`` divides every step time."""
    if profile_path:
        m = StepModel.from_profile(json.loads(Path(profile_path).read_text()), precision,
                                   kv_cache_dtype=kv_cache_dtype)
        return m.sped_up(speed) if speed != 1.0 else m
    vals = {k: v / speed if speed != 1.0 else v for k, v in linear.items() if v is not None}
    return LinearSteps(**vals)
