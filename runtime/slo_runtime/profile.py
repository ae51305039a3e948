"""GPU micro-benchmarks that matter for serving, written as a profile JSON.

Measures device-copy bandwidth, BF16 and FP8 matrix rates, and for each model shape the
decode step (CUDA graphs on GPU) and prefill time at several sizes, in BF16 and FP8.
Optionally, long context: a prompt prefilled chunk by chunk as a chunked-prefill engine
does (each chunk attends to every earlier token of its prompt, read from the KV cache),
and decode steps at long per-sequence contexts.
The analysis (knee, FP8 verdicts) lives in :mod:`slo_runtime.profile_math`; the format
is described in ``docs/profile-format.md``.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from slo_runtime import profile_math as pm
from slo_runtime.decoder import FP8, Decoder, new_kv_cache, scaled_mm_available
from slo_runtime.model_shape import ModelShape
from slo_runtime.probe import GpuInfo, probe

log = logging.getLogger("slo_runtime.profile")
FORMAT = "slo-runtime-profile/v1"


@dataclass
class ModelPlan:
    shape: str                                  # built-in name or path to config.json
    ctx: int = 1024
    batches: list[int] = field(default_factory=lambda: [1, 8, 16, 32, 64, 128, 256])
    prefill_tokens: list[int] = field(default_factory=lambda: [128, 512, 2048, 8192])
    modes: list[str] = field(default_factory=lambda: ["bf16", "fp8"])
    # Per mode: layers to build; None = as many as fit (all when the model fits).
    layers: dict[str, int | None] = field(default_factory=dict)
    name: str | None = None                     # output file stem
    # Long context (empty: not measured). A prompt of max(prefill_contexts) + chunk tokens
    # is prefilled chunk by chunk for each chunk size; the chunk after each listed context
    # and the sum of the chunks of each listed prompt length are reported. Contexts must
    # be multiples of every chunk size (chunks start at multiples of the chunk).
    prefill_chunks: list[int] = field(default_factory=list)
    prefill_contexts: list[int] = field(default_factory=list)
    # Decode batches per context length (tokens per sequence), e.g. {"32768": [1, 8]}.
    decode_contexts: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelPlan:
        return cls(**d)

    def __post_init__(self) -> None:
        for c in self.prefill_contexts:
            for t in self.prefill_chunks:
                if c % t:
                    raise ValueError(f"prefill_contexts: {c} is not a multiple of the "
                                     f"prefill_chunks value {t}")


@dataclass
class Settings:
    device: str = "cuda"
    use_graphs: bool = True
    compile: bool = True
    decode_iters: int = 30
    prefill_iters: int = 10
    warmup: int = 3
    # Passes over each long chunked prompt; every chunk's median over the passes is kept.
    chunk_passes: int = 3
    gemm_n: int = 8192
    copy_bytes: int = 2**32


# --- timing -----------------------------------------------------------------------
class Timer:
    """Median wall time of a callable, with CUDA events on a GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def median_ms(self, fn: Callable[[], object], iters: int, warmup: int) -> float:
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(iters):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def sequence_ms(self, fns: list[Callable[[], object]], passes: int) -> list[float]:
        """Median time of each callable of a sequence run back to back, over ``passes``
        runs of the whole sequence (device events between the calls, no synchronization
        inside a pass, so the device never waits for the host between two calls)."""
        runs: list[list[float]] = []
        for _ in range(passes):
            if self.cuda:
                evs = [torch.cuda.Event(enable_timing=True) for _ in range(len(fns) + 1)]
                evs[0].record()
                for fn, ev in zip(fns, evs[1:], strict=True):
                    fn()
                    ev.record()
                evs[-1].synchronize()
                runs.append([a.elapsed_time(b) for a, b in itertools.pairwise(evs)])
            else:
                row = []
                for fn in fns:
                    t0 = time.perf_counter()
                    fn()
                    row.append((time.perf_counter() - t0) * 1e3)
                runs.append(row)
        return [statistics.median(col) for col in zip(*runs, strict=True)]


def measure_copy_gbps(device: torch.device, nbytes: int, timer: Timer) -> float:
    n = nbytes // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = timer.median_ms(lambda: dst.copy_(src), iters=10, warmup=2)
    return 2 * nbytes / (ms * 1e-3) / 1e9   # bytes read plus bytes written


def measure_gemm_tflops(device: torch.device, n: int, timer: Timer,
                        fp8: bool = False) -> float | None:
    # Three operand sets rotate so repeated products do not run out of cache.
    sets = [(torch.randn(n, n, device=device, dtype=torch.bfloat16),
             torch.randn(n, n, device=device, dtype=torch.bfloat16)) for _ in range(3)]
    if fp8:
        if not scaled_mm_available(device):
            return None
        one = torch.ones((), device=device)
        qsets = [(a.to(FP8), b.to(FP8)) for a, b in sets]
        it = iter(range(10**9))

        def run() -> object:
            a, b = qsets[next(it) % 3]
            return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                    out_dtype=torch.bfloat16, use_fast_accum=True)
    else:
        it = iter(range(10**9))

        def run() -> object:
            a, b = sets[next(it) % 3]
            return a @ b
    ms = timer.median_ms(run, iters=10, warmup=3)
    return 2 * n**3 / (ms * 1e-3) / 1e12


# --- per model --------------------------------------------------------------------
def _decode_ms(dec: Decoder, ks: list[torch.Tensor], vs: list[torch.Tensor], batch: int,
               ctx: int, st: Settings, timer: Timer,
               step_fn: DecodeStep | None = None) -> tuple[float, float]:
    """Median decode-step time and LM-head time at ``batch`` sequences of ``ctx`` tokens
    (the step is ``dec.decode`` unless ``step_fn`` is given)."""
    dev = dec.device
    decode = dec.decode if step_fn is None else functools.partial(step_fn, dec)
    x = torch.randn(batch, dec.shape.hidden_size, device=dev, dtype=dec.dtype)
    hx = torch.randn(batch, dec.shape.hidden_size, device=dev, dtype=dec.dtype)
    if dev.type == "cuda" and st.use_graphs:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # Eager runs first: compile the fused kernels outside the capture.
            for _ in range(2):
                decode(x, ks, vs, ctx)
                dec.lm_head_step(hx)
        torch.cuda.current_stream().wait_stream(side)
        g, gh = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            decode(x, ks, vs, ctx)
        with torch.cuda.graph(gh):
            dec.lm_head_step(hx)
        step = timer.median_ms(g.replay, st.decode_iters, st.warmup)
        head = timer.median_ms(gh.replay, st.decode_iters, st.warmup)
        del g, gh
        return step, head
    step = timer.median_ms(lambda: decode(x, ks, vs, ctx), st.decode_iters, st.warmup)
    head = timer.median_ms(lambda: dec.lm_head_step(hx), st.decode_iters, st.warmup)
    return step, head


def _prefill_ms(dec: Decoder, tokens: int, st: Settings, timer: Timer) -> float:
    """Median prefill time of one ``tokens``-long sequence.

    On a GPU the prefill is replayed from a CUDA graph too: eager Python launches
    ~15 kernels per layer, and at a few hundred tokens that host time, not the GPU,
    would be measured (engines capture or batch prefill kernels likewise).
    """
    x = torch.randn(tokens, dec.shape.hidden_size, device=dec.device, dtype=dec.dtype)
    if dec.device.type == "cuda" and st.use_graphs:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                dec.prefill(x)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dec.prefill(x)
        ms = timer.median_ms(g.replay, st.prefill_iters, 2)
        del g
        return ms
    return timer.median_ms(lambda: dec.prefill(x), st.prefill_iters, 2)


DecodeStep = Callable[[Decoder, torch.Tensor, list[torch.Tensor], list[torch.Tensor], int],
                      torch.Tensor]


def _reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 attention with its log-sum-exp (grouped K/V heads repeated), the CPU path."""
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, 1)
    vf = v.float().repeat_interleave(group, 1)
    scores = q.float() @ kf.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        ql, kl = q.shape[2], k.shape[2]
        keep = torch.ones(ql, kl, dtype=torch.bool, device=q.device).tril(kl - ql)
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    return (torch.softmax(scores, -1) @ vf).to(q.dtype), lse


# Which CUDA kernel ran the unmasked attention (against cached context, and the decode
# splits): "cudnn", or "flash" where cuDNN refused; the profile notes it. On the H200
# cuDNN ran a chunk's attention against 64k cached tokens at 560-600 TFLOP/s, flash
# attention with a bottom-right causal mask at 340 (docs/profile-format.md).
CONTEXT_KERNEL: dict[str, str] = {}


def _context_attention(q: torch.Tensor, k: torch.Tensor,
                       v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unmasked attention of the chunk's queries [1, Hq, T, d] against cached K/V
    [1, Hkv, c, d], with its log-sum-exp. No mask, so the ``group`` query heads that share
    a KV head can be stacked as ``group * T`` query rows of one head: the kernel reads
    each cached K/V once, with no grouped-head support needed."""
    b, hq, t, d = q.shape
    hkv = k.shape[1]
    o, lse = _fused_attention(q.reshape(b, hkv, (hq // hkv) * t, d), k, v)
    return o.reshape(b, hq, t, d), lse.reshape(b, hq, t)


def _chunk_attention(q: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of a chunk [1, Hq, T, d] against its own K/V [1, Hkv, T, d], with
    its log-sum-exp (flash attention reads grouped K/V heads in place)."""
    if q.device.type != "cuda":
        return _reference_attention(q, k, v, True)
    r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
    return r[0], r[1]


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention of a chunk's queries [1, Hq, T, d] over ``k``/``v`` [1, Hkv, c + T, d]:
    every cached key of the first ``c`` and, causally, the chunk's own ``T``.

    The two parts run as two kernels, merged by their log-sum-exp (the split-softmax
    identity flash attention itself is built on): the chunk's causal square, which the
    chunk also pays with no context, and the unmasked ``T x c`` block against the cache,
    the cost that grows with context.
    """
    t = q.shape[2]
    c = k.shape[2] - t
    o_sq, l_sq = _chunk_attention(q, k[:, :, c:], v[:, :, c:])
    if c == 0:
        return o_sq
    o_ctx, l_ctx = _context_attention(q, k[:, :, :c], v[:, :, :c])
    w = torch.softmax(torch.stack([l_ctx, l_sq]), dim=0).unsqueeze(-1)
    return (w[0] * o_ctx.float() + w[1] * o_sq.float()).to(q.dtype)


# Smallest KV split of the split-KV decode: shorter splits cost more in the merge than
# they gain in parallelism (FlashAttention's heuristic likewise keeps a split at least a
# few 128-key blocks long).
MIN_KV_SPLIT = 512


def kv_splits(parallel: int, keys: int, processors: int) -> int:
    """KV splits of a decode attention with ``parallel`` (sequence, KV head) problems over
    ``keys`` cached keys: enough for two blocks per multiprocessor, none shorter than
    ``MIN_KV_SPLIT`` (the split-KV, "flash-decoding", scheme of FlashAttention's
    ``num_splits_heuristic`` in ``csrc/flash_attn/flash_api.cpp``, simplified)."""
    want = -(-2 * processors // max(1, parallel))
    return max(1, min(want, keys // MIN_KV_SPLIT))


def _fused_attention(q: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unmasked attention with its log-sum-exp, ``q`` [B, H, L, d] against ``k``/``v``
    [B, H, S, d]: cuDNN's fused kernel on CUDA (flash where cuDNN refuses), else the
    float32 reference."""
    if q.device.type != "cuda":
        return _reference_attention(q, k, v, False)
    if CONTEXT_KERNEL.get("kernel") != "flash":
        try:
            r = torch.ops.aten._scaled_dot_product_cudnn_attention(
                q, k, v, None, True, 0.0, False, False)
            CONTEXT_KERNEL["kernel"] = "cudnn"
            return r[0], r[1].reshape(q.shape[:3])
        except RuntimeError as e:
            if CONTEXT_KERNEL.get("kernel") == "cudnn":
                raise
            log.warning("cuDNN attention unavailable (%s); flash attention instead", e)
            CONTEXT_KERNEL["kernel"] = "flash"
    r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False)
    return r[0], r[1].reshape(q.shape[:3])


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     splits: int) -> torch.Tensor:
    """Decode attention of ``q`` [b, kv_heads, group, d] (the query heads that share a KV
    head as rows) over ``k``/``v`` [b, kv_heads, n, d] (slices of a cache whose batch
    stride is kv_heads times its head stride), split along the keys into ``splits``
    parts computed in parallel and merged by their log-sum-exp.

    A fused attention kernel gives each (sequence, KV head) one block of the GPU: at
    batch 1 an 8-KV-head model would stream a long cache through 8 of 132
    multiprocessors. Serving engines split the keys (FlashAttention's split-KV decode,
    FlashInfer); so does this.
    """
    b, hkv, g, d = q.shape
    n = k.shape[2]
    length = n // max(1, splits)
    main = length * splits
    qf = q.reshape(b * hkv, 1, g, d)
    outs, lses = [], []
    if length > 0:
        def parts(t: torch.Tensor) -> torch.Tensor:
            return t[:, :, :main].flatten(0, 1).view(b * hkv, splits, length, d)
        o, lse = _fused_attention(qf.expand(b * hkv, splits, g, d).contiguous(),
                                  parts(k), parts(v))
        outs.append(o)
        lses.append(lse)
    if main < n:
        o, lse = _fused_attention(qf, k[:, :, main:].flatten(0, 1).unsqueeze(1),
                                  v[:, :, main:].flatten(0, 1).unsqueeze(1))
        outs.append(o)
        lses.append(lse)
    weights = torch.softmax(torch.cat(lses, 1), dim=1).unsqueeze(-1)
    merged = (torch.cat(outs, 1).float() * weights).sum(1)
    return merged.to(q.dtype).view(b, hkv, g, d)


def decode_long(dec: Decoder, x: torch.Tensor, k_cache: list[torch.Tensor],
                v_cache: list[torch.Tensor], pos: int) -> torch.Tensor:
    """:meth:`Decoder.decode` with the split-KV :func:`decode_attention`, for long
    contexts (splits from :func:`kv_splits` for this GPU's multiprocessors)."""
    s = dec.shape
    b = x.shape[0]
    hq, hkv, d = s.num_heads, s.num_kv_heads, s.head_dim
    n = pos + 1
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count \
        if x.device.type == "cuda" else 1
    splits = kv_splits(b * hkv, n, sms)
    cos, sin = dec._cos_sin(torch.full((1,), pos, device=x.device, dtype=torch.long))

    def attend(li: int, ly: object, qkv: torch.Tensor) -> torch.Tensor:
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        q, k = dec.kernels.rope_qk(q.view(b, hq, 1, d), k.view(b, hkv, 1, d), cos, sin)
        k_cache[li][:b, :, pos:n] = k
        v_cache[li][:b, :, pos:n] = v.view(b, hkv, 1, d)
        out = decode_attention(q.view(b, hkv, hq // hkv, d), k_cache[li][:b, :, :n],
                               v_cache[li][:b, :, :n], splits)
        return out.reshape(b, hq * d)

    h = dec._blocks(x, attend)
    return dec.lm_head(dec.kernels.rmsnorm(h, dec.final_norm, s.rms_norm_eps))


def prefill_chunk(dec: Decoder, x: torch.Tensor, k_cache: list[torch.Tensor],
                  v_cache: list[torch.Tensor], start: int) -> torch.Tensor:
    """Prefill one chunk of a sequence whose first ``start`` tokens are already cached.

    ``x`` [T, hidden] holds positions ``start .. start+T-1``; the caches are
    [1, kv_heads, >= start+T, head_dim] per layer. The chunk's K/V are written at their
    positions (as an engine writes its paged cache) and its queries attend to all
    ``start + T`` cached positions, causally among themselves
    (:func:`prefill_attention`), as a chunked-prefill engine computes it.
    Returns the last position's logits, like :meth:`Decoder.prefill`.
    """
    s = dec.shape
    t = x.shape[0]
    end = start + t
    hq, hkv, d = s.num_heads, s.num_kv_heads, s.head_dim
    cos, sin = dec._cos_sin(torch.arange(start, end, device=x.device))

    def attend(li: int, ly: object, qkv: torch.Tensor) -> torch.Tensor:
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        q, k = dec.kernels.rope_qk(q.view(t, hq, d).transpose(0, 1),
                                   k.view(t, hkv, d).transpose(0, 1), cos, sin)
        k_cache[li][0, :, start:end] = k
        v_cache[li][0, :, start:end] = v.view(t, hkv, d).transpose(0, 1)
        out = prefill_attention(q.unsqueeze(0), k_cache[li][:, :, :end],
                                v_cache[li][:, :, :end])
        return out[0].transpose(0, 1).reshape(t, hq * d)

    h = dec._blocks(x, attend)
    return dec.lm_head(dec.kernels.rmsnorm(h[-1:], dec.final_norm, s.rms_norm_eps))


def _chunk_pass_ms(dec: Decoder, chunk: int, tokens: int, st: Settings,
                   timer: Timer) -> list[float]:
    """Median time of each ``chunk``-token chunk of one ``tokens``-long prompt prefilled
    chunk by chunk (chunk i starts after ``i * chunk`` cached tokens).

    On a GPU every chunk is replayed from a CUDA graph of its own (all graphs share one
    memory pool and are replayed in capture order, as PyTorch requires for sharing):
    eager launches would time the host at small chunks in FP8, as for ``prefill_ms``.
    """
    ks, vs = new_kv_cache(dec.shape, 1, tokens - 1, device=dec.device, dtype=dec.dtype)
    x = torch.randn(chunk, dec.shape.hidden_size, device=dec.device, dtype=dec.dtype)
    fns: list[Callable[[], object]] = [
        functools.partial(prefill_chunk, dec, x, ks, vs, start)
        for start in range(0, tokens - chunk + 1, chunk)]
    if dec.device.type == "cuda" and st.use_graphs:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # The first chunk (plain causal) and a later one (bottom-right causal) run
            # eagerly first: the fused kernels compile outside the captures.
            for fn in fns[:2]:
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graphs: list[torch.cuda.CUDAGraph] = []
        for fn in fns:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=graphs[0].pool() if graphs else None):
                fn()
            graphs.append(g)
        fns = [g.replay for g in graphs]
    for fn in fns[:2]:
        fn()
    timer.sync()
    return timer.sequence_ms(fns, st.chunk_passes)


def _long_context(dec: Decoder, plan: ModelPlan, full_layers: int, st: Settings,
                  timer: Timer, notes: list[str], mode: str
                  ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]],
                             dict[str, dict[str, float]]]:
    """Chunked prefill after cached context and decode at long context, full depth."""
    layers = dec.shape.num_layers
    per_layer = full_layers / layers
    ctx_ms: dict[str, dict[str, float]] = {}
    chunked: dict[str, dict[str, float]] = {}
    contexts = sorted(set(plan.prefill_contexts))
    for chunk in sorted(set(plan.prefill_chunks)) if contexts else []:
        times = [t * per_layer for t in _chunk_pass_ms(dec, chunk, max(contexts) + chunk,
                                                       st, timer)]
        _empty_cache(dec.device)
        ctx_ms[str(chunk)] = {str(c): times[c // chunk] for c in contexts}
        chunked[str(chunk)] = {str(n): v for n, v in pm.chunked_prefill_totals(
            times, chunk, [c for c in contexts if c > 0]).items()}
        log.info("Prefill %s chunk %d after context: %s", mode, chunk,
                 {c: round(v, 2) for c, v in ctx_ms[str(chunk)].items()})
    dctx: dict[str, dict[str, float]] = {}
    for ctx_s, batches in sorted(plan.decode_contexts.items(), key=lambda kv: int(kv[0])):
        ctx = int(ctx_s)
        fit = [b for b in sorted(batches) if dec.shape.kv_bytes(b, ctx + 1)
               < 0.85 * _free_bytes(dec.device)]
        if len(fit) < len(batches):
            notes.append(f"{mode}: decode at context {ctx} skipped batches "
                         f"{sorted(set(batches) - set(fit))} (KV cache does not fit)")
        if not fit:
            continue
        ks, vs = new_kv_cache(dec.shape, max(fit), ctx, device=dec.device, dtype=dec.dtype)
        row = {}
        for b in fit:
            step, head = _decode_ms(dec, ks, vs, b, ctx, st, timer, decode_long)
            row[str(b)] = pm.scale_layers(step, head, layers, full_layers)
        dctx[str(ctx)] = row
        log.info("Decode %s at context %d: %s", mode, ctx,
                 {b: round(v, 3) for b, v in row.items()})
        del ks, vs
        _empty_cache(dec.device)
    if CONTEXT_KERNEL:
        notes.append(f"{mode}: attention against cached context and the split-KV decode "
                     f"attention ran on {CONTEXT_KERNEL['kernel']}")
    return ctx_ms, chunked, dctx


def _free_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    return float("inf")


def profile_model(plan: ModelPlan, st: Settings, timer: Timer,
                  fp8_supported: bool) -> dict[str, Any]:
    dev = torch.device(st.device)
    full = ModelShape.load(plan.shape)
    dtype = torch.bfloat16
    out: dict[str, Any] = {
        "shape": full.name, "model": full.as_dict(), "layers": full.num_layers,
        "ctx": plan.ctx, "fp8_static_scales": True, "cuda_graphs": dev.type == "cuda"
        and st.use_graphs, "layers_measured": {}, "decode_ms": {}, "prefill_ms": {},
        "decode_ms_measured": {}, "lm_head_ms": {}, "notes": [],
    }
    long_ctx = bool(plan.prefill_chunks and plan.prefill_contexts) or bool(plan.decode_contexts)
    if long_ctx:
        out.update(prefill_ctx_ms={}, prefill_chunked_ms={}, decode_ctx_ms={})
    max_b = max(plan.batches)
    modes = [m for m in plan.modes if m == "bf16" or fp8_supported]
    if "fp8" in plan.modes and not fp8_supported:
        out["notes"].append("FP8 not measured: no FP8 matrix product on this device")
    ks = vs = None
    kv_layers = 0
    for mode in modes:
        wbytes = 2.0 if mode == "bf16" else 1.0
        layers = plan.layers.get(mode)
        if layers is None:
            layers = pm.layers_that_fit(
                layer_bytes=full.layer_params() * wbytes,
                fixed_bytes=full.lm_head_params() * 2 + 2**30,
                kv_bytes_per_layer=full.kv_bytes(max_b, plan.ctx + 1, layers=1),
                total_layers=full.num_layers, free_bytes=_free_bytes(dev)
                + (0 if ks is None else 2 * sum(t.numel() * t.element_size() for t in ks)),
            )
        shape = full.with_layers(layers)
        out["layers_measured"][mode] = layers
        if layers < full.num_layers:
            out["notes"].append(
                f"{mode}: {layers} of {full.num_layers} layers fit on one device; "
                "decode and prefill scaled per layer to the full depth (LM head timed apart)")
        if ks is None or kv_layers < layers:
            ks = vs = None
            _empty_cache(dev)
            ks, vs = new_kv_cache(shape, max_b, plan.ctx, device=dev, dtype=dtype)
            kv_layers = layers
        log.info("Building %s %s with %d layers", full.name, mode, layers)
        dec = Decoder.build(shape, device=dev, dtype=dtype, fp8=mode == "fp8",
                            compile=st.compile and dev.type == "cuda")
        with torch.inference_mode():
            cx = torch.randn(min(8, max_b), shape.hidden_size, device=dev, dtype=dtype)
            dec.calibrate(cx, ks, vs, plan.ctx)
            dms, raw, heads = {}, {}, {}
            for b in sorted(plan.batches):
                step, head = _decode_ms(dec, ks, vs, b, plan.ctx, st, timer)
                raw[str(b)] = step
                heads[str(b)] = head
                dms[str(b)] = pm.scale_layers(step, head, layers, full.num_layers)
                log.info("Decode %s %s b=%d: %.3f ms", full.name, mode, b, dms[str(b)])
            pms = {}
            for t in sorted(plan.prefill_tokens):
                ms = _prefill_ms(dec, t, st, timer)
                pms[str(t)] = ms * full.num_layers / layers
                log.info("Prefill %s %s T=%d: %.3f ms", full.name, mode, t, pms[str(t)])
            if long_ctx:
                (out["prefill_ctx_ms"][mode], out["prefill_chunked_ms"][mode],
                 out["decode_ctx_ms"][mode]) = _long_context(
                    dec, plan, full.num_layers, st, timer, out["notes"], mode)
        out["decode_ms"][mode] = dms
        out["decode_ms_measured"][mode] = raw
        out["lm_head_ms"][mode] = heads
        out["prefill_ms"][mode] = pms
        del dec
        _empty_cache(dev)
    ks = vs = None
    _empty_cache(dev)
    return analyse(out, fp8_supported)


def analyse(out: dict[str, Any], fp8_supported: bool) -> dict[str, Any]:
    """Add knees and FP8 verdicts to a profile's measured tables (pure)."""
    out["knee_batch"] = {m: pm.knee_batch(t) for m, t in out["decode_ms"].items()}
    d, p = out["decode_ms"], out["prefill_ms"]
    if "bf16" in d and "fp8" in d:
        dsp = pm.fp8_speedup(d["bf16"], d["fp8"])
        psp = pm.fp8_speedup(p.get("bf16", {}), p.get("fp8", {}))
        out["fp8_speedup"] = {"decode": dsp, "prefill": psp}
        out["fp8_faster"] = pm.fp8_faster(dsp)
        out["fp8_faster_prefill"] = pm.fp8_faster(psp)
        out["fp8_recommended"] = pm.fp8_recommended(out["fp8_faster"], fp8_supported)
    else:
        out["fp8_recommended"] = False
    return out


def _empty_cache(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def hardware_section(gpu: GpuInfo) -> dict[str, Any]:
    return {"product": gpu.product, "vendor": gpu.vendor, "cc": gpu.compute_capability,
            "memory_mib": gpu.memory_mib, "count": gpu.count, "driver": gpu.driver,
            "source": gpu.source}


def run(plans: list[ModelPlan], st: Settings, out_dir: Path | None = None,
        gpu: GpuInfo | None = None) -> list[dict[str, Any]]:
    """Measure the device once, then each model; write one JSON per model."""
    dev = torch.device(st.device)
    timer = Timer(dev)
    torch._dynamo.config.cache_size_limit = 64
    if gpu is None:
        gpu = probe() if dev.type == "cuda" else GpuInfo("none", "cpu", "", 0, 0, "cpu")
    fp8_ok = scaled_mm_available(dev) and (dev.type != "cuda" or gpu.fp8_native)
    common: dict[str, Any] = {
        "format": FORMAT,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": gpu.product or dev.type,
        "cc": [int(x) for x in gpu.compute_capability.split(".")]
        if gpu.vendor == "nvidia" else gpu.compute_capability,
        "torch": torch.__version__,
        "hardware": hardware_section(gpu),
    }
    with torch.inference_mode():
        common["hbm_copy_GBps"] = measure_copy_gbps(dev, st.copy_bytes, timer)
        common["bf16_gemm_TFLOPs"] = measure_gemm_tflops(dev, st.gemm_n, timer)
        common["fp8_gemm_TFLOPs"] = measure_gemm_tflops(dev, st.gemm_n, timer, fp8=True) \
            if fp8_ok else None
    common["fp8_supported"] = fp8_ok
    log.info("Measured device: %s", json.dumps(common))
    results = []
    for plan in plans:
        prof = {**common, **profile_model(plan, st, timer, fp8_ok)}
        prof["decode_floor_ms"] = {
            "bf16": {b: round(ModelShape.load(plan.shape).decode_floor_ms(
                int(b), plan.ctx, common["hbm_copy_GBps"], 2.0), 3)
                for b in prof["decode_ms"].get("bf16", {})},
        }
        results.append(prof)
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            stem = plan.name or f"{prof['shape']}-ctx{plan.ctx}"
            (out_dir / f"{stem}.json").write_text(json.dumps(prof, indent=1) + "\n")
    return results
