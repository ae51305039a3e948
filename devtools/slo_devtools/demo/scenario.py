"""The demo's scenario: which tenants it applies and which trace each one receives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from slo_devtools.sim import traces

# operator/slo_devtools/demo/scenario.py -> the repository root (the demo runs from a clone:
# it needs the chart, the examples and the binary build script).
ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "demo"
CHART = ROOT / "charts" / "slo-operator"
OPERATOR_NAMESPACE = "slo-system"
RELEASE = "slo-operator"

DEFAULT_SPEED = 20.0  # trace seconds per wall second
# After the replay the demo keeps watching, without load, for longer than the tenants'
# scale-down stabilization (30 s), so that the operator's scale-in shows.
COOL_DOWN_S = 45.0
# Requests/s are averaged over this many wall seconds for the "load" column and plot.
LOAD_WINDOW_S = 5.0


class ScenarioError(ValueError):
    pass


@dataclass(frozen=True)
class Tenant:
    file: str  # manifest under examples/demo (Namespace, SLOPolicy, InferenceService)
    service: str  # namespace/name of its InferenceService
    trace: str  # trace replayed against it (a name sim.traces knows)
    rate_factor: float  # replayed request rate over the source trace's


# Each tenant's load, as a multiple of its source trace's request rate, whatever the speed:
# time compression alone would multiply the rate by the speed, so the trace is thinned by
# rate_factor / speed. The levels keep the replica models (Python, on the same few cores as
# everything else) responsive: the conversation trace at its own rate (5.5 req/s: two H100
# replicas at the chat tenant's latency targets, three in its busier minutes); the code trace
# at half its rate (one A100 replica most of the time; its one-minute bursts need three: its
# prompts are long and BF16 prefill is slow).
TENANTS: tuple[Tenant, ...] = (
    Tenant("tenant-chat.yaml", "tenant-chat/chat", "azure-conv", 1.0),
    Tenant("tenant-code.yaml", "tenant-code/code", "azure-code", 0.5),
)

# A vLLM replica takes about a minute from pod start to serving (weights, CUDA graphs); the
# replica models take that minute compressed like the trace.
REAL_COLD_START_S = 60.0

TRACE_NAMES: tuple[str, ...] = tuple(sorted(traces.AZURE_FILES))


def tenants(trace: str | None = None) -> tuple[Tenant, ...]:
    """The demo's tenants; ``trace`` replays that one trace against every service."""
    if trace is None:
        return TENANTS
    if trace not in TRACE_NAMES:
        raise ScenarioError(f"--trace: unknown trace {trace!r}; known: {', '.join(TRACE_NAMES)}")
    return tuple(replace(t, trace=trace) for t in TENANTS)


def manifests(chosen: Sequence[Tenant]) -> list[Path]:
    """The tenants' manifest files, checked to exist."""
    paths = [EXAMPLES / t.file for t in chosen]
    for p in paths:
        if not p.is_file():
            raise ScenarioError(f"{p} not found: run the demo from a clone of the repository")
    return paths


def trace_span(trace: str) -> float:
    """Seconds the source trace covers (uncompressed)."""
    src = traces.read_azure(trace)
    return src[-1].t + 1.0


def load(tenant: Tenant, speed: float, duration: float | None, seed: int = 0) -> traces.Trace:
    """The tenant's trace, time-compressed by ``speed`` and cut to ``duration`` wall seconds."""
    if speed <= 0:
        raise ScenarioError(f"--speed: must be > 0, got {speed:g}")
    if duration is not None and duration <= 0:
        raise ScenarioError(f"--duration: must be > 0, got {duration:g}")
    full = traces.azure(tenant.trace, rate_scale=tenant.rate_factor / speed,
                        time_compression=speed, seed=seed, tenant=tenant.service)
    if duration is None or duration >= full.duration:
        return full
    kept = tuple(r for r in full.requests if r.t < duration)
    return replace(full, requests=kept, duration=duration,
                   notes=(*full.notes, f"cut to the first {duration:g} s of the replay"))
