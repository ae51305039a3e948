"""Node labels -> hardware class.

Facts are decided from the hardware labels (NVIDIA compute capability and memory, AMD
device ID and VRAM); the product string only picks the catalogue row that refines them
(bandwidth, TFLOP/s). See ``tests/fixtures/hardware/README.md`` rules 1-4 and
``docs/hardware-and-engine.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from slo_operator.hardware.catalogue import (
    RESOURCE_NAMES,
    CatalogueEntry,
    Features,
    HardwareClass,
    Vendor,
    features_for_cc,
    features_for_gfx,
    load_catalogue,
)

# Reasons (CamelCase, for the HardwareResolved condition).
RESOLVED = "Resolved"
UNKNOWN_GPU_PRODUCT = "UnknownGPUProduct"
NO_GPU_LABELS = "NoGPULabels"
INVALID_LABEL = "InvalidLabel"
INCONSISTENT_LABELS = "InconsistentLabels"

REASONS: tuple[str, ...] = (
    RESOLVED,
    UNKNOWN_GPU_PRODUCT,
    NO_GPU_LABELS,
    INVALID_LABEL,
    INCONSISTENT_LABELS,
)

# Label keys.
NV_PRODUCT = "nvidia.com/gpu.product"
NV_CC_MAJOR = "nvidia.com/gpu.compute.major"
NV_CC_MINOR = "nvidia.com/gpu.compute.minor"
NV_MEMORY = "nvidia.com/gpu.memory"
NV_COUNT = "nvidia.com/gpu.count"
NV_FAMILY = "nvidia.com/gpu.family"
NV_REPLICAS = "nvidia.com/gpu.replicas"
NV_SHARING = "nvidia.com/gpu.sharing-strategy"
NV_MIG_STRATEGY = "nvidia.com/mig.strategy"
AMD_PREFIX = "amd.com/gpu."
AMD_BETA_PREFIX = "beta.amd.com/gpu."
GAUDI_PREFIX = "habana.ai/"
# No vendor-published Gaudi label example exists (tests/fixtures/hardware/
# node-labels.yaml); these keys are the operator's documented convention.
GAUDI_PRODUCT = "habana.ai/gaudi.product"
GAUDI_COUNT = "habana.ai/gaudi.count"
GAUDI_MEMORY = "habana.ai/gaudi.memory"

SELECTOR_KEYS: dict[Vendor, str] = {
    "nvidia": NV_PRODUCT,
    "amd": AMD_PREFIX + "product-name",
    "intel": GAUDI_PRODUCT,
}

# GFD family label -> a compute capability of that family, used only when the
# compute.major/minor labels are absent (NVIDIA/k8s-device-plugin internal/lm/resource.go).
_FAMILY_CC: dict[str, tuple[int, int]] = {
    "volta": (7, 0),
    "turing": (7, 5),
    "ampere": (8, 0),
    "ada-lovelace": (8, 9),
    "hopper": (9, 0),
    "blackwell": (10, 0),
}

# A100 and H100 have 7 MIG compute slices (NVIDIA MIG user guide, "Supported Profiles").
_MIG_COMPUTE_SLICES = 7

_MIG_RE = re.compile(r"^(?P<base>.+?)-MIG-(?P<profile>(?P<g>\d+)g\.(?P<gb>\d+)gb\S*)$", re.I)
_SHARED_RE = re.compile(r"-SHARED$", re.I)
_MIG_COUNT_RE = re.compile(r"^nvidia\.com/mig-(?P<profile>[^/]+)\.count$")
_VRAM_RE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT])i?B?$", re.I)


@dataclass(frozen=True)
class HardwareResolution:
    """What a node (or a ``--gpu-product`` name) tells the planner.

    ``hardware`` is None only when nothing could be resolved (``NoGPULabels``, or an
    unknown ``resolve_product`` name). ``node_selector`` holds the label key/value that
    identify this pool for node affinity. ``mig_profiles`` lists the MIG devices a node
    with the mixed MIG strategy exposes as ``nvidia.com/mig-<profile>``.
    """

    hardware: HardwareClass | None
    gpus_per_node: int
    node_selector: dict[str, str] = field(hash=False)
    reason: str
    message: str
    mig: bool = False
    shared: bool = False
    mig_profiles: tuple[str, ...] = ()
    # Pods sharing one physical GPU (time-slicing or MPS, nvidia.com/gpu.replicas); 1 when
    # GPUs are not shared. A "-SHARED" product without the replicas label counts as 2.
    replicas: int = 1

    @property
    def resolved(self) -> bool:
        return self.hardware is not None


def _int_label(
    labels: Mapping[str, str], key: str, problems: list[str], minimum: int = 0
) -> int | None:
    raw = labels.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        problems.append(f"label {key}={raw!r} is not an integer")
        return None
    if value < minimum:
        problems.append(f"label {key}={raw!r} is below {minimum}")
        return None
    return value


def _fmt_cc(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def _unknown_class(
    vendor: Vendor,
    product: str,
    display_name: str,
    memory_gib: float,
    *,
    cc: tuple[int, int] | None = None,
    gfx: str | None = None,
) -> HardwareClass:
    """A conservative class for a product missing from the catalogue."""
    if vendor == "nvidia":
        feats = features_for_cc(cc)
    elif vendor == "amd":
        # Weight-only FP8 goes through Marlin, which vLLM disables on ROCm.
        feats = replace(features_for_gfx(gfx), fp8_weight_only=False)
    else:
        # Every Gaudi generation computes in BF16; FP8 is not assumed for an unknown one.
        feats = Features("unknown", True, False, False, False, None)
    arch, bf16, fp8, wo, kv, fmt = (
        feats.architecture,
        feats.bf16,
        feats.fp8_compute,
        feats.fp8_weight_only,
        feats.fp8_kv_cache,
        feats.fp8_format,
    )
    return HardwareClass(
        vendor=vendor,
        product=product,
        display_name=display_name,
        architecture=arch,
        compute_capability=cc,
        gfx_target=gfx,
        memory_gib=memory_gib,
        memory_bandwidth_gbps=None,
        dense_bf16_tflops=None,
        dense_fp8_tflops=None,
        bf16=bf16,
        fp8_compute=fp8,
        fp8_weight_only=wo,
        fp8_kv_cache=kv,
        fp8_format=fmt,
        resource_name=RESOURCE_NAMES[vendor],
        known=False,
        sources=("node labels",),
    )


def _summary(hw: HardwareClass) -> str:
    facts = []
    if hw.compute_capability is not None:
        facts.append(f"CC {_fmt_cc(hw.compute_capability)}")
    if hw.gfx_target is not None:
        facts.append(hw.gfx_target)
    facts.append(f"{hw.memory_gib:.1f} GiB" if hw.memory_gib > 0 else "memory unknown")
    facts.append("BF16" if hw.bf16 else "no BF16")
    if hw.fp8_compute:
        facts.append("FP8")
    elif hw.fp8_weight_only:
        facts.append("FP8 weight-only")
    else:
        facts.append("no FP8")
    return f"{hw.display_name} ({', '.join(facts)})"


def _finish(
    hw: HardwareClass,
    entry: CatalogueEntry | None,
    problems: list[str],
    inconsistency: str | None,
    where: str,
) -> tuple[str, str]:
    """Pick reason and message; problems outrank inconsistency outrank unknown product."""
    parts: list[str] = []
    if problems:
        reason = INVALID_LABEL
        parts.append("ignored " + "; ".join(problems))
    elif inconsistency is not None:
        reason = INCONSISTENT_LABELS
    elif entry is None:
        reason = UNKNOWN_GPU_PRODUCT
    else:
        reason = RESOLVED
    if inconsistency is not None:
        parts.append(inconsistency)
    if entry is None:
        parts.append(
            f"GPU product from {where} is not in the catalogue; planning with a conservative "
            f"class from the labels: {_summary(hw)}"
        )
    else:
        parts.append(f"{where} resolved to {_summary(hw)}")
    message = "; ".join(parts)
    return reason, message[0].upper() + message[1:]


# ---------------------------------------------------------------- NVIDIA


def _classify_nvidia(labels: Mapping[str, str]) -> HardwareResolution:
    catalogue = load_catalogue()
    problems: list[str] = []
    raw = labels.get(NV_PRODUCT, "").strip()

    base = raw
    shared = False
    if _SHARED_RE.search(base):
        base = _SHARED_RE.sub("", base)
        shared = True
    mig = False
    mig_slices: int | None = None
    mig_gb: float | None = None
    profile = ""
    m = _MIG_RE.match(base)
    if m:
        base = m.group("base")
        profile = m.group("profile")
        mig = True
        mig_slices = int(m.group("g"))
        mig_gb = float(m.group("gb"))

    replicas = _int_label(labels, NV_REPLICAS, problems)
    if (replicas is not None and replicas > 1) or labels.get(NV_SHARING) in (
        "time-slicing",
        "mps",
    ):
        # Time-slicing/MPS with renameByDefault=true keeps the product name but sets
        # replicas (NVIDIA/cloud-native-docs gpu-operator/gpu-sharing.rst).
        shared = True

    mig_profiles: tuple[str, ...] = ()
    if labels.get(NV_MIG_STRATEGY) == "mixed":
        found = []
        for key, value in labels.items():
            pm = _MIG_COUNT_RE.match(key)
            if pm and value.strip().isascii() and value.strip().isdigit() and int(value) > 0:
                found.append(pm.group("profile"))
        mig_profiles = tuple(sorted(found))
        if mig_profiles:
            mig = True

    major = _int_label(labels, NV_CC_MAJOR, problems)
    minor = _int_label(labels, NV_CC_MINOR, problems)
    cc_label = (major, minor if minor is not None else 0) if major is not None else None
    mem_mib = _int_label(labels, NV_MEMORY, problems, minimum=1)
    count = _int_label(labels, NV_COUNT, problems)

    entry = catalogue.lookup(base) if base else None
    if entry is not None and entry.hardware.vendor != "nvidia":
        entry = None
    inconsistency: str | None = None
    if entry is not None and cc_label is not None and entry.hardware.compute_capability != cc_label:
        # Labels decide (README rule 1): the catalogue row is not trusted for this node.
        inconsistency = (
            f"label {NV_CC_MAJOR}/minor says CC {_fmt_cc(cc_label)} but {raw!r} is "
            f"CC {_fmt_cc(entry.hardware.compute_capability)} in the catalogue; "
            "the labels win"
        )
        entry = None

    # The capability builds only a class missing from the catalogue (a listed product keeps
    # its row's): the labels' one, else the GPU family's (H5).
    cc = cc_label
    if cc is None:
        cc = _FAMILY_CC.get(labels.get(NV_FAMILY, "").strip().lower())

    if mem_mib is not None:
        memory = mem_mib / 1024.0
    elif mig_gb is not None:
        memory = mig_gb
    elif entry is not None:
        memory = entry.hardware.memory_gib
    else:
        memory = 0.0

    if entry is not None:
        parent = entry.hardware
        hw = replace(parent, memory_gib=round(memory, 3))
        if mig and mig_slices is not None:
            frac_compute = min(1.0, mig_slices / _MIG_COMPUTE_SLICES)
            frac_mem = min(1.0, memory / parent.memory_gib)

            def scale(v: float | None, f: float) -> float | None:
                return None if v is None else round(v * f, 1)

            hw = replace(
                hw,
                product=f"{parent.product}-MIG-{profile}",
                display_name=f"{parent.display_name} (MIG {profile})",
                memory_bandwidth_gbps=scale(parent.memory_bandwidth_gbps, frac_mem),
                dense_bf16_tflops=scale(parent.dense_bf16_tflops, frac_compute),
                dense_fp8_tflops=scale(parent.dense_fp8_tflops, frac_compute),
            )
    else:
        name = raw or "unknown NVIDIA GPU"
        hw = _unknown_class("nvidia", base or "unknown", name, round(memory, 3), cc=cc)

    if raw:
        selector = {NV_PRODUCT: raw}
        where = f"label {NV_PRODUCT}={raw!r}"
    else:
        selector = {k: labels[k] for k in (NV_CC_MAJOR, NV_CC_MINOR) if k in labels}
        where = f"labels without {NV_PRODUCT}"
    reason, message = _finish(hw, entry, problems, inconsistency, where)
    if shared:
        message += "; GPUs are shared (time-slicing or MPS), so latency is not isolated"
    if mig_profiles:
        message += "; MIG mixed strategy: slices are exposed as " + ", ".join(
            f"nvidia.com/mig-{p}" for p in mig_profiles
        )
    return HardwareResolution(
        hardware=hw,
        gpus_per_node=count if count is not None else 1,
        node_selector=selector,
        reason=reason,
        message=message,
        mig=mig,
        shared=shared,
        mig_profiles=mig_profiles,
        replicas=max(replicas or 2, 2) if shared else 1,
    )


def _mig_profile_pool(labels: Mapping[str, str], profile: str) -> HardwareResolution:
    """One MIG profile of a mixed-strategy node, as its own pool.

    The device plugin advertises each profile as the resource ``nvidia.com/mig-<profile>``
    and GFD describes it in ``nvidia.com/mig-<profile>.{count,memory,product}``
    (NVIDIA/k8s-device-plugin, MIG "mixed" strategy); the slice's memory, not the parent
    GPU's, bounds what fits.
    """
    prefix = f"nvidia.com/mig-{profile}."
    parent = labels.get(NV_PRODUCT, "").strip()
    product = labels.get(prefix + "product", "").strip() or f"{parent}-MIG-{profile}"
    # The parent's memory would overstate the slice: only the slice's own label counts.
    slice_labels = {k: v for k, v in labels.items() if k not in (NV_MIG_STRATEGY, NV_MEMORY)}
    slice_labels[NV_PRODUCT] = product
    slice_labels[NV_COUNT] = labels[prefix + "count"]  # the profile is listed from this label
    if prefix + "memory" in labels:
        slice_labels[NV_MEMORY] = labels[prefix + "memory"]
    res = _classify_nvidia(slice_labels)
    hw = res.hardware
    assert hw is not None  # _classify_nvidia always resolves a class
    resource = f"nvidia.com/mig-{profile}"
    selector_key = prefix + "product" if prefix + "product" in labels else NV_PRODUCT
    return replace(
        res,
        hardware=replace(hw, resource_name=resource),
        node_selector={selector_key: labels.get(selector_key, product)},
        message=f"{res.message}; MIG mixed strategy: requests {resource}",
        mig=True,
    )


def classify_node_pools(labels: Mapping[str, str]) -> list[HardwareResolution]:
    """List every GPU pool a node offers. Never raises.

    One per MIG profile on a mixed-strategy node (each a separate device-plugin resource),
    else the node's one class.
    """
    res = classify_node(labels)
    if res.hardware is None or not res.mig_profiles:
        return [res]
    return [_mig_profile_pool(labels, p) for p in res.mig_profiles]


# ---------------------------------------------------------------- AMD


def _amd_values(labels: Mapping[str, str], prefix: str, kind: str) -> list[tuple[str, str, int]]:
    """Values of one AMD label kind as (label key, value, device count), most first.

    The labeller writes ``<prefix><kind>=<value>`` when all GPUs agree and
    ``<prefix><kind>.<value>=<count>`` otherwise (ROCm/k8s-device-plugin
    cmd/k8s-node-labeller/main.go).
    """
    single = labels.get(prefix + kind)
    if single is not None and single.strip():
        return [(prefix + kind, single.strip(), 0)]
    out: list[tuple[str, str, int]] = []
    stem = prefix + kind + "."
    for key, count in labels.items():
        if key.startswith(stem):
            value = key[len(stem) :]
            n = int(count) if count.strip().isascii() and count.strip().isdigit() else 0
            out.append((key, value, n))
    out.sort(key=lambda t: (-t[2], t[1]))
    return out


def _parse_vram(raw: str) -> float | None:
    m = _VRAM_RE.match(raw.strip())
    if not m:
        return None
    num = float(m.group("num"))
    unit = m.group("unit").upper()
    return num * {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}[unit]


def _classify_amd(labels: Mapping[str, str]) -> HardwareResolution:
    catalogue = load_catalogue()
    problems: list[str] = []
    # The current labeller writes amd.com/*; old ones only beta.amd.com/*. When both are
    # present the beta keys may be stale (main_test.go TestRemoveOldNodeLabels).
    prefix = AMD_PREFIX if any(k.startswith(AMD_PREFIX) for k in labels) else AMD_BETA_PREFIX

    products = _amd_values(labels, prefix, "product-name")
    devices = _amd_values(labels, prefix, "device-id")
    vrams = _amd_values(labels, prefix, "vram")
    count = _int_label(labels, prefix + "count", problems)
    if count is None:
        counted = products or devices
        if counted and counted[0][2] > 0:
            count = counted[0][2]

    several = ""
    if len(products) > 1 or len(devices) > 1:
        several = (
            "; node has several GPU products ("
            + ", ".join(v for _, v, _ in (products or devices))
            + "); planned for the most numerous"
        )

    by_dev = catalogue.lookup_device_id(devices[0][1]) if devices else None
    by_name = catalogue.lookup(products[0][1]) if products else None
    if by_name is not None and by_name.hardware.vendor != "amd":
        by_name = None
    inconsistency: str | None = None
    if by_dev is not None and by_name is not None and by_dev is not by_name:
        inconsistency = (
            f"device id {devices[0][1]} is {by_dev.hardware.product} but product name "
            f"{products[0][1]!r} is {by_name.hardware.product}; the device id wins"
        )
    entry = by_dev or by_name

    memory: float | None = None
    if vrams:
        key, value, _ = vrams[0]
        memory = _parse_vram(value)
        if memory is None:
            problems.append(f"label {key}={value!r} is not a size like 192G")
    if memory is None:
        memory = entry.hardware.memory_gib if entry is not None else 0.0

    if entry is not None:
        hw = replace(entry.hardware, memory_gib=round(memory, 3))
    else:
        name = products[0][1] if products else (f"device {devices[0][1]}" if devices else "")
        hw = _unknown_class("amd", name or "unknown", name or "unknown AMD GPU", round(memory, 3))

    named = products or devices
    if named:
        # The label as the node has it: the name, or the device count of a counted label.
        key = named[0][0]
        selector = {key: labels[key].strip()}
        where = f"label {key}={selector[key]!r}"
    else:
        selector = {}
        where = "labels without an AMD product-name or device-id"
    reason, message = _finish(hw, entry, problems, inconsistency, where)
    message += several
    return HardwareResolution(
        hardware=hw,
        gpus_per_node=count if count is not None else 1,
        node_selector=selector,
        reason=reason,
        message=message,
    )


# ---------------------------------------------------------------- Intel Gaudi


def _classify_gaudi(labels: Mapping[str, str]) -> HardwareResolution:
    catalogue = load_catalogue()
    problems: list[str] = []
    raw = labels.get(GAUDI_PRODUCT, "").strip()
    count = _int_label(labels, GAUDI_COUNT, problems)
    mem_mib = _int_label(labels, GAUDI_MEMORY, problems, minimum=1)
    entry = catalogue.lookup(raw) if raw else None
    if entry is not None and entry.hardware.vendor != "intel":
        entry = None
    if mem_mib is not None:
        memory = mem_mib / 1024.0
    elif entry is not None:
        memory = entry.hardware.memory_gib
    else:
        memory = 0.0
    if entry is not None:
        hw = replace(entry.hardware, memory_gib=round(memory, 3))
    else:
        hw = _unknown_class("intel", raw or "unknown", raw or "unknown Intel Gaudi", memory)
    selector = {GAUDI_PRODUCT: raw} if raw else {}
    where = f"label {GAUDI_PRODUCT}={raw!r}" if raw else f"labels without {GAUDI_PRODUCT}"
    reason, message = _finish(hw, entry, problems, None, where)
    return HardwareResolution(
        hardware=hw,
        gpus_per_node=count if count is not None else 1,
        node_selector=selector,
        reason=reason,
        message=message,
    )


# Labels that describe an NVIDIA GPU. The GPU Operator also writes nvidia.com/gpu.present
# and nvidia.com/gpu.deploy.* before GPU Feature Discovery has run; those alone say
# nothing about the GPU.
_NV_FACT_KEYS = (NV_PRODUCT, NV_CC_MAJOR, NV_MEMORY, NV_COUNT, NV_FAMILY)


def classify_node(labels: Mapping[str, str]) -> HardwareResolution:
    """Resolve a node's accelerator from its labels. Never raises on label content."""
    if any(k in labels for k in _NV_FACT_KEYS):
        return _classify_nvidia(labels)
    if any(k.startswith("nvidia.com/gpu.") for k in labels):
        return HardwareResolution(
            hardware=None,
            gpus_per_node=0,
            node_selector={},
            reason=NO_GPU_LABELS,
            message=(
                "Node has NVIDIA GPU Operator labels but no GPU Feature Discovery labels "
                f"({NV_PRODUCT}, {NV_CC_MAJOR}, {NV_MEMORY}); is GFD running?"
            ),
        )
    if any(k.startswith((AMD_PREFIX, AMD_BETA_PREFIX)) for k in labels):
        return _classify_amd(labels)
    if any(k.startswith(GAUDI_PREFIX) for k in labels):
        return _classify_gaudi(labels)
    return HardwareResolution(
        hardware=None,
        gpus_per_node=0,
        node_selector={},
        reason=NO_GPU_LABELS,
        message=(
            "Node has no GPU labels (nvidia.com/gpu.*, amd.com/gpu.*, beta.amd.com/gpu.* "
            "or habana.ai/*); is GPU Feature Discovery or the AMD node labeller running?"
        ),
    )


def resolve_product(name: str, gpus_per_node: int = 8) -> HardwareResolution:
    """Resolve a product name given on the command line (``--gpu-product NAME``).

    Accepts catalogue keys, node-label values and short aliases, ignoring case,
    punctuation and vendor prefixes ("H100", "h100-80gb", "NVIDIA-H100-80GB-HBM3").
    """
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be at least 1, got {gpus_per_node}")
    catalogue = load_catalogue()
    entry = catalogue.lookup(name) if name.strip() else None
    if entry is None:
        return HardwareResolution(
            hardware=None,
            gpus_per_node=gpus_per_node,
            node_selector={},
            reason=UNKNOWN_GPU_PRODUCT,
            message=(
                f"GPU product {name!r} is not in the catalogue; known products: "
                + ", ".join(catalogue.names())
            ),
        )
    hw = entry.hardware
    return HardwareResolution(
        hardware=hw,
        gpus_per_node=gpus_per_node,
        node_selector={SELECTOR_KEYS[hw.vendor]: entry.canonical_label},
        reason=RESOLVED,
        message=f"GPU product {name!r} resolved to {_summary(hw)}",
    )
