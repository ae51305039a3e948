"""``ControlPolicy``: an SLOPolicy spec and a service's replica bounds, ready for ``decide``."""

from __future__ import annotations

from dataclasses import dataclass

from slo_operator.api.models import ReplicaBounds, SLOPolicySpec, parse_duration
from slo_operator.control.capacity import StepTimes


@dataclass(frozen=True)
class ControlPolicy:
    """Everything the control law reads from the user's objects (plain values; their
    defaults are the CRD's, applied when the SLOPolicy is read), plus tuning constants."""

    # Objectives (milliseconds). Priority and tenancy are the fleet step's
    # (control.arbitrate).
    e2e_target_ms: float
    ttft_target_ms: float
    itl_target_ms: float | None
    window_s: float
    # Scaling.
    min_replicas: int
    max_replicas: int
    scale_up_stabilization_s: float
    scale_down_stabilization_s: float
    max_scale_up_step: int
    max_scale_down_step: int
    # Batching: live | restart | off.
    batching_mode: str
    min_batch: int
    max_batch: int
    # Fleet.
    gpu_budget: int | None
    # Capacity seed for the service's hardware class and precision (None: built-in seed).
    step_times: StepTimes | None
    # Scale to zero: after ``idle_before_zero_s`` without requests, zero replicas; a wake
    # (the activator's annotation) brings them back. False where the policy does not ask
    # for it or the operator has no activator to wake the service.
    scale_to_zero: bool = False
    idle_before_zero_s: float = 300.0
    # The highest percentile the objectives are read at (pooled routing sizes the in-flight
    # count's headroom to it: capacity.pooled_replicas).
    quantile: float = 0.99
    # The jitter bound (throughputCVMax; None: not an objective). No replica count fixes
    # jitter: the law only records how far over it the last window was (ControlState's
    # jitter_over), which the chunked-prefill lever reads (reconcile.chunking).
    jitter_max: float | None = None
    # Tuning (not in the CRD; documented in docs/slo-loop.md).
    tolerance: float = 0.1  # dead band on the replica need, both directions
    burst_k: float = 1.0  # headroom in standard deviations of the recent request rate
    burst_lookback_s: float = 600.0  # how far back burst statistics reach
    backlog_drain_s: float = 30.0  # time in which a queue should be drained once served
    cold_start_s: float = 60.0  # time from asking for a replica to its first request
    limit_interval_s: float = 10.0  # least time between two live limit changes
    restart_interval_s: float = 1800.0  # least time between two restart-mode limit changes


def replica_bounds(spec: SLOPolicySpec, bounds: ReplicaBounds | None = None) -> tuple[int, int]:
    """(min, max) replicas: the policy's scaling range narrowed by the service's bounds."""
    lo, hi = spec.scaling.min_replicas, spec.scaling.max_replicas
    if bounds is not None:
        if bounds.max is not None:
            hi = min(hi, bounds.max)
        if bounds.min is not None:
            lo = max(lo, bounds.min)
    # Bounds that miss the policy's range: the tighter maximum wins (the platform's cap).
    return min(lo, hi), hi


def awake_bounds(spec: SLOPolicySpec, bounds: ReplicaBounds | None = None) -> tuple[int, int]:
    """(min, max) replicas of an awake service: :func:`replica_bounds`, and with
    ``scaling.scaleToZero`` at least one (zero comes only from the law's idle rule)."""
    lo, hi = replica_bounds(spec, bounds)
    return (max(lo, min(1, hi)) if spec.scaling.scale_to_zero else lo), hi


def idle_before_zero_s(spec: SLOPolicySpec) -> float:
    """Seconds without requests before scale to zero: ``scaling.idleBeforeZero``, else the
    longer of the policy window and the scale-down stabilization (a quiet window is no
    evidence of a quiet service before the window has passed; the stabilization is the
    time the policy already waits before giving up a replica)."""
    s = spec.scaling
    if s.idle_before_zero is not None:
        return float(parse_duration(s.idle_before_zero))
    return float(max(parse_duration(spec.window), parse_duration(s.scale_down_stabilization)))


def policy_for(
    spec: SLOPolicySpec,
    bounds: ReplicaBounds | None = None,
    *,
    step_times: StepTimes | None = None,
    can_wake: bool = True,
) -> ControlPolicy:
    """Control policy of one service: the policy's scaling narrowed by the service bounds.

    With ``scaling.scaleToZero`` the law keeps at least one replica while the service is
    awake (``minReplicas: 0`` included) and goes to zero only by its idle rule, and only
    when the operator ``can_wake`` the service again (an activator is configured)."""
    o, s, b = spec.objectives, spec.scaling, spec.batching
    lo, hi = awake_bounds(spec, bounds)
    return ControlPolicy(
        e2e_target_ms=float(o.e2e_latency_ms),
        ttft_target_ms=float(o.ttft_ms),
        itl_target_ms=None if o.inter_token_latency_ms is None else float(o.inter_token_latency_ms),
        window_s=float(parse_duration(spec.window)),
        min_replicas=lo,
        max_replicas=hi,
        scale_up_stabilization_s=float(parse_duration(s.scale_up_stabilization)),
        scale_down_stabilization_s=float(parse_duration(s.scale_down_stabilization)),
        max_scale_up_step=s.max_scale_up_step,
        max_scale_down_step=s.max_scale_down_step,
        batching_mode=b.mode,
        min_batch=b.min_batch,
        max_batch=b.max_batch,
        gpu_budget=spec.gpu_budget,
        step_times=step_times,
        scale_to_zero=s.scale_to_zero and can_wake,
        idle_before_zero_s=idle_before_zero_s(spec),
        quantile=max(o.e2e_percentile, o.ttft_percentile,
                     o.inter_token_percentile if o.inter_token_latency_ms is not None else 0.0),
        jitter_max=None if o.throughput_cv_max is None else float(o.throughput_cv_max),
    )
