"""Node labels -> hardware class (hardware.labels): every real label set in
tests/fixtures/hardware, then the label keys, number parsing, precedence rules and pools,
vendor by vendor, and ``--gpu-product`` names.

Label keys and reasons are API (docs/hardware-and-engine.md, rules H1-H14); the messages are
what `kubectl describe` shows, pinned in tests/golden/hardware.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import yaml

from slo_operator.hardware import (
    INCONSISTENT_LABELS,
    INVALID_LABEL,
    NO_GPU_LABELS,
    REASONS,
    RESOLVED,
    SELECTOR_KEYS,
    UNKNOWN_GPU_PRODUCT,
    HardwareClass,
    HardwareResolution,
    classify_node,
    classify_node_pools,
    load_catalogue,
    resolve_product,
)
from tests.support.paths import FIXTURES, NODE_LABELS

HW_FIXTURES = FIXTURES / "hardware"

PRODUCT = "nvidia.com/gpu.product"
MAJOR = "nvidia.com/gpu.compute.major"
MINOR = "nvidia.com/gpu.compute.minor"
MEMORY = "nvidia.com/gpu.memory"
COUNT = "nvidia.com/gpu.count"
FAMILY = "nvidia.com/gpu.family"
REPLICAS = "nvidia.com/gpu.replicas"
SHARING = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY = "nvidia.com/mig.strategy"
AMD = "amd.com/gpu."
BETA = "beta.amd.com/gpu."
GAUDI_PRODUCT = "habana.ai/gaudi.product"
GAUDI_COUNT = "habana.ai/gaudi.count"
GAUDI_MEMORY = "habana.ai/gaudi.memory"

H100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3", MAJOR: "9", MINOR: "0", MEMORY: "81559", COUNT: "8"}


@cache
def _node_label_sets() -> list[dict[str, Any]]:
    with NODE_LABELS.open() as f:
        data = yaml.safe_load(f)
    assert isinstance(data, list)
    return data


def _fixture(product: str) -> dict[str, str]:
    entry = next(e for e in _node_label_sets() if e["product"] == product)
    return {str(k): str(v) for k, v in entry["labels"].items()}


def _hw(res: HardwareResolution) -> HardwareClass:
    assert res.hardware is not None, res.message
    return res.hardware


def _id(request: pytest.FixtureRequest) -> str:
    """The table row's narrative id, also its key in the golden file."""
    return str(request.node.callspec.id)


# ---------------------------------------------------------------- API constants


def test_reasons_are_the_documented_condition_reasons() -> None:
    assert REASONS == (
        "Resolved", "UnknownGPUProduct", "NoGPULabels", "InvalidLabel", "InconsistentLabels")
    assert REASONS == (
        RESOLVED, UNKNOWN_GPU_PRODUCT, NO_GPU_LABELS, INVALID_LABEL, INCONSISTENT_LABELS)


def test_pools_are_selected_on_each_vendors_product_label() -> None:
    assert SELECTOR_KEYS == {
        "nvidia": "nvidia.com/gpu.product",
        "amd": "amd.com/gpu.product-name",
        "intel": "habana.ai/gaudi.product",
    }


def test_a_resolution_is_a_hashable_value() -> None:
    res = classify_node(H100)
    assert res.resolved
    # Resolutions are hashable (the selector dict does not take part) and equal by value.
    again = classify_node(dict(H100))
    assert res == again and hash(res) == hash(again)
    assert not classify_node({}).resolved


# ---------------------------------------------------------------- real label sets


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
def test_classify_real_label_sets(index: int, want: Want, golden: Any) -> None:
    res = classify_node(_node_label_sets()[index]["labels"])
    _check(res, want)
    golden.check("hardware", f"labels.fixture.{want.id}", res.message)


def test_mig_mixed_lists_the_profiles() -> None:
    res = classify_node(_node_label_sets()[1]["labels"])
    assert res.mig_profiles == ("1g.10gb", "2g.20gb", "3g.40gb")


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
    pytest.param("Tesla-T4-SHARED", 4, id="shared-suffix-and-replicas"),
    pytest.param("Tesla-T4", 4, id="renamed-resource-replicas-only"),
    pytest.param("A100-SXM4-40GB-MIG-1g.5gb-SHARED", 2, id="shared-suffix-without-replicas"),
])
def test_time_sliced_nodes_report_how_many_pods_share_a_gpu(
    product: str, want_replicas: int
) -> None:
    (res,) = classify_node_pools(_fixture(product))
    assert res.shared and res.replicas == want_replicas


def test_whole_gpus_are_not_shared() -> None:
    (res,) = classify_node_pools(H100)
    assert not res.shared and not res.mig and res.replicas == 1


def test_mig_slice_scales_throughput_of_parent() -> None:
    parent = load_catalogue().lookup("A100-SXM4-40GB")
    assert parent is not None
    res = classify_node(_node_label_sets()[3]["labels"])
    assert res.hardware is not None
    assert res.hardware.dense_bf16_tflops == pytest.approx(312 / 7, abs=0.1)
    bw = res.hardware.memory_bandwidth_gbps
    assert bw is not None and bw < (parent.hardware.memory_bandwidth_gbps or 0)


# ---------------------------------------------------------------- edge cases


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


EDGE_CASES = [
    EdgeCase("empty-node", {}, NO_GPU_LABELS, None, want_gpus=0),
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
    ),
    EdgeCase(
        "h100-full-label-set-eight-gpus",
        H100,
        RESOLVED,
        "H100-SXM-80GB",
        want_known=True,
        want_gpus=8,
        want_fp8_compute=True,
    ),
    EdgeCase(
        "garbage-compute-major-falls-back-to-catalogue",
        {**H100, "nvidia.com/gpu.compute.major": "abc"},
        INVALID_LABEL,
        "H100-SXM-80GB",
        want_known=True,
        want_cc=(9, 0),
        want_fp8_compute=True,
    ),
    EdgeCase(
        "garbage-memory-uses-catalogue-memory",
        {**H100, "nvidia.com/gpu.memory": "lots"},
        INVALID_LABEL,
        "H100-SXM-80GB",
        want_memory_gib=80.0,
    ),
    EdgeCase(
        "negative-count-ignored",
        {**H100, "nvidia.com/gpu.count": "-3"},
        INVALID_LABEL,
        "H100-SXM-80GB",
        want_gpus=1,
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
        {**H100, "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0"},
        INCONSISTENT_LABELS,
        "NVIDIA-H100-80GB-HBM3",
        want_known=False,
        want_cc=(8, 0),
        want_fp8_compute=False,
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
    ),
    EdgeCase(
        "amd-device-id-and-name-disagree-device-wins",
        {"amd.com/gpu.product-name": "AMD_Instinct_MI210", "amd.com/gpu.device-id": "74a1"},
        INCONSISTENT_LABELS,
        "MI300X-192GB",
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
def test_classify_edge_cases(case: EdgeCase, golden: Any) -> None:
    res = classify_node(case.labels)
    assert res.reason == case.want_reason, res.message
    golden.check("hardware", f"labels.edge.{case.id}", res.message)
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


# ---------------------------------------------------------------- NVIDIA: messages


def test_full_label_set(golden: Any) -> None:
    res = classify_node(H100)
    assert res.reason == RESOLVED
    golden.check("hardware", "labels.nvidia.full-label-set", res.message)
    assert res.node_selector == {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    assert res.gpus_per_node == 8
    hw = _hw(res)
    # Label memory (usable MiB) replaces the catalogue's, rounded to 3 decimals (H1).
    assert hw.memory_gib == 79.647
    assert hw.known and hw.product == "H100-SXM-80GB"


@pytest.mark.parametrize(
    ("labels", "want_reason"),
    [
        pytest.param({**H100, COUNT: "x"}, INVALID_LABEL, id="bad-count"),
        pytest.param({**H100, MEMORY: "0", COUNT: "-1"}, INVALID_LABEL, id="below-minimum"),
        pytest.param({**H100, MAJOR: "8", MINOR: "6"}, INCONSISTENT_LABELS, id="inconsistent"),
        # A broken label outranks the inconsistency; both are told.
        pytest.param({**H100, MAJOR: "8", MINOR: "0", COUNT: "many"}, INVALID_LABEL,
                     id="invalid-outranks-inconsistent"),
        pytest.param({PRODUCT: "NVIDIA-Mystery", MAJOR: "7", MINOR: "5"}, UNKNOWN_GPU_PRODUCT,
                     id="unknown-product"),
        pytest.param({MAJOR: "9", MINOR: "0", MEMORY: "98304"}, UNKNOWN_GPU_PRODUCT,
                     id="no-product"),
        pytest.param({COUNT: "4"}, UNKNOWN_GPU_PRODUCT, id="count-only"),
        pytest.param({PRODUCT: "Tesla-T4", COUNT: " 2 "}, RESOLVED, id="product-only"),
    ],
)
def test_nvidia_reason_and_message(labels: dict[str, str], want_reason: str,
                                   request: pytest.FixtureRequest, golden: Any) -> None:
    res = classify_node(labels)
    assert res.reason == want_reason
    golden.check("hardware", f"labels.nvidia.{_id(request)}", res.message)


def test_labels_without_product_select_on_the_compute_labels() -> None:
    res = classify_node({MAJOR: "9", MINOR: "0", MEMORY: "98304"})
    assert res.node_selector == {MAJOR: "9", MINOR: "0"}
    hw = _hw(res)
    assert (hw.product, hw.display_name, hw.compute_capability) == (
        "unknown", "unknown NVIDIA GPU", (9, 0))
    assert classify_node({MAJOR: "8"}).node_selector == {MAJOR: "8"}
    assert classify_node({COUNT: "1"}).node_selector == {}


def test_unknown_nvidia_class_is_conservative_and_labelled() -> None:
    hw = _hw(classify_node({PRODUCT: "NVIDIA-H300", MAJOR: "9", MINOR: "0", MEMORY: "1024"}))
    assert (hw.vendor, hw.product, hw.display_name) == ("nvidia", "NVIDIA-H300", "NVIDIA-H300")
    assert (hw.architecture, hw.compute_capability, hw.gfx_target) == ("hopper", (9, 0), None)
    assert hw.memory_gib == 1.0
    assert hw.memory_bandwidth_gbps is None
    assert hw.dense_bf16_tflops is None and hw.dense_fp8_tflops is None
    assert (hw.bf16, hw.fp8_compute, hw.fp8_weight_only, hw.fp8_kv_cache, hw.fp8_format) == (
        True, True, False, True, "e4m3")
    assert hw.resource_name == "nvidia.com/gpu"
    assert hw.known is False
    assert hw.sources == ("node labels",)


def test_unknown_nvidia_memory_is_rounded_like_a_known_one() -> None:
    hw = _hw(classify_node({PRODUCT: "NVIDIA-H300", MEMORY: "1000"}))
    assert hw.memory_gib == 0.977
    known = _hw(classify_node({PRODUCT: "NVIDIA-H100-80GB-HBM3", MEMORY: "1000"}))
    assert known.memory_gib == 0.977


def test_product_of_another_vendor_in_the_nvidia_label_is_unknown() -> None:
    res = classify_node({PRODUCT: "AMD_Instinct_MI300X_OAM", MAJOR: "9"})
    assert res.reason == UNKNOWN_GPU_PRODUCT
    hw = _hw(res)
    assert (hw.vendor, hw.known, hw.compute_capability) == ("nvidia", False, (9, 0))


# ---------------------------------------------------------------- NVIDIA: numbers


@pytest.mark.parametrize(
    ("labels", "want_cc"),
    [
        pytest.param({MAJOR: "9"}, (9, 0), id="major-only-minor-zero"),
        pytest.param({MAJOR: " 8 ", MINOR: " 9 "}, (8, 9), id="padded-numbers"),
        pytest.param({MAJOR: "8", MINOR: ""}, (8, 0), id="blank-minor-is-zero"),
        pytest.param({MINOR: "6", COUNT: "1"}, None, id="minor-without-major"),
        pytest.param({FAMILY: "volta"}, (7, 0), id="family-volta"),
        pytest.param({FAMILY: "turing"}, (7, 5), id="family-turing"),
        pytest.param({FAMILY: "ampere"}, (8, 0), id="family-ampere"),
        pytest.param({FAMILY: "ada-lovelace"}, (8, 9), id="family-ada-lovelace"),
        pytest.param({FAMILY: "hopper"}, (9, 0), id="family-hopper"),
        pytest.param({FAMILY: " Blackwell "}, (10, 0), id="family-padded-mixed-case"),
        pytest.param({FAMILY: "kepler"}, None, id="family-unknown"),
        # The compute labels outrank the family (H5).
        pytest.param({FAMILY: "hopper", MAJOR: "8", MINOR: "6"}, (8, 6),
                     id="compute-labels-outrank-family"),
        # A catalogue product outranks the family.
        pytest.param({FAMILY: "ampere", PRODUCT: "NVIDIA-H100-80GB-HBM3"}, (9, 0),
                     id="catalogue-product-outranks-family"),
    ],
)
def test_compute_capability_sources(labels: dict[str, str],
                                    want_cc: tuple[int, int] | None) -> None:
    res = classify_node(labels)
    assert _hw(res).compute_capability == want_cc
    assert res.reason != INVALID_LABEL


@pytest.mark.parametrize(
    ("extra", "want_gpus", "want_memory", "want_reason"),
    [
        pytest.param({}, 1, 80.0, RESOLVED, id="no-labels-catalogue-memory-one-gpu"),
        pytest.param({COUNT: "0"}, 0, 80.0, RESOLVED, id="zero-count"),
        pytest.param({COUNT: "  "}, 1, 80.0, RESOLVED, id="blank-count"),
        pytest.param({MEMORY: "1"}, 1, 0.001, RESOLVED, id="one-mib"),
        pytest.param({MEMORY: "2048"}, 1, 2.0, RESOLVED, id="two-gib"),
        pytest.param({MEMORY: ""}, 1, 80.0, RESOLVED, id="blank-memory"),
        pytest.param({MEMORY: "0"}, 1, 80.0, INVALID_LABEL, id="zero-memory"),
        pytest.param({MEMORY: "1.5"}, 1, 80.0, INVALID_LABEL, id="fractional-memory"),
        pytest.param({COUNT: "-1"}, 1, 80.0, INVALID_LABEL, id="negative-count"),
    ],
)
def test_count_and_memory_labels(
    extra: dict[str, str], want_gpus: int, want_memory: float, want_reason: str
) -> None:
    res = classify_node({PRODUCT: "NVIDIA-H100-80GB-HBM3", **extra})
    assert (res.gpus_per_node, _hw(res).memory_gib, res.reason) == (
        want_gpus, want_memory, want_reason)


# ---------------------------------------------------------------- NVIDIA: sharing (H4)


@pytest.mark.parametrize(
    ("labels", "want_shared", "want_replicas"),
    [
        pytest.param({PRODUCT: "Tesla-T4"}, False, 1, id="whole-gpu"),
        pytest.param({PRODUCT: "Tesla-T4", REPLICAS: "1"}, False, 1, id="one-replica"),
        pytest.param({PRODUCT: "Tesla-T4", REPLICAS: "0"}, False, 1, id="zero-replicas"),
        pytest.param({PRODUCT: "Tesla-T4", REPLICAS: "2"}, True, 2, id="two-replicas"),
        pytest.param({PRODUCT: "Tesla-T4", REPLICAS: "5"}, True, 5, id="five-replicas"),
        pytest.param({PRODUCT: "Tesla-T4", SHARING: "time-slicing"}, True, 2,
                     id="time-slicing-without-replicas"),
        pytest.param({PRODUCT: "Tesla-T4", SHARING: "mps"}, True, 2, id="mps-without-replicas"),
        pytest.param({PRODUCT: "Tesla-T4", SHARING: "none"}, False, 1, id="strategy-none"),
        pytest.param({PRODUCT: "Tesla-T4", SHARING: "mps", REPLICAS: "1"}, True, 2,
                     id="mps-with-one-replica-counts-two"),
        pytest.param({PRODUCT: "Tesla-T4", SHARING: "mps", REPLICAS: "3"}, True, 3,
                     id="mps-with-three-replicas"),
        pytest.param({PRODUCT: "Tesla-T4-SHARED"}, True, 2, id="shared-suffix"),
        pytest.param({PRODUCT: "Tesla-T4-shared"}, True, 2, id="shared-suffix-lower-case"),
        pytest.param({PRODUCT: "Tesla-T4-SHARED", REPLICAS: "1"}, True, 2,
                     id="shared-suffix-with-one-replica"),
    ],
)
def test_sharing(labels: dict[str, str], want_shared: bool, want_replicas: int,
                 request: pytest.FixtureRequest, golden: Any) -> None:
    res = classify_node(labels)
    assert (res.shared, res.replicas) == (want_shared, want_replicas)
    assert _hw(res).product == "T4-16GB"
    assert res.node_selector == {PRODUCT: labels[PRODUCT]}
    assert res.reason == RESOLVED
    # A shared GPU says so: its latency is not isolated.
    golden.check("hardware", f"labels.sharing.{_id(request)}", res.message)


# ---------------------------------------------------------------- NVIDIA: MIG (H3)


def test_mig_single_slice_scales_the_parent(golden: Any) -> None:
    res = classify_node({PRODUCT: "A100-SXM4-40GB-MIG-1g.5gb", MEMORY: "4864", COUNT: "7"})
    hw = _hw(res)
    assert res.mig and not res.mig_profiles
    assert (hw.product, hw.display_name) == (
        "A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA A100 SXM4 40GB (MIG 1g.5gb)")
    assert hw.memory_gib == 4.75
    # TFLOP/s by compute slices (1/7), bandwidth by memory share (4.75/40), one decimal.
    assert hw.dense_bf16_tflops == 44.6
    assert hw.memory_bandwidth_gbps == 184.7
    assert hw.dense_fp8_tflops is None
    assert hw.compute_capability == (8, 0)
    golden.check("hardware", "labels.mig.single-slice", res.message)
    assert res.gpus_per_node == 7


def test_mig_slice_memory_from_the_profile_and_fp8_scaled() -> None:
    hw = _hw(classify_node({PRODUCT: "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"}))
    assert hw.memory_gib == 40.0
    assert hw.dense_bf16_tflops == 424.0  # 989.4 * 3/7
    assert hw.dense_fp8_tflops == 848.1  # 1978.9 * 3/7
    assert hw.memory_bandwidth_gbps == 1675.0  # 3350 * 40/80


def test_mig_slice_never_scales_above_the_parent() -> None:
    hw = _hw(classify_node({PRODUCT: "A100-SXM4-40GB-MIG-8g.80gb"}))
    assert hw.memory_gib == 80.0
    assert (hw.dense_bf16_tflops, hw.memory_bandwidth_gbps) == (312.0, 1555.0)
    whole = _hw(classify_node({PRODUCT: "A100-SXM4-40GB-MIG-7g.40gb"}))
    assert (whole.dense_bf16_tflops, whole.memory_bandwidth_gbps) == (312.0, 1555.0)


def test_mig_slice_of_a_parent_without_figures() -> None:
    hw = _hw(classify_node({PRODUCT: "NVIDIA-A10G-MIG-1g.6gb"}))
    assert hw.product == "A10G-24GB-MIG-1g.6gb"
    assert hw.dense_bf16_tflops is None
    assert hw.memory_bandwidth_gbps == 150.0


def test_mig_slice_of_an_unknown_gpu() -> None:
    res = classify_node({PRODUCT: "NVIDIA-X9-MIG-2g.20gb", MAJOR: "9"})
    hw = _hw(res)
    assert res.mig and res.reason == UNKNOWN_GPU_PRODUCT
    assert (hw.product, hw.display_name, hw.memory_gib) == (
        "NVIDIA-X9", "NVIDIA-X9-MIG-2g.20gb", 20.0)


MIXED = {
    PRODUCT: "NVIDIA-H100-80GB-HBM3", MAJOR: "9", MINOR: "0", MEMORY: "81559", COUNT: "1",
    MIG_STRATEGY: "mixed",
    "nvidia.com/mig-1g.10gb.count": "2",
    "nvidia.com/mig-3g.40gb.count": " 1 ",
    "nvidia.com/mig-2g.20gb.count": "0",
    "nvidia.com/mig-4g.40gb.count": "x",
    "nvidia.com/mig-7g.80gb.memory": "81000",
}


def test_mig_mixed_lists_the_slices_it_exposes(golden: Any) -> None:
    res = classify_node(MIXED)
    assert res.mig_profiles == ("1g.10gb", "3g.40gb")
    assert res.mig and not res.shared
    golden.check("hardware", "labels.mig.mixed-node", res.message)


@pytest.mark.parametrize("strategy", [
    pytest.param("single", id="single"), pytest.param("none", id="none"),
    pytest.param("", id="blank"),
])
def test_mig_profiles_only_with_the_mixed_strategy(strategy: str) -> None:
    res = classify_node({**MIXED, MIG_STRATEGY: strategy})
    assert (res.mig, res.mig_profiles) == (False, ())
    assert len(classify_node_pools({**MIXED, MIG_STRATEGY: strategy})) == 1


def test_mixed_strategy_without_slices_is_a_whole_gpu() -> None:
    labels = {**H100, MIG_STRATEGY: "mixed", "nvidia.com/mig-1g.10gb.count": "0"}
    res = classify_node(labels)
    assert (res.mig, res.mig_profiles) == (False, ())
    assert classify_node_pools(labels) == [res]


def test_mixed_pools_without_slice_labels(golden: Any) -> None:
    pools = classify_node_pools(MIXED)
    assert [p.gpus_per_node for p in pools] == [2, 1]
    small, big = pools
    hw = _hw(small)
    # No slice memory label: the profile's 10 GB, never the parent's 81559 MiB.
    assert hw.memory_gib == 10.0
    assert (hw.product, hw.resource_name) == (
        "H100-SXM-80GB-MIG-1g.10gb", "nvidia.com/mig-1g.10gb")
    assert small.node_selector == {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    assert (small.mig, small.mig_profiles, small.reason) == (True, (), RESOLVED)
    golden.check("hardware", "labels.mig.mixed-pool-without-slice-labels", small.message)
    assert _hw(big).memory_gib == 40.0


def test_mixed_pools_with_slice_labels(golden: Any) -> None:
    # The slice's own product label names it (here as an older driver would, no prefix).
    labels = {**MIXED, "nvidia.com/mig-3g.40gb.memory": "40320",
              "nvidia.com/mig-3g.40gb.product": "H100-80GB-HBM3-MIG-3g.40gb"}
    _, big = classify_node_pools(labels)
    hw = _hw(big)
    assert hw.memory_gib == 39.375
    assert hw.product == "H100-SXM-80GB-MIG-3g.40gb"
    assert big.node_selector == {"nvidia.com/mig-3g.40gb.product": "H100-80GB-HBM3-MIG-3g.40gb"}
    golden.check("hardware", "labels.mig.mixed-pool-with-slice-labels", big.message)
    assert big.gpus_per_node == 1


def test_pools_of_a_node_without_gpus() -> None:
    assert classify_node_pools({}) == [classify_node({})]


# ---------------------------------------------------------------- node kinds


@pytest.mark.parametrize(
    "labels",
    [pytest.param({PRODUCT: "x"}, id="product"), pytest.param({MAJOR: "9"}, id="compute-major"),
     pytest.param({MEMORY: "1024"}, id="memory"), pytest.param({COUNT: "1"}, id="count"),
     pytest.param({FAMILY: "hopper"}, id="family")],
)
def test_each_gfd_fact_label_makes_an_nvidia_node(labels: dict[str, str]) -> None:
    res = classify_node({**labels, "amd.com/gpu.device-id": "74a1", "habana.ai/gaudi.count": "8"})
    assert _hw(res).vendor == "nvidia"


def _unresolved(res: HardwareResolution) -> None:
    assert res.hardware is None
    assert (res.gpus_per_node, res.node_selector, res.reason) == (0, {}, NO_GPU_LABELS)
    assert (res.mig, res.shared, res.mig_profiles, res.replicas) == (False, False, (), 1)


@pytest.mark.parametrize(
    "labels",
    [pytest.param({MINOR: "0"}, id="compute-minor-alone"),
     pytest.param({"nvidia.com/gpu.present": "true"}, id="gpu-present"),
     pytest.param({REPLICAS: "2"}, id="replicas-alone"),
     pytest.param({"nvidia.com/gpu.deploy.driver": "true", "amd.com/gpu.device-id": "74a1"},
                  id="operator-labels-outrank-amd")],
)
def test_operator_labels_without_gfd_ask_whether_gfd_runs(labels: dict[str, str],
                                                          golden: Any) -> None:
    res = classify_node(labels)
    _unresolved(res)
    golden.check("hardware", "labels.no-gfd-labels", res.message)


@pytest.mark.parametrize(
    "labels",
    [pytest.param({}, id="no-labels"),
     pytest.param({"nvidia.com/mig.strategy": "mixed"}, id="mig-strategy-alone"),
     pytest.param({"amd.com/gpu": "1"}, id="amd-resource-name-not-a-label-prefix"),
     pytest.param({"habana.ai": "x"}, id="habana-without-slash"),
     pytest.param({"example.com/habana.ai/gaudi": "1"}, id="habana-not-at-start")],
)
def test_nodes_without_gpu_labels(labels: dict[str, str], golden: Any) -> None:
    res = classify_node(labels)
    _unresolved(res)
    golden.check("hardware", "labels.no-gpu-labels", res.message)


def test_amd_labels_outrank_gaudi_labels() -> None:
    res = classify_node({"amd.com/gpu.device-id": "74a1", "habana.ai/gaudi.product": "Gaudi3"})
    assert _hw(res).product == "MI300X-192GB"
    beta = classify_node({"beta.amd.com/gpu.device-id.74a1": "8", "habana.ai/gaudi.count": "8"})
    assert _hw(beta).product == "MI300X-192GB"


# ---------------------------------------------------------------- AMD (H10-H12)


@pytest.mark.parametrize(
    ("vram", "want_gib"),
    [
        pytest.param("192G", 192.0, id="G"), pytest.param("192g", 192.0, id="lower-case-g"),
        pytest.param("192Gi", 192.0, id="Gi"), pytest.param("192GiB", 192.0, id="GiB"),
        pytest.param("192GB", 192.0, id="GB"), pytest.param("192 G", 192.0, id="space-before-unit"),
        pytest.param(" 1.5G ", 1.5, id="padded-fraction"),
        pytest.param("196608M", 192.0, id="mebibytes"),
        pytest.param("196608mi", 192.0, id="lower-case-mi"),
        pytest.param("201326592K", 192.0, id="kibibytes"),
        pytest.param("0.1875T", 192.0, id="fraction-of-a-tebibyte"),
        pytest.param("1t", 1024.0, id="one-tebibyte"),
    ],
)
def test_vram_sizes(vram: str, want_gib: float) -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM", AMD + "vram": vram})
    assert res.reason == RESOLVED
    assert _hw(res).memory_gib == want_gib


@pytest.mark.parametrize("vram", [
    pytest.param("big", id="a-word"), pytest.param("192", id="no-unit"),
    pytest.param("192X", id="unknown-unit"), pytest.param("G", id="unit-only"),
    pytest.param("-1G", id="negative"), pytest.param("1.G", id="dangling-point"),
])
def test_bad_vram_keeps_the_catalogue_memory(vram: str, request: pytest.FixtureRequest,
                                              golden: Any) -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM", AMD + "vram": vram})
    assert res.reason == INVALID_LABEL
    assert _hw(res).memory_gib == 192.0
    golden.check("hardware", f"labels.amd.bad-vram.{_id(request)}", res.message)


def test_amd_memory_is_rounded_like_nvidia() -> None:
    known = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM", AMD + "vram": "1000M"})
    assert _hw(known).memory_gib == 0.977
    unknown = classify_node({AMD + "product-name": "AMD_Radeon_X", AMD + "vram": "1000M"})
    assert _hw(unknown).memory_gib == 0.977


def test_amd_single_value_labels(golden: Any) -> None:
    res = classify_node({AMD + "product-name": " AMD_Instinct_MI300X_OAM ", AMD + "vram": "191G"})
    assert res.reason == RESOLVED
    assert res.gpus_per_node == 1
    assert res.node_selector == {AMD + "product-name": "AMD_Instinct_MI300X_OAM"}
    golden.check("hardware", "labels.amd.single-value-labels", res.message)
    hw = _hw(res)
    assert (hw.memory_gib, hw.known, hw.resource_name) == (191.0, True, "amd.com/gpu")


def test_amd_counted_labels_with_equal_counts_plan_for_the_first_name(golden: Any) -> None:
    res = classify_node({
        AMD + "product-name.AMD_Instinct_MI300X_OAM": "3",
        AMD + "product-name.AMD_Instinct_MI210": "3",
        AMD + "device-id.74a1": "3",
        AMD + "device-id.740f": "3",
    })
    # Equal counts: the first name in order (MI210); its device id is the first too (740f).
    hw = _hw(res)
    assert hw.product == "MI210-64GB"
    assert res.gpus_per_node == 3
    assert res.node_selector == {AMD + "product-name.AMD_Instinct_MI210": "3"}
    assert res.reason == RESOLVED
    golden.check("hardware", "labels.amd.counted-names-equal-counts", res.message)


def test_amd_several_device_ids_without_names(golden: Any) -> None:
    res = classify_node({AMD + "device-id.740f": "2", AMD + "device-id.74a1": "6"})
    assert _hw(res).product == "MI300X-192GB"
    assert res.gpus_per_node == 6
    assert res.node_selector == {AMD + "device-id.74a1": "6"}
    golden.check("hardware", "labels.amd.several-device-ids", res.message)


def test_amd_one_name_several_device_ids(golden: Any) -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM",
                         AMD + "device-id.74a1": "6", AMD + "device-id.74b5": "2"})
    golden.check("hardware", "labels.amd.one-name-several-device-ids", res.message)


@pytest.mark.parametrize("count", [
    pytest.param("08", id="leading-zero"), pytest.param(" 8 ", id="padded")])
def test_amd_counted_label_selects_on_the_value_the_node_has(count: str) -> None:
    res = classify_node({AMD + "device-id.74a1": count})
    assert res.gpus_per_node == 8
    assert res.node_selector == {AMD + "device-id.74a1": count.strip()}


@pytest.mark.parametrize("labels", [
    pytest.param({**MIXED, "nvidia.com/mig-1g.10gb.count": "\u00b2"}, id="mig-count-superscript"),
    pytest.param({AMD + "device-id.74a1": "\u00b2"}, id="amd-count-superscript"),
])
def test_digits_that_are_not_ascii_count_nothing_instead_of_failing(
        labels: dict[str, str]) -> None:
    res = classify_node(labels)
    assert res.gpus_per_node >= 0


def test_amd_count_that_is_not_a_number_counts_no_device() -> None:
    res = classify_node({AMD + "device-id.74a1": "lots", AMD + "device-id.74a5": "1"})
    assert _hw(res).product == "MI325X-256GB"


def test_amd_counted_label_with_a_bad_count(golden: Any) -> None:
    res = classify_node({AMD + "device-id.74a1": "lots"})
    assert _hw(res).product == "MI300X-192GB"
    assert res.gpus_per_node == 1
    # The selector still matches the node (the label's value, not the device id).
    assert res.node_selector == {AMD + "device-id.74a1": "lots"}
    golden.check("hardware", "labels.amd.counted-label-bad-count", res.message)


def test_amd_count_label_outranks_counted_names(golden: Any) -> None:
    res = classify_node({AMD + "product-name.AMD_Instinct_MI300X_OAM": "6", AMD + "count": "8"})
    assert res.gpus_per_node == 8
    bad = classify_node({AMD + "product-name.AMD_Instinct_MI300X_OAM": "6", AMD + "count": "x"})
    assert (bad.gpus_per_node, bad.reason) == (6, INVALID_LABEL)
    golden.check("hardware", "labels.amd.bad-count-label", bad.message)


def test_amd_blank_single_value_falls_back_to_counted_labels() -> None:
    res = classify_node({AMD + "product-name": " ", AMD + "product-name.AMD_Instinct_MI210": "2"})
    assert _hw(res).product == "MI210-64GB"
    assert res.gpus_per_node == 2
    assert res.node_selector == {AMD + "product-name.AMD_Instinct_MI210": "2"}


def test_amd_device_id_only(golden: Any) -> None:
    res = classify_node({AMD + "device-id": "0x74A5"})
    assert _hw(res).product == "MI325X-256GB"
    assert res.node_selector == {AMD + "device-id": "0x74A5"}
    golden.check("hardware", "labels.amd.device-id-only", res.message)


@pytest.mark.parametrize(
    ("labels", "want_product"),
    [
        pytest.param({AMD + "product-name": "AMD_Instinct_MI210", AMD + "device-id": "740f"},
                     "MI210-64GB", id="name-and-device-id-agree"),
        pytest.param({AMD + "product-name": "AMD_Instinct_MI210"}, "MI210-64GB", id="name-only"),
        pytest.param({AMD + "device-id": "740f"}, "MI210-64GB", id="device-id-only"),
        # An unknown device id does not contradict a known name.
        pytest.param({AMD + "product-name": "AMD_Instinct_MI210", AMD + "device-id": "6860"},
                     "MI210-64GB", id="unknown-device-id-beside-a-known-name"),
    ],
)
def test_amd_agreeing_names_are_resolved(labels: dict[str, str], want_product: str) -> None:
    res = classify_node(labels)
    assert (res.reason, _hw(res).product) == (RESOLVED, want_product)


def test_amd_device_id_outranks_the_name(golden: Any) -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI210", AMD + "device-id": "74a1"})
    assert res.reason == INCONSISTENT_LABELS
    assert _hw(res).product == "MI300X-192GB"
    golden.check("hardware", "labels.amd.device-id-outranks-name", res.message)


@pytest.mark.parametrize(
    ("labels", "want_product", "want_display", "want_selector"),
    [
        pytest.param({AMD + "product-name": "AMD_Radeon_X", AMD + "vram": "24G"}, "AMD_Radeon_X",
                     "AMD_Radeon_X", {AMD + "product-name": "AMD_Radeon_X"}, id="name"),
        # A product of another vendor in the AMD label is not taken.
        pytest.param({AMD + "product-name": "NVIDIA-H100-80GB-HBM3", AMD + "vram": "24G"},
                     "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3",
                     {AMD + "product-name": "NVIDIA-H100-80GB-HBM3"}, id="nvidia-name"),
        pytest.param({AMD + "device-id": "6860", AMD + "vram": "24G"}, "device 6860",
                     "device 6860", {AMD + "device-id": "6860"}, id="device"),
        pytest.param({AMD + "vram": "24G"}, "unknown", "unknown AMD GPU", {}, id="nothing"),
    ],
)
def test_unknown_amd(labels: dict[str, str], want_product: str, want_display: str,
                     want_selector: dict[str, str], request: pytest.FixtureRequest,
                     golden: Any) -> None:
    res = classify_node(labels)
    hw = _hw(res)
    assert res.reason == UNKNOWN_GPU_PRODUCT
    assert (hw.vendor, hw.product, hw.display_name, hw.known) == (
        "amd", want_product, want_display, False)
    assert (hw.architecture, hw.gfx_target, hw.compute_capability) == ("unknown", None, None)
    assert (hw.bf16, hw.fp8_compute, hw.fp8_weight_only, hw.fp8_kv_cache, hw.fp8_format) == (
        False, False, False, False, None)
    assert hw.memory_gib == 24.0 and hw.resource_name == "amd.com/gpu"
    assert res.node_selector == want_selector
    golden.check("hardware", f"labels.amd.unknown.{_id(request)}", res.message)


def test_unknown_amd_without_memory(golden: Any) -> None:
    res = classify_node({AMD + "family": "AI"})
    assert _hw(res).memory_gib == 0.0
    assert res.gpus_per_node == 1
    golden.check("hardware", "labels.amd.unknown-without-memory", res.message)


def test_amd_beta_labels_only_when_no_current_ones() -> None:
    res = classify_node({BETA + "device-id.74a1": "8", BETA + "vram.192G": "8"})
    assert (_hw(res).product, res.gpus_per_node) == ("MI300X-192GB", 8)
    assert res.node_selector == {BETA + "device-id.74a1": "8"}
    both = classify_node({BETA + "device-id.74a1": "8", AMD + "family": "AI"})
    assert _hw(both).known is False


# ---------------------------------------------------------------- Intel Gaudi (H14)


def test_gaudi_full_labels(golden: Any) -> None:
    res = classify_node({GAUDI_PRODUCT: " HL-225 ", GAUDI_COUNT: "8", GAUDI_MEMORY: "98304"})
    hw = _hw(res)
    assert (hw.product, hw.memory_gib, hw.resource_name) == (
        "Gaudi2-96GB", 96.0, "habana.ai/gaudi")
    assert res.gpus_per_node == 8
    assert res.node_selector == {GAUDI_PRODUCT: "HL-225"}
    assert res.reason == RESOLVED
    golden.check("hardware", "labels.gaudi.full-labels", res.message)


@pytest.mark.parametrize(
    ("extra", "want_memory", "want_reason"),
    [pytest.param({}, 128.0, RESOLVED, id="catalogue-memory"),
     pytest.param({GAUDI_MEMORY: "1"}, 0.001, RESOLVED, id="one-mib"),
     pytest.param({GAUDI_MEMORY: "1000"}, 0.977, RESOLVED, id="rounded"),
     pytest.param({GAUDI_MEMORY: "0"}, 128.0, INVALID_LABEL, id="zero-memory"),
     pytest.param({GAUDI_MEMORY: "x"}, 128.0, INVALID_LABEL, id="not-a-number")],
)
def test_gaudi_memory(extra: dict[str, str], want_memory: float, want_reason: str) -> None:
    res = classify_node({GAUDI_PRODUCT: "Gaudi3", **extra})
    assert (_hw(res).memory_gib, res.reason, res.gpus_per_node) == (want_memory, want_reason, 1)


def test_unknown_gaudi(golden: Any) -> None:
    res = classify_node({GAUDI_PRODUCT: "Gaudi9", GAUDI_MEMORY: "1000", GAUDI_COUNT: "4"})
    hw = _hw(res)
    assert res.reason == UNKNOWN_GPU_PRODUCT
    assert (hw.vendor, hw.product, hw.display_name, hw.known) == (
        "intel", "Gaudi9", "Gaudi9", False)
    assert hw.memory_gib == 1000 / 1024
    assert (hw.architecture, hw.bf16, hw.fp8_compute, hw.fp8_weight_only, hw.fp8_kv_cache,
            hw.fp8_format) == ("unknown", True, False, False, False, None)
    assert (hw.memory_bandwidth_gbps, hw.dense_bf16_tflops, hw.dense_fp8_tflops) == (
        None, None, None)
    assert hw.resource_name == "habana.ai/gaudi"
    assert res.node_selector == {GAUDI_PRODUCT: "Gaudi9"}
    assert res.gpus_per_node == 4
    golden.check("hardware", "labels.gaudi.unknown", res.message)


def test_gaudi_node_without_product(golden: Any) -> None:
    res = classify_node({"habana.ai/gaudi.present": "true"})
    hw = _hw(res)
    assert (hw.product, hw.display_name, hw.memory_gib) == ("unknown", "unknown Intel Gaudi", 0.0)
    assert res.node_selector == {}
    golden.check("hardware", "labels.gaudi.without-product", res.message)


def test_gaudi_label_naming_another_vendor_is_unknown() -> None:
    res = classify_node({GAUDI_PRODUCT: "H100"})
    assert res.reason == UNKNOWN_GPU_PRODUCT
    assert _hw(res).vendor == "intel"


# ---------------------------------------------------------------- --gpu-product names


@pytest.mark.parametrize(
    ("name", "want_product", "want_selector_value"),
    [
        pytest.param("H100", "H100-SXM-80GB", "NVIDIA-H100-80GB-HBM3", id="H100"),
        pytest.param("h100-80gb", "H100-SXM-80GB", "NVIDIA-H100-80GB-HBM3", id="h100-80gb"),
        pytest.param("NVIDIA-H100-80GB-HBM3", "H100-SXM-80GB", "NVIDIA-H100-80GB-HBM3",
                     id="gfd-label-value"),
        pytest.param("NVIDIA H100 PCIe", "H100-PCIE-80GB", "NVIDIA-H100-PCIe", id="nvml-name"),
        pytest.param("h100-nvl", "H100-NVL-94GB", None, id="h100-nvl"),
        pytest.param("H200", "H200-SXM-141GB", None, id="H200"),
        pytest.param("A100", "A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", id="A100"),
        pytest.param("a100-80gb", "A100-SXM4-80GB", None, id="a100-80gb"),
        pytest.param("T4", "T4-16GB", "Tesla-T4", id="T4"),
        pytest.param("tesla-t4", "T4-16GB", None, id="tesla-t4"),
        pytest.param("L4", "L4-24GB", None, id="L4"),
        pytest.param("L40S", "L40S-48GB", None, id="L40S"),
        pytest.param("A10G", "A10G-24GB", None, id="A10G"),
        pytest.param("RTX 3090", "RTX-3090-24GB", None, id="RTX-3090"),
        pytest.param("GeForce RTX 4090", "RTX-4090-24GB", None, id="GeForce-RTX-4090"),
        pytest.param("RTX A6000", "RTX-A6000-48GB", None, id="RTX-A6000"),
        pytest.param("V100", "V100-SXM2-16GB", None, id="V100"),
        pytest.param("B200", "B200-SXM-180GB", None, id="B200"),
        pytest.param("GB200", "GB200-186GB", None, id="GB200"),
        pytest.param("MI300X", "MI300X-192GB", "AMD_Instinct_MI300X_OAM", id="MI300X"),
        pytest.param("AMD Instinct MI325X", "MI325X-256GB", None, id="AMD-Instinct-MI325X"),
        pytest.param("mi250x", "MI250X-64GB", None, id="mi250x"),
        pytest.param("MI210", "MI210-64GB", None, id="MI210"),
        pytest.param("Gaudi2", "Gaudi2-96GB", "Gaudi2", id="Gaudi2"),
        pytest.param("gaudi-3", "Gaudi3-128GB", None, id="gaudi-3"),
    ],
)
def test_resolve_product(name: str, want_product: str, want_selector_value: str | None) -> None:
    res = resolve_product(name)
    assert res.gpus_per_node == 8
    assert res.reason == RESOLVED
    assert _hw(res).product == want_product
    ((key, value),) = res.node_selector.items()
    assert key in SELECTOR_KEYS.values()
    if want_selector_value is not None:
        assert value == want_selector_value
    # A selector value must classify back to the same product.
    assert _hw(classify_node({key: value})).product == want_product


@pytest.mark.parametrize(("name", "want_selector"), [
    pytest.param("H100", {PRODUCT: "NVIDIA-H100-80GB-HBM3"}, id="nvidia"),
    pytest.param("mi300x", {AMD + "product-name": "AMD_Instinct_MI300X_OAM"}, id="amd"),
    pytest.param("A100", {PRODUCT: "NVIDIA-A100-SXM4-40GB"}, id="nvidia-weight-only-fp8"),
])
def test_resolve_product_messages(name: str, want_selector: dict[str, str],
                                  request: pytest.FixtureRequest, golden: Any) -> None:
    res = resolve_product(name, gpus_per_node=1)
    assert res.gpus_per_node == 1
    assert res.node_selector == want_selector
    golden.check("hardware", f"labels.resolve-product.{_id(request)}", res.message)


@pytest.mark.parametrize("name", [
    pytest.param("H300", id="unknown-name"), pytest.param("", id="empty"),
    pytest.param("   ", id="blank"), pytest.param("NVIDIA", id="vendor-word-alone"),
])
def test_resolve_unknown_product_lists_the_known_ones(
    name: str, request: pytest.FixtureRequest, golden: Any
) -> None:
    res = resolve_product(name, gpus_per_node=2)
    assert res.hardware is None
    assert (res.gpus_per_node, res.node_selector, res.reason) == (2, {}, UNKNOWN_GPU_PRODUCT)
    assert res.message.endswith(", ".join(load_catalogue().names()))
    golden.check("hardware", f"labels.resolve-product.{_id(request)}", res.message)


@pytest.mark.parametrize("gpus", [pytest.param(0, id="zero"), pytest.param(-1, id="negative")])
def test_resolve_product_needs_a_gpu(gpus: int, request: pytest.FixtureRequest,
                                     golden: Any) -> None:
    assert resolve_product("H100", gpus_per_node=4).gpus_per_node == 4
    with pytest.raises(ValueError) as exc:
        resolve_product("H100", gpus_per_node=gpus)
    golden.check("hardware", f"labels.resolve-product.gpus-per-node-{_id(request)}",
                 str(exc.value))
