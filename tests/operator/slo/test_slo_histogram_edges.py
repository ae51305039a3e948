"""Edges of the bucket arithmetic: bounds of q, fractional rates, flat buckets, exact spread."""

from __future__ import annotations

import math

import pytest

from slo_operator.slo.histogram import cv_lower_bound, quantile

INF = math.inf
NAN = math.nan


@pytest.mark.parametrize(("q", "buckets", "want"), [
    # Bucket rates are per second: a total below one request per second still has a p50.
    (0.5, [(1.0, 0.0), (2.0, 0.5), (INF, 0.5)], 1.5),
    (0.0, [(1.0, 0.0), (2.0, 10.0), (INF, 10.0)], 1.0),
    (1.0, [(1.0, 5.0), (2.0, 10.0), (INF, 10.0)], 2.0),
    # The rank sits exactly on a flat stretch: the first bucket reaching it wins.
    (0.5, [(1.0, 5.0), (2.0, 5.0), (3.0, 10.0), (INF, 10.0)], 1.0),
    # Rank in +Inf: the highest finite bound, not that bucket's count.
    (0.99, [(0.25, 1.0), (INF, 10.0)], 0.25),
    # A lowest bucket at or below zero answers its own bound (no interpolation from 0).
    (0.5, [(-1.0, 10.0), (INF, 10.0)], -1.0),
    (0.5, [(-2.0, 2.0), (-1.0, 10.0), (INF, 10.0)], -1.625),
    # A NaN count drops its bucket; interpolation spans its neighbours.
    (0.5, [(1.0, 4.0), (2.0, NAN), (3.0, 10.0), (INF, 10.0)], 1.0 + 2.0 / 6.0),
], ids=["fractional-total", "q0", "q1", "flat-at-rank", "in-inf-bound", "negative-lowest",
        "negative-second", "nan-count-dropped"])
def test_quantile_edges(q: float, buckets: list[tuple[float, float]], want: float) -> None:
    got = quantile(q, buckets)
    assert got is not None and got == pytest.approx(want)


@pytest.mark.parametrize("q", [-0.1, 1.5])
def test_quantile_outside_zero_to_one_is_none(q: float) -> None:
    assert quantile(q, [(1.0, 5.0), (2.0, 10.0), (INF, 10.0)]) is None


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
    ([], 1.0),
    ([(1.0, 0.0), (INF, 0.0)], 1.0),  # no observations, a stray sum
    ([(1.0, 5.0), (INF, 5.0)], 0.0),  # observations without a sum
    ([(1.0, 5.0), (INF, 5.0)], INF),
    ([(1.0, 5.0)], 1.0),  # no +Inf bucket
], ids=["empty", "no-observations", "zero-sum", "infinite-sum", "no-inf-bucket"])
def test_cv_bound_without_usable_data_is_none(buckets: list[tuple[float, float]],
                                              total_sum: float) -> None:
    assert cv_lower_bound(buckets, total_sum) is None
