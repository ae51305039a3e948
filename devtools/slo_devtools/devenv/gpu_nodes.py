"""Fake GPU nodes for the local cluster, labelled as real GPU clusters label them.

Label sets come from ``slo_devtools/data/hardware/node-labels.yaml`` (the repository's one
copy; sources in ``tests/fixtures/hardware/README.md``) (copied from NVIDIA GPU
Feature Discovery / GPU Operator and AMD node-labeller outputs). Where the fixture has no node of
a model (A100-80GB, L4), the NVIDIA key set of the fixture's H100 node is reused and the
model-specific values are filled in by GFD's own rules (product = NVML name with spaces turned
into "-", family from compute capability), with NVML names and memory sizes taken from
``device-names.yaml`` / ``gpus.csv``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

# Annotation kwok is started to select on (--manage-nodes-with-annotation-selector); the label
# and taint follow kwok's documented conventions for fake nodes.
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KWOK_LABEL = ("type", "kwok")
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


# The repository's one copy of the real label sets (sources: tests/fixtures/hardware/README.md).
NODE_LABELS = Path(__file__).resolve().parents[1] / "data" / "hardware" / "node-labels.yaml"


@cache
def _label_sets() -> tuple[dict[str, Any], ...]:
    path = NODE_LABELS
    return tuple(yaml.safe_load(path.read_text()))


def fixture_labels(product: str) -> dict[str, str]:
    """The first label set in node-labels.yaml whose ``product`` is exactly ``product``."""
    for entry in _label_sets():
        if entry.get("product") == product:
            return {str(k): str(v) for k, v in entry["labels"].items()}
    raise KeyError(f"no label set for product {product!r} in node-labels.yaml")


@dataclass(frozen=True)
class GpuNodeType:
    """One kind of fake node: its labels and the extended resource it advertises."""

    key: str
    resource: str
    gpus: int
    labels: Mapping[str, str]
    cpu: str = "128"
    memory: str = "2Ti"
    pods: str = "110"
    extra_allocatable: Mapping[str, str] = field(default_factory=dict)

    def allocatable(self) -> dict[str, str]:
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": self.pods,
            "ephemeral-storage": "1Ti",
            self.resource: str(self.gpus),
            **self.extra_allocatable,
        }


@dataclass(frozen=True)
class NodeGroup:
    type: GpuNodeType
    count: int


def _gfd_family(major: int, minor: int) -> str:
    # GFD's mapping (internal/lm/resource.go in NVIDIA/k8s-device-plugin).
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    if major == 9:
        return "hopper"
    return "undefined"


def nvidia_node_type(
    key: str,
    *,
    nvml_name: str,
    compute: tuple[int, int],
    memory_mib: int,
    gpus: int = 8,
    mig_capable: bool = False,
) -> GpuNodeType:
    """GFD labels for a node of ``gpus`` identical NVIDIA GPUs, on the key set of the
    fixture's H100 node (driver/CUDA labels are node-level and kept as published)."""
    labels = fixture_labels("NVIDIA-H100-80GB-HBM3")
    # The machine name belongs to that H100 server, not to other models.
    labels.pop("nvidia.com/gpu.machine", None)
    major, minor = compute
    labels.update(
        {
            "nvidia.com/gpu.product": "-".join(nvml_name.split()),
            "nvidia.com/gpu.compute.major": str(major),
            "nvidia.com/gpu.compute.minor": str(minor),
            "nvidia.com/gpu.family": _gfd_family(major, minor),
            "nvidia.com/gpu.memory": str(memory_mib),
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/mig.capable": "true" if mig_capable else "false",
        }
    )
    if not mig_capable:
        for k in (
            "nvidia.com/mig.config",
            "nvidia.com/mig.config.state",
            "nvidia.com/mig.strategy",
        ):
            labels.pop(k, None)
    return GpuNodeType(key=key, resource="nvidia.com/gpu", gpus=gpus, labels=labels)


def h100_80gb(gpus: int = 8) -> GpuNodeType:
    labels = fixture_labels("NVIDIA-H100-80GB-HBM3")
    labels["nvidia.com/gpu.count"] = str(gpus)
    return GpuNodeType(key="h100", resource="nvidia.com/gpu", gpus=gpus, labels=labels)


def a100_80gb(gpus: int = 8) -> GpuNodeType:
    # NVML name and size from device-names.yaml (go-nvml mock a100.go).
    return nvidia_node_type(
        "a100",
        nvml_name="NVIDIA A100-SXM4-80GB",
        compute=(8, 0),
        memory_mib=81920,
        gpus=gpus,
        mig_capable=True,
    )


def l4(gpus: int = 8) -> GpuNodeType:
    # Compute capability 8.9 per gpus.csv; 23034 MiB is the framebuffer NVML reports for a
    # 24 GB L4 (part of the memory is reserved).
    return nvidia_node_type(
        "l4", nvml_name="NVIDIA L4", compute=(8, 9), memory_mib=23034, gpus=gpus
    )


def mi300x(gpus: int = 8) -> GpuNodeType:
    return GpuNodeType(
        key="mi300x",
        resource="amd.com/gpu",
        gpus=gpus,
        labels=fixture_labels("AMD_Instinct_MI300X_OAM"),
    )


def default_fleet() -> list[NodeGroup]:
    """2 x 8 H100-80GB, 2 x 8 A100-80GB, 1 x 8 L4, 1 x 8 MI300X."""
    return [
        NodeGroup(h100_80gb(), 2),
        NodeGroup(a100_80gb(), 2),
        NodeGroup(l4(), 1),
        NodeGroup(mi300x(), 1),
    ]


def node_names(fleet: Iterable[NodeGroup], prefix: str = "kwok") -> list[str]:
    return [f"{prefix}-{g.type.key}-{i}" for g in fleet for i in range(g.count)]


def node_manifest(name: str, node_type: GpuNodeType, *, taint: bool = False) -> dict[str, Any]:
    """A Node object kwok will manage. The kwok taint is off by default: every node here is
    fake, and the taint would force a toleration onto every pod the operator renders."""
    labels = {
        **node_type.labels,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        KWOK_LABEL[0]: KWOK_LABEL[1],
    }
    allocatable = node_type.allocatable()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1],
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {"taints": [dict(KWOK_TAINT)] if taint else []},
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
        },
    }


def fleet_manifests(
    fleet: Iterable[NodeGroup], *, prefix: str = "kwok", taint: bool = False
) -> list[dict[str, Any]]:
    groups = list(fleet)
    names = iter(node_names(groups, prefix))
    return [node_manifest(next(names), g.type, taint=taint) for g in groups for _ in range(g.count)]
