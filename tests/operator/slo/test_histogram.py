"""Percentiles and the jitter bound from bucket rates: ``histogram_quantile`` semantics at
the edges, and the coefficient-of-variation lower bound against known distributions."""

from __future__ import annotations

import math
import random

import pytest

from slo_operator.slo.histogram import cv_lower_bound, quantile, quantile_floor
from slo_runtime.contract import INTER_TOKEN_BUCKETS, tokens_buckets

INF = math.inf
NAN = math.nan


def cumulative(samples: list[float], bounds: tuple[float, ...]) -> list[tuple[float, float]]:
    return [(b, float(sum(1 for s in samples if s <= b))) for b in bounds] + \
        [(INF, float(len(samples)))]


# --- quantile -------------------------------------------------------------------------------


@pytest.mark.parametrize(("q", "buckets", "want"), [
    pytest.param(0.5, [(1.0, 0.0), (2.0, 10.0), (INF, 10.0)], 1.5, id="middle"),
    pytest.param(0.99, [(1.0, 50.0), (2.0, 100.0), (INF, 100.0)], 1.98, id="p99"),
    pytest.param(0.5, [(1.0, 10.0), (INF, 10.0)], 0.5, id="lowest-bucket-starts-at-zero"),
    pytest.param(0.99, [(1.0, 1.0), (INF, 10.0)], 1.0, id="rank-in-inf-highest-finite-bound"),
    pytest.param(0.99, [(0.25, 1.0), (INF, 10.0)], 0.25,
                 id="rank-in-inf-is-the-bound-not-the-count"),
    pytest.param(0.5, [(2.0, 10.0), (1.0, 4.0), (INF, 10.0)], 1.1666666666666667,
                 id="unsorted-input-is-sorted"),
    pytest.param(0.5, [(1.0, 6.0), (2.0, 5.0), (INF, 10.0)], 5 / 6,
                 id="non-monotonic-counts-made-monotonic"),
    # Bucket rates are per second: a total below one request per second still has a p50.
    pytest.param(0.5, [(1.0, 0.0), (2.0, 0.5), (INF, 0.5)], 1.5, id="fractional-total"),
    pytest.param(0.0, [(1.0, 0.0), (2.0, 10.0), (INF, 10.0)], 1.0, id="q0"),
    pytest.param(1.0, [(1.0, 5.0), (2.0, 10.0), (INF, 10.0)], 2.0, id="q1"),
    pytest.param(0.5, [(1.0, 5.0), (2.0, 5.0), (3.0, 10.0), (INF, 10.0)], 1.0,
                 id="rank-on-a-flat-stretch-first-bucket-reaching-it-wins"),
    # A lowest bucket at or below zero answers its own bound (no interpolation from 0).
    pytest.param(0.5, [(-1.0, 10.0), (INF, 10.0)], -1.0, id="negative-lowest-bucket"),
    pytest.param(0.5, [(-2.0, 2.0), (-1.0, 10.0), (INF, 10.0)], -1.625,
                 id="negative-second-bucket-interpolates"),
    pytest.param(0.5, [(1.0, 4.0), (2.0, NAN), (3.0, 10.0), (INF, 10.0)], 1.0 + 2.0 / 6.0,
                 id="nan-count-drops-its-bucket"),
])
def test_quantile_follows_histogram_quantile(q: float, buckets: list[tuple[float, float]],
                                             want: float) -> None:
    got = quantile(q, buckets)
    assert got is not None and got == pytest.approx(want)


@pytest.mark.parametrize(("q", "buckets"), [
    pytest.param(0.99, [], id="empty"),
    pytest.param(0.99, [(1.0, 0.0), (INF, 0.0)], id="no-requests"),
    pytest.param(0.99, [(1.0, 5.0)], id="no-inf-bucket"),
    pytest.param(0.99, [(1.0, NAN), (INF, NAN)], id="nan-counts"),
    pytest.param(-0.1, [(1.0, 5.0), (2.0, 10.0), (INF, 10.0)], id="q-below-zero"),
    pytest.param(1.5, [(1.0, 5.0), (2.0, 10.0), (INF, 10.0)], id="q-above-one"),
])
def test_no_quantile_is_none_never_zero(q: float, buckets: list[tuple[float, float]]) -> None:
    assert quantile(q, buckets) is None


# --- the quantile's floor -------------------------------------------------------------------


@pytest.mark.parametrize(("q", "buckets", "want"), [
    pytest.param(0.99, [(200.0, 90.0), (500.0, 98.0), (1000.0, 100.0), (INF, 100.0)], 500.0,
                 id="rank-in-a-bucket-its-lower-bound"),
    pytest.param(0.5, [(200.0, 90.0), (500.0, 98.0), (INF, 100.0)], 0.0,
                 id="rank-in-the-first-bucket-zero"),
    pytest.param(0.99, [(200.0, 90.0), (500.0, 95.0), (INF, 100.0)], 500.0,
                 id="rank-in-inf-the-highest-finite-bound"),
    pytest.param(0.98, [(200.0, 90.0), (500.0, 98.0), (1000.0, 100.0), (INF, 100.0)], 200.0,
                 id="rank-at-a-bucket-top-is-inside-it"),
    pytest.param(0.99, [(500.0, 98.0), (200.0, 90.0), (INF, 100.0), (1000.0, 100.0)], 500.0,
                 id="unsorted-input-is-sorted"),
])
def test_quantile_floor_is_the_lower_bound_of_the_bucket_holding_the_rank(
        q: float, buckets: list[tuple[float, float]], want: float) -> None:
    assert quantile_floor(q, buckets) == want


@pytest.mark.parametrize("q", [0.9, 0.95, 0.99])
def test_quantile_floor_never_reads_a_long_tail_above_the_truth_where_interpolation_does(
        q: float) -> None:
    # Answer lengths with a long tail on vLLM's 1-2-5 token buckets: the interpolated
    # quantile sits far above the exact one, the floor never above it.
    rng = random.Random(3)
    samples = sorted(max(1.0, round(rng.lognormvariate(math.log(150), 0.8))) for _ in range(4000))
    exact = samples[math.ceil(q * len(samples)) - 1]
    buckets = cumulative(samples, tokens_buckets(131072))
    floor, interpolated = quantile_floor(q, buckets), quantile(q, buckets)
    assert floor is not None and interpolated is not None
    assert floor <= exact < interpolated


@pytest.mark.parametrize(("q", "buckets"), [
    pytest.param(0.99, [], id="empty"),
    pytest.param(0.99, [(1.0, 0.0), (INF, 0.0)], id="no-requests"),
    pytest.param(0.99, [(1.0, 5.0)], id="no-inf-bucket"),
    pytest.param(1.5, [(1.0, 5.0), (INF, 10.0)], id="q-above-one"),
])
def test_no_quantile_floor_is_none(q: float, buckets: list[tuple[float, float]]) -> None:
    assert quantile_floor(q, buckets) is None


# --- the jitter bound ----------------------------------------------------------------------


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


def test_cv_bound_exact_value_with_fractional_rates() -> None:
    """Mass 0.25 in (0, 1], 0.5 in (2, 4], 0.25 above 4; mean 2.5.

    The middle mass contains the mean (distance 0); the outer masses sit at least 1.5
    from it: variance >= 2 * 0.25 * 1.5**2.
    """
    buckets = [(1.0, 0.25), (2.0, 0.25), (4.0, 0.75), (INF, 1.0)]
    got = cv_lower_bound(buckets, 2.5)
    assert got == pytest.approx(math.sqrt(2 * 0.25 * 1.5**2) / 2.5)


def test_cv_bound_of_a_slow_steady_stream_is_zero() -> None:
    """Half a request per second, 8 ms per token, all inside one bucket: no spread."""
    assert cv_lower_bound([(0.01, 0.5), (INF, 0.5)], 0.004) == 0.0


@pytest.mark.parametrize(("buckets", "total_sum"), [
    pytest.param([], 1.0, id="empty"),
    pytest.param([(1.0, 0.0), (INF, 0.0)], 1.0, id="no-observations-a-stray-sum"),
    pytest.param([(0.01, 0.0), (INF, 0.0)], 0.0, id="no-samples"),
    pytest.param([(1.0, 5.0), (INF, 5.0)], 0.0, id="observations-without-a-sum"),
    pytest.param([(1.0, 5.0), (INF, 5.0)], INF, id="infinite-sum"),
    pytest.param([(1.0, 5.0)], 1.0, id="no-inf-bucket"),
])
def test_cv_bound_without_usable_data_is_none(buckets: list[tuple[float, float]],
                                              total_sum: float) -> None:
    assert cv_lower_bound(buckets, total_sum) is None
