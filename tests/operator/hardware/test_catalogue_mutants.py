"""GPU catalogue: types, derived feature flags, row schema, indexes and the packaged table.

Boundaries come from docs/hardware-and-engine.md (rules H5-H10, H14) and the rows of
tests/fixtures/hardware (gpus.csv, device-names.yaml).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import get_args

import pytest
from pydantic import ValidationError

from slo_operator.hardware.catalogue import (
    RESOURCE_NAMES,
    VENDORS,
    Architecture,
    Features,
    Fp8Format,
    ResourceName,
    Vendor,
    architecture_for_cc,
    features_for_cc,
    features_for_gfx,
    load_catalogue,
    parse_catalogue,
    product_key,
)

# ---------------------------------------------------------------- public types


def test_vendors_and_their_resources() -> None:
    # H14 and the device plugins' extended resources.
    assert VENDORS == ("nvidia", "amd", "intel")
    assert get_args(Vendor) == VENDORS
    assert RESOURCE_NAMES == {
        "nvidia": "nvidia.com/gpu",
        "amd": "amd.com/gpu",
        "intel": "habana.ai/gaudi",
    }
    assert get_args(ResourceName) == tuple(RESOURCE_NAMES.values())


def test_architecture_and_fp8_format_names() -> None:
    assert get_args(Architecture) == (
        "volta", "turing", "ampere", "ada", "hopper", "blackwell",
        "cdna2", "cdna3", "gaudi2", "gaudi3", "unknown",
    )
    assert get_args(Fp8Format) == ("e4m3", "e4m3fnuz")


# ---------------------------------------------------------------- compute capability


@pytest.mark.parametrize(
    ("cc", "arch"),
    [
        (None, "unknown"),
        ((3, 3), "unknown"),
        ((6, 1), "unknown"),
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 4), "volta"),
        ((7, 5), "turing"),
        ((7, 6), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 8), "ampere"),
        ((8, 9), "ada"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((11, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((13, 0), "unknown"),
    ],
    ids=str,
)
def test_architecture_for_cc(cc: tuple[int, int] | None, arch: str) -> None:
    assert architecture_for_cc(cc) == arch


# (architecture, bf16, fp8_compute, fp8_weight_only, fp8_kv_cache, fp8_format): H6-H9.
@pytest.mark.parametrize(
    ("cc", "want"),
    [
        (None, Features("unknown", False, False, False, False, None)),
        ((6, 1), Features("unknown", False, False, False, False, None)),
        ((7, 0), Features("volta", False, False, False, False, None)),
        ((7, 5), Features("turing", False, False, False, False, None)),
        ((7, 9), Features("turing", False, False, False, False, None)),
        ((8, 0), Features("ampere", True, False, True, False, None)),
        ((8, 1), Features("ampere", True, False, True, False, None)),
        ((8, 8), Features("ampere", True, False, True, False, None)),
        ((8, 9), Features("ada", True, True, False, True, "e4m3")),
        ((9, 0), Features("hopper", True, True, False, True, "e4m3")),
        ((10, 0), Features("blackwell", True, True, False, True, "e4m3")),
        ((12, 0), Features("blackwell", True, True, False, True, "e4m3")),
    ],
    ids=str,
)
def test_features_for_cc(cc: tuple[int, int] | None, want: Features) -> None:
    assert features_for_cc(cc) == want


# ---------------------------------------------------------------- gfx target (H10)


@pytest.mark.parametrize(
    ("gfx", "want"),
    [
        (None, Features("unknown", False, False, False, False, None)),
        ("gfx908", Features("unknown", False, False, False, False, None)),
        ("gfx90a", Features("cdna2", True, False, False, False, None)),
        ("GFX90A", Features("cdna2", True, False, False, False, None)),
        ("gfx940", Features("cdna3", True, True, False, True, "e4m3fnuz")),
        ("gfx942", Features("cdna3", True, True, False, True, "e4m3fnuz")),
        ("Gfx942", Features("cdna3", True, True, False, True, "e4m3fnuz")),
        ("gfx950", Features("unknown", True, True, False, True, "e4m3")),
        ("gfx1100", Features("unknown", True, False, False, False, None)),
        ("gfx1030", Features("unknown", False, False, False, False, None)),
        ("gfx1201", Features("unknown", True, True, False, True, "e4m3")),
    ],
    ids=str,
)
def test_features_for_gfx(gfx: str | None, want: Features) -> None:
    assert features_for_gfx(gfx) == want


# ---------------------------------------------------------------- product keys (H2)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("NVIDIA-T4", "T4"),
        ("AMD MI300X", "MI300X"),
        ("Instinct_MI210", "MI210"),
        ("Tesla-V100", "V100"),
        ("GeForce RTX 4090", "RTX4090"),
        ("Intel Gaudi2", "GAUDI2"),
        ("Habana Gaudi3", "GAUDI3"),
        # Vendor words in any order, each stripped (a second pass after a later prefix).
        ("Tesla NVIDIA T4", "T4"),
        ("Habana Intel Gaudi2", "GAUDI2"),
        # A vendor word alone is kept, never emptied.
        ("NVIDIA", "NVIDIA"),
        ("nvidia-nvidia", "NVIDIA"),
        ("Tesla", "TESLA"),
        ("h100-80gb (HBM3)", "H10080GBHBM3"),
        ("", ""),
    ],
)
def test_product_key(raw: str, want: str) -> None:
    assert product_key(raw) == want


# ---------------------------------------------------------------- rows and indexes

MINIMAL_NV = "- {product: X-1, vendor: nvidia, display_name: X one, memory_gib: 0.5, sources: [s]}"


def test_minimal_row_defaults() -> None:
    cat = parse_catalogue(MINIMAL_NV)
    (entry,) = cat.entries
    hw = entry.hardware
    assert (entry.labels, entry.aliases, entry.device_ids) == ((), (), ())
    assert entry.canonical_label == "X-1"
    assert hw.product == "X-1" and hw.display_name == "X one" and hw.vendor == "nvidia"
    assert hw.compute_capability is None and hw.gfx_target is None
    assert hw.architecture == "unknown"
    assert hw.memory_gib == 0.5
    assert hw.memory_bandwidth_gbps is None
    assert hw.dense_bf16_tflops is None and hw.dense_fp8_tflops is None
    assert (hw.bf16, hw.fp8_compute, hw.fp8_weight_only, hw.fp8_kv_cache) == (
        False, False, False, False)
    assert hw.fp8_format is None
    assert hw.resource_name == "nvidia.com/gpu"
    assert hw.known is True
    assert hw.sources == ("s",)
    assert cat.names() == ("X-1",)
    assert cat.lookup("x 1") is entry
    assert cat.by_device_id == {}


def test_nvidia_row_flags_follow_compute_capability() -> None:
    cat = parse_catalogue(
        "- {product: A-1, vendor: nvidia, display_name: A, compute_capability: [8, 0],"
        " memory_gib: 40, memory_bandwidth_gbps: 1555, dense_bf16_tflops: 312,"
        " dense_fp8_tflops: 624, labels: [Lab-A, Lab-B], aliases: [AA], sources: [s, t]}\n"
        "- {product: H-1, vendor: nvidia, display_name: H, compute_capability: [9, 0],"
        " memory_gib: 80, dense_fp8_tflops: 1979, sources: [s]}\n"
    )
    a, h = cat.entries
    # Ampere has no FP8 tensor throughput, whatever the row says (H7).
    assert a.hardware.dense_fp8_tflops is None
    assert a.hardware.dense_bf16_tflops == 312
    assert a.hardware.memory_bandwidth_gbps == 1555
    assert (a.hardware.architecture, a.hardware.bf16, a.hardware.fp8_weight_only) == (
        "ampere", True, True)
    assert a.hardware.compute_capability == (8, 0)
    assert a.canonical_label == "Lab-A"
    assert a.labels == ("Lab-A", "Lab-B") and a.aliases == ("AA",)
    assert a.hardware.sources == ("s", "t")
    assert h.hardware.dense_fp8_tflops == 1979
    assert h.hardware.fp8_format == "e4m3"
    for name in ("A-1", "lab a", "LAB-B", "aa"):
        assert cat.lookup(name) is a
    assert cat.lookup("H 1") is h
    assert cat.lookup("nope") is None


def test_amd_row_flags_follow_gfx_and_device_ids_are_normalised() -> None:
    cat = parse_catalogue(
        "- {product: M-1, vendor: amd, display_name: M, gfx_target: gfx942, memory_gib: 192,"
        " dense_fp8_tflops: 2614.9, device_ids: ['0x74A1', '74B5'], sources: [s]}\n"
    )
    (m,) = cat.entries
    hw = m.hardware
    assert hw.gfx_target == "gfx942" and hw.compute_capability is None
    assert (hw.architecture, hw.fp8_compute, hw.fp8_format) == ("cdna3", True, "e4m3fnuz")
    assert hw.dense_fp8_tflops == 2614.9
    assert hw.resource_name == "amd.com/gpu"
    assert m.device_ids == ("74a1", "74b5")
    assert cat.by_device_id == {"74a1": m, "74b5": m}
    for dev in ("74a1", "0x74a1", "0X74A1", "74B5"):
        assert cat.lookup_device_id(dev) is m
    assert cat.lookup_device_id("740f") is None


def test_row_architecture_overrides_the_derived_one() -> None:
    cat = parse_catalogue(
        "- {product: N-1, vendor: nvidia, display_name: N, architecture: hopper,"
        " memory_gib: 1, sources: [s]}"
    )
    assert cat.entries[0].hardware.architecture == "hopper"
    # The flags still come from the (absent) compute capability.
    assert cat.entries[0].hardware.bf16 is False


def test_gaudi_row_flags_come_from_the_row() -> None:
    cat = parse_catalogue(
        "- {product: G-1, vendor: intel, display_name: G, architecture: gaudi3,"
        " memory_gib: 128, dense_fp8_tflops: 1835, bf16: true, fp8_compute: true,"
        " fp8_kv_cache: true, fp8_format: e4m3, sources: [s]}\n"
        "- {product: G-2, vendor: intel, display_name: G2, memory_gib: 96,"
        " dense_fp8_tflops: 865, fp8_kv_cache: true, fp8_format: e4m3fnuz, sources: [s]}\n"
        "- {product: G-3, vendor: intel, display_name: G3, memory_gib: 96,"
        " fp8_compute: true, sources: [s]}\n"
    )
    g1, g2, g3 = (e.hardware for e in cat.entries)
    assert (g1.architecture, g1.bf16, g1.fp8_compute, g1.fp8_weight_only, g1.fp8_kv_cache,
            g1.fp8_format, g1.dense_fp8_tflops) == ("gaudi3", True, True, False, True, "e4m3", 1835)
    assert g1.resource_name == "habana.ai/gaudi"
    # No FP8 compute: no FP8 format or FP8 throughput, whatever the row says.
    assert (g2.architecture, g2.bf16, g2.fp8_compute, g2.fp8_kv_cache, g2.fp8_format,
            g2.dense_fp8_tflops) == ("unknown", False, False, True, None, None)
    assert (g3.fp8_compute, g3.fp8_kv_cache, g3.fp8_format, g3.bf16) == (True, False, None, False)
    assert (g3.dense_fp8_tflops, g3.dense_bf16_tflops, g3.memory_bandwidth_gbps) == (
        None, None, None)


@pytest.mark.parametrize("arch", get_args(Architecture))
def test_every_architecture_is_accepted_in_a_row(arch: str) -> None:
    cat = parse_catalogue(
        f"- {{product: G-1, vendor: intel, display_name: G, architecture: {arch},"
        " memory_gib: 1, sources: [s]}"
    )
    assert cat.entries[0].hardware.architecture == arch


@pytest.mark.parametrize("fmt", get_args(Fp8Format))
def test_every_fp8_format_is_accepted_in_a_row(fmt: str) -> None:
    cat = parse_catalogue(
        f"- {{product: G-1, vendor: intel, display_name: G, fp8_compute: true, fp8_format: {fmt},"
        " memory_gib: 1, sources: [s]}"
    )
    assert cat.entries[0].hardware.fp8_format == fmt


@pytest.mark.parametrize(
    "row",
    [
        "{product: X, vendor: nvidia, display_name: X, memory_gib: 0, sources: [s]}",
        "{product: X, vendor: nvidia, display_name: X, memory_gib: -1, sources: [s]}",
        "{product: X, vendor: nvidia, display_name: X, memory_gib: 1, sources: []}",
        "{product: X, vendor: nvidia, display_name: X, memory_gib: 1}",
        "{product: X, vendor: nvidia, display_name: X, sources: [s]}",
        "{product: X, vendor: arm, display_name: X, memory_gib: 1, sources: [s]}",
        "{product: X, vendor: nvidia, display_name: X, memory_gib: 1, sources: [s], tdp: 700}",
        "{product: X, vendor: intel, display_name: X, memory_gib: 1, sources: [s],"
        " architecture: maxwell}",
        "{product: X, vendor: intel, display_name: X, memory_gib: 1, sources: [s],"
        " fp8_format: e5m2}",
    ],
    ids=["zero-memory", "negative-memory", "no-sources", "sources-missing", "memory-missing",
         "unknown-vendor",
         "unknown-column", "unknown-architecture", "unknown-fp8-format"],
)
def test_invalid_rows_are_rejected(row: str) -> None:
    with pytest.raises(ValidationError):
        parse_catalogue(f"- {row}")


@pytest.mark.parametrize("text", ["{product: X}", "just text", "", "42"])
def test_catalogue_must_be_a_list(text: str) -> None:
    with pytest.raises(ValueError, match=r"^GPU catalogue must be a YAML list of rows$"):
        parse_catalogue(text)


def test_empty_list_is_an_empty_catalogue() -> None:
    cat = parse_catalogue("[]")
    assert cat.entries == () and cat.names() == () and cat.by_key == {}


def test_a_row_may_repeat_its_own_names() -> None:
    cat = parse_catalogue(
        "- {product: X-1, vendor: nvidia, display_name: X, memory_gib: 1,"
        " labels: [X-1, NVIDIA-X-1], aliases: [x1], sources: [s]}"
    )
    assert list(cat.by_key) == ["X1"]


def test_a_name_shared_by_two_rows_is_an_error_naming_both() -> None:
    with pytest.raises(
        ValueError, match=r"^GPU catalogue: name 'x 1' matches both X-1 and Y-1$"
    ):
        parse_catalogue(
            "- {product: X-1, vendor: nvidia, display_name: X, memory_gib: 1, sources: [s]}\n"
            "- {product: Y-1, vendor: nvidia, display_name: Y, memory_gib: 1,"
            " aliases: ['x 1'], sources: [s]}\n"
        )


def test_a_device_id_listed_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^GPU catalogue: device id 74a1 listed twice$"):
        parse_catalogue(
            "- {product: X-1, vendor: amd, display_name: X, memory_gib: 1,"
            " device_ids: ['74a1'], sources: [s]}\n"
            "- {product: Y-1, vendor: amd, display_name: Y, memory_gib: 1,"
            " device_ids: ['0x74A1'], sources: [s]}\n"
        )


# ---------------------------------------------------------------- the packaged catalogue


def test_packaged_catalogue_is_read_once() -> None:
    assert load_catalogue() is load_catalogue()


# device-names.yaml: vLLM's AMD device-ID map (rocm.py _ROCM_DEVICE_ID_NAME_MAP).
@pytest.mark.parametrize(
    ("device_id", "product"),
    [("0x74a1", "MI300X-192GB"), ("0x74b5", "MI300X-192GB"), ("0x74a9", "MI300X-192GB"),
     ("0x74bd", "MI300X-192GB"), ("0x74a5", "MI325X-256GB"), ("0x74b9", "MI325X-256GB")],
)
def test_packaged_device_ids(device_id: str, product: str) -> None:
    entry = load_catalogue().lookup_device_id(device_id)
    assert entry is not None and entry.hardware.product == product


# gpus.csv and rules H6-H10/H14: (product, architecture, bf16, fp8, weight-only FP8, FP8 KV,
# FP8 format, resource).
@pytest.mark.parametrize(
    ("product", "want"),
    [
        ("V100-SXM2-16GB", ("volta", False, False, False, False, None, "nvidia.com/gpu")),
        ("T4-16GB", ("turing", False, False, False, False, None, "nvidia.com/gpu")),
        ("A100-SXM4-40GB", ("ampere", True, False, True, False, None, "nvidia.com/gpu")),
        ("L40S-48GB", ("ada", True, True, False, True, "e4m3", "nvidia.com/gpu")),
        ("H100-SXM-80GB", ("hopper", True, True, False, True, "e4m3", "nvidia.com/gpu")),
        ("B200-SXM-180GB", ("blackwell", True, True, False, True, "e4m3", "nvidia.com/gpu")),
        ("MI250X-64GB", ("cdna2", True, False, False, False, None, "amd.com/gpu")),
        ("MI300X-192GB", ("cdna3", True, True, False, True, "e4m3fnuz", "amd.com/gpu")),
        ("Gaudi2-96GB", ("gaudi2", True, True, False, True, "e4m3", "habana.ai/gaudi")),
        ("Gaudi3-128GB", ("gaudi3", True, True, False, True, "e4m3", "habana.ai/gaudi")),
    ],
)
def test_packaged_rows(product: str, want: tuple[object, ...]) -> None:
    entry = load_catalogue().lookup(product)
    assert entry is not None
    hw = entry.hardware
    assert hw.product == product and hw.known
    assert (hw.architecture, hw.bf16, hw.fp8_compute, hw.fp8_weight_only, hw.fp8_kv_cache,
            hw.fp8_format, hw.resource_name) == want


def test_catalogue_values_are_immutable_and_hashable() -> None:
    cat = load_catalogue()
    entry = cat.lookup("H100")
    assert entry is not None
    feats = features_for_cc((9, 0))
    for value, attr in ((entry.hardware, "memory_gib"), (feats, "bf16"), (entry, "labels"),
                        (cat, "entries")):
        with pytest.raises(FrozenInstanceError):
            setattr(value, attr, None)
    assert hash(entry.hardware) == hash(load_catalogue().by_key["H100SXM80GB"].hardware)
    assert hash(feats) == hash(features_for_cc((9, 0)))
    assert {entry: 1}[entry] == 1
