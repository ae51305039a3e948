"""Pure analysis of measured step times (no torch): knee batch, FP8 verdicts, layer fit.

Kept apart from the measuring code so the operator's reading of a profile and the unit
tests need neither a GPU nor PyTorch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

# Elasticity of step time with respect to batch: 0 while a step only streams the weights
# (memory-bound, flat), 1 when it is proportional to the batch (compute- or KV-bound).
# Half-way is where adding sequences stops being nearly free.
KNEE_ELASTICITY = 0.5
# FP8 must beat BF16 by more than run-to-run noise before it is called faster.
FP8_MARGIN = 0.02


def _sorted_items(table: Mapping[int | str, float]) -> list[tuple[int, float]]:
    return sorted((int(k), float(v)) for k, v in table.items())


def knee_batch(decode_ms: Mapping[int | str, float],
               elasticity: float = KNEE_ELASTICITY) -> int | None:
    """Largest measured batch before step time starts to grow in proportion to batch.

    Between consecutive measured batches b1 < b2 the local elasticity is
    ``log(t2/t1) / log(b2/b1)``. The knee is ``b1`` of the first segment whose
    elasticity exceeds ``elasticity``; if none does, the largest measured batch
    (the curve is still flat there).
    """
    pts = _sorted_items(decode_ms)
    if not pts:
        return None
    for (b1, t1), (b2, t2) in itertools.pairwise(pts):
        if t1 > 0 and t2 > 0 and math.log(t2 / t1) / math.log(b2 / b1) > elasticity:
            return b1
    return pts[-1][0]


def fp8_speedup(bf16: Mapping[int | str, float],
                fp8: Mapping[int | str, float]) -> dict[str, float]:
    """BF16 time over FP8 time for each size measured in both modes (>1: FP8 faster)."""
    a, b = dict(_sorted_items(bf16)), dict(_sorted_items(fp8))
    return {str(k): round(a[k] / b[k], 4) for k in sorted(a.keys() & b.keys()) if b[k] > 0}


def fp8_faster(speedup: Mapping[str, float], margin: float = FP8_MARGIN) -> dict[str, bool]:
    return {k: v > 1.0 + margin for k, v in speedup.items()}


def fp8_recommended(decode_faster: Mapping[str, bool], fp8_supported: bool) -> bool:
    """FP8 only when the node has it and it wins at every measured decode batch.

    Decode dominates a serving step count; a batch size at which FP8 loses would be
    one the controller could pick, so a partial win is not a recommendation.
    """
    return fp8_supported and bool(decode_faster) and all(decode_faster.values())


def layers_that_fit(layer_bytes: float, fixed_bytes: float, kv_bytes_per_layer: float,
                    total_layers: int, free_bytes: float, headroom: float = 0.85) -> int:
    """How many layers (weights + KV) fit in ``headroom`` of free device memory.

    A model that does not fit (a 70B-class model in BF16 on one card) is measured with
    fewer layers and its per-layer time scaled to the full depth.
    """
    budget = free_bytes * headroom - fixed_bytes
    per = layer_bytes + kv_bytes_per_layer
    if per <= 0 or math.isinf(budget):
        return total_layers
    return max(1, min(total_layers, int(budget // per)))


def scale_layers(total_ms: float, head_ms: float, measured: int, full: int) -> float:
    """Full-depth time from a run with ``measured`` of ``full`` layers."""
    return head_ms + (total_ms - head_ms) * full / measured


def chunked_prefill_totals(chunk_ms: Sequence[float], chunk: int,
                           prompts: Iterable[int]) -> dict[int, float]:
    """Time of each prompt prefilled in ``chunk``-token chunks, from the times of the
    successive chunks of one longer prompt (a prompt of ``n`` tokens is its first
    ``ceil(n / chunk)`` chunks; a last partial chunk is counted whole)."""
    out = {}
    for n in prompts:
        k = -(-n // chunk)
        if k > len(chunk_ms):
            raise ValueError(f"prompt of {n} tokens needs {k} chunks of {chunk}; "
                             f"{len(chunk_ms)} were timed")
        out[n] = float(sum(chunk_ms[:k]))
    return out


def slope_through_origin(points: Iterable[tuple[float, float]]) -> float:
    """Least-squares ``k`` of ``y = k * x`` (0 without a point of non-zero ``x``)."""
    sxy = sxx = 0.0
    for x, y in points:
        sxy += x * y
        sxx += x * x
    return sxy / sxx if sxx > 0 else 0.0


def attention_ms_per_token2(prefill_ctx_ms: Mapping[str, Mapping[str, float]]) -> float:
    """ms per (chunk token x earlier context token), fitted from ``{chunk: {context: ms}}``.

    The extra time of a chunk of ``T`` tokens after ``c`` cached tokens over the same chunk
    after none is attention against the cache: ``T * c`` query-key pairs, each read and
    multiplied once. Least squares through the origin of that extra time against
    ``T * c`` over every measured (chunk, context); 0 when no chunk was measured both
    with and without context.
    """
    pts = []
    for chunk, row in prefill_ctx_ms.items():
        times = {int(c): float(v) for c, v in row.items()}
        if 0 not in times:
            continue
        pts += [(int(chunk) * c, t - times[0]) for c, t in times.items() if c > 0]
    return max(0.0, slope_through_origin(pts))


def kv_ms_per_token(decode_ctx_ms: Mapping[str, Mapping[str, float]]) -> float:
    """ms per cached token read in a decode step, fitted from ``{ctx: {batch: ms}}``.

    A step of ``b`` sequences at context ``C`` costs the same step at the shortest
    measured context ``C0`` plus the read of ``b * (C - C0)`` more cached tokens. Least
    squares through the origin of the extra time against those extra tokens, over every
    batch measured at both contexts; 0 without such a pair.
    """
    if not decode_ctx_ms:
        return 0.0
    rows = {int(c): {int(b): float(t) for b, t in row.items()}
            for c, row in decode_ctx_ms.items()}
    c0 = min(rows)
    base = rows[c0]
    pts = [(b * (c - c0), t - base[b]) for c, row in rows.items() if c > c0
           for b, t in row.items() if b in base]
    return max(0.0, slope_through_origin(pts))
