"""GPU catalogue: what the operator knows about each accelerator product.

The table lives in ``slo_operator/data/gpus.yaml`` (one row per product, each with its
sources). Precision flags (BF16, FP8 native / weight-only, FP8 KV cache) are derived from
the compute capability (NVIDIA), the gfx target (AMD) or the generation (Gaudi) by the
rules in ``slo_runtime.contract``, the same functions the in-pod launcher applies, so a
product missing from the table follows the same rules as one listed, and the plan and the
pod agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from slo_runtime.contract import (
    PrecisionSupport,
    cuda_precision,
    gaudi_precision,
    normalize_gfx,
    rocm_precision,
)

Vendor = Literal["nvidia", "amd", "intel"]
Architecture = Literal[
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
    "blackwell",
    "cdna2",
    "cdna3",
    "gaudi2",
    "gaudi3",
    "unknown",
]
Fp8Format = Literal["e4m3", "e4m3fnuz"]
ResourceName = Literal["nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi"]

VENDORS: tuple[Vendor, ...] = ("nvidia", "amd", "intel")

RESOURCE_NAMES: dict[Vendor, ResourceName] = {
    "nvidia": "nvidia.com/gpu",
    "amd": "amd.com/gpu",
    "intel": "habana.ai/gaudi",
}


@dataclass(frozen=True)
class HardwareClass:
    """One accelerator as the engine planner sees it (per schedulable device).

    ``dense_bf16_tflops`` is dense 16-bit tensor throughput: BF16, or FP16 on GPUs that
    have no BF16 (Volta, Turing). ``None`` means no source was found.
    """

    vendor: Vendor
    product: str
    display_name: str
    architecture: Architecture
    compute_capability: tuple[int, int] | None
    gfx_target: str | None
    memory_gib: float
    memory_bandwidth_gbps: float | None
    dense_bf16_tflops: float | None
    dense_fp8_tflops: float | None
    bf16: bool
    fp8_compute: bool
    fp8_weight_only: bool
    fp8_kv_cache: bool
    fp8_format: Fp8Format | None
    # The vendor's whole-GPU resource, or a MIG slice's (nvidia.com/mig-1g.10gb).
    resource_name: str
    known: bool
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Features:
    """Precision support derived from the architecture (see ``features_for_*``)."""

    architecture: Architecture
    bf16: bool
    fp8_compute: bool
    fp8_weight_only: bool
    fp8_kv_cache: bool
    fp8_format: Fp8Format | None


def architecture_for_cc(cc: tuple[int, int] | None) -> Architecture:
    """Map a CUDA compute capability to its architecture family.

    Source: NVIDIA/k8s-device-plugin internal/lm/resource.go (GFD family label:
    7.x<5 volta, 7.5 turing, 8.x<9 ampere, 8.9 ada-lovelace, 9 hopper) and
    developer.nvidia.com/cuda-gpus for Blackwell (10.x datacenter, 12.x client).
    """
    if cc is None:
        return "unknown"
    major, minor = cc
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada" if minor >= 9 else "ampere"
    if major == 9:
        return "hopper"
    if major in (10, 11, 12):
        return "blackwell"
    return "unknown"


def _features(arch: Architecture, support: PrecisionSupport) -> Features:
    fmt: Fp8Format | None = None
    if support.fp8_format == "e4m3":
        fmt = "e4m3"
    elif support.fp8_format == "e4m3fnuz":
        fmt = "e4m3fnuz"
    return Features(
        architecture=arch,
        bf16=support.bf16,
        fp8_compute=support.fp8_compute,
        fp8_weight_only=support.fp8_weight_only,
        fp8_kv_cache=support.fp8_kv_cache,
        fp8_format=fmt,
    )


def features_for_cc(cc: tuple[int, int] | None) -> Features:
    """NVIDIA precision support from the compute capability alone.

    The rules live in ``slo_runtime.contract`` (``cuda_precision``), which the in-pod
    launcher reads too: BF16 from 8.0, native FP8 (W8A8) from 8.9, ``--quantization fp8``
    weight-only through FP8 Marlin on 8.0-8.8, an FP8 KV cache by default only from 8.9.
    Each rule quotes its vLLM source there.
    """
    return _features(architecture_for_cc(cc), cuda_precision(cc))


def architecture_for_gfx(gfx: str | None) -> Architecture:
    """gfx90a is CDNA2 (MI200), gfx94x CDNA3 (MI300); others have no name here."""
    g = normalize_gfx(gfx) or ""
    if g.startswith("gfx94"):
        return "cdna3"
    if g.startswith("gfx90a"):
        return "cdna2"
    return "unknown"


def features_for_gfx(gfx: str | None) -> Features:
    """AMD precision support from the gfx target.

    The rules live in ``slo_runtime.contract`` (``rocm_precision``): FP8 on gfx94x, gfx95x
    and gfx12 (gfx94x stores ``float8_e4m3fnuz``), no weight-only fallback (Marlin is
    disabled on ROCm), BF16 wherever vLLM's capability check passes on the capability it
    derives from the target (gfx90a -> 9.0: MI200 and MI300 run BF16); an unknown or
    missing target gets FP16 only (conservative).
    """
    return _features(architecture_for_gfx(gfx), rocm_precision(gfx))


def features_for_gaudi(architecture: Architecture | None) -> Features:
    """Intel Gaudi precision support from the generation (``gaudi2``, ``gaudi3``).

    ``slo_runtime.contract.gaudi_precision``: BF16 on every generation; FP8 (through Intel
    Neural Compressor, with a calibration file) and an ``fp8_inc`` KV cache on Gaudi 2 and 3.
    """
    arch: Architecture = architecture or "unknown"
    return _features(arch, gaudi_precision(arch))


class _Row(BaseModel):
    """Schema of one row of ``data/gpus.yaml`` (validated on load)."""

    model_config = ConfigDict(extra="forbid")

    product: str
    vendor: Vendor
    display_name: str
    compute_capability: tuple[int, int] | None = None
    gfx_target: str | None = None
    architecture: Architecture | None = None
    memory_gib: float = Field(gt=0)
    memory_bandwidth_gbps: float | None = None
    dense_bf16_tflops: float | None = None
    dense_fp8_tflops: float | None = None
    # Gaudi rows may state their precision support; it must equal what the rule in
    # slo_runtime.contract derives from the row's architecture (gaudi2, gaudi3), which is
    # what is used. Never derived from a row for NVIDIA or AMD.
    bf16: bool | None = None
    fp8_compute: bool | None = None
    fp8_kv_cache: bool | None = None
    fp8_format: Fp8Format | None = None
    labels: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    device_ids: tuple[str, ...] = ()
    sources: tuple[str, ...] = Field(min_length=1)


@dataclass(frozen=True)
class CatalogueEntry:
    """Describe one catalogue product: its hardware class and the names that find it."""

    hardware: HardwareClass
    labels: tuple[str, ...]
    aliases: tuple[str, ...]
    device_ids: tuple[str, ...]

    @property
    def canonical_label(self) -> str:
        """The node-label value a selector for this product should use."""
        return self.labels[0] if self.labels else self.hardware.product


_VENDOR_PREFIXES = ("NVIDIA", "AMD", "INSTINCT", "TESLA", "GEFORCE", "INTEL", "HABANA")


def product_key(raw: str) -> str:
    """Normalise a product string for matching.

    Upper-case, punctuation dropped, vendor words stripped from the front: old GFD
    drops the ``NVIDIA-`` prefix (``A100-SXM4-40GB``), newer sanitising drops characters
    outside ``[A-Za-z0-9-_. ]`` (NVIDIA/k8s-device-plugin internal/lm/resource.go), and
    the AMD labeller turns spaces into ``_`` (ROCm/k8s-device-plugin k8s-node-labeller).
    """
    key = re.sub(r"[^A-Z0-9]", "", raw.upper())
    stripped = True
    while stripped:
        stripped = False
        for prefix in _VENDOR_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                stripped = True
    return key


def _build(row: _Row) -> CatalogueEntry:
    if row.vendor == "nvidia":
        feats = features_for_cc(row.compute_capability)
    elif row.vendor == "amd":
        feats = features_for_gfx(row.gfx_target)
    else:
        feats = features_for_gaudi(row.architecture)
        stated = {"bf16": row.bf16, "fp8_compute": row.fp8_compute,
                  "fp8_kv_cache": row.fp8_kv_cache, "fp8_format": row.fp8_format}
        wrong = [f"{k}: {v!r} (rule: {getattr(feats, k)!r})" for k, v in stated.items()
                 if v is not None and v != getattr(feats, k)]
        if wrong:
            raise ValueError(
                f"GPU catalogue: {row.product} ({row.architecture or 'no architecture'}) "
                f"disagrees with the precision rules in slo_runtime.contract: "
                + "; ".join(wrong)
            )
    hw = HardwareClass(
        vendor=row.vendor,
        product=row.product,
        display_name=row.display_name,
        architecture=row.architecture or feats.architecture,
        compute_capability=row.compute_capability,
        gfx_target=row.gfx_target,
        memory_gib=row.memory_gib,
        memory_bandwidth_gbps=row.memory_bandwidth_gbps,
        dense_bf16_tflops=row.dense_bf16_tflops,
        dense_fp8_tflops=row.dense_fp8_tflops if feats.fp8_compute else None,
        bf16=feats.bf16,
        fp8_compute=feats.fp8_compute,
        fp8_weight_only=feats.fp8_weight_only,
        fp8_kv_cache=feats.fp8_kv_cache,
        fp8_format=feats.fp8_format,
        resource_name=RESOURCE_NAMES[row.vendor],
        known=True,
        sources=row.sources,
    )
    return CatalogueEntry(
        hardware=hw,
        labels=row.labels,
        aliases=row.aliases,
        device_ids=tuple(d.lower().removeprefix("0x") for d in row.device_ids),
    )


@dataclass(frozen=True)
class Catalogue:
    """Index the known GPU products by normalised name and by PCI device id."""

    entries: tuple[CatalogueEntry, ...]
    by_key: dict[str, CatalogueEntry]
    by_device_id: dict[str, CatalogueEntry]

    def lookup(self, raw: str) -> CatalogueEntry | None:
        """Find a product by label value, canonical key or alias (loose match)."""
        return self.by_key.get(product_key(raw))

    def lookup_device_id(self, device_id: str) -> CatalogueEntry | None:
        return self.by_device_id.get(device_id.lower().removeprefix("0x"))

    def names(self) -> tuple[str, ...]:
        return tuple(e.hardware.product for e in self.entries)


def parse_catalogue(text: str) -> Catalogue:
    """Validate and index a catalogue YAML document; duplicate keys are an error."""
    raw = yaml.safe_load(text)
    if not isinstance(raw, list):
        raise ValueError("GPU catalogue must be a YAML list of rows")
    entries = tuple(_build(_Row.model_validate(item)) for item in raw)
    by_key: dict[str, CatalogueEntry] = {}
    by_dev: dict[str, CatalogueEntry] = {}
    for entry in entries:
        names = (entry.hardware.product, *entry.labels, *entry.aliases)
        for name in names:
            key = product_key(name)
            other = by_key.get(key)
            if other is not None and other is not entry:
                raise ValueError(
                    f"GPU catalogue: name {name!r} matches both "
                    f"{other.hardware.product} and {entry.hardware.product}"
                )
            by_key[key] = entry
        for dev in entry.device_ids:
            if dev in by_dev:
                raise ValueError(f"GPU catalogue: device id {dev} listed twice")
            by_dev[dev] = entry
    return Catalogue(entries=entries, by_key=by_key, by_device_id=by_dev)


@cache
def load_catalogue() -> Catalogue:
    """The catalogue shipped as package data (``slo_operator/data/gpus.yaml``)."""
    text = resources.files("slo_operator").joinpath("data/gpus.yaml").read_text("utf-8")
    return parse_catalogue(text)
