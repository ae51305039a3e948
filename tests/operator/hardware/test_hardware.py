"""Node labels -> hardware class, over every real label set in ../shared plus edge cases."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from slo_operator.hardware import (
    INCONSISTENT_LABELS,
    INVALID_LABEL,
    NO_GPU_LABELS,
    RESOLVED,
    UNKNOWN_GPU_PRODUCT,
    HardwareResolution,
    classify_node,
    classify_node_pools,
    features_for_cc,
    features_for_gfx,
    load_catalogue,
    parse_catalogue,
    product_key,
    resolve_product,
)
from tests.support.paths import FIXTURES

HW_FIXTURES = FIXTURES / "hardware"


def _node_label_sets() -> list[dict[str, Any]]:
    with (HW_FIXTURES / "node-labels.yaml").open() as f:
        data = yaml.safe_load(f)
    assert isinstance(data, list)
    return data


@dataclass(frozen=True)
class Want:
    id: str
    fixture_product: str  # the `product` field of the fixture entry, to keep alignment
    want_vendor: str
    want_product: str
    want_reason: str = RESOLVED
    want_known: bool = True
    want_cc: tuple[int, int] | None = None
    want_gfx: str | None = None
    want_bf16: bool = True
    want_fp8_compute: bool = False
    want_fp8_weight_only: bool = False
    want_fp8_kv_cache: bool = False
    want_fp8_format: str | None = None
    want_mig: bool = False
    want_shared: bool = False
    want_gpus: int = 1
    want_memory_gib: float | None = None
    want_resource: str = "nvidia.com/gpu"
    want_selector: tuple[tuple[str, str], ...] = ()


HOPPER = {"want_fp8_compute": True, "want_fp8_kv_cache": True, "want_fp8_format": "e4m3"}
AMPERE = {"want_fp8_weight_only": True}

# One row per entry of node-labels.yaml, in file order.
FIXTURE_WANTS: list[Want] = [
    Want(
        "h100-sxm-gpu-operator-mig-disabled",
        "NVIDIA-H100-80GB-HBM3",
        "nvidia",
        "H100-SXM-80GB",
        want_cc=(9, 0),
        want_memory_gib=81559 / 1024,
        want_selector=(("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),),
        **HOPPER,  # type: ignore[arg-type]
    ),
    Want(
        "h100-mig-mixed-all-balanced-keeps-parent-product",
        "NVIDIA-H100-80GB-HBM3 (MIG mixed, all-balanced)",
        "nvidia",
        "H100-SXM-80GB",
        want_cc=(9, 0),
        want_mig=True,
        **HOPPER,  # type: ignore[arg-type]
    ),
    Want(
        "a100-old-driver-without-nvidia-prefix",
        "A100-SXM4-40GB",
        "nvidia",
        "A100-SXM4-40GB",
        want_cc=(8, 0),
        want_memory_gib=40536 / 1024,
        want_selector=(("nvidia.com/gpu.product", "A100-SXM4-40GB"),),
        **AMPERE,  # type: ignore[arg-type]
    ),
    Want(
        "a100-mig-single-1g5gb-slice-memory-from-label",
        "A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia",
        "A100-SXM4-40GB-MIG-1g.5gb",
        want_cc=(8, 0),
        want_mig=True,
        want_gpus=7,
        want_memory_gib=4864 / 1024,
        **AMPERE,  # type: ignore[arg-type]
    ),
    Want(
        "a100-gfd-readme-example",
        "A100-SXM4-40GB",
        "nvidia",
        "A100-SXM4-40GB",
        want_cc=(8, 0),
        want_memory_gib=39538 / 1024,
        **AMPERE,  # type: ignore[arg-type]
    ),
    Want(
        "a100-mig-single-8x7-slices-no-cc-labels",
        "A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia",
        "A100-SXM4-40GB-MIG-1g.5gb",
        want_cc=(8, 0),
        want_mig=True,
        want_gpus=56,
        want_memory_gib=5.0,
        **AMPERE,  # type: ignore[arg-type]
    ),
    Want(
        "kepler-gt710-unknown-and-conservative",
        "GeForce-GT-710",
        "nvidia",
        "GeForce-GT-710",
        want_reason=UNKNOWN_GPU_PRODUCT,
        want_known=False,
        want_cc=(3, 3),
        want_bf16=False,
        want_gpus=2,
        want_memory_gib=2.0,
    ),
    Want(
        "t4-time-sliced-shared-suffix",
        "Tesla-T4-SHARED",
        "nvidia",
        "T4-16GB",
        want_cc=(7, 5),
        want_bf16=False,
        want_shared=True,
        want_gpus=4,
        want_selector=(("nvidia.com/gpu.product", "Tesla-T4-SHARED"),),
    ),
    Want(
        "t4-time-sliced-renamed-resource-detected-by-replicas",
        "Tesla-T4",
        "nvidia",
        "T4-16GB",
        want_cc=(7, 5),
        want_bf16=False,
        want_shared=True,
        want_gpus=4,
    ),
    Want(
        "a100-mig-slice-time-sliced",
        "A100-SXM4-40GB-MIG-1g.5gb-SHARED",
        "nvidia",
        "A100-SXM4-40GB-MIG-1g.5gb",
        want_cc=(8, 0),
        want_mig=True,
        want_shared=True,
        want_memory_gib=5.0,
        **AMPERE,  # type: ignore[arg-type]
    ),
    Want(
        "l40s-product-only-ada-fp8",
        "NVIDIA-L40S",
        "nvidia",
        "L40S-48GB",
        want_cc=(8, 9),
        **HOPPER,  # type: ignore[arg-type]
    ),
    Want(
        "l40-product-only-ada-fp8",
        "NVIDIA-L40",
        "nvidia",
        "L40-48GB",
        want_cc=(8, 9),
        **HOPPER,  # type: ignore[arg-type]
    ),
    Want(
        "h100-nvl-product-only",
        "NVIDIA-H100-NVL",
        "nvidia",
        "H100-NVL-94GB",
        want_cc=(9, 0),
        **HOPPER,  # type: ignore[arg-type]
    ),
    Want(
        "a100-new-driver-with-prefix",
        "NVIDIA-A100-SXM4-40GB",
        "nvidia",
        "A100-SXM4-40GB",
        want_cc=(8, 0),
        want_memory_gib=40.0,
        **AMPERE,  # type: ignore[arg-type]
    ),
    Want(
        "gb200-blackwell",
        "NVIDIA-GB200",
        "nvidia",
        "GB200-186GB",
        want_cc=(10, 0),
        **HOPPER,  # type: ignore[arg-type]
    ),
    Want(
        "mock-device-unknown-but-cc8-gives-bf16",
        "MOCKMODEL",
        "nvidia",
        "MOCKMODEL",
        want_reason=UNKNOWN_GPU_PRODUCT,
        want_known=False,
        want_cc=(8, 0),
        want_memory_gib=300 / 1024,
        **AMPERE,  # type: ignore[arg-type]
    ),
    Want(
        "mi300x-rocm-labeller-fnuz-fp8",
        "AMD_Instinct_MI300X_OAM",
        "amd",
        "MI300X-192GB",
        want_gfx="gfx942",
        want_fp8_compute=True,
        want_fp8_kv_cache=True,
        want_fp8_format="e4m3fnuz",
        want_memory_gib=192.0,
        want_resource="amd.com/gpu",
        want_selector=(("amd.com/gpu.product-name", "AMD_Instinct_MI300X_OAM"),),
    ),
    Want(
        "amd-current-labels-win-over-stale-beta",
        "Instinct_MI210 / Instinct_MI300X (synthetic mix)",
        "amd",
        "MI210-64GB",
        want_gfx="gfx90a",
        want_memory_gib=64.0,
        want_resource="amd.com/gpu",
    ),
    Want(
        "amd-legacy-beta-only-unknown-device",
        "(device-id 6860, legacy beta-only format)",
        "amd",
        "device 6860",
        want_reason=UNKNOWN_GPU_PRODUCT,
        want_known=False,
        want_bf16=False,
        want_memory_gib=16.0,
        want_resource="amd.com/gpu",
        want_selector=(("beta.amd.com/gpu.device-id.6860", "1"),),
    ),
]


def test_every_fixture_label_set_has_an_expectation() -> None:
    sets = _node_label_sets()
    assert [s["product"] for s in sets] == [w.fixture_product for w in FIXTURE_WANTS]


def _check(res: HardwareResolution, want: Want) -> None:
    hw = res.hardware
    assert hw is not None, res.message
    assert res.reason == want.want_reason, res.message
    assert hw.vendor == want.want_vendor
    assert hw.product == want.want_product
    assert hw.known is want.want_known
    assert hw.compute_capability == want.want_cc
    assert hw.gfx_target == want.want_gfx
    assert hw.bf16 is want.want_bf16
    assert hw.fp8_compute is want.want_fp8_compute
    assert hw.fp8_weight_only is want.want_fp8_weight_only
    assert hw.fp8_kv_cache is want.want_fp8_kv_cache
    assert hw.fp8_format == want.want_fp8_format
    assert hw.resource_name == want.want_resource
    assert res.mig is want.want_mig
    assert res.shared is want.want_shared
    assert res.gpus_per_node == want.want_gpus
    if want.want_memory_gib is not None:
        assert hw.memory_gib == pytest.approx(want.want_memory_gib, abs=0.01)
    assert hw.memory_gib > 0
    for key, value in want.want_selector:
        assert res.node_selector[key] == value
    assert res.node_selector, "a resolved pool needs a node selector"
    assert res.message


@pytest.mark.parametrize(
    ("index", "want"), list(enumerate(FIXTURE_WANTS)), ids=[w.id for w in FIXTURE_WANTS]
)
def test_classify_real_label_sets(index: int, want: Want) -> None:
    labels = _node_label_sets()[index]["labels"]
    _check(classify_node(labels), want)


def test_mig_mixed_lists_the_profiles() -> None:
    res = classify_node(_node_label_sets()[1]["labels"])
    assert res.mig_profiles == ("1g.10gb", "2g.20gb", "3g.40gb")
    assert "nvidia.com/mig-3g.40gb" in res.message


def _fixture(product: str) -> dict[str, str]:
    entry = next(e for e in _node_label_sets() if e["product"] == product)
    return {str(k): str(v) for k, v in entry["labels"].items()}


def test_mig_mixed_node_offers_one_pool_per_slice_resource() -> None:
    pools = classify_node_pools(_fixture("NVIDIA-H100-80GB-HBM3 (MIG mixed, all-balanced)"))
    got = {(p.hardware.resource_name if p.hardware else "", p.gpus_per_node) for p in pools}
    assert got == {("nvidia.com/mig-1g.10gb", 2), ("nvidia.com/mig-2g.20gb", 1),
                   ("nvidia.com/mig-3g.40gb", 1)}
    small = next(p for p in pools if p.hardware and "1g.10gb" in p.hardware.resource_name)
    assert small.hardware is not None and small.mig
    # The slice's memory (9984 MiB), not the parent's 80 GiB, bounds the plan.
    assert small.hardware.memory_gib == pytest.approx(9984 / 1024, abs=0.01)
    assert small.node_selector == {
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}


@pytest.mark.parametrize(("product", "want_replicas"), [
    ("Tesla-T4-SHARED", 4), ("Tesla-T4", 4), ("A100-SXM4-40GB-MIG-1g.5gb-SHARED", 2)])
def test_time_sliced_nodes_report_how_many_pods_share_a_gpu(
    product: str, want_replicas: int
) -> None:
    (res,) = classify_node_pools(_fixture(product))
    assert res.shared and res.replicas == want_replicas


def test_whole_gpus_are_not_shared() -> None:
    (res,) = classify_node_pools(H100_LABELS)
    assert not res.shared and not res.mig and res.replicas == 1


def test_mig_slice_scales_throughput_of_parent() -> None:
    parent = load_catalogue().lookup("A100-SXM4-40GB")
    assert parent is not None
    res = classify_node(_node_label_sets()[3]["labels"])
    assert res.hardware is not None
    assert res.hardware.dense_bf16_tflops == pytest.approx(312 / 7, abs=0.1)
    bw = res.hardware.memory_bandwidth_gbps
    assert bw is not None and bw < (parent.hardware.memory_bandwidth_gbps or 0)


H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.count": "8",
}


@dataclass(frozen=True)
class EdgeCase:
    id: str
    labels: dict[str, str]
    want_reason: str
    want_product: str | None
    want_known: bool | None = None
    want_cc: tuple[int, int] | None = None
    want_bf16: bool | None = None
    want_fp8_compute: bool | None = None
    want_memory_gib: float | None = None
    want_gpus: int | None = None
    want_in_message: str = ""


EDGE_CASES = [
    EdgeCase("empty-node", {}, NO_GPU_LABELS, None, want_gpus=0, want_in_message="no GPU labels"),
    EdgeCase(
        "cpu-node-with-unrelated-labels",
        {"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.large"},
        NO_GPU_LABELS,
        None,
    ),
    EdgeCase(
        "gpu-operator-labels-before-gfd-ran",
        {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "true"},
        NO_GPU_LABELS,
        None,
        want_in_message="GPU Feature Discovery",
    ),
    EdgeCase(
        "h100-full-label-set-eight-gpus",
        H100_LABELS,
        RESOLVED,
        "H100-SXM-80GB",
        want_known=True,
        want_gpus=8,
        want_fp8_compute=True,
    ),
    EdgeCase(
        "garbage-compute-major-falls-back-to-catalogue",
        {**H100_LABELS, "nvidia.com/gpu.compute.major": "abc"},
        INVALID_LABEL,
        "H100-SXM-80GB",
        want_known=True,
        want_cc=(9, 0),
        want_fp8_compute=True,
        want_in_message="nvidia.com/gpu.compute.major='abc'",
    ),
    EdgeCase(
        "garbage-memory-uses-catalogue-memory",
        {**H100_LABELS, "nvidia.com/gpu.memory": "lots"},
        INVALID_LABEL,
        "H100-SXM-80GB",
        want_memory_gib=80.0,
        want_in_message="nvidia.com/gpu.memory",
    ),
    EdgeCase(
        "negative-count-ignored",
        {**H100_LABELS, "nvidia.com/gpu.count": "-3"},
        INVALID_LABEL,
        "H100-SXM-80GB",
        want_gpus=1,
        want_in_message="nvidia.com/gpu.count",
    ),
    EdgeCase(
        "unknown-product-cc90-gets-fp8-from-capability",
        {
            "nvidia.com/gpu.product": "NVIDIA-H300-SUPER",
            "nvidia.com/gpu.compute.major": "9",
            "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.memory": "98304",
        },
        UNKNOWN_GPU_PRODUCT,
        "NVIDIA-H300-SUPER",
        want_known=False,
        want_cc=(9, 0),
        want_bf16=True,
        want_fp8_compute=True,
        want_memory_gib=96.0,
        want_in_message="not in the catalogue",
    ),
    EdgeCase(
        "unknown-product-cc86-no-fp8",
        {
            "nvidia.com/gpu.product": "NVIDIA-RTX-A4000",
            "nvidia.com/gpu.compute.major": "8",
            "nvidia.com/gpu.compute.minor": "6",
            "nvidia.com/gpu.memory": "16376",
        },
        UNKNOWN_GPU_PRODUCT,
        "NVIDIA-RTX-A4000",
        want_known=False,
        want_bf16=True,
        want_fp8_compute=False,
    ),
    EdgeCase(
        "unknown-product-no-cc-but-family-hopper",
        {"nvidia.com/gpu.product": "NVIDIA-H20", "nvidia.com/gpu.family": "hopper"},
        UNKNOWN_GPU_PRODUCT,
        "NVIDIA-H20",
        want_cc=(9, 0),
        want_fp8_compute=True,
        want_memory_gib=0.0,
    ),
    EdgeCase(
        "unknown-product-nothing-else-is-conservative",
        {"nvidia.com/gpu.product": "NVIDIA-Mystery", "nvidia.com/gpu.count": "2"},
        UNKNOWN_GPU_PRODUCT,
        "NVIDIA-Mystery",
        want_known=False,
        want_cc=None,
        want_bf16=False,
        want_fp8_compute=False,
        want_gpus=2,
    ),
    EdgeCase(
        "cc-label-contradicts-product-labels-win",
        {**H100_LABELS, "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0"},
        INCONSISTENT_LABELS,
        "NVIDIA-H100-80GB-HBM3",
        want_known=False,
        want_cc=(8, 0),
        want_fp8_compute=False,
        want_in_message="the labels win",
    ),
    EdgeCase(
        "h200-by-short-nvml-name",
        {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "8"},
        RESOLVED,
        "H200-SXM-141GB",
        want_memory_gib=141.0,
        want_gpus=8,
    ),
    EdgeCase(
        "b200-by-full-nvml-name",
        {"nvidia.com/gpu.product": "NVIDIA-B200-180GB-HBM3e"},
        RESOLVED,
        "B200-SXM-180GB",
        want_cc=(10, 0),
    ),
    EdgeCase(
        "rtx4090-consumer-ada",
        {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"},
        RESOLVED,
        "RTX-4090-24GB",
        want_fp8_compute=True,
    ),
    EdgeCase(
        "v100-volta-no-bf16",
        {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"},
        RESOLVED,
        "V100-SXM2-32GB",
        want_cc=(7, 0),
        want_bf16=False,
    ),
    EdgeCase(
        "amd-old-beta-format-mi300x-by-device-id",
        {
            "beta.amd.com/gpu.device-id.74a1": "8",
            "beta.amd.com/gpu.family.AI": "8",
            "beta.amd.com/gpu.vram.192G": "8",
        },
        RESOLVED,
        "MI300X-192GB",
        want_fp8_compute=True,
        want_gpus=8,
        want_memory_gib=192.0,
    ),
    EdgeCase(
        "amd-mi325x-device-id-only",
        {"amd.com/gpu.device-id": "74a5", "amd.com/gpu.count": "8"},
        RESOLVED,
        "MI325X-256GB",
        want_memory_gib=256.0,
        want_gpus=8,
    ),
    EdgeCase(
        "amd-mi250x-no-fp8",
        {"amd.com/gpu.product-name": "AMD_Instinct_MI250X", "amd.com/gpu.vram": "64G"},
        RESOLVED,
        "MI250X-64GB",
        want_bf16=True,
        want_fp8_compute=False,
    ),
    EdgeCase(
        "amd-garbage-vram",
        {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.vram": "big"},
        INVALID_LABEL,
        "MI300X-192GB",
        want_memory_gib=192.0,
        want_in_message="amd.com/gpu.vram='big'",
    ),
    EdgeCase(
        "amd-device-id-and-name-disagree-device-wins",
        {"amd.com/gpu.product-name": "AMD_Instinct_MI210", "amd.com/gpu.device-id": "74a1"},
        INCONSISTENT_LABELS,
        "MI300X-192GB",
        want_in_message="device id wins",
    ),
    EdgeCase(
        "amd-mixed-node-most-numerous-product",
        {
            "amd.com/gpu.product-name.AMD_Instinct_MI300X_OAM": "6",
            "amd.com/gpu.product-name.AMD_Instinct_MI210": "2",
        },
        RESOLVED,
        "MI300X-192GB",
        want_gpus=6,
        want_in_message="several GPU products",
    ),
    EdgeCase(
        "gaudi3-documented-labels",
        {
            "habana.ai/gaudi.product": "Gaudi3",
            "habana.ai/gaudi.count": "8",
            "habana.ai/gaudi.memory": "131072",
        },
        RESOLVED,
        "Gaudi3-128GB",
        want_bf16=True,
        want_fp8_compute=True,
        want_gpus=8,
        want_memory_gib=128.0,
    ),
    EdgeCase(
        "gaudi-present-only-is-unknown",
        {"habana.ai/gaudi.present": "true"},
        UNKNOWN_GPU_PRODUCT,
        "unknown",
        want_known=False,
        want_bf16=True,
        want_fp8_compute=False,
    ),
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=[c.id for c in EDGE_CASES])
def test_classify_edge_cases(case: EdgeCase) -> None:
    res = classify_node(case.labels)
    assert res.reason == case.want_reason, res.message
    assert case.want_in_message in res.message
    if case.want_gpus is not None:
        assert res.gpus_per_node == case.want_gpus
    if case.want_product is None:
        assert res.hardware is None
        return
    hw = res.hardware
    assert hw is not None
    assert hw.product == case.want_product
    if case.want_known is not None:
        assert hw.known is case.want_known
    if case.want_cc is not None or case.id.endswith("conservative"):
        assert hw.compute_capability == case.want_cc
    if case.want_bf16 is not None:
        assert hw.bf16 is case.want_bf16
    if case.want_fp8_compute is not None:
        assert hw.fp8_compute is case.want_fp8_compute
    if case.want_memory_gib is not None:
        assert hw.memory_gib == pytest.approx(case.want_memory_gib, abs=0.01)


def test_classify_never_raises_on_garbage() -> None:
    garbage = {
        "nvidia.com/gpu.product": "",
        "nvidia.com/gpu.compute.major": "",
        "nvidia.com/gpu.compute.minor": "x",
        "nvidia.com/gpu.memory": "-1",
        "nvidia.com/gpu.count": "1.5",
        "nvidia.com/gpu.replicas": "many",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-1g.5gb.count": "lots",
    }
    res = classify_node(garbage)
    assert res.reason == INVALID_LABEL
    assert res.hardware is not None and res.hardware.known is False


@dataclass(frozen=True)
class NameCase:
    name: str
    want_product: str | None
    want_selector_value: str | None = None


NAME_CASES = [
    NameCase("H100", "H100-SXM-80GB", "NVIDIA-H100-80GB-HBM3"),
    NameCase("h100-80gb", "H100-SXM-80GB", "NVIDIA-H100-80GB-HBM3"),
    NameCase("NVIDIA-H100-80GB-HBM3", "H100-SXM-80GB", "NVIDIA-H100-80GB-HBM3"),
    NameCase("NVIDIA H100 PCIe", "H100-PCIE-80GB", "NVIDIA-H100-PCIe"),
    NameCase("h100-nvl", "H100-NVL-94GB"),
    NameCase("H200", "H200-SXM-141GB"),
    NameCase("A100", "A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
    NameCase("a100-80gb", "A100-SXM4-80GB"),
    NameCase("T4", "T4-16GB", "Tesla-T4"),
    NameCase("tesla-t4", "T4-16GB"),
    NameCase("L4", "L4-24GB"),
    NameCase("L40S", "L40S-48GB"),
    NameCase("A10G", "A10G-24GB"),
    NameCase("RTX 3090", "RTX-3090-24GB"),
    NameCase("GeForce RTX 4090", "RTX-4090-24GB"),
    NameCase("RTX A6000", "RTX-A6000-48GB"),
    NameCase("V100", "V100-SXM2-16GB"),
    NameCase("B200", "B200-SXM-180GB"),
    NameCase("GB200", "GB200-186GB"),
    NameCase("MI300X", "MI300X-192GB", "AMD_Instinct_MI300X_OAM"),
    NameCase("AMD Instinct MI325X", "MI325X-256GB"),
    NameCase("mi250x", "MI250X-64GB"),
    NameCase("MI210", "MI210-64GB"),
    NameCase("Gaudi2", "Gaudi2-96GB", "Gaudi2"),
    NameCase("gaudi-3", "Gaudi3-128GB"),
    NameCase("H300", None),
    NameCase("", None),
]


@pytest.mark.parametrize("case", NAME_CASES, ids=[c.name or "empty" for c in NAME_CASES])
def test_resolve_product(case: NameCase) -> None:
    res = resolve_product(case.name)
    assert res.gpus_per_node == 8
    if case.want_product is None:
        assert res.hardware is None
        assert res.reason == UNKNOWN_GPU_PRODUCT
        assert "H100-SXM-80GB" in res.message and "MI300X-192GB" in res.message
        return
    assert res.reason == RESOLVED
    assert res.hardware is not None and res.hardware.product == case.want_product
    ((key, value),) = res.node_selector.items()
    assert key in ("nvidia.com/gpu.product", "amd.com/gpu.product-name", "habana.ai/gaudi.product")
    if case.want_selector_value is not None:
        assert value == case.want_selector_value
    # A selector value must classify back to the same product.
    back = classify_node({key: value})
    assert back.hardware is not None and back.hardware.product == case.want_product


def test_resolve_product_gpus_per_node() -> None:
    assert resolve_product("H100", gpus_per_node=4).gpus_per_node == 4
    with pytest.raises(ValueError):
        resolve_product("H100", gpus_per_node=0)


REQUIRED_PRODUCTS = [
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
    "A100-PCIE-40GB",
    "A100-PCIE-80GB",
    "H100-SXM-80GB",
    "H100-PCIE-80GB",
    "H100-NVL-94GB",
    "H200-SXM-141GB",
    "L4-24GB",
    "L40-48GB",
    "L40S-48GB",
    "B200-SXM-180GB",
    "GB200-186GB",
    "A10-24GB",
    "A10G-24GB",
    "RTX-3090-24GB",
    "RTX-A6000-48GB",
    "RTX-4090-24GB",
    "T4-16GB",
    "V100-SXM2-16GB",
    "MI210-64GB",
    "MI250X-64GB",
    "MI300X-192GB",
    "MI325X-256GB",
    "Gaudi2-96GB",
    "Gaudi3-128GB",
]


def test_catalogue_has_required_products_each_with_sources() -> None:
    cat = load_catalogue()
    assert set(REQUIRED_PRODUCTS) <= set(cat.names())
    for entry in cat.entries:
        assert entry.hardware.sources, entry.hardware.product
        assert entry.hardware.memory_gib > 0
        assert entry.hardware.known


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


def _csv_rows() -> list[dict[str, str]]:
    with (HW_FIXTURES / "gpus.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_catalogue_agrees_with_gpus_csv() -> None:
    cat = load_catalogue()
    rows = _csv_rows()
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


@pytest.mark.parametrize(
    ("cc", "want"),
    [
        ((7, 0), ("volta", False, False, False, False)),
        ((7, 5), ("turing", False, False, False, False)),
        ((8, 0), ("ampere", True, False, True, False)),
        ((8, 6), ("ampere", True, False, True, False)),
        ((8, 9), ("ada", True, True, False, True)),
        ((9, 0), ("hopper", True, True, False, True)),
        ((10, 0), ("blackwell", True, True, False, True)),
        ((12, 0), ("blackwell", True, True, False, True)),
    ],
    ids=lambda v: str(v),
)
def test_features_for_cc(cc: tuple[int, int], want: tuple[str, bool, bool, bool, bool]) -> None:
    f = features_for_cc(cc)
    assert (f.architecture, f.bf16, f.fp8_compute, f.fp8_weight_only, f.fp8_kv_cache) == want


@pytest.mark.parametrize(
    ("gfx", "want_fp8", "want_format"),
    [("gfx90a", False, None), ("gfx942", True, "e4m3fnuz"), ("gfx950", True, "e4m3")],
)
def test_features_for_gfx(gfx: str, want_fp8: bool, want_format: str | None) -> None:
    f = features_for_gfx(gfx)
    assert f.fp8_compute is want_fp8
    assert f.fp8_format == want_format
    assert f.fp8_weight_only is False  # "Disable marlin for rocm" (fp8.py)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("NVIDIA-A100-SXM4-40GB", "A100SXM440GB"),
        ("A100-SXM4-40GB", "A100SXM440GB"),
        ("AMD_Instinct_MI300X_OAM", "MI300XOAM"),
        ("Tesla-T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ],
)
def test_product_key(raw: str, want: str) -> None:
    assert product_key(raw) == want


def test_catalogue_rejects_ambiguous_names() -> None:
    text = """
- {product: X-1, vendor: nvidia, display_name: X, compute_capability: [9, 0],
   memory_gib: 80, labels: [Foo-1], sources: [s]}
- {product: X-2, vendor: nvidia, display_name: Y, compute_capability: [9, 0],
   memory_gib: 80, labels: [FOO 1], sources: [s]}
"""
    with pytest.raises(ValueError, match="matches both"):
        parse_catalogue(text)


def test_catalogue_rejects_rows_without_sources() -> None:
    text = """
- {product: X-1, vendor: nvidia, display_name: X, memory_gib: 80, sources: []}
"""
    with pytest.raises(ValueError):
        parse_catalogue(text)
