"""The step-time model of a vLLM replica, shared by the replica model and the simulator.

A vLLM engine advances in steps. Every step runs one forward pass over the tokens the
scheduler picked: one token for each running (decoding) sequence plus, with chunked
prefill, up to ``--max-num-batched-tokens`` minus that many prompt tokens. This module
says how long such a step takes on a given GPU, model and precision, how many KV-cache
tokens fit, and how long a replica takes to start. It is pure, stdlib only and cheap
(the discrete-event simulator calls :meth:`StepModel.step_ms` millions of times).

Calibration: a node profile written by ``slo-runtime profile`` (the operator ships the
measured ones as package data in ``slo_operator/data/profiles/``, the one copy code
reads). A profile holds, per
precision mode (``bf16``, ``fp8`` weights), the decode step time for batch sizes at a
fixed context length ``ctx`` (``decode_ms``) and the time of one prefill pass for some
token counts (``prefill_ms``), measured with CUDA graphs on the real GPU; where measured,
also prefill chunks after cached context (``prefill_ctx_ms``) and decode steps at long
contexts (``decode_ctx_ms``).

Assumptions, each a simplification of the measured behaviour:

1. Decode step at batch ``b`` with ``C`` context tokens in total (sum over the batch):
   the measured curve at ``b`` (linear between measured batches, the last slope beyond)
   plus ``kv_ms_per_token * (C - b * ctx)``. The KV read cost per token is the KV bytes
   per token over the profile's measured HBM copy bandwidth: decode attention streams
   every cached K/V once per step. (Checked: the 8B profile at ctx 1024 predicts the
   measured ctx 4096 curve within 10%; see tests.) Checked at long context too: decode
   steps at 32k and 64k tokens per sequence (``decode_ctx_ms``, split-KV attention as
   serving engines run it) read the cache at 3.26e-5 ms per token on the H200 8B
   profile, 1.06x the bandwidth figure of 3.08e-5 (4.02 against 4.25 TB/s): the term
   predicts each measured step's growth over the same batch at ctx 1024 within 18%
   (batch 4; 6% in the least-squares fit). Where a profile's long-context decode
   departs from the bandwidth figure by more than ``KV_AGREEMENT``, its measured cost
   replaces it.
2. A step that carries prefill tokens as well costs the decode part plus the prefill
   pass's time beyond the weight read, which both share: ``prefill_ms(p) - weights_ms``,
   where ``weights_ms`` is the batch-1 decode step without its KV read. A prefill-only
   step costs ``prefill_ms(p)``. Prefill is linear between measured token counts;
   attention's quadratic term inside a chunk of at most 8192 tokens is in the
   measurement. A chunk of ``p`` tokens after ``c`` tokens of its sequence already
   cached (earlier chunks of a long prompt, a cached prefix) also attends to those:
   ``prefill_attn_ms_per_token2 * p * c`` more, the least-squares fit of the profile's
   chunks measured after 8k-128k tokens of context (``prefill_ctx_ms``): 8.9e-7 ms per
   token pair on the H200 8B profile in BF16 and FP8 alike (attention is 16-bit in
   both), 4 * heads * head_dim * layers FLOPs per pair at about 590 TFLOP/s. A 128k
   prompt in 8192-token chunks is then predicted at 10.9 s against 11.3 s measured
   (``prefill_chunked_ms``), where the model without the term gave 3.7 s. The 70B
   profile's chunks (measured on an H100, the same die and matrix rate; see its
   ``long_context`` notes) fit 4.5e-6 in both modes, 5.0x the 8B figure for 5x the
   attention width. A profile without the measurement gets 0: long prompts are
   understated there. Beyond the largest measured prompt, the straight line through the
   last two sizes misses the growth of the prompt's own causal square (``p^2 / 2``
   pairs): the quadratic's excess over that line is added (the 70B profile measured
   prefill to 2048 tokens; an 8192-token chunk was 10-16% short without it).
3. Profiles measure BF16 KV caches in both modes; an FP8 KV cache halves the KV bytes
   per token, so it halves the KV read term and doubles the KV capacity.
4. ``fp16`` runs at the ``bf16`` speed; ``fp8`` means FP8 weights (the profile's fp8
   mode); a profile without the asked mode falls back to ``bf16``.
5. Other GPUs than the profiled one: decode-bound times scale with the memory-bandwidth
   ratio and prefill with the dense-compute ratio (:meth:`StepModel.for_hardware`;
   the caller supplies the ratios, e.g. from the operator's GPU catalogue).
6. KV capacity = GPU memory x ``gpu_memory_utilization`` (vLLM's 0.9 default) minus the
   weights minus a fixed activation / CUDA-graph reserve of 3 GiB per GPU, over the KV
   bytes per token; tensor parallelism splits both weights and KV heads.
7. Cold start = 30 s (container start, CUDA init, graph capture) + weights read at
   0.5 GB/s (remote model storage): about 60 s for Llama-3.1-8B in BF16, the figure the
   design uses.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from slo_runtime import profile_math as pm
from slo_runtime.contract import FP8_KV_CACHE_DTYPES

GIB = 2**30
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
ACTIVATION_RESERVE_BYTES = 3 * GIB
COLD_START_FIXED_S = 30.0
WEIGHT_LOAD_BYTES_PER_S = 0.5e9
# Decode times are tabulated per batch size up to here; beyond, the last slope.
_TABLE_MAX_BATCH = 2048
# Largest relative gap between the KV read cost measured at long context and the one
# derived from copy bandwidth (assumption 1) at which the derived one is kept: the
# tolerance assumption 1 is checked to against the measured ctx-4096 curve.
KV_AGREEMENT = 0.10

PRECISIONS = ("bf16", "fp16", "fp8")


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear through (xs, ys); the end segments' slopes beyond the ends."""
    if len(xs) == 1:
        return ys[0]
    i = bisect_right(xs, x)
    i = min(max(i, 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def model_params(shape: Mapping[str, Any]) -> int:
    """Parameter count of a Llama-style decoder from its profile ``model`` entry."""
    h = int(shape["hidden_size"])
    inter = int(shape["intermediate_size"])
    layers = int(shape["num_layers"])
    heads = int(shape["num_heads"])
    kv_heads = int(shape["num_kv_heads"])
    hd = int(shape.get("head_dim") or h // heads)
    vocab = int(shape["vocab_size"])
    attn = h * heads * hd * 2 + h * kv_heads * hd * 2
    mlp = 3 * h * inter
    embed = vocab * h * (1 if shape.get("tie_word_embeddings") else 2)
    return layers * (attn + mlp + 2 * h) + embed + h


def weight_bytes(shape: Mapping[str, Any], precision: str) -> int:
    """Bytes of weights; FP8 stores the linear layers in 1 byte, embeddings stay 16-bit."""
    total = model_params(shape)
    if precision != "fp8":
        return 2 * total
    h = int(shape["hidden_size"])
    embed = int(shape["vocab_size"]) * h * (1 if shape.get("tie_word_embeddings") else 2)
    return (total - embed) + 2 * embed


def kv_bytes_per_token(shape: Mapping[str, Any], kv_cache_dtype: str = "auto",
                       tensor_parallel: int = 1) -> int:
    """KV-cache bytes one token occupies on one GPU (K and V of every layer)."""
    heads = int(shape["num_heads"])
    hd = int(shape.get("head_dim") or int(shape["hidden_size"]) // heads)
    per_elem = 1 if kv_cache_dtype in FP8_KV_CACHE_DTYPES else 2
    kv_heads_per_gpu = max(1, int(shape["num_kv_heads"]) // max(1, tensor_parallel))
    return int(shape["num_layers"]) * kv_heads_per_gpu * hd * 2 * per_elem


def kv_capacity_tokens(gpu_memory_bytes: int, weight_bytes_per_gpu: int, kv_token_bytes: int,
                       gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION) -> int:
    """Tokens of KV cache that fit on one GPU (0 when the weights do not fit)."""
    free = gpu_memory_bytes * gpu_memory_utilization - weight_bytes_per_gpu \
        - ACTIVATION_RESERVE_BYTES
    return max(0, int(free // kv_token_bytes)) if kv_token_bytes > 0 else 0


def cold_start_seconds(total_weight_bytes: int) -> float:
    """Seconds from pod start to a ready engine (assumption 7 above)."""
    return COLD_START_FIXED_S + total_weight_bytes / WEIGHT_LOAD_BYTES_PER_S


def prefill_chunk(budget: int, decode_batch: int, pending_prompt_tokens: int) -> int:
    """Prompt tokens one step may carry under ``--max-num-batched-tokens`` = ``budget``:
    the budget counts every token of the step, one per decoding sequence first."""
    return max(0, min(pending_prompt_tokens, budget - decode_batch))


@dataclass(frozen=True, slots=True)
class StepModel:
    """Step times of one replica (one GPU product, model shape, precision, KV dtype)."""

    gpu: str
    shape: str
    precision: str
    kv_cache_dtype: str
    ref_ctx: int                         # context length of the measured decode curve
    decode_table: tuple[float, ...]      # ms at ref_ctx for batch 0.._TABLE_MAX_BATCH
    decode_tail_slope: float             # ms per sequence beyond the table
    kv_ms_per_token: float               # ms per context token read in a decode step
    prefill_tokens: tuple[float, ...]
    prefill_ms_points: tuple[float, ...]
    weights_ms: float                    # the weight read, shared by all tokens of a step
    kv_capacity_tokens: int              # per replica (all its GPUs)
    kv_token_bytes_per_gpu: int
    weight_bytes: int                    # per replica
    cold_start_s: float
    tensor_parallel: int = 1
    # ms per (prompt token x earlier context token): the attention a prefill chunk pays
    # against the context already cached before it (a later chunk of a long prompt, or
    # a prompt after a cached prefix). 0 when the profile did not measure it.
    prefill_attn_ms_per_token2: float = 0.0

    # --- step times (the hot path: plain float arithmetic) ---------------------------
    def decode_ms(self, batch: int, context_tokens: int | None = None) -> float:
        """One decode step of ``batch`` sequences holding ``context_tokens`` in total
        (default: ``ref_ctx`` each)."""
        if batch <= 0:
            return 0.0
        table = self.decode_table
        if batch < len(table):
            t = table[batch]
        else:
            t = table[-1] + self.decode_tail_slope * (batch - len(table) + 1)
        if context_tokens is not None:
            t += self.kv_ms_per_token * (context_tokens - batch * self.ref_ctx)
        return max(t, self.weights_ms)

    def prefill_ms(self, tokens: int, context_before: int = 0) -> float:
        """A step that carries only ``tokens`` prompt tokens, after ``context_before``
        tokens of the same sequence already in the KV cache (earlier chunks or a cached
        prefix)."""
        if tokens <= 0:
            return 0.0
        t = max(self.weights_ms, _interp(self.prefill_tokens, self.prefill_ms_points,
                                         float(tokens)))
        xs = self.prefill_tokens
        if len(xs) > 1 and tokens > xs[-1]:
            # Beyond the largest measured prompt the straight line misses the growth of
            # the prompt's own causal attention (p^2 / 2 token pairs, in the measurements
            # up to there): the quadratic's excess over the line through the last two
            # measured sizes.
            t += self.prefill_attn_ms_per_token2 / 2.0 * (tokens - xs[-1]) * (tokens - xs[-2])
        if context_before > 0:
            t += self.prefill_attn_ms_per_token2 * tokens * context_before
        return t

    def step_ms(self, decode_batch: int, context_tokens: int | None = None,
                prefill_tokens: int = 0, prefill_context: int = 0) -> float:
        """A mixed step: ``decode_batch`` decoding sequences (``context_tokens`` cached
        in total) and ``prefill_tokens`` prompt tokens, after ``prefill_context`` cached
        tokens of their sequence, in the same forward pass."""
        if prefill_tokens <= 0:
            return self.decode_ms(decode_batch, context_tokens)
        if decode_batch <= 0:
            return self.prefill_ms(prefill_tokens, prefill_context)
        return self.decode_ms(decode_batch, context_tokens) + \
            self.prefill_ms(prefill_tokens, prefill_context) - self.weights_ms

    def max_step_ms(self, budget: int, decode_batch: int,
                    context_tokens: int | None = None, prefill_context: int = 0) -> float:
        """The longest step under ``--max-num-batched-tokens`` = ``budget``: the bound
        chunked prefill puts on every decoding sequence's inter-token latency (for a
        chunk after ``prefill_context`` cached tokens of its prompt)."""
        return self.step_ms(decode_batch, context_tokens,
                            prefill_chunk(budget, decode_batch, budget), prefill_context)

    def decode_tokens_per_s(self, batch: int, mean_context: int | None = None) -> float:
        """Generated tokens per second of a replica decoding ``batch`` sequences."""
        ctx = None if mean_context is None else batch * mean_context
        ms = self.decode_ms(batch, ctx)
        return 1000.0 * batch / ms if ms > 0 else 0.0

    # --- variants ----------------------------------------------------------------------
    def for_hardware(self, gpu: str, bandwidth_ratio: float, compute_ratio: float,
                     gpu_memory_bytes: int | None = None) -> StepModel:
        """This model moved to another GPU: decode (memory-bound) times divided by the
        bandwidth ratio, prefill (compute-bound) by the compute ratio, the KV capacity
        recomputed for ``gpu_memory_bytes`` per GPU when given."""
        if bandwidth_ratio <= 0 or compute_ratio <= 0:
            raise ValueError("bandwidth_ratio and compute_ratio must be positive")
        cap = self.kv_capacity_tokens
        if gpu_memory_bytes is not None:
            tp = self.tensor_parallel
            cap = tp * kv_capacity_tokens(gpu_memory_bytes, self.weight_bytes // tp,
                                          self.kv_token_bytes_per_gpu)
        return replace(
            self, gpu=gpu,
            decode_table=tuple(t / bandwidth_ratio for t in self.decode_table),
            decode_tail_slope=self.decode_tail_slope / bandwidth_ratio,
            kv_ms_per_token=self.kv_ms_per_token / bandwidth_ratio,
            weights_ms=self.weights_ms / bandwidth_ratio,
            prefill_ms_points=tuple(t / compute_ratio for t in self.prefill_ms_points),
            prefill_attn_ms_per_token2=self.prefill_attn_ms_per_token2 / compute_ratio,
            kv_capacity_tokens=cap)

    def sped_up(self, factor: float) -> StepModel:
        """Every time divided by ``factor`` (time compression for tests and demos);
        capacities unchanged."""
        if factor <= 0:
            raise ValueError("factor must be positive")
        return replace(
            self, decode_table=tuple(t / factor for t in self.decode_table),
            decode_tail_slope=self.decode_tail_slope / factor,
            kv_ms_per_token=self.kv_ms_per_token / factor, weights_ms=self.weights_ms / factor,
            prefill_ms_points=tuple(t / factor for t in self.prefill_ms_points),
            prefill_attn_ms_per_token2=self.prefill_attn_ms_per_token2 / factor,
            cold_start_s=self.cold_start_s / factor)

    # --- calibration -------------------------------------------------------------------
    @classmethod
    def from_profile(cls, profile: Mapping[str, Any], precision: str = "bf16", *,
                     kv_cache_dtype: str = "auto", tensor_parallel: int = 1,
                     gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                     cold_start_s: float | None = None) -> StepModel:
        """Calibrate from one ``slo-runtime-profile/v1`` document (assumptions above)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        mode = "fp8" if precision == "fp8" else "bf16"
        decode = profile["decode_ms"]
        if mode not in decode:
            mode = "bf16"
        shape = profile["model"]
        ref_ctx = int(profile["ctx"])
        hw = profile.get("hardware") or {}
        gpu = str(hw.get("product") or profile.get("device") or "unknown")
        # Measured per-GPU; with TP the step is one GPU's share plus communication, which
        # the single-GPU profile cannot see: assume the measured time (conservative).
        kv_full = kv_bytes_per_token(shape, "auto", 1)
        copy_gbps = float(profile.get("hbm_copy_GBps") or 0.0)
        kv_ms_16 = kv_full / (copy_gbps * 1e9) * 1e3 if copy_gbps > 0 else 0.0
        # Decode measured at long contexts (16-bit KV in both modes) overrules the
        # bandwidth figure only where the two disagree beyond KV_AGREEMENT.
        ctx_dec = profile.get("decode_ctx_ms") or {}
        kv_measured = pm.kv_ms_per_token(ctx_dec.get(mode) or ctx_dec.get("bf16") or {})
        if kv_measured > 0 and (kv_ms_16 <= 0
                                or abs(kv_measured / kv_ms_16 - 1.0) > KV_AGREEMENT):
            kv_ms_16 = kv_measured
        fp8_kv = kv_cache_dtype in FP8_KV_CACHE_DTYPES
        kv_ms = kv_ms_16 / 2 if fp8_kv else kv_ms_16
        pts = sorted((float(b), float(t)) for b, t in decode[mode].items())
        bs = tuple(b for b, _ in pts)
        ts = tuple(t for _, t in pts)
        if fp8_kv:
            # The curve was measured reading 16-bit KV at ref_ctx: half of that is saved.
            ts = tuple(t - (kv_ms_16 - kv_ms) * b * ref_ctx for b, t in zip(bs, ts, strict=True))
        table = [0.0] + [_interp(bs, ts, float(b)) for b in range(1, _TABLE_MAX_BATCH + 1)]
        tail = (ts[-1] - ts[-2]) / (bs[-1] - bs[-2]) if len(bs) > 1 else 0.0
        weights_ms = max(1e-3, table[1] - kv_ms * ref_ctx)
        pre = (profile.get("prefill_ms") or {}).get(mode) or \
            (profile.get("prefill_ms") or {}).get("bf16") or {}
        ppts = sorted((float(k), float(v)) for k, v in pre.items())
        if not ppts:
            # No prefill measured: a prompt token costs what a decode token costs.
            ppts = [(1.0, table[1]), (bs[-1], ts[-1])]
        # Attention against cached context: fitted where the profile measured chunks after
        # context (BF16 attention in both modes, so the BF16 table stands in for a mode
        # without one); 0, the model before such measurements, where it did not.
        ctx_pre = profile.get("prefill_ctx_ms") or {}
        attn = pm.attention_ms_per_token2(ctx_pre.get(mode) or ctx_pre.get("bf16") or {})
        wbytes = weight_bytes(shape, precision)
        tp = max(1, tensor_parallel)
        mem = int(float(hw.get("memory_mib") or 0) * 2**20)
        token_bytes = kv_bytes_per_token(shape, kv_cache_dtype, tp)
        cap = tp * kv_capacity_tokens(mem, wbytes // tp, token_bytes, gpu_memory_utilization)
        return cls(
            gpu=gpu, shape=str(profile.get("shape") or shape.get("name") or ""),
            precision=precision, kv_cache_dtype=kv_cache_dtype, ref_ctx=ref_ctx,
            decode_table=tuple(table), decode_tail_slope=tail, kv_ms_per_token=kv_ms,
            prefill_tokens=tuple(p for p, _ in ppts),
            prefill_ms_points=tuple(t for _, t in ppts), weights_ms=weights_ms,
            kv_capacity_tokens=cap, kv_token_bytes_per_gpu=token_bytes, weight_bytes=wbytes,
            cold_start_s=cold_start_seconds(wbytes) if cold_start_s is None else cold_start_s,
            tensor_parallel=tp, prefill_attn_ms_per_token2=attn)


def load_profiles(directory: Path) -> list[dict[str, Any]]:
    """Every ``*.json`` profile document in ``directory`` (other JSON files skipped)."""
    out = []
    for p in sorted(directory.glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and "decode_ms" in d and "model" in d:
            d.setdefault("_source", p.name)
            out.append(d)
    return out


def select_profile(profiles: Iterable[Mapping[str, Any]], shape: str | None = None,
                   ctx: int | None = None) -> Mapping[str, Any]:
    """The profile of ``shape`` (any, when None) whose context is nearest ``ctx``."""
    cands = [p for p in profiles if shape is None or p.get("shape") == shape]
    if not cands:
        raise LookupError(f"no profile for model shape {shape!r}")
    want = ctx if ctx is not None else 1024
    return min(cands, key=lambda p: (abs(int(p["ctx"]) - want), str(p.get("_source", ""))))
