"""Placement across GPU pools: the SLO rate per product, cost and room, the order, and how
``place`` fills, spills, holds for Ready and wakes, with the reasons users read
(docs/placement.md)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pytest

from slo_operator.control.capacity import itl_budget_ms, replica_capacity, seed_step_times
from slo_operator.control.placement import (
    TP_EFFICIENCY,
    VariantOption,
    describe_order,
    place,
    rank,
    slo_rate,
)
from slo_operator.control.prices import DEFAULT_PRICES
from tests.operator.control.control_support import opt
from tests.support.paths import REPO

H100, A100, L4, MI300X, T4 = ("H100-SXM-80GB", "A100-SXM4-80GB", "L4-24GB", "MI300X-192GB",
                              "T4-16GB")


# --- slo_rate: the capacity model per product, precision and tensor parallelism ---------


def rate_70b(gpus: int, **kw: Any) -> tuple[float, bool]:
    args: dict[str, Any] = dict(model_size_b=70.0, precision="bf16", product=A100,
                                gpus_per_replica=gpus, e2e_ms=60_000.0, ttft_ms=2_000.0,
                                itl_ms=None, min_batch=8, max_batch=256)
    return slo_rate(**{**args, **kw})


def rate_8b(product: str, precision: str, gpus: int = 1, size: float = 8.0
            ) -> tuple[float, bool]:
    return slo_rate(model_size_b=size, precision=precision, product=product,
                    gpus_per_replica=gpus, e2e_ms=10000, ttft_ms=1000, itl_ms=None,
                    min_batch=8, max_batch=256)


def test_tensor_parallel_factor_is_the_documented_one() -> None:
    doc = (REPO / "docs" / "placement.md").read_text()
    m = re.search(r"`1 \+ ([\d.]+) \(t - 1\)`", doc)
    assert m, "docs/placement.md no longer states the tensor-parallel speed-up"
    assert float(m[1]) == TP_EFFICIENCY


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_slo_rate_is_the_capacity_model_scaled_for_tensor_parallelism(gpus: int) -> None:
    st = seed_step_times(70.0, "bf16", A100).scaled(1.0 + TP_EFFICIENCY * (gpus - 1))
    cap = replica_capacity(st, prompt_tokens=512.0, output_tokens=128.0,
                           itl_budget=itl_budget_ms(60_000.0, 2_000.0, None, 128.0),
                           min_batch=8, max_batch=256)
    assert rate_70b(gpus) == (cap.rate, cap.feasible)
    assert cap.feasible and cap.rate > 0


def test_slo_rate_defaults_to_the_documented_request_shape() -> None:
    assert rate_70b(1) == rate_70b(1, prompt_tokens=512.0, output_tokens=128.0)
    assert rate_70b(1) != rate_70b(1, prompt_tokens=2048.0, output_tokens=512.0)


def test_no_gpu_count_is_one_gpu() -> None:
    assert rate_70b(0) == rate_70b(1)


def test_an_unreachable_target_is_reported_infeasible() -> None:
    assert rate_70b(1, e2e_ms=50.0, ttft_ms=10.0, itl_ms=0.01)[1] is False


def test_faster_gpu_and_tensor_parallel_raise_the_rate() -> None:
    assert rate_8b(H100, "fp8")[0] > rate_8b(H100, "bf16")[0] > rate_8b(A100, "bf16")[0]
    assert rate_8b(A100, "bf16", gpus=2, size=70)[0] > rate_8b(A100, "bf16", gpus=1, size=70)[0]


# --- cost and room ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("price", "gpus", "rate", "want"),
    [
        pytest.param(1.2, 2, 3.0, 0.8, id="price-times-gpus-over-rate"),
        pytest.param(1.2, 0, 3.0, 0.4, id="no-gpu-count-is-one-gpu"),
        pytest.param(1.0, 1, 1e-9, 1e9, id="any-positive-rate-has-a-price"),
        pytest.param(1.0, 1, 0.0, math.inf, id="no-slo-meeting-throughput-is-never-cheap"),
        pytest.param(1.0, 1, -1.0, math.inf, id="negative-rate-is-never-cheap"),
    ],
)
def test_cost_per_rate(price: float, gpus: int, rate: float, want: float) -> None:
    assert opt("v", H100, price=price, gpus=gpus, rate=rate).cost_per_rate == \
        pytest.approx(want)


@pytest.mark.parametrize(
    ("kw", "want_room"),
    [
        pytest.param({"scheduled": 2, "free": 5, "gpus": 2}, 4, id="whole-replicas-of-free-gpus"),
        pytest.param({"scheduled": 2, "free": 5, "gpus": 0}, 7, id="no-gpu-count-one-gpu-each"),
        pytest.param({"scheduled": 2, "free": -3}, 2, id="negative-free-count-adds-nothing"),
        pytest.param({"scheduled": 2, "free": 8, "pending": 1, "current": 3}, 2,
                     id="pending-pods-close-the-pool"),
        pytest.param({"scheduled": 0, "free": 1, "pending": 0}, 1, id="one-free-gpu-one-replica"),
    ],
)
def test_room(kw: dict[str, int], want_room: int) -> None:
    assert opt("v", H100, **kw).room == want_room  # type: ignore[arg-type]


# --- order --------------------------------------------------------------------------------


def test_default_prices_put_h100_and_mi300x_first_for_an_fp8_model() -> None:
    options = []
    for product, precision in ((H100, "fp8"), (A100, "bf16"), (L4, "fp8"), (MI300X, "fp8")):
        rate, ok = rate_8b(product, precision)
        options.append(opt(product.lower(), product, price=DEFAULT_PRICES.per_gpu_hour(product),
                           rate=rate, meets=ok))
    order = [o.product for o in rank(options)]
    assert set(order[:2]) == {H100, MI300X}, order
    assert order.index(A100) > 1 and order.index(L4) > 1


def test_cheapest_first_and_slo_misses_go_last() -> None:
    cheap = opt("cheap", L4, price=0.1, rate=1.0)
    dear = opt("dear", H100, price=1.0, rate=1.0)
    miss = opt("miss", A100, price=0.01, rate=1.0, meets=False)
    assert [o.variant for o in rank([dear, miss, cheap])] == ["cheap", "dear", "miss"]


def test_user_order_wins_over_cost() -> None:
    listed = [opt("dear", H100, price=1.0, rate=1.0, pref=0),
              opt("cheap", L4, price=0.1, rate=1.0, pref=1)]
    assert [o.variant for o in rank(listed)] == ["dear", "cheap"]


def test_any_listed_product_goes_before_every_unlisted_one() -> None:
    listed = opt("listed", H100, price=9.0, pref=1000, meets=False)
    free = opt("free", L4, price=0.01)
    first = opt("first", A100, price=5.0, pref=0)
    assert [o.variant for o in rank([free, listed, first])] == ["first", "listed", "free"]


def test_a_listed_product_at_position_zero_goes_before_position_one() -> None:
    one = opt("one", L4, price=0.1, pref=1)
    zero = opt("zero", H100, price=9.0, pref=0, meets=False)
    assert [o.variant for o in rank([one, zero])] == ["zero", "one"]


def test_equal_cost_orders_by_variant_id() -> None:
    b, a = opt("b", H100), opt("a", A100)
    assert [o.variant for o in rank([b, a])] == ["a", "b"]
    assert [o.variant for o in rank([opt("z", L4), opt("y", L4, meets=False)])] == ["z", "y"]


@pytest.mark.parametrize(
    ("case", "options"),
    [
        ("listed-and-missing-the-slo", [opt("h", H100, price=1, rate=2, gpus=2, pref=0),
                                        opt("a", A100, price=0.55, rate=0, meets=False)]),
        ("three-significant-digits", [opt("l", L4, price=0.18, rate=0.123456)]),
    ],
)
def test_describe_order(case: str, options: list[VariantOption], golden: Any) -> None:
    golden.check("control", f"describe_order.{case}", describe_order(options))


def test_describe_order_of_nothing_is_empty() -> None:
    assert describe_order([]) == ""


# --- place --------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    total: int
    options: list[VariantOption]
    want_replicas: dict[str, int]
    want_spilled: int = 0
    want_held: int = 0
    want_waiting: int = 0
    want_moves: tuple[str, ...] = ()
    want_order: tuple[str, ...] | None = None


CASES = [
    # --- fill and spill ------------------------------------------------------------------
    Case("fits-in-the-cheapest-pool", 3,
         [opt("h", H100, price=1, rate=2, free=8), opt("a", A100, price=0.5, rate=0.5, free=8)],
         {"h": 3, "a": 0}),
    Case("fits-in-the-first-pool-with-room-to-spare", 2,
         [opt("h", H100, price=1, rate=2, free=1, current=1),
          opt("a", A100, price=0.5, rate=0.5, free=8)],
         {"h": 2, "a": 0}, want_moves=("+1 H100-SXM-80GB",), want_order=("h", "a")),
    Case("spills-when-the-cheapest-pool-is-full", 5,
         [opt("h", H100, price=1, rate=2, free=2, current=1),
          opt("a", A100, price=0.5, rate=0.5, free=8)],
         {"h": 3, "a": 2}, want_spilled=2, want_moves=("+2 H100-SXM-80GB",)),
    Case("a-variant-growing-from-zero-is-not-a-move", 5,
         [opt("h", H100, price=1, rate=2, free=1, current=2),
          opt("a", A100, price=0.5, rate=0.5, free=4, current=0)],
         {"h": 3, "a": 2}, want_spilled=2, want_moves=("+1 H100-SXM-80GB",)),
    Case("pending-pods-close-a-pool-whatever-the-free-count-says", 3,
         [opt("h", H100, price=1, rate=2, free=4, current=3, pending=2),
          opt("a", A100, price=0.5, rate=0.5, free=8)],
         {"h": 1, "a": 2}, want_spilled=2, want_moves=("-2 H100-SXM-80GB",)),
    Case("tensor-parallel-needs-whole-replicas-of-gpus", 3,
         [opt("h", H100, price=1, rate=4, gpus=2, free=3),
          opt("a", A100, price=0.5, rate=1, gpus=4, free=8)],
         {"h": 1, "a": 2}, want_spilled=2),
    Case("spill-names-at-most-three-full-pools-with-their-pending-pods", 10,
         [opt("h", H100, price=1, rate=2, free=1, current=3, pending=1),
          opt("m", MI300X, price=0.8, rate=1, current=1),
          opt("a", A100, price=0.5, rate=0.4, free=1),
          opt("t", T4, price=0.12, rate=0.04, free=1),
          opt("l", L4, price=0.18, rate=0.05, free=8)],
         {"h": 2, "m": 1, "a": 1, "t": 1, "l": 5}, want_spilled=8,
         want_moves=("-1 H100-SXM-80GB",), want_order=("h", "m", "a", "t", "l")),
    Case("a-negative-free-count-leaves-no-room", 2,
         [opt("h", H100, price=1, rate=2, free=-1, current=0),
          opt("a", A100, price=0.5, rate=0.5, free=4, current=2)],
         {"h": 0, "a": 2}, want_spilled=2),
    # --- replicas that fit nowhere -------------------------------------------------------
    Case("nothing-fits-wait-on-the-first-pool", 4,
         [opt("h", H100, price=1, rate=2, free=1), opt("a", A100, price=0.5, rate=0.5, free=1)],
         {"h": 3, "a": 1}, want_spilled=1, want_waiting=2),
    Case("replicas-that-fit-nowhere-wait-and-the-rest-spill", 5,
         [opt("h", H100, price=1, rate=2, free=0), opt("a", A100, price=0.5, rate=0.5, free=2)],
         {"h": 3, "a": 2}, want_spilled=2, want_waiting=3),
    Case("every-pool-empty-all-wait-on-the-first", 2,
         [opt("h", H100, price=1, rate=2), opt("a", A100, price=0.5, rate=0.5)],
         {"h": 2, "a": 0}, want_waiting=2),
    # --- scale-in, return and surge first ------------------------------------------------
    Case("scale-in-leaves-the-dearest-pool-first", 2,
         [opt("h", H100, price=1, rate=2, free=0, current=2),
          opt("a", A100, price=0.5, rate=0.5, free=0, current=2)],
         {"h": 2, "a": 0}, want_moves=("-2 A100-SXM4-80GB",)),
    Case("return-to-the-better-pool-surge-first", 4,
         [opt("h", H100, price=1, rate=2, free=2, current=2),
          opt("a", A100, price=0.5, rate=0.5, free=0, current=2)],
         {"h": 4, "a": 2}, want_held=2, want_moves=("+2 H100-SXM-80GB",)),
    Case("return-completes-once-the-new-replicas-are-ready", 4,
         [opt("h", H100, price=1, rate=2, free=0, current=4),
          opt("a", A100, price=0.5, rate=0.5, free=0, current=2)],
         {"h": 4, "a": 0}, want_moves=("-2 A100-SXM4-80GB",)),
    Case("surge-keeps-every-ready-replica-until-the-new-ones-are-ready", 3,
         [opt("h", H100, price=1, rate=2, free=3, current=1),
          opt("a", A100, price=0.5, rate=0.4, current=1),
          opt("l", L4, price=0.18, rate=0.1, current=1)],
         {"h": 3, "a": 1, "l": 1}, want_held=2, want_moves=("+2 H100-SXM-80GB",)),
    Case("a-shrinking-replica-that-is-not-ready-goes-at-once", 3,
         [opt("h", H100, price=1, rate=2, free=3, current=1),
          opt("a", A100, price=0.5, rate=0.4, current=1),
          opt("l", L4, price=0.18, rate=0.1, current=1, ready=0)],
         {"h": 3, "a": 1, "l": 0}, want_held=1,
         want_moves=("+2 H100-SXM-80GB", "-1 L4-24GB")),
    Case("surge-holds-exactly-the-ready-deficit-cheaper-variant-first", 4,
         [opt("h", H100, price=1, rate=2, free=4),
          opt("a", A100, price=0.5, rate=0.4, current=2),
          opt("l", L4, price=0.18, rate=0.1, current=2)],
         {"h": 4, "a": 2, "l": 2}, want_held=4),
    Case("surge-floor-is-the-smaller-of-total-and-ready-now", 1,
         [opt("h", H100, price=1, rate=2, free=4), opt("a", A100, price=0.5, rate=0.4, current=3)],
         {"h": 1, "a": 1}, want_held=1, want_moves=("-2 A100-SXM4-80GB",)),
    Case("surge-counts-ready-replicas-that-stay", 3,
         [opt("h", H100, price=1, rate=2, free=1, current=2),
          opt("a", A100, price=0.5, rate=0.4, current=1)],
         {"h": 3, "a": 1}, want_held=1, want_moves=("+1 H100-SXM-80GB",)),
    Case("scale-in-with-a-not-ready-replica-moves-without-holding", 2,
         [opt("h", H100, price=1, rate=2, current=2, ready=2),
          opt("a", A100, price=0.5, rate=0.4, current=2, ready=0)],
         {"h": 2, "a": 0}, want_moves=("-2 A100-SXM4-80GB",)),
    Case("a-shrinking-variant-keeps-replicas-on-top-of-its-new-share", 4,
         [opt("h", H100, price=1, rate=2, free=2), opt("a", A100, price=0.5, rate=0.4, current=3)],
         {"h": 2, "a": 3}, want_spilled=2, want_held=1),
    # --- wake from zero and nothing to place ----------------------------------------------
    Case("wake-from-zero-names-the-first-pool", 1,
         [opt("a", A100, price=0.5, rate=0.5, free=8), opt("h", H100, price=1, rate=2, free=8)],
         {"h": 1, "a": 0}, want_order=("h", "a")),
    Case("wake-from-zero-names-the-first-two-in-order", 3,
         [opt("h", H100, price=1, rate=2, free=2), opt("a", A100, price=0.5, rate=0.5, free=8),
          opt("l", L4, price=0.18, rate=0.05, free=8)],
         {"h": 2, "a": 1, "l": 0}, want_spilled=1),
    Case("zero-replicas-from-zero-says-nothing", 0,
         [opt("h", H100, price=1, rate=2, free=8)], {"h": 0}),
    Case("a-negative-total-is-zero", -2,
         [opt("h", H100, free=4, current=1)], {"h": 0}, want_moves=("-1 H100-SXM-80GB",)),
    Case("no-variant-places-nothing", 3, [], {}, want_order=()),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_place(case: Case, golden: Any) -> None:
    got = place(case.total, case.options)
    assert got.replicas == case.want_replicas
    assert (got.spilled, got.held, got.waiting) == \
        (case.want_spilled, case.want_held, case.want_waiting)
    assert got.moves == case.want_moves
    if case.want_order is not None:
        assert got.order == case.want_order
    # What the reconciler reports, joined as it joins them.
    golden.check("control", f"place.{case.id}", "; ".join(got.reasons))
    if case.options:
        # Never fewer replicas than asked for; Ready capacity never drops because of a move.
        assert got.total >= max(0, case.total)
        ready_now = sum(o.ready for o in case.options)
        ready_after = sum(min(got.replicas[o.variant], o.ready) for o in case.options)
        assert ready_after >= min(max(0, case.total), ready_now)
