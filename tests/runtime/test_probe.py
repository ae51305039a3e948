"""Probe: parsing the tools' output and comparing the pod's GPUs with real node labels."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from slo_runtime.probe import (
    NO_GPU,
    GpuInfo,
    compare,
    gfd_product_label,
    metrics_text,
    parse_hl_smi,
    parse_nvidia_smi,
    parse_rocm_smi,
    probe,
    product_matches,
)
from tests.runtime.rt_support import FIXTURES
from tests.support.paths import NODE_LABELS

HW = FIXTURES / "hardware"


def test_gfd_label_rule_reproduces_the_derived_labels_of_real_nvml_names() -> None:
    doc = yaml.safe_load((HW / "device-names.yaml").read_text())
    seen = 0
    for src in doc["nvidia_nvml_names"]:
        for ent in src.get("entries", [src]):
            if "derived_label" in ent:
                assert gfd_product_label(ent["nvml_name"]) == ent["derived_label"]
                seen += 1
    assert seen >= 5


def _label_sets() -> list[dict[str, str]]:
    return [e["labels"] for e in yaml.safe_load(NODE_LABELS.read_text())
            if isinstance(e, dict) and isinstance(e.get("labels"), dict)]


@pytest.mark.parametrize(("nvml_name", "label", "want"), [
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", True),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB", True),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB-MIG-1g.5gb", True),
    ("Tesla T4", "Tesla-T4-SHARED", True),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB-MIG-1g.5gb-SHARED", True),
    ("NVIDIA H200 141GB HBM3e", "NVIDIA-H200", True),
    ("NVIDIA H200", "NVIDIA-H200", True),
    ("AMD Instinct MI300X OAM", "AMD_Instinct_MI300X_OAM", True),
    ("NVIDIA L40S", "NVIDIA-L40", False),
    ("NVIDIA H100 NVL", "NVIDIA-H100-80GB-HBM3", False),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", False),
], ids=["gfd-exact", "old-driver-no-prefix", "mig-suffix", "time-sliced-suffix",
        "mig-and-shared", "label-shorter-than-nvml-name", "same-name", "amd-underscores",
        "l40s-is-not-l40", "nvl-is-not-sxm", "80gb-is-not-40gb"])
def test_product_matches(nvml_name: str, label: str, want: bool) -> None:
    assert product_matches(nvml_name, label) is want


def test_every_real_nvidia_label_set_matches_its_own_gpu_and_not_another() -> None:
    sets = [ls for ls in _label_sets() if "nvidia.com/gpu.product" in ls
            and "nvidia.com/gpu.compute.major" in ls]
    assert len(sets) >= 5
    for ls in sets:
        product = ls["nvidia.com/gpu.product"]
        cc = f'{ls["nvidia.com/gpu.compute.major"]}.{ls["nvidia.com/gpu.compute.minor"]}'
        name = product.replace("-", " ")
        gpu = GpuInfo("nvidia", name, cc, int(ls.get("nvidia.com/gpu.memory", 0)),
                      int(ls.get("nvidia.com/gpu.count", 1)), "test")
        res = compare(gpu, product, cc, int(ls.get("nvidia.com/gpu.count", 1)),
                      int(ls["nvidia.com/gpu.memory"]) if "nvidia.com/gpu.memory" in ls
                      else None)
        assert res.matches, (product, res.mismatches)
        other = GpuInfo("nvidia", "NVIDIA B200 180GB HBM3e", "10.0", 184320, 8, "test")
        bad = compare(other, product, cc)
        assert len(bad.mismatches) == 2, product


def test_compare_names_every_difference() -> None:
    gpu = GpuInfo("nvidia", "NVIDIA A100-SXM4-80GB", "8.0", 81920, 1, "test")
    res = compare(gpu, "NVIDIA-H100-80GB-HBM3", "9.0", 2, 81559)
    assert not res.matches
    joined = " | ".join(res.mismatches)
    assert "product" in joined and "compute capability" in joined and "2 expected" in joined
    assert len(res.mismatches) == 3        # memory within 3%: not a mismatch
    assert compare(NO_GPU, "NVIDIA-H200").mismatches == ["no GPU visible in the pod"]
    assert compare(NO_GPU).matches


def test_parse_nvidia_smi_multi_gpu() -> None:
    out = "NVIDIA H200, 9.0, 143771, 580.159.04\nNVIDIA H200, 9.0, 143771, 580.159.04\n"
    g = parse_nvidia_smi(out)
    assert g == GpuInfo("nvidia", "NVIDIA H200", "9.0", 143771, 2, "nvidia-smi", "580.159.04")
    assert g.fp8_native and g.bf16
    assert parse_nvidia_smi("") is None


def test_parse_rocm_smi() -> None:
    out = json.dumps({
        "card0": {"Card Series": "AMD Instinct MI300X OAM", "GFX Version": "gfx942",
                  "VRAM Total Memory (B)": str(192 * 2**30)},
        "card1": {"Card Series": "AMD Instinct MI300X OAM", "GFX Version": "gfx942",
                  "VRAM Total Memory (B)": str(192 * 2**30)},
        "system": {"Driver version": "6.8"},
    })
    g = parse_rocm_smi(out)
    assert g is not None
    assert (g.vendor, g.compute_capability, g.memory_mib, g.count) == \
        ("amd", "gfx942", 192 * 1024, 2)
    assert g.fp8_native
    assert parse_rocm_smi("not json") is None


# (native FP8, FP8 weights at all, BF16, FP8 KV cache by default): slo_runtime.contract's
# rules, the ones the operator's catalogue derives its flags from.
@pytest.mark.parametrize(("gpu", "want"), [
    (GpuInfo("nvidia", "H100", "9.0", 1, 1, "t"), (True, True, True, True)),
    (GpuInfo("nvidia", "L4", "8.9", 1, 1, "t"), (True, True, True, True)),
    (GpuInfo("nvidia", "A100", "8.0", 1, 1, "t"), (False, True, True, False)),
    (GpuInfo("nvidia", "RTX 3090", "8.6", 1, 1, "t"), (False, True, True, False)),
    (GpuInfo("nvidia", "T4", "7.5", 1, 1, "t"), (False, False, False, False)),
    (GpuInfo("nvidia", "B200", "10.0", 1, 1, "t"), (True, True, True, True)),
    (GpuInfo("nvidia", "?", "", 1, 1, "t"), (False, False, False, False)),
    (GpuInfo("amd", "MI300X", "gfx942", 1, 1, "t"), (True, True, True, True)),
    (GpuInfo("amd", "MI300X", "gfx942:sramecc+:xnack-", 1, 1, "t"), (True, True, True, True)),
    (GpuInfo("amd", "MI250X", "gfx90a", 1, 1, "t"), (False, False, True, False)),
    (GpuInfo("amd", "MI210", "gfx90a", 1, 1, "t"), (False, False, True, False)),
    (GpuInfo("amd", "?", "", 1, 1, "t"), (False, False, False, False)),
    (GpuInfo("intel", "HL-325L", "gaudi3", 1, 1, "t"), (False, False, True, True)),
    (GpuInfo("intel", "HL-205", "", 1, 1, "t"), (False, False, True, False)),
    (NO_GPU, (False, False, False, False)),
], ids=["hopper", "ada", "ampere-a100-weight-only", "ampere-8.6-weight-only", "turing",
        "blackwell-10.0", "nvidia-without-capability", "mi300x", "mi300x-torch-arch-name",
        "mi250x-bf16-no-fp8", "mi210-bf16-no-fp8", "amd-without-target",
        "gaudi3-fp8-only-through-inc", "gaudi-unknown-generation-bf16", "no-gpu"])
def test_capabilities(gpu: GpuInfo, want: tuple[bool, bool, bool, bool]) -> None:
    assert (gpu.fp8_native, gpu.fp8_weights, gpu.bf16, gpu.support.fp8_kv_cache) == want
    d = gpu.as_dict()
    assert (d["fp8_native"], d["bf16"], d["fp8_kv_cache"]) == (want[0], want[2], want[3])
    assert d["fp8_weight_only"] == (want[1] and not want[0])


def test_parse_hl_smi() -> None:
    out = "HL-325L, 131072 MiB, 1.19.0-abc\nHL-325L, 131072 MiB, 1.19.0-abc\n"
    g = parse_hl_smi(out)
    assert g == GpuInfo("intel", "HL-325L", "gaudi3", 131072, 2, "hl-smi", "1.19.0-abc")
    assert g.bf16 and g.support.fp8_kv_cache and not g.fp8_weights
    header = "name, memory.total [MiB], driver_version\nHL-225, 98304, 1.17.0\n"
    g2 = parse_hl_smi(header)
    assert g2 is not None and (g2.compute_capability, g2.memory_mib, g2.count) == \
        ("gaudi2", 98304, 1)
    assert parse_hl_smi("") is None
    unknown = parse_hl_smi("HL-205, n/a\n")
    assert unknown is not None and (unknown.compute_capability, unknown.memory_mib) == ("", 0)


def test_probe_uses_nvidia_smi_when_torch_is_absent() -> None:
    calls: list[list[str]] = []

    def run(cmd: list[str]) -> str:
        calls.append(cmd)
        if cmd[0] == "nvidia-smi":
            return "NVIDIA L40S, 8.9, 46068, 550.54.15\n"
        raise FileNotFoundError(cmd[0])

    g = probe(run=run, use_torch=False)
    assert (g.product, g.compute_capability, g.count, g.source) == \
        ("NVIDIA L40S", "8.9", 1, "nvidia-smi")


def test_probe_falls_back_to_rocm_smi_then_to_no_gpu() -> None:
    def amd(cmd: list[str]) -> str:
        if cmd[0] == "nvidia-smi":
            raise subprocess.CalledProcessError(9, cmd)
        return json.dumps({"card0": {"Card Series": "AMD Instinct MI300X", "GFX Version":
                                     "gfx942", "VRAM Total Memory (B)": "206141652992"}})

    assert probe(run=amd, use_torch=False).vendor == "amd"

    def nothing(cmd: list[str]) -> str:
        raise FileNotFoundError(cmd[0])

    assert probe(run=nothing, use_torch=False) == NO_GPU

    def gaudi(cmd: list[str]) -> str:
        if cmd[0] != "hl-smi":
            raise FileNotFoundError(cmd[0])
        return "HL-225, 98304 MiB, 1.17.0\n"

    found = probe(run=gaudi, use_torch=False)
    assert (found.vendor, found.compute_capability, found.source) == ("intel", "gaudi2", "hl-smi")


def test_metrics_text_exposes_info_and_match() -> None:
    gpu = GpuInfo("nvidia", "NVIDIA H200", "9.0", 143771, 1, "t")
    text = metrics_text(compare(gpu, "NVIDIA-H100-80GB-HBM3"))
    assert 'slo_runtime_gpu_info{compute_capability="9.0",memory_mib="143771",' \
           'product="NVIDIA H200",vendor="nvidia"} 1.0' in text
    assert "slo_runtime_gpu_matches_node_labels 0.0" in text
