"""The probe result as Prometheus lines, without the probe's GPU libraries.

The gateway exports what the launcher's probe found; importing :mod:`slo_runtime.probe`
for that would pull in its optional PyTorch path, so the rendering lives here.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest


def gpu_metrics_text(vendor: str, product: str, compute_capability: str, memory_mib: int,
                     count: int, matches: bool) -> str:
    """``slo_runtime_gpu_info`` and ``slo_runtime_gpu_matches_node_labels``."""
    reg = CollectorRegistry()
    info = Gauge("slo_runtime_gpu_info", "GPUs seen in the pod (value: count)",
                 ["vendor", "product", "compute_capability", "memory_mib"], registry=reg)
    info.labels(vendor, product, compute_capability, str(memory_mib)).set(count)
    Gauge("slo_runtime_gpu_matches_node_labels",
          "1 when the pod's GPUs are what the node labels promised", registry=reg
          ).set(1 if matches else 0)
    return generate_latest(reg).decode()
