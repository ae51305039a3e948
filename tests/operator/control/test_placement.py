"""Placement tables: prices, capacity, preferences and full pools decide each variant's
replicas, with reasons."""

from __future__ import annotations

import pytest

from slo_operator.control.placement import VariantOption, place, rank, slo_rate
from slo_operator.control.prices import (
    DEFAULT_GPU_PRICES,
    DEFAULT_PRICES,
    UNKNOWN_PRICE,
    parse_prices,
)
from slo_operator.hardware import resolve_product
from tests.operator.control.control_support import opt

H100, A100, L4, MI300X = "H100-SXM-80GB", "A100-SXM4-80GB", "L4-24GB", "MI300X-192GB"


def test_every_default_price_names_a_catalogue_product_and_is_positive() -> None:
    for product, price in DEFAULT_GPU_PRICES.items():
        hw = resolve_product(product).hardware
        assert hw is not None and hw.known and hw.product == product, product
        assert price > 0


@pytest.mark.parametrize(
    ("product", "sharing", "expected"),
    [
        (H100, 1, 1.0),
        ("A100-SXM4-40GB-MIG-1g.5gb", 1, 0.45 / 7),  # a slice costs its share of the GPU
        ("A100-SXM4-40GB-MIG-3g.20gb", 1, 0.45 * 3 / 7),
        ("T4-16GB", 4, 0.12 / 4),  # time-sliced four ways
        ("X900-96GB", 1, UNKNOWN_PRICE),  # never preferred on price alone
    ],
)
def test_price_per_gpu_hour(product: str, sharing: int, expected: float) -> None:
    assert DEFAULT_PRICES.per_gpu_hour(product, sharing) == pytest.approx(expected)


def test_user_prices_override_defaults_and_bad_entries_are_named() -> None:
    prices = parse_prices({"H100-SXM-80GB": "2.5", "A100-SXM4-80GB": "-1", "Banana": "1",
                           "L4-24GB": "nan", "MI300X-192GB": " 1.1 "}, "ConfigMap ops/p")
    assert prices.per_gpu_hour(H100) == 2.5
    assert prices.per_gpu_hour(MI300X) == 1.1
    assert prices.per_gpu_hour(A100) == DEFAULT_GPU_PRICES[A100]  # bad value: default
    assert prices.per_gpu_hour(L4) == DEFAULT_GPU_PRICES[L4]
    assert len(prices.problems) == 3
    assert any(p.startswith("data.Banana:") for p in prices.problems)
    assert any(p.startswith("data.A100-SXM4-80GB:") and "-1" in p for p in prices.problems)
    assert parse_prices(None) is DEFAULT_PRICES and parse_prices({}) is DEFAULT_PRICES


def _rate(product: str, precision: str, gpus: int = 1, size: float = 8.0) -> tuple[float, bool]:
    return slo_rate(model_size_b=size, precision=precision, product=product,
                    gpus_per_replica=gpus, e2e_ms=10000, ttft_ms=1000, itl_ms=None,
                    min_batch=8, max_batch=256)


def test_default_prices_put_h100_and_mi300x_first_for_an_fp8_model() -> None:
    options = []
    for product, precision in ((H100, "fp8"), (A100, "bf16"), (L4, "fp8"), (MI300X, "fp8")):
        rate, ok = _rate(product, precision)
        options.append(opt(product.lower(), product, price=DEFAULT_PRICES.per_gpu_hour(product),
                           rate=rate, meets=ok))
    order = [o.product for o in rank(options)]
    assert set(order[:2]) == {H100, MI300X}, order
    assert order.index(A100) > 1 and order.index(L4) > 1


def test_faster_gpu_and_tensor_parallel_raise_the_rate() -> None:
    assert _rate(H100, "fp8")[0] > _rate(H100, "bf16")[0] > _rate(A100, "bf16")[0]
    assert _rate(A100, "bf16", gpus=2, size=70)[0] > _rate(A100, "bf16", gpus=1, size=70)[0]


def test_user_order_wins_over_cost_and_slo_misses_go_last() -> None:
    cheap = opt("cheap", L4, price=0.1, rate=1.0)
    dear = opt("dear", H100, price=1.0, rate=1.0)
    miss = opt("miss", A100, price=0.01, rate=1.0, meets=False)
    assert [o.variant for o in rank([dear, miss, cheap])] == ["cheap", "dear", "miss"]
    listed = [opt("dear", H100, price=1.0, rate=1.0, pref=0),
              opt("cheap", L4, price=0.1, rate=1.0, pref=1)]
    assert [o.variant for o in rank(listed)] == ["dear", "cheap"]


@pytest.mark.parametrize(
    ("case", "total", "options", "expected", "reason"),
    [
        ("fits in the cheapest pool", 3,
         [opt("h", H100, price=1, rate=2, free=8), opt("a", A100, price=0.5, rate=0.5, free=8)],
         {"h": 3, "a": 0}, None),
        ("spills when the cheapest pool is full", 5,
         [opt("h", H100, price=1, rate=2, free=2, current=1),
          opt("a", A100, price=0.5, rate=0.5, free=8)],
         {"h": 3, "a": 2}, "spilled past H100-SXM-80GB: H100-SXM-80GB full (2 free GPUs)"),
        ("Pending pods close a pool whatever the free count says", 3,
         [opt("h", H100, price=1, rate=2, free=4, current=3, pending=2),
          opt("a", A100, price=0.5, rate=0.5, free=8)],
         {"h": 1, "a": 2}, "2 Pending"),
        ("tensor parallel needs whole replicas' GPUs", 3,
         [opt("h", H100, price=1, rate=4, gpus=2, free=3),
          opt("a", A100, price=0.5, rate=1, gpus=4, free=8)],
         {"h": 1, "a": 2}, "spilled"),
        ("nothing fits: wait on the first pool", 4,
         [opt("h", H100, price=1, rate=2, free=1), opt("a", A100, price=0.5, rate=0.5, free=1)],
         {"h": 3, "a": 1}, "fit no pool now"),
        ("scale-in leaves the dearest pool first", 2,
         [opt("h", H100, price=1, rate=2, free=0, current=2),
          opt("a", A100, price=0.5, rate=0.5, free=0, current=2)],
         {"h": 2, "a": 0}, None),
        ("return to the better pool, surge first", 4,
         [opt("h", H100, price=1, rate=2, free=2, current=2),
          opt("a", A100, price=0.5, rate=0.5, free=0, current=2)],
         {"h": 4, "a": 2}, "surge first"),
        ("return completes once the new replicas are Ready", 4,
         [opt("h", H100, price=1, rate=2, free=0, current=4),
          opt("a", A100, price=0.5, rate=0.5, free=0, current=2)],
         {"h": 4, "a": 0}, None),
        ("wake from zero names the first pool", 1,
         [opt("a", A100, price=0.5, rate=0.5, free=8), opt("h", H100, price=1, rate=2, free=8)],
         {"h": 1, "a": 0}, "H100-SXM-80GB wakes first"),
        ("zero replicas", 0,
         [opt("h", H100, price=1, rate=2, free=8, current=0)], {"h": 0}, None),
    ],
)
def test_place(case: str, total: int, options: list[VariantOption], expected: dict[str, int],
               reason: str | None) -> None:
    got = place(total, options)
    assert got.replicas == expected, case
    if reason is None:
        assert not any("spilled" in r or "surge" in r for r in got.reasons), got.reasons
    else:
        assert any(reason in r for r in got.reasons), (case, got.reasons)


def test_surge_keeps_ready_capacity_and_drops_the_dearest_first() -> None:
    # Two shrinking variants, one replica to hold: the cheaper one keeps it.
    options = [opt("h", H100, price=1, rate=2, free=3, current=1),
               opt("a", A100, price=0.5, rate=0.4, current=1),
               opt("l", L4, price=0.18, rate=0.1, current=1)]
    got = place(3, options)
    assert got.replicas == {"h": 3, "a": 1, "l": 1}
    ready_after = sum(min(got.replicas[o.variant], o.ready) for o in options)
    assert ready_after >= 3
    half = place(3, [options[0], options[1], opt("l", L4, price=0.18, rate=0.1, current=1,
                                                          ready=0)])
    assert half.replicas == {"h": 3, "a": 1, "l": 0}  # the not-Ready one goes at once


def test_placement_never_asks_for_fewer_than_total_and_reports_moves() -> None:
    got = place(5, [opt("h", H100, price=1, rate=2, free=1, current=2),
                    opt("a", A100, price=0.5, rate=0.5, free=4, current=0)])
    assert got.total >= 5 and got.replicas == {"h": 3, "a": 2}
    assert "+2 A100-SXM4-80GB" not in got.moves  # a variant from zero is not a move
    assert got.spilled == 2 and got.waiting == 0 and got.held == 0
