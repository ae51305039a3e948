"""PNG plots of one demo run: load, replicas, live limit, P99 and TTFT against their targets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; the demo may run without a display

import matplotlib.pyplot as plt  # after choosing the backend

from slo_devtools.demo.timeline import Sample, by_service


def _series(samples: Sequence[Sample], attr: str) -> list[float]:
    out = []
    for s in samples:
        v = getattr(s, attr)
        out.append(float("nan") if v is None else float(v))
    return out


def _has_data(values: Sequence[float]) -> bool:
    return any(not math.isnan(v) for v in values)


def plot_service(samples: Sequence[Sample], path: Path, speed: float) -> Path:
    """Stacked panels over wall time for one service (load, replicas, live limit, P99, TTFT,
    and inter-token latency when the policy sets a target for it); returns ``path``."""
    ts = [s.t for s in samples]
    with_itl = any(s.targets is not None and s.targets.itl_ms is not None for s in samples)
    panels = 6 if with_itl else 5
    fig, axes = plt.subplots(panels, 1, figsize=(10, 2.2 * panels), sharex=True)
    svc = samples[0].service
    gpu = next((s.gpu for s in reversed(samples) if s.gpu), None)
    fig.suptitle(f"{svc}" + (f" on {gpu}" if gpu else "") + f"  (trace time x{speed:g})")

    ax = axes[0]
    ax.plot(ts, _series(samples, "offered_rps"), label="offered (trace replay)")
    seen = _series(samples, "request_rate")
    if _has_data(seen):
        ax.plot(ts, seen, label="observed by the operator", linestyle="--")
    ax.set_ylabel("load (req/s)")
    ax.legend(loc="upper right", fontsize="small")

    ax = axes[1]
    ax.step(ts, _series(samples, "ready"), where="post", label="ready")
    ax.step(ts, _series(samples, "desired"), where="post", label="desired", linestyle="--")
    ax.set_ylabel("replicas")
    ax.legend(loc="upper right", fontsize="small")

    ax = axes[2]
    ax.step(ts, _series(samples, "batch_limit"), where="post")
    ax.set_ylabel("live limit\n(in-flight/replica)")

    latencies = [(axes[3], "e2e_ms", "P99 e2e (ms)"), (axes[4], "ttft_ms", "TTFT (ms)")]
    if with_itl:
        latencies.append((axes[5], "itl_ms", "inter-token (ms)"))
    for ax, attr, label in latencies:
        ax.plot(ts, _series(samples, attr), label="observed")
        targets = [float("nan") if s.targets is None or getattr(s.targets, attr) is None
                   else getattr(s.targets, attr) for s in samples]
        if _has_data(targets):
            ax.plot(ts, targets, color="red", linestyle=":", label="target")
        ax.set_ylabel(label)
        ax.legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("wall time since the replay started (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_all(samples: Sequence[Sample], out_dir: Path, speed: float) -> list[Path]:
    """One PNG per service, named after it."""
    paths = []
    for svc, group in sorted(by_service(samples).items()):
        name = svc.replace("/", "_") + ".png"
        paths.append(plot_service(group, out_dir / name, speed))
    return paths
