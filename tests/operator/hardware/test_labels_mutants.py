"""Node labels -> hardware: label keys, number parsing, messages and pools, value by value.

Label keys and reasons are API (docs/hardware-and-engine.md, rules H1-H14; the fixtures in
tests/fixtures/hardware); messages are what `kubectl describe` shows, so they are pinned whole.
"""

from __future__ import annotations

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
from tests.support.paths import FIXTURES

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

H100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3", MAJOR: "9", MINOR: "0", MEMORY: "81559", COUNT: "8"}
H100_SUMMARY = "NVIDIA H100 SXM 80GB (CC 9.0, 79.6 GiB, BF16, FP8)"


def _fixture(product: str) -> dict[str, str]:
    with (HW_FIXTURES / "node-labels.yaml").open() as f:
        data = yaml.safe_load(f)
    entry = next(e for e in data if e["product"] == product)
    return {str(k): str(v) for k, v in entry["labels"].items()}


def _hw(res: HardwareResolution) -> HardwareClass:
    assert res.hardware is not None, res.message
    return res.hardware


# ---------------------------------------------------------------- API constants


def test_reasons_are_the_documented_condition_reasons() -> None:
    assert REASONS == (
        "Resolved", "UnknownGPUProduct", "NoGPULabels", "InvalidLabel", "InconsistentLabels")
    assert REASONS == (
        RESOLVED, UNKNOWN_GPU_PRODUCT, NO_GPU_LABELS, INVALID_LABEL, INCONSISTENT_LABELS)


def test_selector_keys() -> None:
    assert SELECTOR_KEYS == {
        "nvidia": "nvidia.com/gpu.product",
        "amd": "amd.com/gpu.product-name",
        "intel": "habana.ai/gaudi.product",
    }


def test_resolution_defaults_and_hash() -> None:
    res = classify_node(H100)
    assert res.resolved
    assert (res.mig, res.shared, res.mig_profiles, res.replicas) == (False, False, (), 1)
    # Resolutions are hashable (the selector dict does not take part) and equal by value.
    again = classify_node(dict(H100))
    assert res == again and hash(res) == hash(again)
    assert not classify_node({}).resolved


# ---------------------------------------------------------------- NVIDIA: full messages


def test_full_label_set_message() -> None:
    res = classify_node(H100)
    assert res.reason == RESOLVED
    assert res.message == (
        f"Label nvidia.com/gpu.product='NVIDIA-H100-80GB-HBM3' resolved to {H100_SUMMARY}")
    assert res.node_selector == {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    assert res.gpus_per_node == 8
    hw = _hw(res)
    # Label memory (usable MiB) replaces the catalogue's, rounded to 3 decimals (H1).
    assert hw.memory_gib == 79.647
    assert hw.known and hw.product == "H100-SXM-80GB"


@pytest.mark.parametrize(
    ("labels", "reason", "message"),
    [
        (
            {**H100, COUNT: "x"},
            INVALID_LABEL,
            "Ignored label nvidia.com/gpu.count='x' is not an integer; label "
            f"nvidia.com/gpu.product='NVIDIA-H100-80GB-HBM3' resolved to {H100_SUMMARY}",
        ),
        (
            {**H100, MEMORY: "0", COUNT: "-1"},
            INVALID_LABEL,
            "Ignored label nvidia.com/gpu.memory='0' is below 1; label nvidia.com/gpu.count='-1' "
            "is below 0; label nvidia.com/gpu.product='NVIDIA-H100-80GB-HBM3' resolved to "
            "NVIDIA H100 SXM 80GB (CC 9.0, 80.0 GiB, BF16, FP8)",
        ),
        (
            {**H100, MAJOR: "8", MINOR: "6"},
            INCONSISTENT_LABELS,
            "Label nvidia.com/gpu.compute.major/minor says CC 8.6 but 'NVIDIA-H100-80GB-HBM3' is "
            "CC 9.0 in the catalogue; the labels win; GPU product from label "
            "nvidia.com/gpu.product='NVIDIA-H100-80GB-HBM3' is not in the catalogue; planning "
            "with a conservative class from the labels: NVIDIA-H100-80GB-HBM3 (CC 8.6, 79.6 GiB, "
            "BF16, FP8 weight-only)",
        ),
        (
            # A broken label outranks the inconsistency; both are told.
            {**H100, MAJOR: "8", MINOR: "0", COUNT: "many"},
            INVALID_LABEL,
            "Ignored label nvidia.com/gpu.count='many' is not an integer; label "
            "nvidia.com/gpu.compute.major/minor says CC 8.0 but 'NVIDIA-H100-80GB-HBM3' is CC 9.0 "
            "in the catalogue; the labels win; GPU product from label "
            "nvidia.com/gpu.product='NVIDIA-H100-80GB-HBM3' is not in the catalogue; planning "
            "with a conservative class from the labels: NVIDIA-H100-80GB-HBM3 (CC 8.0, 79.6 GiB, "
            "BF16, FP8 weight-only)",
        ),
        (
            {PRODUCT: "NVIDIA-Mystery", MAJOR: "7", MINOR: "5"},
            UNKNOWN_GPU_PRODUCT,
            "GPU product from label nvidia.com/gpu.product='NVIDIA-Mystery' is not in the "
            "catalogue; planning with a conservative class from the labels: NVIDIA-Mystery "
            "(CC 7.5, memory unknown, no BF16, no FP8)",
        ),
        (
            {MAJOR: "9", MINOR: "0", MEMORY: "98304"},
            UNKNOWN_GPU_PRODUCT,
            "GPU product from labels without nvidia.com/gpu.product is not in the catalogue; "
            "planning with a conservative class from the labels: unknown NVIDIA GPU (CC 9.0, "
            "96.0 GiB, BF16, FP8)",
        ),
        (
            {COUNT: "4"},
            UNKNOWN_GPU_PRODUCT,
            "GPU product from labels without nvidia.com/gpu.product is not in the catalogue; "
            "planning with a conservative class from the labels: unknown NVIDIA GPU (memory "
            "unknown, no BF16, no FP8)",
        ),
        (
            {PRODUCT: "Tesla-T4", COUNT: " 2 "},
            RESOLVED,
            "Label nvidia.com/gpu.product='Tesla-T4' resolved to NVIDIA Tesla T4 (CC 7.5, "
            "15.0 GiB, no BF16, no FP8)",
        ),
    ],
    ids=["bad-count", "below-minimum", "inconsistent", "invalid-outranks-inconsistent",
         "unknown-product", "no-product", "count-only", "product-only"],
)
def test_nvidia_messages(labels: dict[str, str], reason: str, message: str) -> None:
    res = classify_node(labels)
    assert (res.reason, res.message) == (reason, message)


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
    ("labels", "cc"),
    [
        ({MAJOR: "9"}, (9, 0)),
        ({MAJOR: " 8 ", MINOR: " 9 "}, (8, 9)),
        ({MAJOR: "8", MINOR: ""}, (8, 0)),
        ({MINOR: "6", COUNT: "1"}, None),
        ({FAMILY: "volta"}, (7, 0)),
        ({FAMILY: "turing"}, (7, 5)),
        ({FAMILY: "ampere"}, (8, 0)),
        ({FAMILY: "ada-lovelace"}, (8, 9)),
        ({FAMILY: "hopper"}, (9, 0)),
        ({FAMILY: " Blackwell "}, (10, 0)),
        ({FAMILY: "kepler"}, None),
        # The compute labels outrank the family (H5).
        ({FAMILY: "hopper", MAJOR: "8", MINOR: "6"}, (8, 6)),
        # A catalogue product outranks the family.
        ({FAMILY: "ampere", PRODUCT: "NVIDIA-H100-80GB-HBM3"}, (9, 0)),
    ],
    ids=str,
)
def test_compute_capability_sources(labels: dict[str, str], cc: tuple[int, int] | None) -> None:
    res = classify_node(labels)
    assert _hw(res).compute_capability == cc
    assert res.reason != INVALID_LABEL


@pytest.mark.parametrize(
    ("extra", "gpus", "memory", "reason"),
    [
        ({}, 1, 80.0, RESOLVED),
        ({COUNT: "0"}, 0, 80.0, RESOLVED),
        ({COUNT: "  "}, 1, 80.0, RESOLVED),
        ({MEMORY: "1"}, 1, 0.001, RESOLVED),
        ({MEMORY: "2048"}, 1, 2.0, RESOLVED),
        ({MEMORY: ""}, 1, 80.0, RESOLVED),
        ({MEMORY: "0"}, 1, 80.0, INVALID_LABEL),
        ({MEMORY: "1.5"}, 1, 80.0, INVALID_LABEL),
        ({COUNT: "-1"}, 1, 80.0, INVALID_LABEL),
    ],
    ids=str,
)
def test_count_and_memory_labels(
    extra: dict[str, str], gpus: int, memory: float, reason: str
) -> None:
    res = classify_node({PRODUCT: "NVIDIA-H100-80GB-HBM3", **extra})
    assert (res.gpus_per_node, _hw(res).memory_gib, res.reason) == (gpus, memory, reason)


# ---------------------------------------------------------------- NVIDIA: sharing (H4)


@pytest.mark.parametrize(
    ("labels", "shared", "replicas"),
    [
        ({PRODUCT: "Tesla-T4"}, False, 1),
        ({PRODUCT: "Tesla-T4", REPLICAS: "1"}, False, 1),
        ({PRODUCT: "Tesla-T4", REPLICAS: "0"}, False, 1),
        ({PRODUCT: "Tesla-T4", REPLICAS: "2"}, True, 2),
        ({PRODUCT: "Tesla-T4", REPLICAS: "5"}, True, 5),
        ({PRODUCT: "Tesla-T4", SHARING: "time-slicing"}, True, 2),
        ({PRODUCT: "Tesla-T4", SHARING: "mps"}, True, 2),
        ({PRODUCT: "Tesla-T4", SHARING: "none"}, False, 1),
        ({PRODUCT: "Tesla-T4", SHARING: "mps", REPLICAS: "1"}, True, 2),
        ({PRODUCT: "Tesla-T4", SHARING: "mps", REPLICAS: "3"}, True, 3),
        ({PRODUCT: "Tesla-T4-SHARED"}, True, 2),
        ({PRODUCT: "Tesla-T4-shared"}, True, 2),
        ({PRODUCT: "Tesla-T4-SHARED", REPLICAS: "1"}, True, 2),
    ],
    ids=str,
)
def test_sharing(labels: dict[str, str], shared: bool, replicas: int) -> None:
    res = classify_node(labels)
    assert (res.shared, res.replicas) == (shared, replicas)
    assert _hw(res).product == "T4-16GB"
    assert res.node_selector == {PRODUCT: labels[PRODUCT]}
    suffix = "; GPUs are shared (time-slicing or MPS), so latency is not isolated"
    assert res.message.endswith(suffix) is shared
    assert res.reason == RESOLVED


def test_shared_message() -> None:
    res = classify_node({PRODUCT: "Tesla-T4-SHARED", REPLICAS: "4"})
    assert res.message == (
        "Label nvidia.com/gpu.product='Tesla-T4-SHARED' resolved to NVIDIA Tesla T4 (CC 7.5, "
        "15.0 GiB, no BF16, no FP8); GPUs are shared (time-slicing or MPS), so latency is not "
        "isolated")


# ---------------------------------------------------------------- NVIDIA: MIG (H3)


def test_mig_single_slice_scales_the_parent() -> None:
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
    assert res.message == (
        "Label nvidia.com/gpu.product='A100-SXM4-40GB-MIG-1g.5gb' resolved to NVIDIA A100 SXM4 "
        "40GB (MIG 1g.5gb) (CC 8.0, 4.8 GiB, BF16, FP8 weight-only)")
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


def test_mig_mixed_profiles_and_message() -> None:
    res = classify_node(MIXED)
    assert res.mig_profiles == ("1g.10gb", "3g.40gb")
    assert res.mig and not res.shared
    assert res.message == (
        f"Label nvidia.com/gpu.product='NVIDIA-H100-80GB-HBM3' resolved to {H100_SUMMARY}; "
        "MIG mixed strategy: slices are exposed as nvidia.com/mig-1g.10gb, "
        "nvidia.com/mig-3g.40gb")


@pytest.mark.parametrize("strategy", ["single", "none", ""])
def test_mig_profiles_only_with_the_mixed_strategy(strategy: str) -> None:
    res = classify_node({**MIXED, MIG_STRATEGY: strategy})
    assert (res.mig, res.mig_profiles) == (False, ())
    assert len(classify_node_pools({**MIXED, MIG_STRATEGY: strategy})) == 1


def test_mixed_strategy_without_slices_is_a_whole_gpu() -> None:
    labels = {**H100, MIG_STRATEGY: "mixed", "nvidia.com/mig-1g.10gb.count": "0"}
    res = classify_node(labels)
    assert (res.mig, res.mig_profiles) == (False, ())
    assert classify_node_pools(labels) == [res]


def test_mixed_pools_without_slice_labels() -> None:
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
    assert small.message == (
        "Label nvidia.com/gpu.product='NVIDIA-H100-80GB-HBM3-MIG-1g.10gb' resolved to NVIDIA "
        "H100 SXM 80GB (MIG 1g.10gb) (CC 9.0, 10.0 GiB, BF16, FP8); MIG mixed strategy: "
        "requests nvidia.com/mig-1g.10gb")
    assert _hw(big).memory_gib == 40.0


def test_mixed_pools_with_slice_labels() -> None:
    # The slice's own product label names it (here as an older driver would, no prefix).
    labels = {**MIXED, "nvidia.com/mig-3g.40gb.memory": "40320",
              "nvidia.com/mig-3g.40gb.product": "H100-80GB-HBM3-MIG-3g.40gb"}
    _, big = classify_node_pools(labels)
    hw = _hw(big)
    assert hw.memory_gib == 39.375
    assert hw.product == "H100-SXM-80GB-MIG-3g.40gb"
    assert big.node_selector == {"nvidia.com/mig-3g.40gb.product": "H100-80GB-HBM3-MIG-3g.40gb"}
    assert big.message.startswith(
        "Label nvidia.com/gpu.product='H100-80GB-HBM3-MIG-3g.40gb' resolved to ")
    assert big.gpus_per_node == 1


def test_pools_of_a_node_without_gpus() -> None:
    assert classify_node_pools({}) == [classify_node({})]


# ---------------------------------------------------------------- node kinds


@pytest.mark.parametrize(
    "labels",
    [{PRODUCT: "x"}, {MAJOR: "9"}, {MEMORY: "1024"}, {COUNT: "1"}, {FAMILY: "hopper"}],
    ids=str,
)
def test_each_gfd_fact_label_makes_an_nvidia_node(labels: dict[str, str]) -> None:
    res = classify_node({**labels, "amd.com/gpu.device-id": "74a1", "habana.ai/gaudi.count": "8"})
    assert _hw(res).vendor == "nvidia"


@pytest.mark.parametrize(
    "labels",
    [{MINOR: "0"}, {"nvidia.com/gpu.present": "true"}, {REPLICAS: "2"},
     {"nvidia.com/gpu.deploy.driver": "true", "amd.com/gpu.device-id": "74a1"}],
    ids=str,
)
def test_operator_labels_without_gfd(labels: dict[str, str]) -> None:
    res = classify_node(labels)
    assert res == HardwareResolution(
        hardware=None,
        gpus_per_node=0,
        node_selector={},
        reason=NO_GPU_LABELS,
        message="Node has NVIDIA GPU Operator labels but no GPU Feature Discovery labels "
        "(nvidia.com/gpu.product, nvidia.com/gpu.compute.major, nvidia.com/gpu.memory); "
        "is GFD running?",
    )


@pytest.mark.parametrize(
    "labels",
    [{}, {"nvidia.com/mig.strategy": "mixed"}, {"amd.com/gpu": "1"}, {"habana.ai": "x"},
     {"example.com/habana.ai/gaudi": "1"}],
    ids=str,
)
def test_nodes_without_gpu_labels(labels: dict[str, str]) -> None:
    res = classify_node(labels)
    assert res == HardwareResolution(
        hardware=None,
        gpus_per_node=0,
        node_selector={},
        reason=NO_GPU_LABELS,
        message="Node has no GPU labels (nvidia.com/gpu.*, amd.com/gpu.*, beta.amd.com/gpu.* "
        "or habana.ai/*); is GPU Feature Discovery or the AMD node labeller running?",
    )
    assert res.mig is False and res.shared is False and res.replicas == 1
    assert res.mig_profiles == ()


def test_amd_labels_outrank_gaudi_labels() -> None:
    res = classify_node({"amd.com/gpu.device-id": "74a1", "habana.ai/gaudi.product": "Gaudi3"})
    assert _hw(res).product == "MI300X-192GB"
    beta = classify_node({"beta.amd.com/gpu.device-id.74a1": "8", "habana.ai/gaudi.count": "8"})
    assert _hw(beta).product == "MI300X-192GB"


# ---------------------------------------------------------------- AMD (H10-H12)

AMD = "amd.com/gpu."
BETA = "beta.amd.com/gpu."


@pytest.mark.parametrize(
    ("vram", "gib"),
    [
        ("192G", 192.0), ("192g", 192.0), ("192Gi", 192.0), ("192GiB", 192.0), ("192GB", 192.0),
        ("192 G", 192.0), (" 1.5G ", 1.5), ("196608M", 192.0), ("196608mi", 192.0),
        ("201326592K", 192.0), ("0.1875T", 192.0), ("1t", 1024.0),
    ],
)
def test_vram_sizes(vram: str, gib: float) -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM", AMD + "vram": vram})
    assert res.reason == RESOLVED
    assert _hw(res).memory_gib == gib


@pytest.mark.parametrize("vram", ["big", "192", "192X", "G", "-1G", "1.G"])
def test_bad_vram_keeps_the_catalogue_memory(vram: str) -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM", AMD + "vram": vram})
    assert res.reason == INVALID_LABEL
    assert _hw(res).memory_gib == 192.0
    assert res.message == (
        f"Ignored label amd.com/gpu.vram={vram!r} is not a size like 192G; label "
        "amd.com/gpu.product-name='AMD_Instinct_MI300X_OAM' resolved to AMD Instinct MI300X "
        "(gfx942, 192.0 GiB, BF16, FP8)")


def test_amd_memory_is_rounded_like_nvidia() -> None:
    known = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM", AMD + "vram": "1000M"})
    assert _hw(known).memory_gib == 0.977
    unknown = classify_node({AMD + "product-name": "AMD_Radeon_X", AMD + "vram": "1000M"})
    assert _hw(unknown).memory_gib == 0.977


def test_amd_single_value_labels() -> None:
    res = classify_node({AMD + "product-name": " AMD_Instinct_MI300X_OAM ", AMD + "vram": "191G"})
    assert res.reason == RESOLVED
    assert res.gpus_per_node == 1
    assert res.node_selector == {AMD + "product-name": "AMD_Instinct_MI300X_OAM"}
    assert res.message == (
        "Label amd.com/gpu.product-name='AMD_Instinct_MI300X_OAM' resolved to AMD Instinct "
        "MI300X (gfx942, 191.0 GiB, BF16, FP8)")
    hw = _hw(res)
    assert (hw.memory_gib, hw.known, hw.resource_name) == (191.0, True, "amd.com/gpu")


def test_amd_counted_labels() -> None:
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
    assert res.message == (
        "Label amd.com/gpu.product-name.AMD_Instinct_MI210='3' resolved to AMD Instinct MI210 "
        "(gfx90a, 64.0 GiB, BF16, no FP8); node has several GPU products (AMD_Instinct_MI210, "
        "AMD_Instinct_MI300X_OAM); planned for the most numerous")


def test_amd_several_device_ids_without_names() -> None:
    res = classify_node({AMD + "device-id.740f": "2", AMD + "device-id.74a1": "6"})
    assert _hw(res).product == "MI300X-192GB"
    assert res.gpus_per_node == 6
    assert res.node_selector == {AMD + "device-id.74a1": "6"}
    assert res.message == (
        "Label amd.com/gpu.device-id.74a1='6' resolved to AMD Instinct MI300X (gfx942, 192.0 GiB, "
        "BF16, FP8); node has several GPU products (74a1, 740f); planned for the most numerous")


def test_amd_one_name_several_device_ids() -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI300X_OAM",
                         AMD + "device-id.74a1": "6", AMD + "device-id.74b5": "2"})
    assert "several GPU products (AMD_Instinct_MI300X_OAM)" in res.message


@pytest.mark.parametrize("count", ["08", " 8 "])
def test_amd_counted_label_selects_on_the_value_the_node_has(count: str) -> None:
    res = classify_node({AMD + "device-id.74a1": count})
    assert res.gpus_per_node == 8
    assert res.node_selector == {AMD + "device-id.74a1": count.strip()}


def test_amd_count_that_is_not_a_number_counts_no_device() -> None:
    res = classify_node({AMD + "device-id.74a1": "lots", AMD + "device-id.74a5": "1"})
    assert _hw(res).product == "MI325X-256GB"


def test_amd_counted_label_with_a_bad_count() -> None:
    res = classify_node({AMD + "device-id.74a1": "lots"})
    assert _hw(res).product == "MI300X-192GB"
    assert res.gpus_per_node == 1
    # The selector still matches the node (the label's value, not the device id).
    assert res.node_selector == {AMD + "device-id.74a1": "lots"}
    assert res.message == (
        "Label amd.com/gpu.device-id.74a1='lots' resolved to AMD Instinct MI300X (gfx942, "
        "192.0 GiB, BF16, FP8)")


def test_amd_count_label_outranks_counted_names() -> None:
    res = classify_node({AMD + "product-name.AMD_Instinct_MI300X_OAM": "6", AMD + "count": "8"})
    assert res.gpus_per_node == 8
    bad = classify_node({AMD + "product-name.AMD_Instinct_MI300X_OAM": "6", AMD + "count": "x"})
    assert (bad.gpus_per_node, bad.reason) == (6, INVALID_LABEL)
    assert bad.message.startswith("Ignored label amd.com/gpu.count='x' is not an integer; ")


def test_amd_blank_single_value_falls_back_to_counted_labels() -> None:
    res = classify_node({AMD + "product-name": " ", AMD + "product-name.AMD_Instinct_MI210": "2"})
    assert _hw(res).product == "MI210-64GB"
    assert res.gpus_per_node == 2
    assert res.node_selector == {AMD + "product-name.AMD_Instinct_MI210": "2"}


def test_amd_device_id_only() -> None:
    res = classify_node({AMD + "device-id": "0x74A5"})
    assert _hw(res).product == "MI325X-256GB"
    assert res.node_selector == {AMD + "device-id": "0x74A5"}
    assert res.message == (
        "Label amd.com/gpu.device-id='0x74A5' resolved to AMD Instinct MI325X (gfx942, "
        "256.0 GiB, BF16, FP8)")


@pytest.mark.parametrize(
    ("labels", "product"),
    [
        ({AMD + "product-name": "AMD_Instinct_MI210", AMD + "device-id": "740f"}, "MI210-64GB"),
        ({AMD + "product-name": "AMD_Instinct_MI210"}, "MI210-64GB"),
        ({AMD + "device-id": "740f"}, "MI210-64GB"),
    ],
    ids=str,
)
def test_amd_agreeing_names_are_resolved(labels: dict[str, str], product: str) -> None:
    res = classify_node(labels)
    assert (res.reason, _hw(res).product) == (RESOLVED, product)


def test_amd_device_id_outranks_the_name() -> None:
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI210", AMD + "device-id": "74a1"})
    assert res.reason == INCONSISTENT_LABELS
    assert res.message == (
        "Device id 74a1 is MI300X-192GB but product name 'AMD_Instinct_MI210' is MI210-64GB; "
        "the device id wins; label amd.com/gpu.product-name='AMD_Instinct_MI210' resolved to "
        "AMD Instinct MI300X (gfx942, 192.0 GiB, BF16, FP8)")
    # An unknown device id does not contradict a known name.
    res = classify_node({AMD + "product-name": "AMD_Instinct_MI210", AMD + "device-id": "6860"})
    assert (res.reason, _hw(res).product) == (RESOLVED, "MI210-64GB")


@pytest.mark.parametrize(
    ("labels", "product", "display", "selector", "where"),
    [
        ({AMD + "product-name": "AMD_Radeon_X", AMD + "vram": "24G"}, "AMD_Radeon_X",
         "AMD_Radeon_X", {AMD + "product-name": "AMD_Radeon_X"},
         "label amd.com/gpu.product-name='AMD_Radeon_X'"),
        # A product of another vendor in the AMD label is not taken.
        ({AMD + "product-name": "NVIDIA-H100-80GB-HBM3", AMD + "vram": "24G"},
         "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3",
         {AMD + "product-name": "NVIDIA-H100-80GB-HBM3"},
         "label amd.com/gpu.product-name='NVIDIA-H100-80GB-HBM3'"),
        ({AMD + "device-id": "6860", AMD + "vram": "24G"}, "device 6860", "device 6860",
         {AMD + "device-id": "6860"}, "label amd.com/gpu.device-id='6860'"),
        ({AMD + "vram": "24G"}, "unknown", "unknown AMD GPU", {},
         "labels without an AMD product-name or device-id"),
    ],
    ids=["name", "nvidia-name", "device", "nothing"],
)
def test_unknown_amd(
    labels: dict[str, str], product: str, display: str, selector: dict[str, str], where: str
) -> None:
    res = classify_node(labels)
    hw = _hw(res)
    assert res.reason == UNKNOWN_GPU_PRODUCT
    assert (hw.vendor, hw.product, hw.display_name, hw.known) == ("amd", product, display, False)
    assert (hw.architecture, hw.gfx_target, hw.compute_capability) == ("unknown", None, None)
    assert (hw.bf16, hw.fp8_compute, hw.fp8_weight_only, hw.fp8_kv_cache, hw.fp8_format) == (
        False, False, False, False, None)
    assert hw.memory_gib == 24.0 and hw.resource_name == "amd.com/gpu"
    assert res.node_selector == selector
    assert res.message == (
        f"GPU product from {where} is not in the catalogue; planning with a conservative class "
        f"from the labels: {display} (24.0 GiB, no BF16, no FP8)")


def test_unknown_amd_without_memory() -> None:
    res = classify_node({AMD + "family": "AI"})
    assert _hw(res).memory_gib == 0.0
    assert res.message.endswith("unknown AMD GPU (memory unknown, no BF16, no FP8)")
    assert res.gpus_per_node == 1


def test_amd_beta_labels_only_when_no_current_ones() -> None:
    res = classify_node({BETA + "device-id.74a1": "8", BETA + "vram.192G": "8"})
    assert (_hw(res).product, res.gpus_per_node) == ("MI300X-192GB", 8)
    assert res.node_selector == {BETA + "device-id.74a1": "8"}
    both = classify_node({BETA + "device-id.74a1": "8", AMD + "family": "AI"})
    assert _hw(both).known is False


# ---------------------------------------------------------------- Intel Gaudi (H14)

GAUDI_PRODUCT = "habana.ai/gaudi.product"
GAUDI_COUNT = "habana.ai/gaudi.count"
GAUDI_MEMORY = "habana.ai/gaudi.memory"


def test_gaudi_full_labels() -> None:
    res = classify_node({GAUDI_PRODUCT: " HL-225 ", GAUDI_COUNT: "8", GAUDI_MEMORY: "98304"})
    hw = _hw(res)
    assert (hw.product, hw.memory_gib, hw.resource_name) == (
        "Gaudi2-96GB", 96.0, "habana.ai/gaudi")
    assert res.gpus_per_node == 8
    assert res.node_selector == {GAUDI_PRODUCT: "HL-225"}
    assert res.reason == RESOLVED
    assert res.message == (
        "Label habana.ai/gaudi.product='HL-225' resolved to Intel Gaudi 2 (96.0 GiB, BF16, FP8)")


@pytest.mark.parametrize(
    ("extra", "memory", "reason"),
    [({}, 128.0, RESOLVED), ({GAUDI_MEMORY: "1"}, 0.001, RESOLVED),
     ({GAUDI_MEMORY: "1000"}, 0.977, RESOLVED),
     ({GAUDI_MEMORY: "0"}, 128.0, INVALID_LABEL), ({GAUDI_MEMORY: "x"}, 128.0, INVALID_LABEL)],
    ids=str,
)
def test_gaudi_memory(extra: dict[str, str], memory: float, reason: str) -> None:
    res = classify_node({GAUDI_PRODUCT: "Gaudi3", **extra})
    assert (_hw(res).memory_gib, res.reason, res.gpus_per_node) == (memory, reason, 1)


def test_unknown_gaudi() -> None:
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
    assert res.message == (
        "GPU product from label habana.ai/gaudi.product='Gaudi9' is not in the catalogue; "
        "planning with a conservative class from the labels: Gaudi9 (1.0 GiB, BF16, no FP8)")


def test_gaudi_node_without_product() -> None:
    res = classify_node({"habana.ai/gaudi.present": "true"})
    hw = _hw(res)
    assert (hw.product, hw.display_name, hw.memory_gib) == ("unknown", "unknown Intel Gaudi", 0.0)
    assert res.node_selector == {}
    assert res.message == (
        "GPU product from labels without habana.ai/gaudi.product is not in the catalogue; "
        "planning with a conservative class from the labels: unknown Intel Gaudi (memory "
        "unknown, BF16, no FP8)")


def test_gaudi_label_naming_another_vendor_is_unknown() -> None:
    res = classify_node({GAUDI_PRODUCT: "H100"})
    assert res.reason == UNKNOWN_GPU_PRODUCT
    assert _hw(res).vendor == "intel"


# ---------------------------------------------------------------- --gpu-product


def test_resolve_product_messages() -> None:
    res = resolve_product("H100", gpus_per_node=1)
    assert res.gpus_per_node == 1
    assert res.message == (
        "GPU product 'H100' resolved to NVIDIA H100 SXM 80GB (CC 9.0, 80.0 GiB, BF16, FP8)")
    assert res.node_selector == {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    mi = resolve_product("mi300x")
    assert mi.message == (
        "GPU product 'mi300x' resolved to AMD Instinct MI300X (gfx942, 192.0 GiB, BF16, FP8)")
    a100 = resolve_product("A100")
    assert a100.message.endswith("(CC 8.0, 40.0 GiB, BF16, FP8 weight-only)")


@pytest.mark.parametrize("name", ["H300", "", "   ", "NVIDIA"])
def test_resolve_unknown_product(name: str) -> None:
    res = resolve_product(name, gpus_per_node=2)
    assert res == HardwareResolution(
        hardware=None,
        gpus_per_node=2,
        node_selector={},
        reason=UNKNOWN_GPU_PRODUCT,
        message=f"GPU product {name!r} is not in the catalogue; known products: "
        + ", ".join(load_catalogue().names()),
    )


@pytest.mark.parametrize("gpus", [0, -1])
def test_resolve_product_needs_a_gpu(gpus: int) -> None:
    with pytest.raises(ValueError, match=rf"^gpus_per_node must be at least 1, got {gpus}$"):
        resolve_product("H100", gpus_per_node=gpus)
