"""The price list: documented defaults, their order, slices and shares, the user's list and
what is wrong with it (docs/placement.md, "The price list")."""

from __future__ import annotations

import dataclasses
import re

import pytest

from slo_operator.control.prices import (
    DEFAULT_GPU_PRICES,
    DEFAULT_PRICES,
    MIG_COMPUTE_SLICES,
    PRICES_LABEL,
    UNKNOWN_PRICE,
    PriceList,
    parse_prices,
)
from tests.support.paths import REPO

DOC = (REPO / "docs" / "placement.md").read_text()
P = DEFAULT_GPU_PRICES


def test_the_label_is_the_documented_one() -> None:
    assert PRICES_LABEL == "inference.slo-operator.io/gpu-prices"
    assert f"labelled `{PRICES_LABEL}: \"true\"`" in DOC


def test_documented_default_prices() -> None:
    """"H100 SXM = 1.00 ... A100 80GB 0.55, L4 0.18, MI300X 0.80, H200 1.20 (... all 27)"."""
    assert "(H100 SXM = 1.00)" in DOC and P["H100-SXM-80GB"] == 1.0
    quoted = dict(re.findall(r"(A100 80GB|L4|MI300X|H200) (\d\.\d\d)", DOC))
    products = {"A100 80GB": "A100-SXM4-80GB", "L4": "L4-24GB", "MI300X": "MI300X-192GB",
                "H200": "H200-SXM-141GB"}
    assert set(quoted) == set(products)
    for name, product in products.items():
        assert P[product] == float(quoted[name]), name
    assert f"lists all {len(P)}" in DOC and len(P) == 27


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


def test_unknown_products_cost_like_the_dearest_known_one() -> None:
    assert UNKNOWN_PRICE == P["GB200-186GB"] == 2.0
    assert DEFAULT_PRICES.per_gpu_hour("X900-96GB") == 2.0
    assert DEFAULT_PRICES.per_gpu_hour("X900-96GB-MIG-2g.24gb") == pytest.approx(2.0 * 2 / 7)


@pytest.mark.parametrize(
    ("product", "sharing", "expected"),
    [
        ("NVIDIA-H100-80GB-HBM3", 1, 1.0),  # a node-label alias of a catalogue product
        ("NVIDIA-L4", 2, 0.09),
        ("a100-sxm4-40gb-mig-2g.10gb", 1, 0.45 * 2 / 7),  # any case
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 1, 0.45 / 7),  # alias of the parent
        ("A100-SXM4-80GB-MIG-7g.80gb", 1, 0.55),  # all seven slices: the whole GPU
        ("A100-SXM4-80GB-MIG-9g.80gb", 1, 0.55),  # never more than the whole GPU
        ("H100-SXM-80GB", 0, 1.0),  # no sharing count: one replica
        ("H100-SXM-80GB", -2, 1.0),
        ("H100-SXM-80GB", 3, 1.0 / 3),
        ("A100-SXM4-80GB-MIG-3g.40gb", 2, 0.55 * 3 / 7 / 2),
    ],
)
def test_per_gpu_hour(product: str, sharing: int, expected: float) -> None:
    assert DEFAULT_PRICES.per_gpu_hour(product, sharing) == pytest.approx(expected)


def test_mig_slices_are_sevenths() -> None:
    assert MIG_COMPUTE_SLICES == 7


def test_default_price_list() -> None:
    assert PriceList(DEFAULT_GPU_PRICES, (), "built-in defaults") == DEFAULT_PRICES
    assert DEFAULT_PRICES.problems == () and DEFAULT_PRICES.source == "built-in defaults"
    assert PriceList({}).per_gpu_hour("H100-SXM-80GB") == UNKNOWN_PRICE


def test_a_user_price_list_names_its_source_and_keeps_the_rest() -> None:
    prices = parse_prices({"h100": "2"})
    assert prices.source == "ConfigMap" and prices.problems == ()
    assert prices.prices == {**DEFAULT_GPU_PRICES, "H100-SXM-80GB": 2.0}
    assert parse_prices({"H100-SXM-80GB": 3}, "ConfigMap ops/p").source == "ConfigMap ops/p"
    assert DEFAULT_GPU_PRICES["H100-SXM-80GB"] == 1.0  # the defaults are not changed


def test_user_prices_reach_mig_slices_and_aliases() -> None:
    prices = parse_prices({"A100-SXM4-40GB": "0.7", "NVIDIA-L4": "0.5"})
    assert prices.per_gpu_hour("A100-SXM4-40GB-MIG-1g.5gb") == pytest.approx(0.1)
    assert prices.per_gpu_hour("L4-24GB") == 0.5


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("0", "data.L4-24GB: '0' is not a positive number; the default 0.18 applies"),
        ("-0.5", "data.L4-24GB: '-0.5' is not a positive number; the default 0.18 applies"),
        ("inf", "data.L4-24GB: 'inf' is not a positive number; the default 0.18 applies"),
        ("nan", "data.L4-24GB: 'nan' is not a positive number; the default 0.18 applies"),
        ("cheap", "data.L4-24GB: 'cheap' is not a positive number; the default 0.18 applies"),
        ("x" * 50, f"data.L4-24GB: {'x' * 40!r} is not a positive number; the default 0.18 "
                   "applies"),
    ],
)
def test_bad_values_are_named_and_the_default_applies(raw: str, problem: str) -> None:
    prices = parse_prices({"L4-24GB": raw})
    assert prices.problems == (problem,)
    assert prices.per_gpu_hour("L4-24GB") == 0.18


def test_smallest_positive_price_is_taken() -> None:
    assert parse_prices({"L4-24GB": "1e-9"}).per_gpu_hour("L4-24GB") == 1e-9
    assert parse_prices({"L4-24GB": " 0.25\n"}).problems == ()


def test_unknown_keys_are_named_in_key_order_and_the_rest_applies() -> None:
    prices = parse_prices({"Zed": "1", "Banana": "1", "L4-24GB": "0.3", "A10-24GB": "no"})
    assert prices.problems == (
        "data.A10-24GB: 'no' is not a positive number; the default 0.25 applies",
        "data.Banana: not a GPU product of the catalogue; ignored",
        "data.Zed: not a GPU product of the catalogue; ignored",
    )
    assert prices.per_gpu_hour("L4-24GB") == 0.3
    assert "Banana" not in prices.prices


def test_a_list_prices_a_name_it_holds_before_asking_the_catalogue() -> None:
    prices = PriceList({"sim-gpu": 0.3, "H100-SXM-80GB": 2.0})
    assert prices.per_gpu_hour("sim-gpu") == 0.3
    assert prices.per_gpu_hour("sim-gpu-MIG-1g.10gb") == pytest.approx(0.3 / 7)
    assert prices.per_gpu_hour("NVIDIA-H100-80GB-HBM3") == 2.0
    assert prices.per_gpu_hour("A100-SXM4-80GB") == UNKNOWN_PRICE  # not in this list


def test_a_price_list_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_PRICES.source = "x"  # type: ignore[misc]
