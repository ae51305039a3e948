"""GPU prices: what one GPU-hour of each product costs, relative or in money.

Only ratios matter to placement (cheapest cost per unit of SLO-meeting throughput first),
so the defaults are relative to one H100 SXM GPU-hour = 1.00. They approximate public
cloud on-demand list prices per GPU-hour of late 2025 and are meant to be replaced: a
platform team puts its own (negotiated, amortised on-prem, or spot) prices in a ConfigMap
labelled ``PRICES_LABEL`` (docs/placement.md), one key per catalogue product, e.g.
``H100-SXM-80GB: "2.10"``. Keys that are not catalogue products or values that are not
positive numbers are reported by name and ignored; the rest still apply.

A MIG slice costs its share of the parent GPU (``g`` of 7 compute slices) and a
time-sliced GPU its share of the sharing replicas: placement compares like with like.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from slo_operator.api.models import GROUP
from slo_operator.hardware import resolve_product

# A ConfigMap with this label (value "true") holds the price list; see docs/placement.md.
PRICES_LABEL = f"{GROUP}/gpu-prices"

# Relative price per GPU-hour, H100 SXM = 1.00 (catalogue products, data/gpus.yaml).
DEFAULT_GPU_PRICES: Mapping[str, float] = MappingProxyType({
    "V100-SXM2-16GB": 0.30,
    "V100-SXM2-32GB": 0.35,
    "T4-16GB": 0.12,
    "A100-SXM4-40GB": 0.45,
    "A100-SXM4-80GB": 0.55,
    "A100-PCIE-40GB": 0.40,
    "A100-PCIE-80GB": 0.50,
    "A10-24GB": 0.25,
    "A10G-24GB": 0.27,
    "RTX-3090-24GB": 0.10,
    "RTX-A6000-48GB": 0.20,
    "L4-24GB": 0.18,
    "L40-48GB": 0.35,
    "L40S-48GB": 0.40,
    "RTX-4090-24GB": 0.15,
    "H100-SXM-80GB": 1.00,
    "H100-PCIE-80GB": 0.85,
    "H100-NVL-94GB": 0.95,
    "H200-SXM-141GB": 1.20,
    "B200-SXM-180GB": 1.70,
    "GB200-186GB": 2.00,
    "MI210-64GB": 0.30,
    "MI250X-64GB": 0.45,
    "MI300X-192GB": 0.80,
    "MI325X-256GB": 0.95,
    "Gaudi2-96GB": 0.40,
    "Gaudi3-128GB": 0.60,
})  # read-only: parse_prices(None) hands out this very mapping
# A product the list does not name (a new GPU) is priced like the dearest known one, so
# it is never preferred on price alone.
UNKNOWN_PRICE = max(DEFAULT_GPU_PRICES.values())

_MIG = re.compile(r"-MIG-(\d+)g\.", re.IGNORECASE)
MIG_COMPUTE_SLICES = 7


@dataclass(frozen=True)
class PriceList:
    """Price per GPU-hour by catalogue product, and what was wrong with the user's list."""

    prices: Mapping[str, float]
    problems: tuple[str, ...] = ()
    source: str = "built-in defaults"

    def per_gpu_hour(self, product: str, sharing_replicas: int = 1) -> float:
        """Price of one GPU-hour of ``product`` (a MIG slice or a time-sliced share costs
        its part of the parent GPU)."""
        m = _MIG.search(product)
        base_product = product[:m.start()] if m else product
        price = self.prices.get(base_product)
        if price is None:
            hw = resolve_product(base_product).hardware
            price = UNKNOWN_PRICE if hw is None else self.prices.get(hw.product, UNKNOWN_PRICE)
        if m:
            price *= min(MIG_COMPUTE_SLICES, int(m.group(1))) / MIG_COMPUTE_SLICES
        return price / max(1, sharing_replicas)


DEFAULT_PRICES = PriceList(DEFAULT_GPU_PRICES)


def parse_prices(data: Mapping[str, object] | None, source: str = "") -> PriceList:
    """The defaults overlaid with a ConfigMap's ``data``; bad entries named, not fatal."""
    if not data:
        return DEFAULT_PRICES
    prices = dict(DEFAULT_GPU_PRICES)
    problems = []
    for key, raw in sorted(data.items()):
        res = resolve_product(str(key))
        product = res.hardware.product if res.hardware is not None and res.hardware.known \
            else None
        if product is None:
            problems.append(f"data.{key}: not a GPU product of the catalogue; ignored")
            continue
        try:
            value = float(str(raw).strip())
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            problems.append(f"data.{key}: {str(raw)[:40]!r} is not a positive number; "
                            f"the default {DEFAULT_GPU_PRICES.get(product, UNKNOWN_PRICE)} "
                            "applies")
            continue
        prices[product] = value
    return PriceList(prices, tuple(problems), source or "ConfigMap")
