"""GPU catalogue (hardware.catalogue): feature flags derived from the compute capability or
gfx target, product keys, the row schema and indexes, and the packaged table.

Boundaries come from docs/hardware-and-engine.md (rules H5-H10, H14) and the rows of
tests/fixtures/hardware (gpus.csv, device-names.yaml). Refusal messages are pinned in
tests/golden/hardware.yaml.
"""

from __future__ import annotations

import csv
from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from pydantic import ValidationError

from slo_operator.hardware.catalogue import (
    RESOURCE_NAMES,
    VENDORS,
    Features,
    architecture_for_cc,
    features_for_cc,
    features_for_gfx,
    load_catalogue,
    parse_catalogue,
    product_key,
)
from tests.support.paths import FIXTURES

HW_FIXTURES = FIXTURES / "hardware"


def test_each_vendor_requests_its_device_plugin_resource() -> None:
    # H14 and the device plugins' extended resources.
    assert VENDORS == ("nvidia", "amd", "intel")
    assert RESOURCE_NAMES == {
        "nvidia": "nvidia.com/gpu",
        "amd": "amd.com/gpu",
        "intel": "habana.ai/gaudi",
    }


# ---------------------------------------------------------------- compute capability (H5-H9)


@pytest.mark.parametrize(
    ("cc", "want_arch"),
    [
        pytest.param(None, "unknown", id="no-capability"),
        pytest.param((3, 3), "unknown", id="kepler"),
        pytest.param((6, 1), "unknown", id="pascal"),
        pytest.param((7, 0), "volta", id="volta-first"),
        pytest.param((7, 2), "volta", id="volta-xavier"),
        pytest.param((7, 4), "volta", id="volta-last-below-turing"),
        pytest.param((7, 5), "turing", id="turing-first"),
        pytest.param((7, 6), "turing", id="turing-above"),
        pytest.param((8, 0), "ampere", id="ampere-first"),
        pytest.param((8, 6), "ampere", id="ampere-consumer"),
        pytest.param((8, 8), "ampere", id="ampere-last-below-ada"),
        pytest.param((8, 9), "ada", id="ada"),
        pytest.param((9, 0), "hopper", id="hopper"),
        pytest.param((10, 0), "blackwell", id="blackwell-datacenter"),
        pytest.param((11, 0), "blackwell", id="blackwell-11"),
        pytest.param((12, 0), "blackwell", id="blackwell-client"),
        pytest.param((13, 0), "unknown", id="beyond-blackwell"),
    ],
)
def test_architecture_for_cc(cc: tuple[int, int] | None, want_arch: str) -> None:
    assert architecture_for_cc(cc) == want_arch


# Features(architecture, bf16, fp8_compute, fp8_weight_only, fp8_kv_cache, fp8_format).
@pytest.mark.parametrize(
    ("cc", "want"),
    [
        pytest.param(None, Features("unknown", False, False, False, False, None),
                     id="no-capability-is-conservative"),
        pytest.param((6, 1), Features("unknown", False, False, False, False, None),
                     id="pascal-nothing"),
        pytest.param((7, 0), Features("volta", False, False, False, False, None),
                     id="volta-no-bf16"),
        pytest.param((7, 5), Features("turing", False, False, False, False, None),
                     id="turing-no-bf16"),
        pytest.param((7, 9), Features("turing", False, False, False, False, None),
                     id="just-below-8-0-no-bf16"),
        pytest.param((8, 0), Features("ampere", True, False, True, False, None),
                     id="ampere-bf16-and-weight-only-fp8"),
        pytest.param((8, 1), Features("ampere", True, False, True, False, None),
                     id="ampere-8-1"),
        pytest.param((8, 6), Features("ampere", True, False, True, False, None),
                     id="ampere-8-6"),
        pytest.param((8, 8), Features("ampere", True, False, True, False, None),
                     id="just-below-8-9-weight-only"),
        pytest.param((8, 9), Features("ada", True, True, False, True, "e4m3"),
                     id="ada-native-fp8"),
        pytest.param((9, 0), Features("hopper", True, True, False, True, "e4m3"),
                     id="hopper-native-fp8"),
        pytest.param((10, 0), Features("blackwell", True, True, False, True, "e4m3"),
                     id="blackwell-native-fp8"),
        pytest.param((12, 0), Features("blackwell", True, True, False, True, "e4m3"),
                     id="blackwell-client-native-fp8"),
    ],
)
def test_features_for_cc(cc: tuple[int, int] | None, want: Features) -> None:
    assert features_for_cc(cc) == want


# ---------------------------------------------------------------- gfx target (H10)


@pytest.mark.parametrize(
    ("gfx", "want"),
    [
        pytest.param(None, Features("unknown", False, False, False, False, None),
                     id="no-target-is-conservative"),
        # vLLM's BF16 check on the capability it derives from the target (rocm.py
        # _capability_from_gcn_arch: gfx908 -> 9.0, gfx1030 -> 10.3; >= 8.0 passes).
        pytest.param("gfx908", Features("unknown", True, False, False, False, None),
                     id="mi100-bf16-by-vllms-check"),
        pytest.param("gfx803", Features("unknown", False, False, False, False, None),
                     id="gfx8-refused-by-vllm-nothing"),
        pytest.param("gfx", Features("unknown", False, False, False, False, None),
                     id="target-without-digits-nothing"),
        pytest.param("gfx90a:sramecc+:xnack-", Features("cdna2", True, False, False, False,
                                                        None),
                     id="torch-gcn-arch-name-with-features"),
        pytest.param("gfx90a", Features("cdna2", True, False, False, False, None),
                     id="cdna2-bf16-no-fp8"),
        pytest.param("GFX90A", Features("cdna2", True, False, False, False, None),
                     id="upper-case-target"),
        pytest.param("gfx940", Features("cdna3", True, True, False, True, "e4m3fnuz"),
                     id="gfx940-fnuz"),
        pytest.param("gfx942", Features("cdna3", True, True, False, True, "e4m3fnuz"),
                     id="mi300-fnuz"),
        pytest.param("Gfx942", Features("cdna3", True, True, False, True, "e4m3fnuz"),
                     id="mixed-case-target"),
        pytest.param("gfx950", Features("unknown", True, True, False, True, "e4m3"),
                     id="gfx95-ocp-fp8"),
        pytest.param("gfx1100", Features("unknown", True, False, False, False, None),
                     id="rdna3-bf16-no-fp8"),
        pytest.param("gfx1030", Features("unknown", True, False, False, False, None),
                     id="rdna2-bf16-no-fp8"),
        pytest.param("gfx1201", Features("unknown", True, True, False, True, "e4m3"),
                     id="rdna4-fp8"),
    ],
)
def test_features_for_gfx(gfx: str | None, want: Features) -> None:
    # No weight-only FP8 on ROCm in any row: "Disable marlin for rocm" (fp8.py).
    assert features_for_gfx(gfx) == want


# ---------------------------------------------------------------- product keys (H2)


@pytest.mark.parametrize(
    ("raw", "want_key"),
    [
        pytest.param("NVIDIA-A100-SXM4-40GB", "A100SXM440GB", id="gfd-with-vendor"),
        pytest.param("A100-SXM4-40GB", "A100SXM440GB", id="old-gfd-without-vendor"),
        pytest.param("AMD_Instinct_MI300X_OAM", "MI300XOAM", id="amd-labeller"),
        pytest.param("Tesla-T4", "T4", id="tesla-prefix"),
        pytest.param("NVIDIA GeForce RTX 4090", "RTX4090", id="two-vendor-words"),
        pytest.param("NVIDIA-T4", "T4", id="nvidia-prefix"),
        pytest.param("AMD MI300X", "MI300X", id="amd-prefix"),
        pytest.param("Instinct_MI210", "MI210", id="instinct-prefix"),
        pytest.param("Tesla-V100", "V100", id="tesla-v100"),
        pytest.param("GeForce RTX 4090", "RTX4090", id="geforce-prefix"),
        pytest.param("Intel Gaudi2", "GAUDI2", id="intel-prefix"),
        pytest.param("Habana Gaudi3", "GAUDI3", id="habana-prefix"),
        # Vendor words in any order, each stripped (a second pass after a later prefix).
        pytest.param("Tesla NVIDIA T4", "T4", id="vendor-words-in-any-order"),
        pytest.param("Habana Intel Gaudi2", "GAUDI2", id="habana-then-intel"),
        # A vendor word alone is kept, never emptied.
        pytest.param("NVIDIA", "NVIDIA", id="vendor-word-alone"),
        pytest.param("nvidia-nvidia", "NVIDIA", id="vendor-word-twice"),
        pytest.param("Tesla", "TESLA", id="tesla-alone"),
        pytest.param("h100-80gb (HBM3)", "H10080GBHBM3", id="punctuation-dropped"),
        pytest.param("", "", id="empty"),
    ],
)
def test_product_key(raw: str, want_key: str) -> None:
    assert product_key(raw) == want_key


# ---------------------------------------------------------------- rows and indexes


def test_a_minimal_row_is_a_known_class_with_nothing_assumed() -> None:
    cat = parse_catalogue(
        "- {product: X-1, vendor: nvidia, display_name: X one, memory_gib: 0.5, sources: [s]}")
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


def test_gaudi_row_flags_come_from_the_contracts_rule_for_its_generation() -> None:
    cat = parse_catalogue(
        "- {product: G-1, vendor: intel, display_name: G, architecture: gaudi3,"
        " memory_gib: 128, dense_fp8_tflops: 1835, bf16: true, fp8_compute: true,"
        " fp8_kv_cache: true, fp8_format: e4m3, sources: [s]}\n"
        "- {product: G-2, vendor: intel, display_name: G2, architecture: gaudi2,"
        " memory_gib: 96, dense_fp8_tflops: 865, sources: [s]}\n"
        "- {product: G-3, vendor: intel, display_name: G3, memory_gib: 96,"
        " dense_fp8_tflops: 100, sources: [s]}\n"
    )
    g1, g2, g3 = (e.hardware for e in cat.entries)
    assert (g1.architecture, g1.bf16, g1.fp8_compute, g1.fp8_weight_only, g1.fp8_kv_cache,
            g1.fp8_format, g1.dense_fp8_tflops) == ("gaudi3", True, True, False, True, "e4m3", 1835)
    assert g1.resource_name == "habana.ai/gaudi"
    # Flags left out of a row come from the rule all the same.
    assert (g2.architecture, g2.bf16, g2.fp8_compute, g2.fp8_kv_cache, g2.fp8_format,
            g2.dense_fp8_tflops) == ("gaudi2", True, True, True, "e4m3", 865)
    # An unknown generation: BF16 only; no FP8 format or FP8 throughput, whatever the row says.
    assert (g3.architecture, g3.bf16, g3.fp8_compute, g3.fp8_kv_cache, g3.fp8_format,
            g3.dense_fp8_tflops) == ("unknown", True, False, False, None, None)


@pytest.mark.parametrize("row", [
    pytest.param("architecture: gaudi3, fp8_format: e4m3fnuz", id="gaudi3-fnuz"),
    pytest.param("architecture: gaudi2, fp8_compute: false", id="gaudi2-without-fp8"),
    pytest.param("fp8_compute: true, fp8_kv_cache: true", id="unknown-generation-with-fp8"),
    pytest.param("architecture: gaudi3, bf16: false", id="gaudi3-without-bf16"),
])
def test_a_gaudi_row_that_contradicts_the_rule_is_an_error(
    row: str, request: pytest.FixtureRequest, golden: Any
) -> None:
    with pytest.raises(ValueError) as exc:
        parse_catalogue(f"- {{product: G-1, vendor: intel, display_name: G, memory_gib: 1,"
                        f" {row}, sources: [s]}}")
    golden.check("hardware", f"catalogue.gaudi-row-contradicts-rule.{request.node.callspec.id}",
                 str(exc.value))


def test_nvidia_and_amd_rows_ignore_stated_flags() -> None:
    # The flags of a row are for Gaudi only; elsewhere the architecture code decides.
    cat = parse_catalogue(
        "- {product: A-1, vendor: nvidia, display_name: A, compute_capability: [8, 0],"
        " memory_gib: 80, fp8_compute: true, fp8_kv_cache: true, sources: [s]}\n"
        "- {product: M-1, vendor: amd, display_name: M, gfx_target: gfx90a, memory_gib: 64,"
        " fp8_compute: true, sources: [s]}\n"
    )
    a, m = (e.hardware for e in cat.entries)
    assert (a.fp8_compute, a.fp8_weight_only, a.fp8_kv_cache) == (False, True, False)
    assert (m.bf16, m.fp8_compute, m.fp8_kv_cache) == (True, False, False)


@pytest.mark.parametrize("arch", [
    "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "gaudi2",
    "gaudi3", "unknown"])
def test_every_architecture_is_accepted_in_a_row(arch: str) -> None:
    cat = parse_catalogue(
        f"- {{product: G-1, vendor: intel, display_name: G, architecture: {arch},"
        " memory_gib: 1, sources: [s]}"
    )
    assert cat.entries[0].hardware.architecture == arch


@pytest.mark.parametrize(("gfx", "fmt"), [("gfx950", "e4m3"), ("gfx942", "e4m3fnuz")])
def test_every_fp8_format_is_derived_for_some_row(gfx: str, fmt: str) -> None:
    cat = parse_catalogue(
        f"- {{product: M-1, vendor: amd, display_name: M, gfx_target: {gfx},"
        " memory_gib: 1, sources: [s]}"
    )
    assert cat.entries[0].hardware.fp8_format == fmt


@pytest.mark.parametrize(
    "row",
    [
        pytest.param("{product: X, vendor: nvidia, display_name: X, memory_gib: 0, sources: [s]}",
                     id="zero-memory"),
        pytest.param("{product: X, vendor: nvidia, display_name: X, memory_gib: -1, sources: [s]}",
                     id="negative-memory"),
        pytest.param("{product: X, vendor: nvidia, display_name: X, memory_gib: 1, sources: []}",
                     id="no-sources"),
        pytest.param("{product: X, vendor: nvidia, display_name: X, memory_gib: 1}",
                     id="sources-missing"),
        pytest.param("{product: X, vendor: nvidia, display_name: X, sources: [s]}",
                     id="memory-missing"),
        pytest.param("{product: X, vendor: arm, display_name: X, memory_gib: 1, sources: [s]}",
                     id="unknown-vendor"),
        pytest.param("{product: X, vendor: nvidia, display_name: X, memory_gib: 1, sources: [s],"
                     " tdp: 700}", id="unknown-column"),
        pytest.param("{product: X, vendor: intel, display_name: X, memory_gib: 1, sources: [s],"
                     " architecture: maxwell}", id="unknown-architecture"),
        pytest.param("{product: X, vendor: intel, display_name: X, memory_gib: 1, sources: [s],"
                     " fp8_format: e5m2}", id="unknown-fp8-format"),
    ],
)
def test_invalid_rows_are_rejected(row: str) -> None:
    with pytest.raises(ValidationError):
        parse_catalogue(f"- {row}")


@pytest.mark.parametrize("text", [
    pytest.param("{product: X}", id="a-mapping"), pytest.param("just text", id="a-string"),
    pytest.param("", id="empty"), pytest.param("42", id="a-number"),
])
def test_catalogue_must_be_a_list(text: str, golden: Any) -> None:
    with pytest.raises(ValueError) as exc:
        parse_catalogue(text)
    golden.check("hardware", "catalogue.not-a-list", str(exc.value))


def test_empty_list_is_an_empty_catalogue() -> None:
    cat = parse_catalogue("[]")
    assert cat.entries == () and cat.names() == () and cat.by_key == {}


def test_a_row_may_repeat_its_own_names() -> None:
    cat = parse_catalogue(
        "- {product: X-1, vendor: nvidia, display_name: X, memory_gib: 1,"
        " labels: [X-1, NVIDIA-X-1], aliases: [x1], sources: [s]}"
    )
    assert list(cat.by_key) == ["X1"]


@pytest.mark.parametrize("text", [
    pytest.param(
        "- {product: X-1, vendor: nvidia, display_name: X, memory_gib: 1, sources: [s]}\n"
        "- {product: Y-1, vendor: nvidia, display_name: Y, memory_gib: 1,"
        " aliases: ['x 1'], sources: [s]}\n", id="alias-of-another-product"),
    pytest.param(
        "- {product: X-1, vendor: nvidia, display_name: X, compute_capability: [9, 0],"
        " memory_gib: 80, labels: [Foo-1], sources: [s]}\n"
        "- {product: X-2, vendor: nvidia, display_name: Y, compute_capability: [9, 0],"
        " memory_gib: 80, labels: [FOO 1], sources: [s]}\n", id="labels-equal-once-normalised"),
])
def test_a_name_shared_by_two_rows_is_an_error_naming_both(
    text: str, request: pytest.FixtureRequest, golden: Any
) -> None:
    with pytest.raises(ValueError) as exc:
        parse_catalogue(text)
    golden.check("hardware", f"catalogue.ambiguous-name.{request.node.callspec.id}",
                 str(exc.value))


def test_a_device_id_listed_twice_is_an_error(golden: Any) -> None:
    with pytest.raises(ValueError) as exc:
        parse_catalogue(
            "- {product: X-1, vendor: amd, display_name: X, memory_gib: 1,"
            " device_ids: ['74a1'], sources: [s]}\n"
            "- {product: Y-1, vendor: amd, display_name: Y, memory_gib: 1,"
            " device_ids: ['0x74A1'], sources: [s]}\n"
        )
    golden.check("hardware", "catalogue.device-id-twice", str(exc.value))


# ---------------------------------------------------------------- the packaged catalogue


def test_packaged_catalogue_is_read_once() -> None:
    assert load_catalogue() is load_catalogue()


REQUIRED_PRODUCTS = [
    "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIE-40GB", "A100-PCIE-80GB", "H100-SXM-80GB",
    "H100-PCIE-80GB", "H100-NVL-94GB", "H200-SXM-141GB", "L4-24GB", "L40-48GB", "L40S-48GB",
    "B200-SXM-180GB", "GB200-186GB", "A10-24GB", "A10G-24GB", "RTX-3090-24GB", "RTX-A6000-48GB",
    "RTX-4090-24GB", "T4-16GB", "V100-SXM2-16GB", "MI210-64GB", "MI250X-64GB", "MI300X-192GB",
    "MI325X-256GB", "Gaudi2-96GB", "Gaudi3-128GB",
]


def test_catalogue_has_required_products_each_with_sources() -> None:
    cat = load_catalogue()
    assert set(REQUIRED_PRODUCTS) <= set(cat.names())
    for entry in cat.entries:
        assert entry.hardware.sources, entry.hardware.product
        assert entry.hardware.memory_gib > 0
        assert entry.hardware.known


# device-names.yaml: vLLM's AMD device-ID map (rocm.py _ROCM_DEVICE_ID_NAME_MAP).
@pytest.mark.parametrize(
    ("device_id", "want_product"),
    [("0x74a1", "MI300X-192GB"), ("0x74b5", "MI300X-192GB"), ("0x74a9", "MI300X-192GB"),
     ("0x74bd", "MI300X-192GB"), ("0x74a5", "MI325X-256GB"), ("0x74b9", "MI325X-256GB")],
)
def test_packaged_device_ids(device_id: str, want_product: str) -> None:
    entry = load_catalogue().lookup_device_id(device_id)
    assert entry is not None and entry.hardware.product == want_product


# gpus.csv and rules H6-H10/H14: (architecture, bf16, fp8, weight-only FP8, FP8 KV,
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


# gpus.csv row (gpu, variant) -> catalogue product, for the cross-check below.
CSV_ROWS = {
    ("NVIDIA A100", "SXM4 40GB"): "A100-SXM4-40GB",
    ("NVIDIA A100", "SXM4 80GB"): "A100-SXM4-80GB",
    ("NVIDIA A100", "PCIe 40GB"): "A100-PCIE-40GB",
    ("NVIDIA A100", "PCIe 80GB"): "A100-PCIE-80GB",
    ("NVIDIA H100", "SXM 80GB HBM3"): "H100-SXM-80GB",
    ("NVIDIA H100", "PCIe"): "H100-PCIE-80GB",
    ("NVIDIA H100", "NVL"): "H100-NVL-94GB",
    ("NVIDIA H200", "SXM 141GB HBM3e"): "H200-SXM-141GB",
    ("NVIDIA B200", "SXM 180GB HBM3e"): "B200-SXM-180GB",
    ("NVIDIA L4", "PCIe 24GB"): "L4-24GB",
    ("NVIDIA L40S", "PCIe 48GB"): "L40S-48GB",
    ("NVIDIA A10G", "(AWS variant)"): "A10G-24GB",
    ("NVIDIA T4", "PCIe 16GB"): "T4-16GB",
    ("NVIDIA V100", "SXM2/PCIe"): "V100-SXM2-16GB",
    ("NVIDIA GeForce RTX 3090", ""): "RTX-3090-24GB",
    ("NVIDIA GeForce RTX 4090", ""): "RTX-4090-24GB",
    ("AMD Instinct MI300X", "OAM"): "MI300X-192GB",
    ("AMD Instinct MI325X", "OAM"): "MI325X-256GB",
    ("AMD Instinct MI250X", "OAM"): "MI250X-64GB",
    ("Intel Gaudi2", "OAM"): "Gaudi2-96GB",
    ("Intel Gaudi3", "OAM"): "Gaudi3-128GB",
}


def test_catalogue_agrees_with_gpus_csv() -> None:
    cat = load_catalogue()
    with (HW_FIXTURES / "gpus.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["gpu"], r["variant"]) for r in rows} == set(CSV_ROWS)
    for row in rows:
        entry = cat.lookup(CSV_ROWS[(row["gpu"], row["variant"])])
        assert entry is not None
        hw = entry.hardware
        target = row["compute_capability_or_gfx"].split(" ")[0]
        if target.startswith("gfx"):
            assert hw.gfx_target == target
        elif target.replace(".", "").isdigit():
            major, minor = (int(x) for x in target.split("."))
            assert hw.compute_capability == (major, minor), hw.product
        fp8 = row["native_fp8_tensor"].lower()
        if fp8.startswith("yes"):
            assert hw.fp8_compute, hw.product
        elif fp8.startswith("no"):
            assert not hw.fp8_compute, hw.product
        bf16 = row["bf16_support"].lower()
        if bf16.startswith("yes"):
            assert hw.bf16, hw.product
        elif bf16.startswith("no"):
            assert not hw.bf16, hw.product
        mem = row["memory_gb"].split(" ")[0]
        if mem.isdigit():
            # MI250X: the csv gives the package (2 GCDs); the catalogue one GCD (device).
            per_device = float(mem) / (2 if "2 GCDs" in row["memory_gb"] else 1)
            assert hw.memory_gib == pytest.approx(per_device, rel=0.07), hw.product


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


def test_every_packaged_row_follows_the_contracts_precision_rules() -> None:
    """One home: every row's flags are what slo_runtime.contract (which the in-pod launcher
    applies to the probed GPU) derives from the row's capability, target or generation."""
    from slo_runtime import contract

    for entry in load_catalogue().entries:
        hw = entry.hardware
        if hw.vendor == "nvidia":
            sup = contract.cuda_precision(hw.compute_capability)
        elif hw.vendor == "amd":
            sup = contract.rocm_precision(hw.gfx_target)
        else:
            sup = contract.gaudi_precision(hw.architecture)
        assert (hw.bf16, hw.fp8_compute, hw.fp8_weight_only, hw.fp8_kv_cache, hw.fp8_format) == (
            sup.bf16, sup.fp8_compute, sup.fp8_weight_only, sup.fp8_kv_cache, sup.fp8_format
        ), hw.product
