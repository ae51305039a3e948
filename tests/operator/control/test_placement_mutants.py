"""Placement edges: the tensor-parallel factor, cost and room at their boundaries, the order
key, and the exact reasons and moves ``place`` reports (docs/placement.md)."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from slo_operator.control.capacity import (
    itl_budget_ms,
    replica_capacity,
    seed_step_times,
)
from slo_operator.control.placement import (
    TP_EFFICIENCY,
    Placement,
    VariantOption,
    describe_order,
    place,
    rank,
    slo_rate,
)
from tests.operator.control.control_support import opt
from tests.support.paths import REPO

DOC = (REPO / "docs" / "placement.md").read_text()
H100, A100, L4, MI300X, T4 = ("H100-SXM-80GB", "A100-SXM4-80GB", "L4-24GB", "MI300X-192GB",
                              "T4-16GB")


def test_option_and_placement_defaults() -> None:
    assert VariantOption("v", H100, 1, 1.0, 2.0) == VariantOption(
        "v", H100, 1, 1.0, 2.0, True, 0, 0, 0, 0, 0, None)
    p = Placement({"v": 1}, ("v",))
    assert (p.reasons, p.spilled, p.held, p.waiting, p.moves) == ((), 0, 0, 0, ())
    assert p == Placement({"v": 1}, ("v",), moves=("+1 x",))  # moves are not compared


# --- slo_rate: the capacity model per product, precision and tensor parallelism ---------


def _rate(gpus: int, **kw: object) -> tuple[float, bool]:
    args: dict[str, object] = dict(model_size_b=70.0, precision="bf16", product=A100,
                                   gpus_per_replica=gpus, e2e_ms=60_000.0, ttft_ms=2_000.0,
                                   itl_ms=None, min_batch=8, max_batch=256)
    args.update(kw)
    return slo_rate(**args)  # type: ignore[arg-type]


def test_tensor_parallel_factor_is_the_documented_one() -> None:
    assert TP_EFFICIENCY == 0.85
    assert "`1 + 0.85 (t - 1)`" in DOC


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_slo_rate_is_the_capacity_model_scaled_for_tensor_parallelism(gpus: int) -> None:
    st = seed_step_times(70.0, "bf16", A100).scaled(1.0 + 0.85 * (gpus - 1))
    cap = replica_capacity(st, prompt_tokens=512.0, output_tokens=128.0,
                           itl_budget=itl_budget_ms(60_000.0, 2_000.0, None, 128.0),
                           min_batch=8, max_batch=256)
    assert _rate(gpus) == (cap.rate, cap.feasible)
    assert cap.feasible and cap.rate > 0


def test_slo_rate_defaults_to_the_documented_request_shape() -> None:
    assert _rate(1) == _rate(1, prompt_tokens=512.0, output_tokens=128.0)
    assert _rate(1) != _rate(1, prompt_tokens=2048.0, output_tokens=512.0)


def test_no_gpu_count_is_one_gpu() -> None:
    assert _rate(0) == _rate(1)


def test_an_unreachable_target_is_reported_infeasible() -> None:
    assert _rate(1, e2e_ms=50.0, ttft_ms=10.0, itl_ms=0.01)[1] is False


# --- cost and room ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("price", "gpus", "rate", "expected"),
    [
        (1.2, 2, 3.0, 0.8),
        (1.2, 0, 3.0, 0.4),  # no GPU count: one GPU
        (1.0, 1, 1e-9, 1e9),  # any positive rate has a price
        (1.0, 1, 0.0, math.inf),  # no SLO-meeting throughput: never cheap
        (1.0, 1, -1.0, math.inf),
    ],
)
def test_cost_per_rate(price: float, gpus: int, rate: float, expected: float) -> None:
    assert opt("v", H100, price=price, gpus=gpus, rate=rate).cost_per_rate == \
        pytest.approx(expected)


@pytest.mark.parametrize(
    ("kw", "room"),
    [
        ({"scheduled": 2, "free": 5, "gpus": 2}, 4),  # whole replicas of free GPUs
        ({"scheduled": 2, "free": 5, "gpus": 0}, 7),  # no GPU count: one GPU each
        ({"scheduled": 2, "free": -3}, 2),  # a negative free count adds nothing
        ({"scheduled": 2, "free": 8, "pending": 1, "current": 3}, 2),  # Pending closes it
        ({"scheduled": 0, "free": 1, "pending": 0}, 1),
    ],
)
def test_room(kw: dict[str, int], room: int) -> None:
    assert opt("v", H100, **kw).room == room  # type: ignore[arg-type]


# --- order --------------------------------------------------------------------------------


def test_any_listed_product_goes_before_every_unlisted_one() -> None:
    listed = opt("listed", H100, price=9.0, pref=1000, meets=False)
    free = opt("free", L4, price=0.01)
    first = opt("first", A100, price=5.0, pref=0)
    assert [o.variant for o in rank([free, listed, first])] == ["first", "listed", "free"]


def test_equal_cost_orders_by_variant_id() -> None:
    b, a = opt("b", H100), opt("a", A100)
    assert [o.variant for o in rank([b, a])] == ["a", "b"]
    assert [o.variant for o in rank([opt("z", L4), opt("y", L4, meets=False)])] == ["z", "y"]


def test_describe_order() -> None:
    assert describe_order([opt("h", H100, price=1, rate=2, gpus=2, pref=0),
                           opt("a", A100, price=0.55, rate=0, meets=False)]) == (
        "H100-SXM-80GB (1 per req/s: 1/GPU-h x 2 GPU / 2 req/s, gpuProducts[0]); "
        "A100-SXM4-80GB (n/a per req/s: 0.55/GPU-h x 1 GPU / 0 req/s, misses the SLO at "
        "any batch)")
    assert describe_order([opt("l", L4, price=0.18, rate=0.123456)]) == \
        "L4-24GB (1.46 per req/s: 0.18/GPU-h x 1 GPU / 0.123 req/s)"
    assert describe_order([]) == ""


# --- place -------------------------------------------------------------------------------


def test_no_variant_places_nothing() -> None:
    assert place(3, []) == Placement({}, ())


def test_a_negative_total_is_zero() -> None:
    got = place(-2, [opt("h", H100, free=4, current=1)])
    assert got.replicas == {"h": 0} and got.reasons == () and got.moves == ("-1 H100-SXM-80GB",)
    assert (got.spilled, got.held, got.waiting) == (0, 0, 0)


def test_fits_in_the_first_pool_with_room_to_spare() -> None:
    got = place(2, [opt("h", H100, price=1, rate=2, free=1, current=1),
                    opt("a", A100, price=0.5, rate=0.5, free=8)])
    assert got == Placement({"h": 2, "a": 0}, ("h", "a"))
    assert got.moves == ("+1 H100-SXM-80GB",)


def test_spill_names_at_most_three_full_pools_with_their_pending_pods() -> None:
    options = [opt("h", H100, price=1, rate=2, free=1, current=3, pending=1),
               opt("m", MI300X, price=0.8, rate=1, current=1),
               opt("a", A100, price=0.5, rate=0.4, free=1),
               opt("t", T4, price=0.12, rate=0.04, free=1),
               opt("l", L4, price=0.18, rate=0.05, free=8)]
    got = place(10, options)
    assert got.order == ("h", "m", "a", "t", "l")
    assert got.replicas == {"h": 2, "m": 1, "a": 1, "t": 1, "l": 5}
    assert got.reasons == (
        "8 replica(s) spilled past H100-SXM-80GB: H100-SXM-80GB full (1 free GPUs, "
        "1 Pending), MI300X-192GB full (0 free GPUs), A100-SXM4-80GB full (1 free GPUs)",)
    assert (got.spilled, got.held, got.waiting) == (8, 0, 0)
    assert got.moves == ("-1 H100-SXM-80GB",)


def test_a_negative_free_count_leaves_no_room() -> None:
    """The first pool reports fewer than zero free GPUs: it is full with 0 free GPUs."""
    got = place(2, [opt("h", H100, price=1, rate=2, free=-1, current=0),
                    opt("a", A100, price=0.5, rate=0.5, free=4, current=2)])
    assert got.replicas == {"h": 0, "a": 2}
    assert got.reasons == ("2 replica(s) spilled past H100-SXM-80GB: H100-SXM-80GB full "
                           "(0 free GPUs)",)


def test_replicas_that_fit_nowhere_wait_and_the_rest_spill() -> None:
    """The first pool has room for none, the second for two: three wait on the first."""
    got = place(5, [opt("h", H100, price=1, rate=2, free=0),
                    opt("a", A100, price=0.5, rate=0.5, free=2)])
    assert got.replicas == {"h": 3, "a": 2} and got.waiting == 3 and got.spilled == 2
    assert got.reasons[0] == ("3 replica(s) fit no pool now: they wait on H100-SXM-80GB, "
                              "the first in order")
    assert got.reasons[1] == ("2 replica(s) spilled past H100-SXM-80GB: H100-SXM-80GB full "
                              "(0 free GPUs)")


def test_waiting_replicas_with_every_pool_empty() -> None:
    got = place(2, [opt("h", H100, price=1, rate=2), opt("a", A100, price=0.5, rate=0.5)])
    assert got.replicas == {"h": 2, "a": 0} and got.waiting == 2 and got.spilled == 0
    assert got.reasons[0] == ("2 replica(s) fit no pool now: they wait on H100-SXM-80GB, "
                              "the first in order")
    assert not any("spilled" in r for r in got.reasons)


def test_wake_from_zero_names_the_first_two_in_order() -> None:
    got = place(3, [opt("h", H100, price=1, rate=2, free=2),
                    opt("a", A100, price=0.5, rate=0.5, free=8),
                    opt("l", L4, price=0.18, rate=0.05, free=8)])
    assert got.replicas == {"h": 2, "a": 1, "l": 0}
    assert got.reasons == (
        "1 replica(s) spilled past H100-SXM-80GB: H100-SXM-80GB full (2 free GPUs)",
        "H100-SXM-80GB wakes first: H100-SXM-80GB (0.5 per req/s: 1/GPU-h x 1 GPU / 2 req/s);"
        " A100-SXM4-80GB (1 per req/s: 0.5/GPU-h x 1 GPU / 0.5 req/s)")
    assert got.moves == ()  # variants from zero are not moves


def test_zero_replicas_from_zero_says_nothing() -> None:
    assert place(0, [opt("h", H100, free=8)]).reasons == ()


def test_surge_holds_exactly_the_ready_deficit_with_its_reason() -> None:
    """4 Ready on a100 and l4 (2 each); h100 gets all 4 but has none Ready: 4 are held, the
    cheaper shrinking variant (a100) keeps its 2 first, then l4 keeps 2."""
    options = [opt("h", H100, price=1, rate=2, free=4),
               opt("a", A100, price=0.5, rate=0.4, current=2),
               opt("l", L4, price=0.18, rate=0.1, current=2)]
    got = place(4, options)
    assert got.replicas == {"h": 4, "a": 2, "l": 2}
    assert got.held == 4 and got.moves == ()
    assert got.reasons == ("4 replica(s) kept on the pools they leave until the replicas "
                           "replacing them are Ready (surge first)",)
    assert got.total == 8


def test_surge_floor_is_the_smaller_of_total_and_ready_now() -> None:
    """3 Ready now but only 1 wanted: one replica is held, not three."""
    options = [opt("h", H100, price=1, rate=2, free=4),
               opt("a", A100, price=0.5, rate=0.4, current=3)]
    got = place(1, options)
    assert got.replicas == {"h": 1, "a": 1} and got.held == 1
    assert got.moves == ("-2 A100-SXM4-80GB",)


def test_surge_counts_ready_replicas_that_stay() -> None:
    """h keeps its 2 Ready and grows by 1; a (1 Ready) shrinks: floor 3, Ready after 2."""
    options = [opt("h", H100, price=1, rate=2, free=1, current=2),
               opt("a", A100, price=0.5, rate=0.4, current=1)]
    got = place(3, options)
    assert got.replicas == {"h": 3, "a": 1} and got.held == 1
    assert got.moves == ("+1 H100-SXM-80GB",)


def test_scale_in_with_a_not_ready_replica_moves_without_holding() -> None:
    options = [opt("h", H100, price=1, rate=2, current=2, ready=2),
               opt("a", A100, price=0.5, rate=0.4, current=2, ready=0)]
    got = place(2, options)
    assert got.replicas == {"h": 2, "a": 0} and got.held == 0
    assert got.moves == ("-2 A100-SXM4-80GB",) and got.reasons == ()


def test_a_shrinking_variant_keeps_replicas_on_top_of_its_new_share() -> None:
    """h has room for 2 of 4; a (3 Ready) keeps its share of 2 plus 1 held for Ready."""
    options = [opt("h", H100, price=1, rate=2, free=2),
               opt("a", A100, price=0.5, rate=0.4, current=3)]
    got = place(4, options)
    assert got.replicas == {"h": 2, "a": 3} and got.held == 1
    assert got.moves == ()


def test_options_and_placements_are_immutable_and_typed() -> None:
    o = opt("v", H100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.current = 2  # type: ignore[misc]
    p = place(1, [o])
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.held = 2  # type: ignore[misc]
    for cls in (VariantOption, Placement):
        hints = typing.get_type_hints(cls)
        assert set(hints) == {f.name for f in dataclasses.fields(cls)}


def test_a_listed_product_at_position_zero_goes_before_position_one() -> None:
    one = opt("one", L4, price=0.1, pref=1)
    zero = opt("zero", H100, price=9.0, pref=0, meets=False)
    assert [o.variant for o in rank([one, zero])] == ["zero", "one"]
