"""Percentiles and the jitter bound from bucket rates, against known distributions."""

from __future__ import annotations

import math
import random

import pytest

from slo_operator.slo.histogram import cv_lower_bound, quantile
from slo_runtime.contract import INTER_TOKEN_BUCKETS

INF = math.inf


def cumulative(samples: list[float], bounds: tuple[float, ...]) -> list[tuple[float, float]]:
    return [(b, float(sum(1 for s in samples if s <= b))) for b in bounds] + \
        [(INF, float(len(samples)))]


@pytest.mark.parametrize(("q", "buckets", "want"), [
    (0.5, [(1.0, 0.0), (2.0, 10.0), (INF, 10.0)], 1.5),
    (0.99, [(1.0, 50.0), (2.0, 100.0), (INF, 100.0)], 1.98),
    (0.5, [(1.0, 10.0), (INF, 10.0)], 0.5),  # lowest bucket starts at zero
    (0.99, [(1.0, 1.0), (INF, 10.0)], 1.0),  # rank in +Inf: highest finite bound
    (0.5, [(2.0, 10.0), (1.0, 4.0), (INF, 10.0)], 1.1666666666666667),  # unsorted input
    (0.5, [(1.0, 6.0), (2.0, 5.0), (INF, 10.0)], 5 / 6),  # non-monotonic: made monotonic
], ids=["middle", "p99", "first-bucket", "in-inf", "unsorted", "non-monotonic"])
def test_quantile_follows_histogram_quantile(q: float, buckets: list[tuple[float, float]],
                                             want: float) -> None:
    got = quantile(q, buckets)
    assert got is not None and got == pytest.approx(want)


@pytest.mark.parametrize("buckets", [
    [], [(1.0, 0.0), (INF, 0.0)], [(1.0, 5.0)], [(1.0, float("nan")), (INF, float("nan"))],
], ids=["empty", "no-requests", "no-inf-bucket", "nan"])
def test_quantile_of_nothing_is_none(buckets: list[tuple[float, float]]) -> None:
    assert quantile(0.99, buckets) is None


def test_jitter_separates_a_healthy_replica_from_an_overloaded_one() -> None:
    """Per-request time per output token on synthetic replicas.

    Healthy: decode steps of 5-7 ms, every request sees about the same pace. Overloaded:
    a large batch with prefill chunks interleaved, so requests see 8 ms to 60 ms per token
    depending on how many long steps fell into their lifetime.
    """
    rng = random.Random(7)
    healthy = [rng.uniform(0.005, 0.007) for _ in range(2000)]
    overloaded = [0.008 + rng.expovariate(1 / 0.015) for _ in range(2000)]
    cv_h = cv_lower_bound(cumulative(healthy, INTER_TOKEN_BUCKETS), sum(healthy))
    cv_o = cv_lower_bound(cumulative(overloaded, INTER_TOKEN_BUCKETS), sum(overloaded))
    assert cv_h is not None and cv_o is not None
    assert cv_h == 0.0  # a steady stream inside one bucket reads as steady
    assert cv_o > 0.15  # the default throughputCVMax
    # A lower bound: never above the true coefficient of variation.
    mean = sum(overloaded) / len(overloaded)
    true_cv = math.sqrt(sum((x - mean) ** 2 for x in overloaded) / len(overloaded)) / mean
    assert cv_o <= true_cv


def test_jitter_ignores_demand_burstiness() -> None:
    """Bursty arrivals at a healthy pace: more requests, same per-request pace, no jitter."""
    rng = random.Random(3)
    calm = [rng.uniform(0.005, 0.007) for _ in range(100)]
    burst = calm + [rng.uniform(0.005, 0.007) for _ in range(5000)]
    assert cv_lower_bound(cumulative(burst, INTER_TOKEN_BUCKETS), sum(burst)) == 0.0


def test_jitter_needs_samples() -> None:
    assert cv_lower_bound([(0.01, 0.0), (INF, 0.0)], 0.0) is None
