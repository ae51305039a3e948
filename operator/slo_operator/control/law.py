"""The control law: ``decide(observation, policy, state, now) -> Decision``.

Pure: no clock, no I/O; the same function runs in the operator and in the benchmark.
It reads the way the HPA's algorithm does, one small step after another, each returning
a value and why:

1. ``learn_model``: the request shape (prompt, output, prefix-cache share) and the
   replicas' speed relative to the seed step times, learnt from the measured mean time
   per output token at whatever load the replicas run (with the model's errors on that
   time and on vLLM's measured prefill time, reported);
2. ``estimate_demand``: arrivals (the gateway's count before admission, else finished
   requests plus the queue's change), burst headroom and the backlog;
3. ``estimate_need``: replicas for the demand at the model's SLO-feasible batch, corrected
   by the measured latency error, and replicas to absorb a short burst's prompts within
   the first-token objective;
4. ``scale_in_window``: how long a scale-in waits, from the error budget left and the
   load's recent shape (none while the load, or the prompt work it brings, rises);
5. ``normalize``: dead band, stabilization windows, no reversal, step limits, pending
   pods, bounds and budget;
6. ``batch_limit``: the live in-flight limit.

``Decision.explanation`` holds every step's figures; the message is formatted from it.
docs/slo-loop.md describes the law, each protection and each reason; keep it in step.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from slo_operator.api.activation import DEFAULT_WAKE_TIMEOUT_S
from slo_operator.api.observe import MetricsState, Observation, Signals
from slo_operator.control import reasons as R
from slo_operator.control.capacity import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    LATENCY_MARGIN,
    TAIL_OUTPUT_FACTOR,
    TARGET_UTILIZATION,
    Capacity,
    StepTimes,
    decode_context,
    itl_budget_ms,
    pooled_replicas,
    rate_at_batch,
    replica_capacity,
    seed_step_times,
    tail_tokens,
)
from slo_operator.control.policy import ControlPolicy
from slo_operator.control.state import MAX_LIMITS, MAX_RATES, MAX_RECOMMENDATIONS, ControlState

# Feedback correction bounds and steps: the latency error corrects the model, it never
# replaces it (an error-only rule overshoots during cold starts).
# Never below the model: the correction only adds replicas the model leaves out. With
# end-to-end and first-token percentiles read exactly at round objectives (the gateway's
# boundaries), a correction decayed below 1 on relaxed windows took the headroom a rise
# needs (docs/slo-loop.md, Feedback).
CORRECTION_MIN = 1.0
CORRECTION_MAX = 3.0
CORRECTION_STEP_MAX = 1.5  # largest growth of the correction in one cycle
CORRECTION_STEP_MIN = 1.1  # growth on an error from 1.1 up (below it, the error itself)
# While latency is well inside its targets the correction decays toward 1 with this
# half-life: the model errors it learns (queueing behind long prompts, bursts the mean
# rates hide) come back with the next peak of the day, so it must outlive the quiet hour
# between peaks (a per-decision 1% forgot them in about 23 minutes at a 20 s interval,
# and the long-context workload missed at every second peak).
CORRECTION_HALF_LIFE_S = 3600.0
RELAXED_ERROR = 0.7  # latency error below which the correction decays
# Speed learning: an EWMA of the speed each cycle's mean time per output token implies,
# from warm replicas, once the window holds enough requests to make the mean meaningful.
SPEED_ALPHA = 0.3
SPEED_MIN, SPEED_MAX = 0.33, 3.0
SPEED_MIN_REQUESTS = 20.0  # requests finished in the window
# Share of the scale-down window the recommendation history must span to be trusted.
HISTORY_COVERAGE = 0.9
MAX_TOKENS_PER_REQUEST = 10_000_000.0
MAX_NEED = 1_000_000.0  # replicas; beyond any bound a policy can set (1000)
# Request shape smoothing per decision: a window of SHAPE_REQUESTS requests moves the mean
# by its weight, at most a fifth (long-tailed prompt lengths make one window's mean noisy:
# a log-normal of sigma 1.8 has a CV near 5, so 700 requests still leave 20% of noise).
SHAPE_REQUESTS = 100.0
SHAPE_ALPHA_MIN, SHAPE_ALPHA_MAX = 0.05, 0.2
# A burst: the rate rose from at most this share of its peak within a cold start.
BURST_RISE = 0.5
# Burst noise: quantile of successive rate differences, and its value in deviations.
NOISE_QUANTILE = 0.75
NOISE_SCALE = 1.627
# Short bursts: the replicas clear a short window's prompts at most this busy (the rest
# of their time decodes), and the short window is what a scrape-resolution peak spans.
BURST_UTILIZATION = 0.9
SHORT_WINDOW_S = 30.0
# Fixed-point rounds of a scale-in's prefix-cache share (estimate_need): two move it
# within a few percent of its fixed point for the ratios a scale-in has.
SCALE_IN_CACHE_ROUNDS = 3
# A short-window peak is remembered as its ratio over the window's mean, at most this
# (a window's worth of requests arriving in one short window is 2x for 30 s in 60 s; ten
# times the mean bounds what one quiet window before a burst can make of it).
MAX_BURST_RATIO = 10.0
# Scale-in from the error budget: with more than BUDGET_RICH of the period's budget left
# and a load that is not bursty, a scale-in waits SCALE_IN_FAST of the policy's window
# (and burst peaks are remembered as long); at BUDGET_THIN or less, the whole window.
BUDGET_RICH = 0.75
BUDGET_THIN = 0.25
SCALE_IN_FAST = 0.4
GROWTH_MAX = 2.0  # most prompt work per request planned ahead of the current shape
BURSTY_NOISE = 0.15  # rate noise over its level from which the load counts as bursty
# Live limit moves.
LIMIT_DOWN_FACTOR = 0.75
LIMIT_UP_FACTOR = 1.5
LIMIT_MIN_CHANGE = 0.1  # relative change below which a latency-driven move is skipped
LIMIT_MODEL_CHANGE = 0.25  # relative change below which a model-driven move is skipped
ITL_HEADROOM = 0.8  # raise the limit only while inter-token latency is below this share
KV_FULL = 0.98  # KV-cache use at which the limit comes down
KV_HIGH = 0.9  # ... or from here on while sequences are being preempted; no raise above


# --- the steps' values ----------------------------------------------------------------------
@dataclass(frozen=True)
class Model:
    """``learn_model``: what one replica of this service is like this cycle."""

    steps: StepTimes  # the seed scaled by the learnt speed
    speed: float
    speed_samples: int
    speed_key: str
    prompt: float  # mean prompt tokens
    output: float  # mean output tokens
    # Tokens the answers at the end-to-end percentile are not below, as measured (None: not
    # yet read from a window of ``SHAPE_REQUESTS`` requests).
    answer_tail: float | None
    cached: float  # share of prompt tokens found in the prefix cache
    error: float | None  # measured / predicted mean time per output token, before learning
    weight: float = SHAPE_ALPHA_MAX  # how far this cycle's window moved the request shape
    # Measured / predicted mean prefill time (``prefill_error``): reported, not learnt.
    prefill_error: float | None = None

    @property
    def long_tail(self) -> bool:
        """The answers' tail measured is longer than the model's own (``tail_tokens``)."""
        return tail_tokens(self.output, self.answer_tail) > TAIL_OUTPUT_FACTOR * self.output


@dataclass(frozen=True)
class Demand:
    """``estimate_demand``: requests per second to plan for."""

    arrivals: float
    source: str  # "gateway" (counted on arrival) or "completions" (finished + queue change)
    burst: float
    burst_kind: str  # "noise", "peak" (a remembered burst), "trend" or "none"
    backlog: float
    total: float
    peak: float | None  # highest short-window arrival rate in the window (gateway)
    excess: float  # short-window burst over the window's mean, this window only (req/s)
    shape: str  # "bursty", "falling", "rising" or "steady"
    rates: tuple[tuple[float, float], ...]  # memory for the next cycle


@dataclass(frozen=True)
class Need:
    """``estimate_need``: replicas the model wants, and why."""

    replicas: float
    per_replica: float  # requests per second one replica sustains at ``batch``
    batch: int
    correction: float
    burst_replicas: float  # replicas a short burst's prompts need within the TTFT target
    driver: str  # "load", "burst" or "queue": which sized the need
    # Fewest replicas whose queueing keeps first tokens within the margin of their
    # objective (``queue_replicas``); 0 where it does not bind. It sizes the need only
    # while the measured latency is over that margin and no capacity is arriving.
    queue_replicas: int = 0
    # Pooled routing (``Observation.pooled_routing``): the load's replicas at full use,
    # before the in-flight count's headroom (``capacity.pooled_replicas``); None otherwise.
    busy: float | None = None
    # Prompt work per request planned for, over the current shape's (``work_growth``).
    growth: float = 1.0


@dataclass(frozen=True)
class ScaleIn:
    """``scale_in_window``: how long a scale-in waits and why."""

    window_s: float
    lookback_s: float
    why: str
    rising: bool = False  # the load has been rising: no scale-in now (LoadRising)


@dataclass(frozen=True)
class Normalized:
    """``normalize``: the replica count after every protection."""

    target: int
    recommendation: int
    held: str | None
    limited_reason: str | None
    limited_message: str
    recommendations: tuple[tuple[float, int], ...]
    history_since: float
    queue_held: bool = False  # the scale-in stopped at ``queue_replicas`` (above the need)
    e2e_held: bool = False  # the scale-in held by ``e2e_near``


@dataclass(frozen=True)
class LimitMove:
    """``batch_limit``: the live in-flight limit."""

    limit: int
    bias: float
    reason: str | None
    message: str


@dataclass(frozen=True)
class Explanation:
    """Every step's figures for one decision (status, Events and tests read these)."""

    model: Model
    demand: Demand
    need: Need
    scale_in: ScaleIn
    replicas_from: int
    replicas_to: int
    limit_from: int
    limit_to: int
    latency: str
    # Fewest replicas whose queueing keeps the first-token objective (``queue_replicas``);
    # 0 where it does not bind.
    queue_floor: int = 0
    # A scale-in held by an end-to-end latency over the planning margin where the model
    # calls the targets out of reach (``normalize``'s ``e2e_near``).
    e2e_held: bool = False


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
    explanation: Explanation | None = None  # None for held and bring-up decisions


def decide(obs: Observation, policy: ControlPolicy, state: ControlState, now: float) -> Decision:
    """Replicas and batch limit for one service in one cycle (pure)."""
    sig = obs.signals
    cur = max(0, obs.replicas.desired)
    if policy.scale_to_zero and cur == 0:
        return at_zero(obs, policy, state, now)
    invalid = _invalid(sig)
    if invalid is not None:
        if sig.state == MetricsState.EMPTY and obs.replicas.ready == 0:
            return _bring_up(obs, policy, state, now)
        return _hold(obs, policy, state, now, *invalid)
    assert sig.request_rate is not None  # _invalid guarantees it
    lam = max(0.0, sig.request_rate)
    waiting = max(0.0, sig.waiting or 0.0)
    running = max(0.0, sig.running or 0.0)
    arriving = max(0.0, sig.arrival_rate or 0.0)
    idle = lam == 0.0 and waiting == 0.0 and running == 0.0 and arriving == 0.0

    model = learn_model(obs, policy, state)
    st = model.steps
    ceiling = max(1, min(policy.max_batch, obs.max_batch))
    floor = max(1, min(policy.min_batch, ceiling))
    budget = itl_budget_ms(policy.e2e_target_ms, policy.ttft_target_ms, policy.itl_target_ms,
                           model.output, model.answer_tail)
    cap = replica_capacity(st, prompt_tokens=model.prompt, output_tokens=model.output,
                           itl_budget=budget, min_batch=floor, max_batch=ceiling,
                           cached_share=model.cached, chunk_tokens=obs.max_num_batched_tokens)

    # SLO error: latency over target, only for targets replicas can reach.
    ttft_floor = st.prefill_request_ms(model.prompt, model.cached) + st.step_ms(1)
    e2e_budget = itl_budget_ms(policy.e2e_target_ms, policy.ttft_target_ms, None, model.output,
                               model.answer_tail)
    ratios = _ratios(sig, policy, cap, ttft_floor, e2e_budget)
    err = max(ratios.values()) if ratios else None
    # A scale-in is held by any measured miss, also an end-to-end one the model calls out
    # of reach: its tail (TAIL_OUTPUT_FACTOR) is an estimate, the tail requests' tokens
    # wait behind other sequences' prefill chunks, and fewer replicas lengthen every
    # request (larger batches, longer queues, more chunks per replica).
    e2e_ratio = sig.e2e_ms / policy.e2e_target_ms \
        if sig.e2e_ms is not None and policy.e2e_target_ms > 0 else None
    miss = err if e2e_ratio is None else max(err or 0.0, e2e_ratio)
    # Where the model calls the targets out of reach it sizes at the knee, which says
    # nothing about end-to-end latency: the measurement is then the only guide, and a
    # scale-in waits until it shows the planning margin (LatencyHeadroom).
    e2e_near = not cap.feasible and e2e_ratio is not None and e2e_ratio > LATENCY_MARGIN
    # Capacity is arriving where fewer pods are Ready than asked for, or some wait for a
    # GPU. Pods starting beside as many Ready ones as asked for replace them (a rolling
    # update's surge successors): they add nothing, and the feedback held while capacity
    # arrives would otherwise be blind for the whole roll.
    in_flight = obs.replicas.pending > 0 or cur > obs.replicas.ready

    # The batch limit first: the replicas are sized at the batch they will really run.
    # The limit guards the per-step objective (inter-token latency) only: the e2e budget
    # sizes the replicas (each runs about b* sequences at the planned load), and capping
    # admission at it would turn a little e2e slack into a queue and a TTFT miss.
    step_batch = ceiling
    if policy.itl_target_ms is not None:
        step_batch = replica_capacity(
            st, prompt_tokens=model.prompt, output_tokens=model.output,
            itl_budget=LATENCY_MARGIN * policy.itl_target_ms, min_batch=floor,
            max_batch=ceiling, cached_share=model.cached,
            chunk_tokens=obs.max_num_batched_tokens).batch
    move = batch_limit(obs, policy, state, now, step_batch, ratios, waiting, cur, in_flight,
                       floor, ceiling)

    arrivals_now = _arrivals(sig, state, now, policy.window_s)[0]
    work = work_load(st, arrivals_now, model)
    loads = _remember(state.loads, now, work, policy)[0]
    scale_in = scale_in_window(policy, obs.error_budget_left, state, now, arrivals_now, loads)
    demand = estimate_demand(obs, policy, state, now, scale_in.lookback_s, idle)
    # The smoothed shape trails a ramp by (1 - weight) / weight decisions.
    cycle = 0.0 if state.last_time is None \
        else min(policy.window_s, max(0.0, now - state.last_time))
    growth = work_growth(loads, (*state.rates, (now, arrivals_now)), now, policy,
                         (1.0 - model.weight) / model.weight * cycle)
    need = estimate_need(obs, policy, state, demand, model, cap, move.limit, err, cur, in_flight,
                         now, ttft_floor, growth)
    # Prompt-work samples are kept where rate samples are: ``work_growth`` pairs them by
    # time (after a status without them, their own quarter-window cadence need not align).
    kept = {t for t, _ in demand.rates}
    loads_next = tuple((t, w) for t, w in loads if t in kept)
    # Ready (warm) pods without series in this pass (a failing scrape, a target gone
    # from Prometheus): their requests are missing from the load, which reads low.
    unreported = 0 if sig.pods is None else max(
        0, obs.replicas.ready - obs.replicas.warming - sig.pods)
    queued = min(cur, need.queue_replicas)
    norm = normalize(need.replicas, cur, obs, policy, state, now, miss, scale_in, unreported,
                     queued, e2e_near, measured=need.driver == "queue")

    limited_reason, limited_message = norm.limited_reason, norm.limited_message
    if not cap.feasible and limited_reason is None:
        limited_reason, limited_message = R.TARGET_INFEASIBLE, (
            f"inter-token latency of {cap.best_itl_ms:.1f} ms at batch {floor} exceeds the "
            f"{budget:.1f} ms per token the targets leave for {model.output:.0f}-token "
            "outputs; sizing for throughput")
    target = norm.target
    reason = _reason(target, cur, norm.recommendation, need.replicas, idle, err, norm.held,
                     in_flight, move.reason, obs.batch_limit, move.limit)
    # The idle clock runs only while nothing starts and no wake is fresh: a woken
    # service's first replica starts with an empty window, and the requests it was woken
    # for reach its series only after the activator forwards them.
    quiet = idle and not in_flight and not _woke_lately(obs, policy, now)
    idle_since = (state.idle_since if state.idle_since is not None else now) if quiet else None
    # Any pod still starting holds the service up (a scale-out asked for load the window
    # has not shown yet, or a roll's successor).
    if to_zero(policy, idle_since, now, miss, in_flight or obs.replicas.starting > 0):
        return _go_to_zero(obs, policy, state, now, idle_since or now, move.limit)
    explanation = Explanation(model=model, demand=demand, need=need, scale_in=scale_in,
                              replicas_from=cur, replicas_to=target,
                              limit_from=obs.batch_limit, limit_to=move.limit,
                              latency=_latency_text(sig, policy),
                              queue_floor=queued if norm.queue_held else 0,
                              e2e_held=norm.e2e_held)
    direction = (target > cur) - (target < cur)
    limits = state.limits
    if move.limit != obs.batch_limit:
        limits = (*limits, (now, move.limit))[-MAX_LIMITS:]
    new_state = state.evolve(
        last_good_replicas=target,
        last_good_limit=move.limit,
        last_good_time=now,
        recommendations=norm.recommendations,
        history_since=norm.history_since,
        last_scale_time=now if direction else state.last_scale_time,
        last_scale_direction=direction or state.last_scale_direction,
        speed=model.speed,
        speed_key=model.speed_key,
        speed_samples=model.speed_samples,
        model_error=model.error if model.error is not None else state.model_error,
        prefill_error=model.prefill_error if model.prefill_error is not None
        else state.prefill_error,
        correction=need.correction,
        limit_bias=move.bias,
        limits=limits,
        rates=demand.rates,
        loads=loads_next,
        prompt_tokens=model.prompt,
        output_tokens=model.output,
        answer_tail=model.answer_tail,
        cached_share=model.cached,
        last_waiting=waiting,
        last_time=now,
        short_time=now if _short(obs, in_flight) and _queued(ratios) else state.short_time,
        itl_over=_itl_over(sig, policy),
        jitter_over=_jitter_over(sig, policy, lam * policy.window_s),
        idle_since=idle_since,
    )
    return Decision(
        valid=True, replicas=target, batch_limit=move.limit, reason=reason,
        message=format_explanation(explanation), state=new_state,
        limited_reason=limited_reason, limited_message=limited_message,
        limit_reason=move.reason, limit_message=move.message, need=need.replicas,
        slo_error=err, explanation=explanation,
    )


# --- 1. the model -------------------------------------------------------------------------
def learn_model(obs: Observation, policy: ControlPolicy, state: ControlState) -> Model:
    """Request shape and replica speed, learnt from this cycle's signals.

    The shape: live means smoothed by how many requests they stand for (a window with a
    single request says little), else the last seen ones, else defaults. The speed: the
    seed predicts the mean time per output token of a replica decoding ``b`` sequences
    while prefill takes a share ``f`` of its time as ``step(b) / (1 - f)``; a replica
    ``s`` times faster shows ``(step(b) / s) / (1 - f / s)``, so a measured mean ``m``
    gives ``s = step(b) / m + f``. The batch ``b`` is Little's law over the window
    (generated tokens per second x time per token), so no gauge sampled at one instant
    enters; this holds at any load, not only when replicas are saturated.
    """
    sig = obs.signals
    lam = max(0.0, sig.request_rate or 0.0)
    weight = max(SHAPE_ALPHA_MIN, min(SHAPE_ALPHA_MAX, lam * policy.window_s / SHAPE_REQUESTS))
    prompt = _smooth(state.prompt_tokens, _per_request(sig.prompt_tokens_rate, lam), weight) \
        or DEFAULT_PROMPT_TOKENS
    output = _smooth(state.output_tokens, _per_request(sig.generation_tokens_rate, lam),
                     weight) or DEFAULT_OUTPUT_TOKENS
    hit = sig.prefix_hit_share
    hit = None if hit is None or not math.isfinite(hit) else max(0.0, min(1.0, hit))
    cached = _smooth(state.cached_share, hit, weight) or 0.0
    # The answers' tail only from a window of SHAPE_REQUESTS requests or more: the
    # percentile of fewer is their longest one.
    tail = sig.answer_tail_tokens
    fresh = tail if tail is not None and math.isfinite(tail) and tail >= 0 \
        and lam * policy.window_s >= SHAPE_REQUESTS else None
    answer_tail = _smooth(state.answer_tail, fresh, weight)

    seed = policy.step_times or seed_step_times(obs.model_size_b, obs.precision, obs.hardware,
                                                obs.gpus_per_replica)
    key = f"{obs.hardware}/{obs.precision}"
    speed, samples = (state.speed, state.speed_samples) if state.speed_key == key else (1.0, 0)
    error: float | None = None
    implied = _implied_speed(obs, seed, prompt, output, cached, lam * policy.window_s)
    if implied is not None:
        measured, b, share = implied
        predicted = seed.step_ms(b, context=decode_context(prompt, output)) / speed \
            / max(0.1, 1.0 - share / speed)
        error = measured / predicted if predicted > 0 else None
        ratio = seed.step_ms(b, context=decode_context(prompt, output)) / measured + share
        ratio = max(SPEED_MIN, min(SPEED_MAX, ratio))
        speed, samples = (1 - SPEED_ALPHA) * speed + SPEED_ALPHA * ratio, samples + 1
    steps = seed.scaled(speed)
    return Model(steps=steps, speed=speed, speed_samples=samples, speed_key=key,
                 prompt=prompt, output=output, answer_tail=answer_tail, cached=cached,
                 error=error, weight=weight,
                 prefill_error=prefill_error(obs, steps, prompt, output, cached,
                                             lam * policy.window_s))


def _implied_speed(obs: Observation, seed: StepTimes, prompt: float, output: float,
                   cached: float, requests: float) -> tuple[float, float, float] | None:
    """(measured ms per output token, mean decode batch, prefill share at seed speed) of
    warm replicas, or None when this cycle cannot say."""
    s = obs.signals
    serving = _teaching(obs, requests)
    decode = _decode(s, serving) if serving else None
    if decode is None:
        return None
    m, batch = decode
    lam = max(0.0, s.request_rate or 0.0)
    share = min(0.9, lam / serving * seed.prefill_request_ms(prompt, cached) / 1000.0)
    return m, batch, share


def _teaching(obs: Observation, requests: float) -> int:
    """Serving replicas whose window may teach the model, 0 when it may not: a replica
    warming or starting would read as a slow one, and fewer than ``SPEED_MIN_REQUESTS``
    requests make a noisy mean."""
    r = obs.replicas
    if r.warming or r.starting or requests < SPEED_MIN_REQUESTS:
        return 0
    return max(0, r.serving)


def _decode(sig: Signals, serving: int) -> tuple[float, float] | None:
    """(measured ms per output token, mean decode batch of a replica), the batch by
    Little's law (generated tokens per second x time per token), or None."""
    m, gen = sig.decode_mean_ms, sig.generation_tokens_rate
    if m is None or gen is None or not (math.isfinite(m) and math.isfinite(gen)) \
            or m <= 0 or gen <= 0:
        return None
    return m, max(1.0, gen * m / 1000.0 / serving)


def prefill_error(obs: Observation, st: StepTimes, prompt: float, output: float,
                  cached: float, requests: float) -> float | None:
    """vLLM's measured mean prefill time (scheduled to first token) over what the model
    ``st`` predicts for the mean prompt, on warm replicas; None when this cycle cannot
    say (the rules of the speed's learning).

    A prompt of ``q`` uncached tokens goes through ``max(1, q / (chunk - b))`` engine
    steps beside ``b`` decoding sequences (the decode tokens take ``b`` of the chunk
    budget; one step where no budget is known) and costs its own prefill work ``w``;
    prompts admitted together share the steps, so at a prefill share ``f`` of the
    replica's time (the rate per replica times ``w``) the time stretches by
    ``1 / (1 - f)``, as a processor-shared server's does. ``b`` is Little's law over the
    window, as in ``_implied_speed``. The error is reported (explanation and status), not
    learnt: it mixes the prompts' work with their queueing behind each other
    (docs/slo-loop.md, "Prefill error").
    """
    s = obs.signals
    serving = _teaching(obs, requests)
    m = s.prefill_mean_ms
    if not serving or m is None or not math.isfinite(m) or m <= 0:
        return None
    decode = _decode(s, serving)
    b = decode[1] if decode is not None else 1.0
    chunk = obs.max_num_batched_tokens
    steps = max(1.0, prompt * (1.0 - cached) / max(1.0, chunk - b)) if chunk else 1.0
    work = st.prefill_request_ms(prompt, cached)
    alone = steps * st.step_ms(b, context=decode_context(prompt, output)) + work
    share = min(0.9, max(0.0, s.request_rate or 0.0) / serving * work / 1000.0)
    error = m / (alone / (1.0 - share)) if alone > 0 else math.inf
    return error if math.isfinite(error) else None


# --- 2. demand ----------------------------------------------------------------------------
def _arrivals(sig: Signals, state: ControlState, now: float, window_s: float) -> tuple[float, str]:
    """Requests per second arriving now, and where that was read.

    The gateway's count: the window's mean, or the mean of its last half where that is
    higher. A window's mean lags a rising load by half a window, its last half's by a
    quarter; a step up is met at its new level after half a window (never above it). A
    falling load is read from the whole window's mean (a scale-in waits anyway)."""
    if sig.arrival_rate is not None and math.isfinite(sig.arrival_rate):
        rate = sig.arrival_rate
        recent = sig.arrival_recent_rate
        if recent is not None and math.isfinite(recent):
            rate = max(rate, recent)
        return max(0.0, rate), "gateway"
    lam = max(0.0, sig.request_rate or 0.0)
    waiting = max(0.0, sig.waiting or 0.0)
    if state.last_waiting is not None and state.last_time is not None \
            and 0 < now - state.last_time <= 2 * window_s:
        # Signed: a draining queue means the service finishes faster than requests arrive.
        lam = max(0.0, lam + (waiting - state.last_waiting) / (now - state.last_time))
    return lam, "completions"


def estimate_demand(obs: Observation, policy: ControlPolicy, state: ControlState, now: float,
                    lookback_s: float, idle: bool) -> Demand:
    """Requests per second to plan for: arrivals, burst headroom and the backlog.

    Arrivals are the gateway's count before admission where pods run it (a saturated
    service finishes at its capacity, not at the demand), else finished requests plus the
    queue's change. Headroom: new replicas arrive a cold start late, so the plan covers
    the noise around the current level, the highest burst remembered over ``lookback_s``,
    and a rising trend carried a cold start and a window ahead, whichever is most.
    """
    sig = obs.signals
    arrivals, source = _arrivals(sig, state, now, policy.window_s)
    waiting = max(0.0, sig.waiting or 0.0)
    # The memory always spans the policy's whole lookback (what status keeps does not
    # depend on the error budget); the budget's shorter lookback applies when reading it.
    recall = max(lookback_s, policy.window_s)
    rates_all, rates_next = _remember(state.rates, now, arrivals, policy)
    rates = tuple((t, r) for t, r in rates_all if now - t <= recall)
    # Short bursts inside a window (the gateway's short-window peak over the window's
    # mean) count as their excess over that mean. They size replicas for their prompts
    # (``estimate_need``), not as sustained demand: a burst of seconds needs its prompts
    # prefilled within the first-token objective, and the planned utilisation's headroom
    # absorbs the rest. The excess is not stored: only the window that shows it counts,
    # because a level change (a step up, or a drop) also shows a short-window peak over
    # its window's mean, and remembering that would hold replicas for a load that has
    # gone; recurring bursts show again in their own windows. (What a burst asked for is
    # held by the scale-in's stabilization window, like any recommendation.)
    peak = sig.arrival_peak_rate if sig.arrival_peak_rate is not None \
        and math.isfinite(sig.arrival_peak_rate) else None
    ratio_now = 0.0 if peak is None or arrivals <= 0 \
        else min(MAX_BURST_RATIO, max(0.0, peak / arrivals - 1.0))
    excess = arrivals * ratio_now

    noise = policy.burst_k * _noise([r for _, r in rates])
    top = _burst_peak(rates, policy.cold_start_s + policy.window_s) - arrivals
    trend = _trend(rates, now, policy)
    kinds = {"noise": noise, "peak": top, "trend": trend}
    kind, burst = max(kinds.items(), key=lambda kv: kv[1])
    if burst <= 0:
        kind, burst = "none", 0.0
    # The queue must drain after the replicas asked for now arrive (a cold start later).
    backlog = waiting / max(policy.backlog_drain_s + policy.cold_start_s, 1.0)
    total = 0.0 if idle else arrivals + burst + backlog
    return Demand(arrivals=arrivals, source=source, burst=burst, burst_kind=kind,
                  backlog=backlog, total=total, peak=peak, excess=excess,
                  shape=_shape(rates, now, policy), rates=rates_next)


def _remember(series: tuple[tuple[float, float], ...], now: float, value: float,
              policy: ControlPolicy) -> tuple[tuple[tuple[float, float], ...],
                                              tuple[tuple[float, float], ...]]:
    """(the samples over the policy's lookback with ``value`` now, the samples to keep):
    one sample at most every quarter window, so a short cycle does not shorten the
    memory."""
    memory = max(policy.burst_lookback_s, policy.window_s)
    kept = tuple((t, r) for t, r in series if now - t <= memory)
    every = (*kept, (now, value))
    recent = bool(kept) and now - kept[-1][0] < policy.window_s / 4
    return every, (kept if recent else every[-MAX_RATES:])


def work_load(st: StepTimes, arrivals: float, model: Model) -> float:
    """Prompt work arriving per second, in replicas' worth: the arrival rate times the
    prefill time of the mean prompt less the share its prefix cache spares (with the
    attention over its earlier tokens), so longer prompts or fewer cache hits raise it at a
    steady request rate. At the seed's speed: a learnt speed settling is no work arriving
    (every step time scales by it). At most ``MAX_NEED`` replicas' worth: an absurd rate
    (1e307 requests a second) stays a finite number in status."""
    work = max(0.0, arrivals) * st.prefill_request_ms(model.prompt, model.cached) \
        * model.speed / 1000.0
    return min(work, MAX_NEED) if not math.isnan(work) else 0.0


def work_growth(loads: tuple[tuple[float, float], ...], rates: tuple[tuple[float, float], ...],
                now: float, policy: ControlPolicy, lag_s: float) -> float:
    """How much more prompt work each request will bring when replicas asked for now
    serve. The prompt work per request is ``work_load`` over the arrival rate at each
    stored sample (both series are stored together); where it rises (``_shape``), its
    trend (``_trend``'s rule) is carried a cold start and half a window ahead, as the
    rate's is, plus ``lag_s``, how far the smoothed request shape it is read from trails a
    ramp. 1 where it does not rise; at most ``GROWTH_MAX``. The rise must have lasted the
    third window back too: read from the smoothed shape, a step in the request mix (a
    burst of long prompts) reaches this series as a rise of two windows, where the rate's
    trend sees a step as one."""
    lookback = max(policy.burst_lookback_s, policy.window_s)
    at = {t: r for t, r in rates if now - t <= lookback}
    per = tuple((t, w / at[t]) for t, w in loads if at.get(t, 0.0) > 0)
    if not per or per[-1][0] != now or per[-1][1] <= 0 or _shape(per, now, policy) != "rising":
        return 1.0
    w = policy.window_s
    if _slope([(t, r) for t, r in per if 2 * w <= now - t <= 3 * w]) <= 0:
        return 1.0
    ahead = policy.cold_start_s + policy.window_s / 2 + max(0.0, lag_s)
    return max(1.0, min(GROWTH_MAX, 1.0 + _trend(per, now, policy, ahead) / per[-1][1]))


def _trend(rates: tuple[tuple[float, float], ...], now: float, policy: ControlPolicy,
           ahead: float | None = None) -> float:
    """A rising load keeps rising while new replicas start: plan for the rate they will
    meet, a cold start and half a window (a window's mean lags a ramp by half a window)
    ahead. Only a rise that lasted both of the last two windows counts (the smaller of
    their slopes): a step up enters a window's mean as a one-window ramp, and projecting
    that would plan for twice the new level."""
    w = policy.window_s
    recent = _slope([(t, r) for t, r in rates if now - t <= w])
    older = _slope([(t, r) for t, r in rates if w <= now - t <= 2 * w])
    if ahead is None:
        ahead = policy.cold_start_s + w / 2
    return max(0.0, min(recent, older)) * ahead


def _shape(rates: tuple[tuple[float, float], ...], now: float, policy: ControlPolicy) -> str:
    """The load's recent shape: bursty (noise beyond ``BURSTY_NOISE`` of its level), else
    the sign of its trend over the last few windows."""
    level = sum(r for _, r in rates) / len(rates) if rates else 0.0
    if level <= 0:
        return "steady"
    if _noise([r for _, r in rates]) > BURSTY_NOISE * level:
        return "bursty"
    span = 4 * policy.window_s
    slope = _slope([(t, r) for t, r in rates if now - t <= span]) * span
    if slope < -BURSTY_NOISE * level:
        return "falling"
    if slope > BURSTY_NOISE * level:
        return "rising"
    return "steady"


# --- 3. need ------------------------------------------------------------------------------
def estimate_need(obs: Observation, policy: ControlPolicy, state: ControlState, demand: Demand,
                  model: Model, cap: Capacity, limit: int, err: float | None, cur: int,
                  in_flight: bool, now: float, ttft_floor_ms: float, growth: float = 1.0) -> Need:
    """Replicas for the demand, corrected by the latency error, or for a short burst.

    Load: ``demand x correction / per_replica`` at the batch the replicas will run (the
    model's SLO-feasible batch under the live limit). Feedback corrects the model only
    where the model says the replicas suffice and the latency says they do not, and never
    while capacity is arriving or a queue drains, nor from a miss read within its reach of
    a shortfall that queued first tokens (:func:`shortfall_reach`).

    Burst: a short window's arrivals at the peak rate ``P`` bring ``P x prefill`` of
    prompt work per second on top of the decode work of the mean load ``A``; replicas
    must clear it within the window plus the first-token objective (margin applied), at
    most ``BURST_UTILIZATION`` busy: ``(P prefill + A decode) / 1000 x S / (S + m TTFT)
    / u``, with ``S`` the short window. Only the current window's peak counts (the
    stabilization window holds what it asked for).

    Queue: where the first-token latency measured on the serving replicas is over
    ``LATENCY_MARGIN`` of its objective, no capacity is arriving, no shortfall is within
    its reach and the queue is not draining, the replicas whose
    queueing would keep it there (:func:`queue_replicas`, from ``ttft_floor_ms``, the mean
    prompt's own prefill and a step): the capacity model's mean service times do not see
    how prompts spread, and the measured wait does.
    """
    st = model.steps
    plan_batch = max(1, min(cap.batch, limit))
    chunk = obs.max_num_batched_tokens
    prompt = model.prompt * growth
    per_replica = rate_at_batch(st, plan_batch, prompt, model.output,
                                cached_share=model.cached, chunk_tokens=chunk)
    # Square-root staffing assumes requests of comparable work: where the answers' tail
    # measured is longer than the model's (a few long answers hold a replica's batch for
    # minutes whatever the router balances), the planned utilisation's margin stays.
    pooled = obs.pooled_routing and not model.long_tail

    def replicas(rate: float) -> float:
        return load_replicas(rate, per_replica, plan_batch, pooled, policy.quantile)

    model_need = replicas(demand.total * state.correction)
    waiting = max(0.0, obs.signals.waiting or 0.0)
    draining = state.last_waiting is not None and waiting < state.last_waiting
    # The model explains a miss only when it would scale out itself (beyond the dead band):
    # a need just above the current replicas, inside the band, moves nothing.
    after_short = state.short_time is not None \
        and 0.0 <= now - state.short_time <= shortfall_reach(obs.signals, policy)
    # Capacity arriving, a shortfall within its reach or a draining queue: latency still
    # carries a backlog the replicas already there are clearing.
    clearing = _short(obs, in_flight) or after_short or draining
    settling = clearing or model_need > cur * (1.0 + policy.tolerance)
    # One decision vouches for at most its window of relaxed latency (a restarted
    # operator's gap says nothing about the latency meanwhile).
    elapsed = 0.0 if state.last_time is None \
        else max(0.0, min(policy.window_s, now - state.last_time))
    correction = _correct(state.correction, err, settling, elapsed)
    load = replicas(demand.total * correction) if per_replica > 0 \
        else float(policy.max_replicas)
    # Fewer replicas hold fewer prefixes: the prefix cache's hits shrink with the replicas
    # (the cache is the replicas' free KV; the conversations it must hold stay). A scale-in
    # is planned with the hit share scaled to the replicas it leaves (a few fixed-point
    # rounds), so it does not count on hits that leave with the replicas.
    cached = model.cached
    for _ in range(SCALE_IN_CACHE_ROUNDS):
        if not (cached > 0 and 0 < load < cur and per_replica > 0):
            break
        cached = model.cached * max(load, 1.0) / cur
        per_replica = rate_at_batch(st, plan_batch, prompt, model.output,
                                    cached_share=cached, chunk_tokens=chunk)
        load = replicas(demand.total * correction)
    peak = demand.arrivals + demand.excess if demand.peak is not None else 0.0
    burst = 0.0
    if peak > 0 and demand.total > 0:
        prefill = st.prefill_request_ms(model.prompt, model.cached)
        decode = model.output * st.step_ms(plan_batch, context=decode_context(
            model.prompt, model.output)) / plan_batch
        work = (peak * prefill + demand.arrivals * decode) / 1000.0
        burst = work * SHORT_WINDOW_S / (SHORT_WINDOW_S + LATENCY_MARGIN
                                         * policy.ttft_target_ms / 1000.0) / BURST_UTILIZATION
    serving = obs.replicas.serving
    queue = queue_replicas(obs.signals.ttft_ms, ttft_floor_ms, policy.ttft_target_ms,
                           demand.arrivals, per_replica, serving)
    # Bounded as the correction is: the latency corrects the model, it never replaces it
    # (a latency that does not answer to replicas would otherwise ask for ever more).
    # Not while a backlog is being cleared (``clearing``): first tokens then still carry
    # its wait.
    queue_need = min(float(queue), CORRECTION_MAX * demand.total / per_replica) \
        if queue > serving and not clearing else 0.0
    need = max(load, burst, queue_need)
    need = min(need, MAX_NEED) if math.isfinite(need) else MAX_NEED  # absurd rates stay finite
    driver = "queue" if queue_need > max(load, burst) else ("burst" if burst > load else "load")
    busy = demand.total * correction * TARGET_UTILIZATION / per_replica \
        if pooled and 0 < per_replica < math.inf else None
    return Need(replicas=need, per_replica=per_replica, batch=plan_batch, correction=correction,
                burst_replicas=burst, driver=driver, queue_replicas=queue, busy=busy,
                growth=growth)


def load_replicas(rate: float, per_replica: float, batch: int, pooled: bool,
                  quantile: float) -> float:
    """Replicas for ``rate`` requests per second, ``per_replica`` being one replica's
    planned rate (``TARGET_UTILIZATION`` of its full rate at ``batch``): each replica at
    that share where a proxy spreads requests at random; where routing pools them, the
    in-flight count's headroom at ``quantile`` (``capacity.pooled_replicas``)."""
    if not per_replica > 0:
        return math.inf
    if not pooled:
        return rate / per_replica
    return pooled_replicas(rate * TARGET_UTILIZATION / per_replica, batch, quantile)


def _short(obs: Observation, in_flight: bool) -> bool:
    """Capacity is short: replicas asked for are starting or Pending, or warming up."""
    return in_flight or obs.replicas.warming > 0


def _queued(ratios: dict[str, float]) -> bool:
    """Requests wait for capacity: first tokens are over an objective replicas can reach
    (``_ratios``; where the mean prompt's prefill alone takes most of it, first tokens are
    late on any count of replicas and say nothing of a queue)."""
    return ratios.get("ttft", 0.0) > 1.0


def shortfall_reach(sig: Signals, policy: ControlPolicy) -> float:
    """Seconds back a latency measured now still describes: a request finishing now with an
    end-to-end latency ``E`` arrived ``E`` ago, and the percentiles cover the policy's
    window. A miss read within this reach of the last shortfall that queued first tokens
    (``ControlState.short_time``) may have waited for the capacity then arriving (a
    start-up or a burst's backlog, whose requests finish minutes later on long answers):
    it does not grow the correction, which would outlive the backlog by hours (its
    half-life) at full cost. A shortfall whose first tokens met their objective holds
    nothing: its misses are the model's (docs/slo-loop.md, Feedback)."""
    e2e_s = (sig.e2e_ms or 0.0) / 1000.0
    return max(policy.window_s, e2e_s if math.isfinite(e2e_s) else 0.0)


# --- 4. scale-in ----------------------------------------------------------------------------
def scale_in_window(policy: ControlPolicy, budget_left: float | None, state: ControlState,
                    now: float, arrivals: float,
                    loads: tuple[tuple[float, float], ...] = ()) -> ScaleIn:
    """How long a scale-in waits (and how long burst peaks are remembered).

    The error budget decides the trade: with much of it left (``BUDGET_RICH``) a scale-in
    may risk a window, so it waits ``SCALE_IN_FAST`` of the policy's window; with little
    left (``BUDGET_THIN``) the whole window; in between, linearly. Bursty load keeps the
    whole window whatever the budget (its next burst is likely inside it). A load that
    has been rising over the last four windows (``_shape``) is not scaled in at all
    (``LoadRising``): the need that reads lower than the replicas is the model's, and a
    model that under-sizes the traffic (queueing behind long prompts) reads lowest just
    as the load climbs toward its peak; a replica given up then comes back a cold start
    late. The same holds where the prompt work arriving rises at a steady or falling
    request rate (``loads``, :func:`work_load`: longer prompts, fewer prefix-cache hits):
    the need is read from a request shape smoothed over minutes, which trails such a rise,
    and a scale-in that starts then also loses the cached prefixes of the replicas it
    removes. A request rate that rises while the prompt work arriving falls (each request
    cheaper faster than the requests multiply: shorter turns, more of each prompt cached)
    is no rising load: the need reads lower because the work does, and the error budget
    decides as for any other load. A policy window of zero stays zero.
    """
    full, lookback = policy.scale_down_stabilization_s, policy.burst_lookback_s
    rates = (*((t, r) for t, r in state.rates if now - t <= lookback), (now, arrivals))
    shape = _shape(rates, now, policy)
    work = _shape(tuple((t, r) for t, r in loads if now - t <= lookback), now, policy)
    if shape == "rising" and work != "falling":
        return ScaleIn(full, lookback, "rising load: none while it rises", rising=True)
    if work == "rising":
        return ScaleIn(full, lookback, "rising prompt work (longer or less cached prompts): "
                       "none while it rises", rising=True)
    kind = "rising requests at falling prompt work" if shape == "rising" else f"{shape} load"
    if budget_left is None or not math.isfinite(budget_left):
        return ScaleIn(full, lookback, "no error budget measured yet: the whole window")
    if shape == "bursty":
        return ScaleIn(full, lookback, f"bursty load: the whole window ({budget_left:.0%} of "
                       "the error budget left)")
    if budget_left <= BUDGET_THIN:
        share = 1.0
    elif budget_left >= BUDGET_RICH:
        share = SCALE_IN_FAST
    else:
        share = 1.0 - (1.0 - SCALE_IN_FAST) * (budget_left - BUDGET_THIN) \
            / (BUDGET_RICH - BUDGET_THIN)
    return ScaleIn(full * share, lookback * share,
                   f"{budget_left:.0%} of the error budget left, {kind}: "
                   f"{full * share:.0f} s of the {full:.0f} s window")


def queue_replicas(ttft_ms: float | None, floor_ms: float, target_ms: float,
                   arrivals: float, per_replica: float, serving: int) -> int:
    """Fewest replicas whose first-token latency, as measured now and scaled by queueing to
    that many replicas, keeps ``LATENCY_MARGIN`` of its objective.

    The capacity model sizes replicas by mean service times; how long a request waits for
    its prefill also depends on how the prompts spread (a long prompt holds every later one
    back), which it does not see, and the wait grows steeply as utilisation nears 1. So the
    measured first-token latency above its floor (the mean prompt's own prefill and a step)
    is taken as waiting ``W``, which grows as ``rho / (1 - rho)`` (an M/G/1 queue's mean
    wait, whatever the spread of service times). ``rho`` is the ``arrivals`` over the
    ``serving`` replicas' capacity at full utilisation (``per_replica /
    TARGET_UTILIZATION``), ``L`` replicas' worth of load, and ``L / n`` on ``n`` replicas;
    the latency on ``n`` replicas keeps the goal ``g`` (from the floor ``f``) from
    ``n = L (1 + W / (q (g - f)))`` on, ``q = rho / (1 - rho)`` as measured. On the
    serving replicas the prediction is the measurement itself, so the count is above them
    exactly when the measured latency is over the goal. A scale-in stops at it
    (``normalize``); a measured latency over the goal asks for it (``estimate_need``). The
    demand's headroom (noise, bursts, trend) stays out: the measured latency already holds
    its window's bursts. Without a measured latency, load or capacity, with no wait
    measured, or with the floor itself above the goal (out of the replicas' reach, as in
    ``_ratios``) it does not bind (0)."""
    if ttft_ms is None or not math.isfinite(ttft_ms) or serving <= 0 or arrivals <= 0 \
            or not 0 < per_replica < math.inf or target_ms <= 0:
        return 0
    capacity = per_replica / TARGET_UTILIZATION
    rho = arrivals / (serving * capacity)
    wait = max(0.0, ttft_ms - floor_ms)
    goal = LATENCY_MARGIN * target_ms
    if not 0 < rho < 1.0 or wait <= 0 or floor_ms >= goal:
        return 0
    load = arrivals / capacity
    n = load * (1.0 + wait / (rho / (1.0 - rho) * (goal - floor_ms)))
    return max(1, math.ceil(min(n, MAX_NEED) - 1e-9))


# --- 5. normalize ---------------------------------------------------------------------------
def normalize(need: float, cur: int, obs: Observation, policy: ControlPolicy,
              state: ControlState, now: float, miss: float | None,
              scale_in: ScaleIn, unreported: int = 0, queued: int = 0,
              e2e_near: bool = False, measured: bool = False) -> Normalized:
    """The replica count after the dead band, stabilization, reversal, step limits,
    pending pods, bounds and budget; limits report from the softest to the hardest (the
    last that bit is the one reported). ``miss``: the largest measured latency over its
    target (above 1: violated), which holds any scale-in; so does ``unreported`` above 0
    (Ready pods whose series are missing: the load reads lower than it is). ``queued``
    (``queue_replicas``): a scale-in goes no lower than the replicas whose queueing keeps the
    first-token objective (``LatencyHeadroom`` where it holds the scale-in altogether).
    ``e2e_near``: the end-to-end latency is over the planning margin of its objective where
    the model calls the targets out of reach, which holds any scale-in (``LatencyHeadroom``).
    ``measured``: the need is first tokens' measured queueing (``queue_replicas``), not the
    model's estimate, so any need above ``cur`` scales out: the dead band is for the
    model's noise."""
    limited: tuple[str | None, str] = (None, "")
    tol = policy.tolerance
    # Dead band, with hysteresis at small counts (scale down only when the need fits in
    # fewer replicas with the tolerance to spare).
    if need > cur * (1.0 + tol) or (measured and need > cur):  # from zero replicas: any need
        rec = math.ceil(need - 1e-9)
    elif math.ceil(need * (1.0 + tol) - 1e-9) < cur:
        rec = math.ceil(need * (1.0 + tol) - 1e-9)
    else:
        rec = cur
    slo_hold = rec < cur and miss is not None and miss > 1.0
    unreported_hold = rec < cur and not slo_hold and unreported > 0
    e2e_hold = rec < cur and not (slo_hold or unreported_hold) and e2e_near
    if e2e_hold:
        rec = cur
    queue_hold = rec < cur and not (slo_hold or unreported_hold) and queued > rec
    if queue_hold:
        rec = min(cur, queued)
    rising_hold = rec < cur and not (slo_hold or unreported_hold) and scale_in.rising
    if slo_hold or unreported_hold or rising_hold:
        # Never scale in while the SLO is violated, the load is undercounted or rising.
        rec = cur

    # Stabilization windows (as HPA): up to the lowest recommendation of the up window,
    # down to the highest of the down window (shortened by the error budget). Each run of
    # equal wishes is kept once, stamped with its last time.
    down_s = scale_in.window_s
    horizon = max(policy.scale_up_stabilization_s, policy.scale_down_stabilization_s)
    recs = tuple((t, n) for t, n in state.recommendations if now - t <= horizon)
    if recs and recs[-1][1] == rec:
        recs = recs[:-1]
    recs = (*recs, (now, rec))[-MAX_RECOMMENDATIONS:]
    up_floor = min(n for t, n in recs if now - t <= policy.scale_up_stabilization_s)
    down_ceiling = max(n for t, n in recs if now - t <= down_s)
    hist_since = state.history_since
    if hist_since is None and state.recommendations:
        hist_since = state.recommendations[0][0]  # state written before historySince
    if hist_since is None or not state.recommendations:
        hist_since = now
    if now - hist_since < HISTORY_COVERAGE * down_s:
        # History shorter than the window (new service, or status lost): the current
        # replicas count as the window's wish, so the first scale-down waits a whole window.
        down_ceiling = max(down_ceiling, cur)
    target = min(max(cur, up_floor), down_ceiling)
    held: str | None = R.SLO_VIOLATED if slo_hold else (
        R.PODS_UNREPORTED if unreported_hold else (
            R.LATENCY_HEADROOM if e2e_hold else (R.LOAD_RISING if rising_hold else None)))
    if rec < cur and target == cur:
        held = R.STABILIZING
    elif queue_hold and rec == cur and held is None:
        held = R.LATENCY_HEADROOM

    # No direction reversal inside a window.
    since = None if state.last_scale_time is None else now - state.last_scale_time
    if since is not None:
        down_after_up = target < cur and state.last_scale_direction > 0 and since < down_s
        up_after_down = target > cur and state.last_scale_direction < 0 \
            and since < policy.scale_up_stabilization_s
        if down_after_up or up_after_down:
            target, held = cur, R.REVERSAL_BLOCKED

    # Step limits.
    if target > cur + policy.max_scale_up_step:
        limited = (R.SCALE_UP_LIMIT, f"wanted {target} replicas, at most "
                   f"{policy.max_scale_up_step} added per decision")
        target = cur + policy.max_scale_up_step
    if target < cur - policy.max_scale_down_step:
        limited = (R.SCALE_DOWN_LIMIT, f"wanted {target} replicas, at most "
                   f"{policy.max_scale_down_step} removed per decision")
        target = cur - policy.max_scale_down_step

    # Pending pods are not capacity, and asking for more while they wait helps nobody.
    if target > cur and obs.replicas.pending > 0:
        limited = (R.PENDING, f"{obs.replicas.pending} pod(s) Pending for lack of GPUs; no "
                   f"further scale-up (wanted {target}) until they schedule")
        target, held = cur, R.PENDING

    # Bounds and budget, reported when the wish itself is beyond them and they bind at
    # least as hard as the step limits did. Resting at minReplicas (TooFewReplicas) is
    # reported too; status posts it as Normal, not a Warning (reconcile.status.AT_REST).
    lo, hi = policy.min_replicas, policy.max_replicas
    if rec < lo and target <= lo:
        limited = (R.TOO_FEW_REPLICAS, f"the load needs {rec}; minReplicas is {lo}")
    target = max(target, lo)
    if rec > hi and target >= hi:
        limited = (R.TOO_MANY_REPLICAS, f"the load needs {rec}; maxReplicas is {hi}")
    target = min(target, hi)
    if policy.gpu_budget is not None:
        most = max(0, policy.gpu_budget // max(1, obs.gpus_per_replica))
        if min(rec, hi) > most and target >= most:
            limited = (R.GPU_BUDGET, f"gpuBudget {policy.gpu_budget} allows {most} replicas "
                       f"of {obs.gpus_per_replica} GPU(s); the load needs {rec}")
        target = min(target, most)
    return Normalized(target=target, recommendation=rec, held=held, limited_reason=limited[0],
                      limited_message=limited[1], recommendations=recs, history_since=hist_since,
                      queue_held=queue_hold, e2e_held=e2e_hold)


# --- 6. the batch limit -----------------------------------------------------------------------
def batch_limit(obs: Observation, policy: ControlPolicy, state: ControlState, now: float,
                step_batch: int, ratios: dict[str, float], waiting: float, cur: int,
                in_flight: bool, floor: int, ceiling: int) -> LimitMove:
    """The live in-flight limit: the model's batch for the inter-token objective, lowered
    by a measured inter-token miss or a full KV cache, raised while requests queue and
    replicas are short, and back toward the model's batch once latency is inside."""
    current = obs.batch_limit
    if policy.batching_mode == "off":
        return LimitMove(current, state.limit_bias, None, "")
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
    elif why in (R.LIMIT_LOWERED, R.LIMIT_RAISED):
        # A latency miss: move now, in small steps.
        big = abs(proposal - current) >= max(1.0, LIMIT_MIN_CHANGE * current)
        due = last_change is None or now - last_change >= policy.limit_interval_s
    else:
        # The model's batch drifting with the request shape, or a way back: move only for
        # a clear change and at most once a window, so the limit does not chase noise.
        big = abs(proposal - current) >= max(2.0, LIMIT_MODEL_CHANGE * current)
        due = last_change is None or now - last_change >= policy.window_s
    move = out_of_range or (big and due)
    if not move or proposal == current:
        return LimitMove(current, bias, None, "")
    if why is None:
        why, cause = R.LIMIT_RESIZED, "the model's batch for the current request shape moved"
    return LimitMove(proposal, bias, why, (
        f"in-flight limit {current} -> {proposal} ({cause}; model batch {step_batch}, "
        f"range {floor}..{ceiling})"))


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


# --- scale to zero -------------------------------------------------------------------------
def to_zero(policy: ControlPolicy, idle_since: float | None, now: float, miss: float | None,
            in_flight: bool) -> bool:
    """Whether an awake service goes to zero now: the policy allows it (and an activator
    can wake it), nothing arrived, ran or finished over the window since ``idle_since``
    for ``idle_before_zero_s``, no latency is over its target and no replica is still
    starting (a scale-out asked for load the window has not shown yet)."""
    return (policy.scale_to_zero and idle_since is not None
            and now - idle_since >= policy.idle_before_zero_s
            and (miss is None or miss <= 1.0) and not in_flight)


def _woke_lately(obs: Observation, policy: ControlPolicy, now: float) -> bool:
    """A wake still holds requests (at most the activator's timeout and a window: an
    activator restarted while holding never writes the end), or served them less than a
    window ago. Times are the activator's clock, so either side of ``now`` counts."""
    w = obs.wake
    if w is None or (w.timed_out_at is not None and w.served_at is None):
        return False
    if w.served_at is None:
        return abs(now - w.requested_at) < DEFAULT_WAKE_TIMEOUT_S + policy.window_s
    return abs(now - w.served_at) < policy.window_s


def _go_to_zero(obs: Observation, policy: ControlPolicy, state: ControlState, now: float,
                idle_since: float, limit: int) -> Decision:
    quiet = now - idle_since + policy.window_s
    wake = obs.wake
    return Decision(
        valid=True, replicas=0, batch_limit=limit, reason=R.SCALED_TO_ZERO_REASON,
        message=(f"no request for {quiet:.0f} s (the {policy.window_s:.0f} s window and "
                 f"{policy.idle_before_zero_s:.0f} s idle before zero): scaling to zero; "
                 "the activator holds the next request and wakes the service"),
        state=state.evolve(
            last_good_replicas=0, last_good_limit=limit, last_good_time=now,
            recommendations=(), history_since=now, last_scale_time=now,
            last_scale_direction=-1, idle_since=None, zero_since=now,
            # A wake already recorded belongs to an earlier cold start: only a newer one wakes.
            wake_seen=wake.requested_at if wake is not None else state.wake_seen,
            last_time=now),
        need=0.0,
    )


def at_zero(obs: Observation, policy: ControlPolicy, state: ControlState,
            now: float) -> Decision:
    """A service at zero replicas: stay there until the activator records another wake
    than the one last seen, then ask for ``max(1, minReplicas, held / batch limit)``
    replicas (the requests held, each replica taking a batch of them), at most
    ``maxReplicas`` (no series exist at zero: the held requests are the only demand)."""
    limit = _in_range(obs.batch_limit, obs, policy)
    wake = obs.wake
    zero_since = state.zero_since if state.zero_since is not None else now
    # Any other wake than the one seen is new: the activator stamps each wake with its own
    # clock, so "newer" is not compared (a wake dated ahead would block all later ones).
    if wake is None or wake.requested_at == state.wake_seen:
        return Decision(
            valid=True, replicas=0, batch_limit=limit, reason=R.SCALED_TO_ZERO_REASON,
            message="at zero replicas; the activator wakes the service on its next request",
            state=state.evolve(zero_since=zero_since, idle_since=None), need=0.0)
    need = math.ceil(wake.held / max(1, limit))
    target = min(policy.max_replicas, max(1, policy.min_replicas, need))
    return Decision(
        valid=True, replicas=target, batch_limit=limit, reason=R.WOKEN,
        message=(f"woken by the activator: {wake.held} request(s) held; scaling from zero "
                 f"to {target}"),
        state=state.evolve(
            last_good_replicas=target, last_good_limit=limit, last_good_time=now,
            recommendations=(), history_since=now, last_scale_time=now,
            last_scale_direction=1, zero_since=None, idle_since=None,
            wake_seen=wake.requested_at, last_time=now),
        need=float(need),
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


def _ratios(sig: Signals, policy: ControlPolicy, cap: Capacity, ttft_floor_ms: float,
            e2e_budget_ms: float) -> dict[str, float]:
    out: dict[str, float] = {}
    if sig.ttft_ms is not None and ttft_floor_ms <= LATENCY_MARGIN * policy.ttft_target_ms:
        out["ttft"] = sig.ttft_ms / policy.ttft_target_ms
    # The end-to-end target is out of reach only where the smallest batch misses it without
    # the planning margin too: inside the margin (a percentile guess on an estimated tail
    # request, TAIL_OUTPUT_FACTOR) the measurement decides, and more replicas (smaller
    # batches, fewer prefill chunks each) shorten every request.
    if sig.e2e_ms is not None and (cap.feasible
                                   or LATENCY_MARGIN * cap.best_itl_ms <= e2e_budget_ms):
        out["e2e"] = sig.e2e_ms / policy.e2e_target_ms
    if cap.feasible and sig.itl_ms is not None and policy.itl_target_ms:
        out["itl"] = sig.itl_ms / policy.itl_target_ms
    return out


def _correct(correction: float, err: float | None, settling: bool, elapsed_s: float) -> float:
    # A remembered correction outside the range (status written by an operator whose floor
    # was lower, or edited by hand) is brought inside it before anything else.
    correction = min(CORRECTION_MAX, max(CORRECTION_MIN, correction))
    if err is None:
        return correction
    if err > 1.0:
        if settling:
            return correction  # the model already explains the miss: do not ask twice
        # The square root of a large error, the error itself near 1: a reading 0.5% over
        # its objective (a P99 interpolated inside a 5-10 s bucket) grows the correction by
        # 0.5%, not by the 10% that then outlives the hour (the half-life) at full cost.
        step = max(math.sqrt(err), min(CORRECTION_STEP_MIN, err))
        return min(CORRECTION_MAX, correction * min(CORRECTION_STEP_MAX, step))
    if err < RELAXED_ERROR:
        decay = float(0.5 ** (elapsed_s / CORRECTION_HALF_LIFE_S))
        return max(CORRECTION_MIN, correction * decay)
    return correction


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


def _over(measured: float | None, bound: float | None) -> float | None:
    """``measured`` as a multiple of ``bound``; None without either, or not a number."""
    if measured is None or not bound or bound <= 0:
        return None
    over = measured / bound
    return over if math.isfinite(over) and over >= 0 else None


def _itl_over(sig: Signals, policy: ControlPolicy) -> float | None:
    """The measured inter-token percentile over its objective; None without either."""
    return _over(sig.itl_ms, policy.itl_target_ms)


def _jitter_over(sig: Signals, policy: ControlPolicy, requests: float) -> float | None:
    """The measured jitter over its bound; None without either, or from a window of fewer
    than ``SPEED_MIN_REQUESTS`` requests (a spread of a few streams says little)."""
    return None if requests < SPEED_MIN_REQUESTS else _over(sig.jitter, policy.jitter_max)


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


def format_explanation(e: Explanation) -> str:
    """The decision's message, from its structured explanation."""
    m, d, n = e.model, e.demand, e.need
    source = "arriving" if d.source == "gateway" else "finished+queue"
    burst = f"+{d.burst:.2f} {d.burst_kind}" if d.burst_kind != "none" else "+0 burst"
    err = f", model error {m.error:.2f}" if m.error is not None else ""
    if m.prefill_error is not None:
        err += f", prefill error {m.prefill_error:.2f}"
    cache = f", {m.cached:.0%} cached" if m.cached > 0 else ""
    if m.long_tail:
        cache += f", tail answers over {m.answer_tail:.0f} tokens"
    if n.driver == "burst":
        sized = (f"burst of {d.arrivals + d.excess:.2f} req/s needs "
                 f"{n.burst_replicas:.2f} replicas for its prompts")
    elif n.driver == "queue":
        sized = f"first tokens' queueing needs {n.replicas:.2f} replicas"  # as bounded
    else:
        pooled = "" if n.busy is None else f" ({n.busy:.2f} busy, pooled routing)"
        ahead = "" if n.growth <= 1.0 else f", prompt work rising: x{n.growth:.2f} per request"
        sized = (f"x{n.correction:.2f} correction at {n.per_replica:.2f} req/s per replica "
                 f"(batch {n.batch}{ahead}) needs {n.replicas:.2f} replicas{pooled}")
    queue = f", no lower than {e.queue_floor} (first tokens' queueing)" if e.queue_floor else ""
    if e.e2e_held:
        queue += (f", held: e2e over {LATENCY_MARGIN:.0%} of its objective where the model "
                  "calls it out of reach")
    return (
        f"load {d.arrivals:.2f} req/s {source} ({burst}, +{d.backlog:.2f} backlog) "
        f"{m.prompt:.0f}+{m.output:.0f} tokens{cache}, speed {m.speed:.2f}{err}: {sized}; "
        f"{e.latency}; scale-in: {e.scale_in.why}{queue}; replicas {e.replicas_from} -> "
        f"{e.replicas_to}, limit {e.limit_from} -> {e.limit_to}"
    )
