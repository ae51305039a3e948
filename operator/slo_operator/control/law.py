"""The control law: ``decide(observation, policy, state, now) -> Decision``.

Pure: no clock, no I/O; the same function runs in the operator and in the benchmark.
Replicas come from a capacity model of the load (``capacity``), corrected by feedback on
the measured SLO error; the batch limit moves with them. docs/slo-loop.md describes the
law, each protection and each reason; keep it in step with this module.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from slo_operator.api.observe import MetricsState, Observation, Signals
from slo_operator.control import reasons as R
from slo_operator.control.capacity import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    LATENCY_MARGIN,
    Capacity,
    StepTimes,
    itl_budget_ms,
    predicted_tokens_per_s,
    rate_at_batch,
    replica_capacity,
    seed_step_times,
)
from slo_operator.control.policy import ControlPolicy
from slo_operator.control.state import MAX_LIMITS, MAX_RATES, MAX_RECOMMENDATIONS, ControlState

# Feedback correction bounds and steps: the latency error corrects the model, it never
# replaces it (an error-only rule overshoots during cold starts).
CORRECTION_MIN = 0.9  # with TARGET_UTILIZATION 0.8: never plan replicas beyond ~90% busy
CORRECTION_MAX = 3.0
CORRECTION_STEP_MAX = 1.5  # largest growth of the correction in one cycle
CORRECTION_DECAY = 0.99  # per cycle, while latency is well inside its targets
RELAXED_ERROR = 0.7  # latency error below which the correction decays
# Speed learning from warm, saturated replicas.
SPEED_ALPHA = 0.3
SPEED_MIN, SPEED_MAX = 0.33, 3.0
SATURATED_SHARE = 0.5  # replicas count as saturated from this share of the batch limit
# Share of the scale-down window the recommendation history must span to be trusted.
HISTORY_COVERAGE = 0.9
MAX_TOKENS_PER_REQUEST = 10_000_000.0
MAX_NEED = 1_000_000.0  # replicas; beyond any bound a policy can set (1000)
# Request shape smoothing: a window of SHAPE_REQUESTS requests moves the mean halfway.
SHAPE_REQUESTS = 100.0
SHAPE_ALPHA_MIN, SHAPE_ALPHA_MAX = 0.05, 0.5
# A burst: the rate rose from at most this share of its peak within a cold start.
BURST_RISE = 0.5
# Burst noise: quantile of successive rate differences, and its value in deviations.
NOISE_QUANTILE = 0.75
NOISE_SCALE = 1.627
# Live limit moves.
LIMIT_DOWN_FACTOR = 0.75
LIMIT_UP_FACTOR = 1.5
LIMIT_MIN_CHANGE = 0.1  # relative change below which a latency-driven move is skipped
LIMIT_MODEL_CHANGE = 0.25  # relative change below which a model-driven move is skipped
ITL_HEADROOM = 0.8  # raise the limit only while inter-token latency is below this share
KV_FULL = 0.98  # KV-cache use at which the limit comes down
KV_HIGH = 0.9  # ... or from here on while sequences are being preempted; no raise above


@dataclass(frozen=True)
class Decision:
    """What ``decide`` wants, why, and the state to keep for the next cycle."""

    valid: bool  # False: no data to decide on; replicas and limit hold the last good ones
    replicas: int
    batch_limit: int
    reason: str  # CamelCase constant of control.reasons
    message: str
    state: ControlState
    limited_reason: str | None = None  # ScalingLimited reason, when a limit bit
    limited_message: str = ""
    limit_reason: str | None = None  # why the batch limit moved this cycle, if it did
    limit_message: str = ""
    need: float | None = None  # replicas the model needs (before protections)
    slo_error: float | None = None  # worst latency / target ratio this cycle


@dataclass
class _Limited:
    reason: str | None = None
    message: str = ""

    def set(self, reason: str, message: str) -> None:
        # Limits are applied from the softest to the hardest: the last that bit is the one
        # that decides, and the one reported.
        self.reason, self.message = reason, message


def decide(obs: Observation, policy: ControlPolicy, state: ControlState, now: float) -> Decision:
    """Replicas and batch limit for one service in one cycle (pure)."""
    sig = obs.signals
    cur = max(0, obs.replicas.desired)
    invalid = _invalid(sig)
    if invalid is not None:
        if sig.state == MetricsState.EMPTY and obs.replicas.ready == 0:
            return _bring_up(obs, policy, state, now)
        return _hold(obs, policy, state, now, *invalid)
    assert sig.request_rate is not None  # _invalid guarantees it
    lam = max(0.0, sig.request_rate)
    waiting = max(0.0, sig.waiting or 0.0)
    running = max(0.0, sig.running or 0.0)
    idle = lam == 0.0 and waiting == 0.0 and running == 0.0

    # Request shape: live means smoothed by how many requests they stand for (a window
    # with a single request says little), else the last seen ones, else defaults.
    weight = max(SHAPE_ALPHA_MIN, min(SHAPE_ALPHA_MAX, lam * policy.window_s / SHAPE_REQUESTS))
    prompt = _smooth(state.prompt_tokens, _per_request(sig.prompt_tokens_rate, lam), weight) \
        or DEFAULT_PROMPT_TOKENS
    output = _smooth(state.output_tokens, _per_request(sig.generation_tokens_rate, lam),
                     weight) or DEFAULT_OUTPUT_TOKENS

    seed = policy.step_times or seed_step_times(obs.model_size_b, obs.precision, obs.hardware)
    key = f"{obs.hardware}/{obs.precision}"
    speed, speed_samples = (state.speed, state.speed_samples) if state.speed_key == key \
        else (1.0, 0)
    speed, speed_samples = _learn_speed(obs, seed, prompt, speed, speed_samples)
    st = seed.scaled(speed)

    ceiling = max(1, min(policy.max_batch, obs.max_batch))
    floor = max(1, min(policy.min_batch, ceiling))
    budget = itl_budget_ms(policy.e2e_target_ms, policy.ttft_target_ms, policy.itl_target_ms,
                           output)
    cap = replica_capacity(st, prompt_tokens=prompt, output_tokens=output, itl_budget=budget,
                           min_batch=floor, max_batch=ceiling)

    # SLO error: latency over target, only for targets replicas can reach.
    ttft_floor = st.step_ms(1, prompt)
    ratios = _ratios(sig, policy, cap, ttft_floor)
    err = max(ratios.values()) if ratios else None
    in_flight = obs.replicas.starting + obs.replicas.pending > 0 or cur > obs.replicas.ready

    # The batch limit first: the replicas are sized at the batch they will really run.
    # The limit guards the per-step objective (inter-token latency) only: the e2e budget
    # sizes the replicas (each runs about b* sequences at the planned load), and capping
    # admission at it would turn a little e2e slack into a queue and a TTFT miss.
    step_batch = ceiling
    if policy.itl_target_ms is not None:
        step_batch = replica_capacity(
            st, prompt_tokens=prompt, output_tokens=output,
            itl_budget=LATENCY_MARGIN * policy.itl_target_ms, min_batch=floor,
            max_batch=ceiling).batch
    limit, bias, limit_reason, limit_message = _batch_limit(
        obs, policy, state, now, step_batch, ratios, waiting, cur, in_flight, floor, ceiling)
    plan_batch = min(cap.batch, limit)
    per_replica = rate_at_batch(st, plan_batch, prompt, output)

    # Demand: arrivals (finished rate plus queue growth: a saturated service finishes at
    # its capacity, not at the demand), burst headroom from recent rates, and the backlog.
    arrivals = lam
    if state.last_waiting is not None and state.last_time is not None \
            and 0 < now - state.last_time <= 2 * policy.window_s:
        # Signed: a draining queue means the service finishes faster than requests arrive.
        arrivals = max(0.0, arrivals + (waiting - state.last_waiting) / (now - state.last_time))
    kept = tuple((t, r) for t, r in state.rates if now - t <= policy.burst_lookback_s)
    rates = (*kept, (now, arrivals))
    # Stored at most every quarter window, so a short cycle does not shorten the memory.
    recent_sample = bool(kept) and now - kept[-1][0] < policy.window_s / 4
    kept_next = kept if recent_sample else rates[-MAX_RATES:]
    # Burst headroom: new replicas arrive a cold start late, so plan for the noise around
    # the current level and for the highest burst of the lookback, whichever is more.
    peak = _burst_peak(rates, policy.cold_start_s + policy.window_s)
    burst = max(policy.burst_k * _noise([r for _, r in rates]), peak - arrivals)
    # A rising load keeps rising while new replicas start: plan for the rate they will
    # meet, a cold start plus a window (the rate's own lag) ahead.
    lead = policy.cold_start_s + policy.window_s
    trend = max(0.0, _slope([(t, r) for t, r in rates if now - t <= 2 * policy.window_s])) * lead
    burst = max(burst, trend)
    # The queue must drain after the replicas asked for now arrive (a cold start later).
    backlog = waiting / max(policy.backlog_drain_s + policy.cold_start_s, 1.0)
    demand = 0.0 if idle else arrivals + burst + backlog
    # Feedback corrects the model only where the model says the replicas suffice and the
    # latency says they do not, and never while capacity is arriving or a queue drains.
    model_need = demand * state.correction / per_replica if per_replica > 0 else math.inf
    draining = state.last_waiting is not None and waiting < state.last_waiting
    settling = in_flight or obs.replicas.warming > 0 or draining or model_need > cur
    correction = _correct(state.correction, err, settling)
    need = demand * correction / per_replica if per_replica > 0 else float(policy.max_replicas)
    need = min(need, MAX_NEED) if math.isfinite(need) else MAX_NEED  # absurd rates stay finite

    lo, hi = policy.min_replicas, policy.max_replicas
    limited = _Limited()
    if not cap.feasible:
        limited.set(R.TARGET_INFEASIBLE, (
            f"inter-token latency of {cap.best_itl_ms:.1f} ms at batch {floor} exceeds the "
            f"{budget:.1f} ms per token the targets leave for {output:.0f}-token outputs; "
            "sizing for throughput"))

    # Dead band, with hysteresis at small counts (scale down only when the need fits in
    # fewer replicas with the tolerance to spare).
    tol = policy.tolerance
    if need > cur * (1.0 + tol):  # from zero replicas: any need
        rec = math.ceil(need - 1e-9)
    elif math.ceil(need * (1.0 + tol) - 1e-9) < cur:
        rec = math.ceil(need * (1.0 + tol) - 1e-9)
    else:
        rec = cur
    slo_hold = rec < cur and err is not None and err > 1.0
    if slo_hold:
        rec = cur  # never scale in while the SLO is violated

    # Stabilization windows (as HPA): up to the lowest recommendation of the up window,
    # down to the highest of the down window.
    # Each run of equal wishes is kept once, stamped with its last time: a wish counts in
    # a window when it was last made inside it, whatever the cycle period.
    horizon = max(policy.scale_up_stabilization_s, policy.scale_down_stabilization_s)
    recs = tuple((t, n) for t, n in state.recommendations if now - t <= horizon)
    if recs and recs[-1][1] == rec:
        recs = recs[:-1]
    recs = (*recs, (now, rec))[-MAX_RECOMMENDATIONS:]
    up_floor = min(n for t, n in recs if now - t <= policy.scale_up_stabilization_s)
    down_ceiling = max(n for t, n in recs if now - t <= policy.scale_down_stabilization_s)
    hist_since = state.history_since
    if hist_since is None and state.recommendations:
        hist_since = state.recommendations[0][0]  # state written before historySince
    if hist_since is None or not state.recommendations:
        hist_since = now
    covered = now - hist_since >= HISTORY_COVERAGE * policy.scale_down_stabilization_s
    if not covered:
        # History shorter than the window (new service, or status lost): the current
        # replicas count as the window's wish, so the first scale-down waits a whole window.
        down_ceiling = max(down_ceiling, cur)
    target = cur
    if target < up_floor:
        target = up_floor
    if target > down_ceiling:
        target = down_ceiling
    held: str | None = R.SLO_VIOLATED if slo_hold else None
    if rec < cur and target == cur:
        held = R.STABILIZING

    # No direction reversal inside a window.
    since = None if state.last_scale_time is None else now - state.last_scale_time
    if since is not None:
        down_after_up = target < cur and state.last_scale_direction > 0 \
            and since < policy.scale_down_stabilization_s
        up_after_down = target > cur and state.last_scale_direction < 0 \
            and since < policy.scale_up_stabilization_s
        if down_after_up or up_after_down:
            target, held = cur, R.REVERSAL_BLOCKED

    # Step limits.
    if target > cur + policy.max_scale_up_step:
        limited.set(R.SCALE_UP_LIMIT, f"wanted {target} replicas, at most "
                    f"{policy.max_scale_up_step} added per decision")
        target = cur + policy.max_scale_up_step
    if target < cur - policy.max_scale_down_step:
        limited.set(R.SCALE_DOWN_LIMIT, f"wanted {target} replicas, at most "
                    f"{policy.max_scale_down_step} removed per decision")
        target = cur - policy.max_scale_down_step

    # Pending pods are not capacity, and asking for more while they wait helps nobody.
    if target > cur and obs.replicas.pending > 0:
        limited.set(R.PENDING, f"{obs.replicas.pending} pod(s) Pending for lack of GPUs; no "
                    f"further scale-up (wanted {target}) until they schedule")
        target, held = cur, R.PENDING

    # Bounds and budget, reported as ScalingLimited when the wish itself is out of them
    # (they outrank the step limits: they would bind even with unlimited steps).
    # A bound is reported when the wish is beyond it and it binds at least as hard as
    # the step limits did.
    if rec < lo and target <= lo:
        limited.set(R.TOO_FEW_REPLICAS, f"the load needs {rec}; minReplicas is {lo}")
    target = max(target, lo)
    if rec > hi and target >= hi:
        limited.set(R.TOO_MANY_REPLICAS, f"the load needs {rec}; maxReplicas is {hi}")
    target = min(target, hi)
    if policy.gpu_budget is not None:
        most = max(0, policy.gpu_budget // max(1, obs.gpus_per_replica))
        if min(rec, hi) > most and target >= most:
            limited.set(R.GPU_BUDGET, f"gpuBudget {policy.gpu_budget} allows {most} replicas "
                        f"of {obs.gpus_per_replica} GPU(s); the load needs {rec}")
        target = min(target, most)

    reason = _reason(target, cur, rec, need, idle, err, held, in_flight, limit_reason,
                     obs.batch_limit, limit)
    message = (
        f"load {arrivals:.2f} req/s (+{burst:.2f} burst, +{backlog:.2f} backlog) x{correction:.2f} "
        f"correction at {per_replica:.2f} req/s per replica (batch {plan_batch}, "
        f"{prompt:.0f}+{output:.0f} tokens, speed {speed:.2f}) needs {need:.2f} replicas; "
        f"{_latency_text(sig, policy)}; replicas {cur} -> {target}, limit "
        f"{obs.batch_limit} -> {limit}"
    )
    direction = (target > cur) - (target < cur)
    limits = state.limits
    if limit != obs.batch_limit:
        limits = (*limits, (now, limit))[-MAX_LIMITS:]
    new_state = state.evolve(
        last_good_replicas=target,
        last_good_limit=limit,
        last_good_time=now,
        recommendations=recs,
        history_since=hist_since,
        last_scale_time=now if direction else state.last_scale_time,
        last_scale_direction=direction or state.last_scale_direction,
        speed=speed,
        speed_key=key,
        speed_samples=speed_samples,
        correction=correction,
        limit_bias=bias,
        limits=limits,
        rates=kept_next,
        prompt_tokens=prompt,
        output_tokens=output,
        last_waiting=waiting,
        last_time=now,
    )
    return Decision(
        valid=True, replicas=target, batch_limit=limit, reason=reason, message=message,
        state=new_state, limited_reason=limited.reason, limited_message=limited.message,
        limit_reason=limit_reason, limit_message=limit_message, need=need, slo_error=err,
    )


# --- validity ---------------------------------------------------------------------------
def _invalid(sig: Signals) -> tuple[str, str] | None:
    if sig.state == MetricsState.UNAVAILABLE:
        return R.METRICS_UNAVAILABLE, sig.message or "Prometheus could not be queried"
    if sig.state == MetricsState.STALE:
        return R.METRICS_STALE, sig.message or "newest sample is too old"
    if sig.state == MetricsState.EMPTY:
        return R.METRICS_EMPTY, sig.message or "no series for this service"
    if sig.request_rate is None or not math.isfinite(sig.request_rate):
        return R.METRICS_PARTIAL, sig.message or "request rate missing: the load is unknown"
    return None


def _hold(obs: Observation, policy: ControlPolicy, state: ControlState, now: float,
          reason: str, message: str) -> Decision:
    """No valid decision: hold the last good one (never scale to zero for lack of data)."""
    cur = obs.replicas.desired
    held = state.last_good_replicas if state.last_good_replicas is not None else cur
    if held == 0:
        held = cur  # never zero while replicas run
    held = max(policy.min_replicas, min(policy.max_replicas, held))
    limit = obs.batch_limit if policy.batching_mode == "off" or state.last_good_limit is None \
        else _in_range(state.last_good_limit, obs, policy)
    return Decision(
        valid=False, replicas=held, batch_limit=limit, reason=reason,
        message=f"{message}; holding {held} replica(s) and batch limit {limit}",
        state=state,
    )


def _bring_up(obs: Observation, policy: ControlPolicy, state: ControlState,
              now: float) -> Decision:
    """No replica serves yet (new service, or scaled to zero): run the minimum."""
    cur = obs.replicas.desired
    target = max(policy.min_replicas, min(cur, policy.max_replicas))
    limit = obs.batch_limit if policy.batching_mode == "off" else \
        _in_range(obs.batch_limit, obs, policy)
    if target == 0:
        return Decision(valid=True, replicas=0, batch_limit=limit, reason=R.SCALED_TO_ZERO_REASON,
                        message="no replicas and no series: scaled to zero", state=state)
    return Decision(
        valid=True, replicas=target, batch_limit=limit, reason=R.WAITING_FOR_REPLICAS,
        message=f"no replica serves yet; running {target} until metrics arrive",
        state=state.evolve(last_good_replicas=target, last_good_limit=limit,
                           last_good_time=now),
    )


def _in_range(limit: int, obs: Observation, policy: ControlPolicy) -> int:
    """``limit`` within minBatch..min(maxBatch, --max-num-seqs)."""
    ceiling = max(1, min(policy.max_batch, obs.max_batch))
    return max(max(1, min(policy.min_batch, ceiling)), min(ceiling, limit))


# --- model pieces -------------------------------------------------------------------------
def _smooth(old: float | None, new: float | None, weight: float) -> float | None:
    if new is None:
        return old
    if old is None:
        return new
    return old + weight * (new - old)


def _per_request(token_rate: float | None, lam: float) -> float | None:
    if token_rate is None or lam <= 0 or not math.isfinite(token_rate):
        return None
    v = token_rate / lam
    # A rate of a few requests over a whole window divides badly: beyond any context
    # length a model has, the ratio is noise.
    return v if 0 < v <= MAX_TOKENS_PER_REQUEST else None


def _learn_speed(obs: Observation, seed: StepTimes, prompt: float, speed: float,
                 samples: int) -> tuple[float, int]:
    """EWMA of observed / predicted decode throughput, from warm saturated replicas only."""
    r, s = obs.replicas, obs.signals
    serving = r.serving
    if r.warming or r.starting or serving <= 0:
        return speed, samples  # cold replicas would read as slow ones
    if not s.waiting or s.waiting < 1 or not s.running or not s.generation_tokens_rate:
        return speed, samples  # only a queue shows the replicas' limit
    batch = s.running / serving
    if batch < SATURATED_SHARE * max(1, obs.batch_limit):
        return speed, samples  # a queue in front of half-empty replicas is not their limit
    # A replica s times faster than the seed decodes s * D(b) tokens/s for the time prefill
    # leaves it: gen = s * D * (1 - prefill_seed / s) = s * D - D * prefill_seed, where
    # prefill_seed is the share of time prefill takes at seed speed. Solve for s.
    decode = predicted_tokens_per_s(seed, batch)
    if decode <= 0:
        return speed, samples
    prefill_seed = (s.prompt_tokens_rate or 0.0) / serving * seed.prefill_ms_per_token / 1000.0
    ratio = s.generation_tokens_rate / serving / decode + prefill_seed
    ratio = max(SPEED_MIN, min(SPEED_MAX, ratio))
    new = (1 - SPEED_ALPHA) * speed + SPEED_ALPHA * ratio
    return new, samples + 1


def _ratios(sig: Signals, policy: ControlPolicy, cap: Capacity,
            ttft_floor_ms: float) -> dict[str, float]:
    out: dict[str, float] = {}
    if sig.ttft_ms is not None and ttft_floor_ms <= LATENCY_MARGIN * policy.ttft_target_ms:
        out["ttft"] = sig.ttft_ms / policy.ttft_target_ms
    if cap.feasible:
        if sig.e2e_ms is not None:
            out["e2e"] = sig.e2e_ms / policy.e2e_target_ms
        if sig.itl_ms is not None and policy.itl_target_ms:
            out["itl"] = sig.itl_ms / policy.itl_target_ms
    return out


def _correct(correction: float, err: float | None, settling: bool) -> float:
    if err is None:
        return correction
    if err > 1.0:
        if settling:
            return correction  # the model already explains the miss: do not ask twice
        return min(CORRECTION_MAX, correction * min(CORRECTION_STEP_MAX, max(1.1, math.sqrt(err))))
    if err < RELAXED_ERROR:
        if correction > 1.0:
            return max(1.0, correction * CORRECTION_DECAY)
        return max(CORRECTION_MIN, correction * math.sqrt(CORRECTION_DECAY))
    return correction


def _batch_limit(obs: Observation, policy: ControlPolicy, state: ControlState, now: float,
                 step_batch: int, ratios: dict[str, float], waiting: float, cur: int,
                 in_flight: bool, floor: int, ceiling: int) -> tuple[int, float, str | None, str]:
    current = obs.batch_limit
    if policy.batching_mode == "off":
        return current, state.limit_bias, None, ""
    base = max(floor, min(ceiling, step_batch))
    bias = state.limit_bias
    # Only a measured inter-token latency against its own target lowers the limit (an
    # e2e miss is as often queueing, the replicas' job), or a KV cache that overflows:
    # preempted sequences are recomputed, which costs everyone.
    itl_r = ratios.get("itl")
    ttft_r = ratios.get("ttft")
    kv = obs.signals.kv_usage
    kv_full = kv is not None and (kv >= KV_FULL or (
        kv >= KV_HIGH and (obs.signals.preemptions_rate or 0.0) > 0))
    kv_room = kv is None or kv < KV_HIGH
    short = in_flight or cur >= policy.max_replicas or obs.replicas.pending > 0
    why: str | None = None
    cause = ""
    if kv_full or (itl_r is not None and itl_r > 1.0):
        proposal = math.floor(current * LIMIT_DOWN_FACTOR)
        why = R.LIMIT_LOWERED
        cause = "KV cache full" if kv_full else "inter-token latency over target"
    elif ttft_r is not None and ttft_r > 1.0 and waiting > 0 and short and kv_room \
            and (itl_r is None or itl_r < ITL_HEADROOM):
        proposal = math.ceil(current * LIMIT_UP_FACTOR)
        why = R.LIMIT_RAISED
        cause = "requests queue while replicas are short"
    else:
        if all(r <= ITL_HEADROOM for r in ratios.values()) and kv_room and bias != 1.0:
            bias = 1.0 + (bias - 1.0) * 0.5
            if abs(bias - 1.0) < 0.05:
                bias = 1.0
            why = R.LIMIT_RESTORED
            cause = "latency back inside targets"
        proposal = round(base * bias)
        if proposal > current and (not kv_room or any(r > 1.0 for r in ratios.values())):
            proposal = current  # no way up while a latency or the KV cache is in trouble
    proposal = max(floor, min(ceiling, proposal))
    if why in (R.LIMIT_LOWERED, R.LIMIT_RAISED):
        bias = proposal / base  # remembered, so the way back starts from here
    last_change = state.limits[-1][0] if state.limits else None
    out_of_range = current < floor or current > ceiling
    if policy.batching_mode == "restart":
        big = proposal >= 2 * current or proposal * 2 <= current
        due = last_change is None or now - last_change >= policy.restart_interval_s
        move = out_of_range or (big and due)
    elif why in (R.LIMIT_LOWERED, R.LIMIT_RAISED):
        # A latency miss: move now, in small steps.
        big = abs(proposal - current) >= max(1.0, LIMIT_MIN_CHANGE * current)
        due = last_change is None or now - last_change >= policy.limit_interval_s
        move = out_of_range or (big and due)
    else:
        # The model's batch drifting with the request shape, or a way back: move only for
        # a clear change and at most once a window, so the limit does not chase noise.
        big = abs(proposal - current) >= max(2.0, LIMIT_MODEL_CHANGE * current)
        due = last_change is None or now - last_change >= policy.window_s
        move = out_of_range or (big and due)
    if not move or proposal == current:
        return current, bias, None, ""
    if why is None:
        why, cause = R.LIMIT_RESIZED, "the model's batch for the current request shape moved"
    return proposal, bias, why, (
        f"in-flight limit {current} -> {proposal} ({cause}; model batch {step_batch}, "
        f"range {floor}..{ceiling})")


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (per second) of (time, rate) points; 0 with fewer than 3."""
    if len(points) < 3:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mr = sum(r for _, r in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (r - mr) for t, r in points) / var if var > 0 else 0.0


def _burst_peak(rates: tuple[tuple[float, float], ...], horizon: float) -> float:
    """Highest rate of the lookback reached by a burst: from at most half of it within
    ``horizon`` (a cold start and a window), faster than new replicas can follow.

    A smooth ramp never qualifies, so a falling ramp is not held up; a step up qualifies
    but equals the new level while it lasts; bursty arrivals keep their peaks planned for
    the whole lookback.
    """
    peak = 0.0
    for i, (t, r) in enumerate(rates):
        low = min(x for u, x in rates[: i + 1] if t - u <= horizon)
        if r > peak and low <= BURST_RISE * r:
            peak = r
    return peak


def _noise(xs: list[float]) -> float:
    """Deviation of the rate around its trend, from its successive jumps.

    The upper quartile of the absolute successive differences: for Gaussian noise of
    deviation s it is 1.627 s. A single step in the level, or a smooth ramp, moves few
    differences and so is not mistaken for burstiness; a rate that keeps jumping (bursty
    arrivals) moves most of them.
    """
    if len(xs) < 4:
        return 0.0
    diffs = sorted(abs(b - a) for a, b in itertools.pairwise(xs))
    return diffs[min(len(diffs) - 1, int(NOISE_QUANTILE * len(diffs)))] / NOISE_SCALE


def _reason(target: int, cur: int, rec: int, need: float, idle: bool, err: float | None,
            held: str | None, in_flight: bool, limit_reason: str | None, old_limit: int,
            limit: int) -> str:
    if target > cur:
        return R.SLO_VIOLATED if err is not None and err > 1.0 else R.LOAD_INCREASED
    if target < cur:
        if idle:
            return R.SCALED_TO_ZERO_REASON if target == 0 else R.NO_TRAFFIC
        return R.LOAD_DECREASED
    if limit_reason is not None and limit != old_limit:
        return limit_reason  # the action taken outranks why replicas stayed
    if held is not None:
        return held
    if in_flight and rec >= cur:
        return R.WAITING_FOR_REPLICAS
    if idle:
        return R.NO_TRAFFIC
    if math.ceil(need - 1e-9) != cur:
        return R.WITHIN_TOLERANCE
    return R.STEADY


def _latency_text(sig: Signals, policy: ControlPolicy) -> str:
    parts = []
    if sig.e2e_ms is not None:
        parts.append(f"e2e {sig.e2e_ms:.0f}/{policy.e2e_target_ms:.0f} ms")
    if sig.ttft_ms is not None:
        parts.append(f"TTFT {sig.ttft_ms:.0f}/{policy.ttft_target_ms:.0f} ms")
    if sig.itl_ms is not None:
        tgt = f"/{policy.itl_target_ms:.0f}" if policy.itl_target_ms else ""
        parts.append(f"ITL {sig.itl_ms:.1f}{tgt} ms")
    return ", ".join(parts) or "no latency samples"
