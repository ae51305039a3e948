"""The price list: documented defaults, their order, slices and shares, the user's list and
what is wrong with it (docs/placement.md, "The price list")."""

from __future__ import annotations

import re
from typing import Any

import pytest

from slo_operator.control.prices import (
    DEFAULT_GPU_PRICES,
    DEFAULT_PRICES,
    PRICES_LABEL,
    UNKNOWN_PRICE,
    PriceList,
    parse_prices,
)
from slo_operator.hardware import resolve_product
from tests.support.paths import REPO

DOC = " ".join((REPO / "docs" / "placement.md").read_text().split())
P = DEFAULT_GPU_PRICES
H100, A100, L4, MI300X = "H100-SXM-80GB", "A100-SXM4-80GB", "L4-24GB", "MI300X-192GB"


# --- the documented defaults ------------------------------------------------------------


def test_the_label_is_the_documented_one() -> None:
    m = re.search(r'ConfigMap labelled `([^`:]+): "true"`', DOC)
    assert m, "docs/placement.md no longer names the price-list label"
    assert m[1] == PRICES_LABEL


def test_documented_default_prices() -> None:
    """"H100 SXM = 1.00 ... A100 80GB 0.55, L4 0.18, MI300X 0.80, H200 1.20 (... all 27)"."""
    m = re.search(r"\(H100 SXM = (\d\.\d\d)\)", DOC)
    assert m and P[H100] == float(m[1])
    quoted = dict(re.findall(r"(A100 80GB|L4|MI300X|H200) (\d\.\d\d)", DOC))
    products = {"A100 80GB": A100, "L4": L4, "MI300X": MI300X, "H200": "H200-SXM-141GB"}
    assert set(quoted) == set(products)
    for name, product in products.items():
        assert P[product] == float(quoted[name]), name
    m = re.search(r"lists all (\d+)", DOC)
    assert m and int(m[1]) == len(P)


def test_every_default_price_names_a_catalogue_product_and_is_positive() -> None:
    for product, price in P.items():
        hw = resolve_product(product).hardware
        assert hw is not None and hw.known and hw.product == product, product
        assert price > 0


# Only the order of prices matters to placement: each ladder is cheapest first.
LADDERS = [
    ("T4-16GB", "V100-SXM2-16GB", "V100-SXM2-32GB", "A100-PCIE-40GB", "A100-SXM4-40GB",
     "A100-PCIE-80GB", "A100-SXM4-80GB", "H100-PCIE-80GB", "H100-NVL-94GB", "H100-SXM-80GB",
     "H200-SXM-141GB", "B200-SXM-180GB", "GB200-186GB"),
    ("RTX-3090-24GB", "T4-16GB", "RTX-4090-24GB", "L4-24GB", "RTX-A6000-48GB", "A10-24GB",
     "A10G-24GB", "L40-48GB", "L40S-48GB", "H100-PCIE-80GB"),
    ("MI210-64GB", "MI250X-64GB", "MI300X-192GB", "MI325X-256GB", "H200-SXM-141GB"),
    ("Gaudi2-96GB", "Gaudi3-128GB", "H100-SXM-80GB"),
]


@pytest.mark.parametrize("ladder", LADDERS, ids=lambda ladder: ladder[0])
def test_default_prices_rise_along_each_ladder(ladder: tuple[str, ...]) -> None:
    prices = [P[p] for p in ladder]
    named = list(zip(ladder, prices, strict=True))
    assert prices == sorted(prices) and len(set(prices)) == len(prices), named


def test_ladders_cover_every_product() -> None:
    assert {p for ladder in LADDERS for p in ladder} == set(P)


# --- price per GPU-hour -----------------------------------------------------------------


def test_unknown_products_cost_like_the_dearest_known_one() -> None:
    dearest = max(P.values())
    assert UNKNOWN_PRICE == dearest == P["GB200-186GB"]
    assert DEFAULT_PRICES.per_gpu_hour("X900-96GB") == dearest
    assert DEFAULT_PRICES.per_gpu_hour("X900-96GB-MIG-2g.24gb") == pytest.approx(dearest * 2 / 7)


@pytest.mark.parametrize(
    ("product", "sharing", "want"),
    [
        pytest.param(H100, 1, 1.0, id="the-reference-gpu"),
        pytest.param("NVIDIA-H100-80GB-HBM3", 1, 1.0, id="node-label-alias-of-a-product"),
        pytest.param("X900-96GB", 1, UNKNOWN_PRICE, id="unknown-never-preferred-on-price"),
        pytest.param("A100-SXM4-40GB-MIG-1g.5gb", 1, 0.45 / 7, id="a-slice-costs-its-share"),
        pytest.param("A100-SXM4-40GB-MIG-3g.20gb", 1, 0.45 * 3 / 7, id="three-slices"),
        pytest.param("a100-sxm4-40gb-mig-2g.10gb", 1, 0.45 * 2 / 7, id="slices-in-any-case"),
        pytest.param("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 1, 0.45 / 7,
                     id="slice-of-an-alias-of-the-parent"),
        pytest.param("A100-SXM4-80GB-MIG-7g.80gb", 1, 0.55, id="all-seven-slices-whole-gpu"),
        pytest.param("A100-SXM4-80GB-MIG-9g.80gb", 1, 0.55, id="never-more-than-the-whole-gpu"),
        pytest.param("T4-16GB", 4, 0.12 / 4, id="time-sliced-four-ways"),
        pytest.param("NVIDIA-L4", 2, 0.09, id="time-sliced-alias"),
        pytest.param(H100, 3, 1.0 / 3, id="time-sliced-three-ways"),
        pytest.param(H100, 0, 1.0, id="no-sharing-count-is-one-replica"),
        pytest.param(H100, -2, 1.0, id="negative-sharing-count-is-one-replica"),
        pytest.param("A100-SXM4-80GB-MIG-3g.40gb", 2, 0.55 * 3 / 7 / 2,
                     id="slice-time-sliced-two-ways"),
    ],
)
def test_per_gpu_hour(product: str, sharing: int, want: float) -> None:
    assert DEFAULT_PRICES.per_gpu_hour(product, sharing) == pytest.approx(want)


def test_a_list_prices_a_name_it_holds_before_asking_the_catalogue() -> None:
    prices = PriceList({"sim-gpu": 0.3, H100: 2.0})
    assert prices.per_gpu_hour("sim-gpu") == 0.3
    assert prices.per_gpu_hour("sim-gpu-MIG-1g.10gb") == pytest.approx(0.3 / 7)
    assert prices.per_gpu_hour("NVIDIA-H100-80GB-HBM3") == 2.0
    assert prices.per_gpu_hour(A100) == UNKNOWN_PRICE  # not in this list


def test_an_empty_list_prices_everything_as_unknown() -> None:
    assert PriceList({}).per_gpu_hour(H100) == UNKNOWN_PRICE


# --- the user's list ----------------------------------------------------------------------


def test_no_user_list_is_the_built_in_defaults() -> None:
    assert parse_prices(None) is DEFAULT_PRICES and parse_prices({}) is DEFAULT_PRICES
    assert DEFAULT_PRICES.prices == P
    assert DEFAULT_PRICES.problems == () and DEFAULT_PRICES.source == "built-in defaults"


def test_a_user_price_list_names_its_source_and_keeps_the_rest() -> None:
    prices = parse_prices({"h100": "2"})
    assert prices.source == "ConfigMap" and prices.problems == ()
    assert prices.prices == {**P, H100: 2.0}
    assert parse_prices({H100: 3}, "ConfigMap ops/p").source == "ConfigMap ops/p"
    assert P[H100] == 1.0  # the defaults are not changed


def test_user_prices_override_defaults_and_bad_entries_are_named() -> None:
    prices = parse_prices({H100: "2.5", A100: "-1", "Banana": "1", L4: "nan",
                           MI300X: " 1.1 "}, "ConfigMap ops/p")
    assert prices.per_gpu_hour(H100) == 2.5
    assert prices.per_gpu_hour(MI300X) == 1.1
    assert prices.per_gpu_hour(A100) == P[A100]  # bad value: default
    assert prices.per_gpu_hour(L4) == P[L4]
    assert [p.split(":")[0] for p in prices.problems] == ["data.A100-SXM4-80GB", "data.Banana",
                                                         "data.L4-24GB"]


def test_user_prices_reach_mig_slices_and_aliases() -> None:
    prices = parse_prices({"A100-SXM4-40GB": "0.7", "NVIDIA-L4": "0.5"})
    assert prices.per_gpu_hour("A100-SXM4-40GB-MIG-1g.5gb") == pytest.approx(0.1)
    assert prices.per_gpu_hour(L4) == 0.5


def test_smallest_positive_price_is_taken() -> None:
    assert parse_prices({L4: "1e-9"}).per_gpu_hour(L4) == 1e-9
    assert parse_prices({L4: " 0.25\n"}).problems == ()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("0", id="zero"),
        pytest.param("-0.5", id="negative"),
        pytest.param("inf", id="infinite"),
        pytest.param("nan", id="not-a-number-nan"),
        pytest.param("cheap", id="not-a-number-word"),
        pytest.param("x" * 50, id="long-value-cut-to-40-characters"),
    ],
)
def test_bad_values_are_named_and_the_default_applies(raw: str, request: pytest.FixtureRequest,
                                                      golden: Any) -> None:
    prices = parse_prices({L4: raw})
    assert len(prices.problems) == 1
    golden.check("control", f"prices.bad-value.{request.node.callspec.id}", prices.problems[0])
    assert prices.per_gpu_hour(L4) == P[L4]


def test_unknown_keys_are_named_in_key_order_and_the_rest_applies(golden: Any) -> None:
    prices = parse_prices({"Zed": "1", "Banana": "1", L4: "0.3", "A10-24GB": "no"})
    assert [p.split(":")[0] for p in prices.problems] == ["data.A10-24GB", "data.Banana",
                                                         "data.Zed"]
    golden.check("control", "prices.unknown-keys-and-a-bad-value", "\n".join(prices.problems))
    assert prices.per_gpu_hour(L4) == 0.3
    assert "Banana" not in prices.prices


def test_the_default_price_list_cannot_be_changed_by_a_caller() -> None:
    handed_out = parse_prices(None)
    with pytest.raises(TypeError):
        handed_out.prices["H100-SXM-80GB"] = 0.0  # type: ignore[index]
    assert parse_prices(None).prices["H100-SXM-80GB"] == 1.0
