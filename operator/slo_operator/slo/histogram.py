"""Percentiles and spread from Prometheus histogram bucket rates, in Python.

The loop asks Prometheus for bucket *rates* grouped by ``(namespace, service, le)`` and
interpolates here, so one query serves every percentile every policy asks for.
``quantile`` follows PromQL's ``histogram_quantile``: buckets made monotonic, linear
interpolation inside the bucket holding the rank, the lowest bucket starting at 0, and
the upper bound of the highest finite bucket when the rank falls in ``+Inf``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def normalise(buckets: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted cumulative buckets with non-finite counts dropped and counts made monotonic."""
    pts = sorted((le, c) for le, c in buckets if not math.isnan(le) and math.isfinite(c))
    out: list[tuple[float, float]] = []
    top = 0.0
    for le, c in pts:
        top = max(top, c)  # rates of sums of counters can dip by float noise or resets
        out.append((le, top))
    return out


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """Value at quantile ``q`` (0..1) of cumulative ``(le, count)`` buckets; None if empty."""
    pts = normalise(buckets)
    if not pts or not math.isinf(pts[-1][0]) or len(pts) < 2:
        return None
    total = pts[-1][1]
    if total <= 0 or not 0 <= q <= 1:
        return None
    rank = q * total
    # The first bucket holding the rank; the +Inf bucket holds every observation.
    i = next(i for i, (_, c) in enumerate(pts) if c >= rank)
    le, c = pts[i]
    if math.isinf(le):
        return pts[i - 1][0]
    if i == 0 and le <= 0:
        return le
    prev_le, prev_c = pts[i - 1] if i else (0.0, 0.0)
    if c == prev_c:
        return le
    return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)


def quantile_floor(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """A value the quantile ``q`` is not below: the lower bound of the bucket holding its
    rank (0 for the first bucket, the highest finite bound for ``+Inf``); None if empty.

    Where buckets are wide (vLLM's token counts: 1, 2, 5, 10, ...), ``quantile``'s linear
    interpolation reads a tail quantile well above the truth (a long tail puts little of a
    bucket's mass near its top); the bucket's lower bound never does.
    """
    pts = normalise(buckets)
    if not pts or not math.isinf(pts[-1][0]) or not 0 <= q <= 1:
        return None
    total = pts[-1][1]
    if total <= 0:
        return None
    rank = q * total
    # The first bucket holding the rank: the quantile lies above the bound below it.
    i = next(i for i, (_, c) in enumerate(pts) if c >= rank)
    return pts[i - 1][0] if i else 0.0


def cv_lower_bound(buckets: Sequence[tuple[float, float]], total_sum: float) -> float | None:
    """Smallest coefficient of variation consistent with the buckets and the exact mean.

    Every observation in bucket ``(lo, hi]`` is at least ``dist(mean, [lo, hi])`` from the
    mean, so ``sum(w_i * dist_i**2)`` bounds the variance from below. Coarse buckets then
    read as "no spread" instead of inventing one (a midpoint estimate would report spread
    for a perfectly steady stream that sits inside one wide bucket).
    """
    pts = normalise(buckets)
    if not pts or not math.isinf(pts[-1][0]):
        return None
    total = pts[-1][1]
    if total <= 0 or not math.isfinite(total_sum) or total_sum <= 0:
        return None
    mean = total_sum / total
    var = 0.0
    lo, below = 0.0, 0.0
    for le, c in pts:
        w = c - below
        if w > 0:
            d = lo - mean if mean < lo else (mean - le if mean > le else 0.0)
            var += w * d * d
        lo, below = le, c
    return math.sqrt(var / total) / mean
