"""The pod's real GPUs, and how they compare with what the node labels promised.

Sources, in order: PyTorch (when installed in the image), ``nvidia-smi``, ``rocm-smi``,
``hl-smi`` (Intel Gaudi). The parsing and the comparison are pure functions; only
``probe()`` runs anything. What a device runs (BF16, FP8, FP8 KV cache) is decided by
``slo_runtime.contract``'s rules, the ones the operator planned with.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from slo_runtime.contract import PrecisionSupport, gaudi_generation, precision_support

log = logging.getLogger("slo_runtime.probe")

Runner = Callable[[list[str]], str]


@dataclass(frozen=True)
class GpuInfo:
    vendor: str                 # "nvidia" | "amd" | "intel" (Gaudi) | "none"
    product: str                # NVML / ROCm / hl-smi product name, e.g. "NVIDIA H200"
    compute_capability: str     # "9.0" on NVIDIA; gfx target ("gfx942") on AMD; "gaudi3"
    memory_mib: int             # per GPU
    count: int
    source: str                 # which tool answered
    driver: str = ""

    @property
    def support(self) -> PrecisionSupport:
        """What vLLM runs on this device: the rules of ``slo_runtime.contract``, the same the
        operator planned with."""
        return precision_support(self.vendor, self.compute_capability)

    @property
    def fp8_native(self) -> bool:
        """FP8 weights and activations natively (capability >= 8.9, gfx94x/95x/12)."""
        return self.support.fp8_compute and self.vendor != "intel"

    @property
    def fp8_weights(self) -> bool:
        """FP8 weights load (natively, or weight-only through Marlin on 8.0-8.8)."""
        return self.support.fp8_weights and self.vendor != "intel"

    @property
    def bf16(self) -> bool:
        return self.support.bf16

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        sup = self.support
        d["fp8_native"] = self.fp8_native
        d["fp8_weight_only"] = sup.fp8_weight_only
        d["fp8_kv_cache"] = sup.fp8_kv_cache
        d["bf16"] = sup.bf16
        return d


NO_GPU = GpuInfo("none", "", "", 0, 0, "none")


@dataclass
class ProbeResult:
    gpu: GpuInfo
    expected: dict[str, str | None]
    mismatches: list[str] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.as_dict(), "expected": self.expected,
                "matches": self.matches, "mismatches": self.mismatches}


def cc_tuple(cc: str) -> tuple[int, int]:
    try:
        major, _, minor = cc.partition(".")
        return int(major), int(minor or 0)
    except ValueError:
        return (0, 0)


def gfd_product_label(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GPU Feature Discovery makes of an NVML name."""
    return re.sub(r"[^A-Za-z0-9\-_.]", "", nvml_name.strip().replace(" ", "-"))


def _base_product(label: str) -> str:
    # Sharing suffixes describe how the GPU is offered, not what it is; old drivers
    # drop the vendor prefix (A100-SXM4-40GB); AMD's labeller joins words with "_".
    label = re.sub(r"[\s_]+", "-", label.strip())
    label = re.sub(r"[^A-Za-z0-9\-.]", "", label)
    label = re.sub(r"-MIG-.*$", "", label)
    label = re.sub(r"-SHARED$", "", label)
    return re.sub(r"^NVIDIA-", "", label, flags=re.IGNORECASE).lower()


def product_matches(found_name: str, expected_label: str) -> bool:
    """True when the pod's GPU is the one the node label names.

    Labels may be shorter than the NVML name (``NVIDIA-H200`` vs
    ``NVIDIA H200 141GB HBM3e``), so a label that is a dash-bounded prefix matches.
    """
    found = _base_product(found_name)
    want = _base_product(expected_label)
    return bool(want) and (found == want or found.startswith(want + "-"))


def compare(gpu: GpuInfo, expected_product: str | None = None,
            expected_cc: str | None = None, expected_count: int | None = None,
            expected_memory_mib: int | None = None,
            memory_tolerance: float = 0.03) -> ProbeResult:
    """Compare the probe with the node's promise; every difference is named."""
    exp = {"product": expected_product, "compute_capability": expected_cc,
           "count": None if expected_count is None else str(expected_count),
           "memory_mib": None if expected_memory_mib is None else str(expected_memory_mib)}
    res = ProbeResult(gpu, exp)
    if gpu.count == 0:
        if any(v for v in (expected_product, expected_cc, expected_count)):
            res.mismatches.append("no GPU visible in the pod")
        return res
    if expected_product and not product_matches(gpu.product, expected_product):
        res.mismatches.append(f"product {gpu.product!r} is not {expected_product!r}")
    if expected_cc and cc_tuple(expected_cc) != cc_tuple(gpu.compute_capability) and \
            expected_cc != gpu.compute_capability:
        res.mismatches.append(
            f"compute capability {gpu.compute_capability} is not {expected_cc}")
    if expected_count is not None and gpu.count < expected_count:
        res.mismatches.append(f"{gpu.count} GPUs visible, {expected_count} expected")
    if expected_memory_mib and abs(gpu.memory_mib - expected_memory_mib) > \
            memory_tolerance * expected_memory_mib:
        res.mismatches.append(f"{gpu.memory_mib} MiB per GPU, {expected_memory_mib} expected")
    return res


# --- parsers (pure) -----------------------------------------------------------------
def parse_nvidia_smi(csv_text: str) -> GpuInfo | None:
    """Output of ``nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version
    --format=csv,noheader,nounits``, one line per GPU."""
    rows = [[c.strip() for c in line.split(",")] for line in csv_text.splitlines()
            if line.strip()]
    rows = [r for r in rows if len(r) >= 3]
    if not rows:
        return None
    name, cc, mem = rows[0][0], rows[0][1], rows[0][2]
    driver = rows[0][3] if len(rows[0]) > 3 else ""
    try:
        mem_mib = int(float(mem))
    except ValueError:
        mem_mib = 0
    return GpuInfo("nvidia", name, cc, mem_mib, len(rows), "nvidia-smi", driver)


def parse_rocm_smi(json_text: str) -> GpuInfo | None:
    """Output of ``rocm-smi --showproductname --showmeminfo vram --json``."""
    try:
        data = json.loads(json_text)
    except json.JSONDecodeError:
        return None
    cards = [v for k, v in sorted(data.items()) if k.startswith("card") and isinstance(v, dict)]
    if not cards:
        return None
    c = cards[0]
    name = c.get("Card Series") or c.get("Card series") or c.get("Card model") or "AMD GPU"
    gfx = c.get("GFX Version") or c.get("gfx_target_version") or ""
    total = c.get("VRAM Total Memory (B)") or 0
    return GpuInfo("amd", str(name), str(gfx), int(int(total) / 2**20), len(cards), "rocm-smi")


HL_SMI_QUERY = ["hl-smi", "-Q", "name,memory.total,driver_version", "-f", "csv,noheader"]


def parse_hl_smi(csv_text: str) -> GpuInfo | None:
    """Output of ``hl-smi -Q name,memory.total,driver_version -f csv,noheader``, one line
    per Gaudi (docs.habana.ai: hl-smi ``-Q, --query-aip``); memory may carry a unit
    ("98304 MiB"). The generation ("gaudi2", "gaudi3") comes from the board name (HL-225,
    HL-325L) and stands where NVIDIA has its compute capability."""
    rows = [[c.strip() for c in line.split(",")] for line in csv_text.splitlines()
            if line.strip()]
    rows = [r for r in rows if len(r) >= 2 and r[0].lower() != "name"]
    if not rows:
        return None
    name, mem = rows[0][0], rows[0][1]
    driver = rows[0][2] if len(rows[0]) > 2 else ""
    m = re.match(r"\s*(\d+)", mem)
    mem_mib = int(m.group(1)) if m else 0
    return GpuInfo("intel", name, gaudi_generation(name) or "", mem_mib, len(rows), "hl-smi",
                   driver)


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout


def probe_torch() -> GpuInfo | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None
    p = torch.cuda.get_device_properties(0)
    hip = getattr(torch.version, "hip", None)
    if hip:
        gfx = getattr(p, "gcnArchName", "").split(":")[0]
        return GpuInfo("amd", p.name, gfx, p.total_memory // 2**20,
                       torch.cuda.device_count(), "torch")
    return GpuInfo("nvidia", p.name, f"{p.major}.{p.minor}", p.total_memory // 2**20,
                   torch.cuda.device_count(), "torch")


def probe(run: Runner = _run, use_torch: bool = True) -> GpuInfo:
    """The first source that answers wins (PyTorch, nvidia-smi, rocm-smi, hl-smi); driver
    version filled from nvidia-smi."""
    smi: GpuInfo | None = None
    if shutil.which("nvidia-smi") or run is not _run:
        try:
            smi = parse_nvidia_smi(run(["nvidia-smi",
                                        "--query-gpu=name,compute_cap,memory.total,"
                                        "driver_version", "--format=csv,noheader,nounits"]))
        except (OSError, subprocess.SubprocessError) as e:
            log.info("nvidia-smi did not answer: %s", e)
    found = probe_torch() if use_torch else None
    if found and smi:
        return GpuInfo(found.vendor, found.product, found.compute_capability,
                       found.memory_mib, found.count, "torch+nvidia-smi", smi.driver)
    if found or smi:
        return found or smi  # type: ignore[return-value]
    if shutil.which("rocm-smi") or run is not _run:
        try:
            amd = parse_rocm_smi(run(["rocm-smi", "--showproductname", "--showmeminfo",
                                      "vram", "--json"]))
            if amd:
                return amd
        except (OSError, subprocess.SubprocessError) as e:
            log.info("rocm-smi did not answer: %s", e)
    if shutil.which("hl-smi") or run is not _run:
        try:
            gaudi = parse_hl_smi(run(HL_SMI_QUERY))
            if gaudi:
                return gaudi
        except (OSError, subprocess.SubprocessError) as e:
            log.info("hl-smi did not answer: %s", e)
    return NO_GPU


def metrics_text(res: ProbeResult) -> str:
    """Prometheus lines for the gateway's /metrics (the pod's own view of its GPUs)."""
    from slo_runtime.probe_metrics import gpu_metrics_text

    g = res.gpu
    return gpu_metrics_text(g.vendor, g.product, g.compute_capability, g.memory_mib, g.count,
                            res.matches)
