"""The capacity model: how many requests per second one replica sustains within the SLO.

A replica's engine step takes ``base_ms + per_seq_ms * batch`` to decode one token for
every running sequence, plus ``prefill_ms_per_token`` for each prompt token admitted in
the step (chunked prefill). From the mean prompt length ``p`` and output length ``g`` of
the live traffic:

- decode time one request costs the replica: ``g * step(b) / b`` (the step is shared by
  ``b`` sequences), prefill time: ``p * prefill_ms_per_token``;
- so a replica running ``b`` sequences serves at most
  ``mu(b) = 1000 / (g * step(b) / b + p * prefill_ms_per_token)`` requests per second;
- prefill chunks stretch every decode stream by the prefill share ``f`` of the replica's
  time, so inter-token latency is about ``step(b) / (1 - f)``.

The SLO-feasible batch ``b*`` is the largest batch whose inter-token latency keeps both
the inter-token target and the end-to-end target (for a tail request of
``TAIL_OUTPUT_FACTOR * g`` tokens after its first token), with ``LATENCY_MARGIN`` of
slack for the percentile. The replica is then planned at ``TARGET_UTILIZATION * mu(b*)``
so that queueing (TTFT) stays bounded; where routing pools the requests (a load-aware
picker), the service's in-flight count is sized instead, with headroom growing as its
square root (``pooled_replicas``). ``speed`` scales every step time: it is learnt
online from the throughput of warm, saturated replicas (the model was optimistic when
``speed < 1``).

Seeds: the shared step model (``slo_runtime.stepmodel``, calibrated from the measured H200
profiles ``h200-llama-3.1-{8b,70b}-ctx1024.json``) reduced to this linear form by
``StepTimes.from_step_model``; ``SEED_STEP_TIMES`` holds those reductions (a unit test
recomputes them from the packaged profiles, so the copy cannot drift) and
``seed_step_times`` scales them to the service's model size and GPU (decode by memory
bandwidth, prefill by dense compute, from the hardware catalogue), as the simulator and
the replica models do. A caller with a better model passes ``StepTimes`` to ``policy_for``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Protocol

from slo_operator.hardware import resolve_product

# Planned utilisation of a replica's capacity: the rest absorbs arrival noise so TTFT
# does not grow without bound as in an M/D/1 queue at rho -> 1.
TARGET_UTILIZATION = 0.8
# Pooled routing (a load-aware picker sends each request to a replica with room): the
# in-flight count of the whole service, not of each replica, must fit the batches, and its
# noise grows as the square root of its mean (``pooled_replicas``). The count is held under
# the batches at the highest percentile the objectives are read at, never below this one.
POOLED_MIN_QUANTILE = 0.95
# Fraction of a latency target the model plans for (a percentile sits above the mean).
LATENCY_MARGIN = 0.8
# A tail request's output, relative to the mean output length (e2e grows with length).
TAIL_OUTPUT_FACTOR = 2.4
# Assumed request shape before any traffic has been seen.
DEFAULT_PROMPT_TOKENS = 512.0
DEFAULT_OUTPUT_TOKENS = 128.0
# Range of the linear reduction of the shared step model.
FIT_MAX_BATCH = 256
FIT_PREFILL_TOKENS = 2048
# E[p^2] / E[p]^2 of prompt lengths (1 + CV^2; CV about 1 in chat and code traces).
PROMPT_SQUARE_FACTOR = 2.0
# Share of the KV cache the planned batch may fill (vLLM preempts when it is full).
KV_PLAN_SHARE = 0.9


@dataclass(frozen=True)
class StepTimes:
    """Engine step-time model of one replica (milliseconds).

    ``base_ms + per_seq_ms * b`` is a decode step of ``b`` sequences holding
    ``ref_context`` tokens each; every further context token costs ``kv_ms_per_token`` per
    sequence and step (decode attention reads the whole KV cache). A prompt token costs
    ``prefill_ms_per_token``, plus ``attn_ms_per_token2`` for each earlier token of its
    sequence it attends to. ``kv_tokens`` is the KV cache of one replica, in tokens.
    """

    base_ms: float
    per_seq_ms: float
    prefill_ms_per_token: float
    kv_ms_per_token: float = 0.0
    attn_ms_per_token2: float = 0.0
    ref_context: float = 0.0
    kv_tokens: float = math.inf
    floor_ms: float = 0.0  # the batch-1 step (the weight read): no batch decodes faster

    def step_ms(self, running: float, prefill_tokens: float = 0.0,
                context: float | None = None) -> float:
        """Duration of one engine step with ``running`` sequences of ``context`` tokens
        each (default: the reference context) and a prefill chunk."""
        extra = 0.0 if context is None else self.kv_ms_per_token * (context - self.ref_context)
        decode = max(self.floor_ms, self.base_ms + self.per_seq_ms * running)
        return max(0.0, decode + extra * running) + self.prefill_ms_per_token * prefill_tokens

    def prefill_request_ms(self, prompt_tokens: float, cached_share: float = 0.0) -> float:
        """Prefill work of a prompt whose leading ``cached_share`` is in the prefix cache.

        Computed tokens ``p (1 - h)`` cost the linear term; each attends to the tokens
        before it, ``p^2 (1 - h^2) / 2`` token pairs in all. A mean prompt understates
        the mean of squares: ``PROMPT_SQUARE_FACTOR`` is E[p^2] / E[p]^2 for the
        exponential-like length spreads of chat traffic (1 + CV^2 with CV 1).
        """
        p = max(0.0, prompt_tokens)
        h = max(0.0, min(1.0, cached_share))
        pairs = PROMPT_SQUARE_FACTOR * p * p * (1.0 - h * h) / 2.0
        return p * (1.0 - h) * self.prefill_ms_per_token + self.attn_ms_per_token2 * pairs

    def scaled(self, speed: float) -> StepTimes:
        """The same model on a replica ``speed`` times faster."""
        s = max(speed, 1e-6)
        return replace(self, base_ms=self.base_ms / s, per_seq_ms=self.per_seq_ms / s,
                       prefill_ms_per_token=self.prefill_ms_per_token / s,
                       kv_ms_per_token=self.kv_ms_per_token / s,
                       attn_ms_per_token2=self.attn_ms_per_token2 / s,
                       floor_ms=self.floor_ms / s)

    @classmethod
    def from_step_model(cls, model: SharedStepModel, max_batch: int = FIT_MAX_BATCH,
                        prefill_tokens: int = FIT_PREFILL_TOKENS) -> StepTimes:
        """Linear reduction of the shared step model: least squares of the decode step over
        batches 1..``max_batch``, and the marginal cost of a prompt token in a mixed step;
        the context terms and the KV capacity as the model has them (0 and unbounded for
        a model without them)."""
        bs = range(1, max(2, max_batch) + 1)
        ys = {b: model.decode_ms(b) for b in bs}
        mx, my = sum(bs) / len(bs), sum(ys.values()) / len(bs)
        # Deviations of b sum to zero, so sum((b - mx) * y) is the covariance's numerator.
        slope = sum((b - mx) * y for b, y in ys.items()) / sum((b - mx) ** 2 for b in bs)
        per_token = (model.prefill_ms(prefill_tokens) - model.weights_ms) / prefill_tokens
        return cls(max(0.0, my - slope * mx), max(0.0, slope), max(0.0, per_token),
                   kv_ms_per_token=float(getattr(model, "kv_ms_per_token", 0.0)),
                   attn_ms_per_token2=float(getattr(model, "prefill_attn_ms_per_token2", 0.0)),
                   ref_context=float(getattr(model, "ref_ctx", 0.0)),
                   kv_tokens=float(getattr(model, "kv_capacity_tokens", 0) or math.inf),
                   floor_ms=max(0.0, model.decode_ms(1)))


class SharedStepModel(Protocol):
    """What ``from_step_model`` reads of ``slo_runtime.stepmodel.StepModel``."""

    @property
    def weights_ms(self) -> float: ...

    def decode_ms(self, batch: int, context_tokens: int | None = None) -> float: ...

    def prefill_ms(self, tokens: int) -> float: ...


# StepTimes.from_step_model(StepModel.from_profile(h200 profile, precision)), keyed by the
# parameter count (billions) and precision measured; checked against the profiles by a test.
SEED_PRODUCT = "NVIDIA H200"
SEED_STEP_TIMES: dict[tuple[float, str], StepTimes] = {
    (8.0, "bf16"): StepTimes(4.462, 0.05049, 0.02320, 3.083e-05, 8.918e-07, 1024.0, 883_607.0,
                             5.348),
    (8.0, "fp8"): StepTimes(2.971, 0.04603, 0.01465, 3.083e-05, 8.965e-07, 1024.0, 936_857.0,
                            3.722),
    # 70B in BF16 does not fit one H200: its KV capacity is the TP=2 deployment's concern.
    # Its prefill attention was measured on an H100 (the same die and matrix rate; see the
    # profile's long_context notes): 5.0x the 8B figure, as the attention width (layers x
    # heads: 80 x 64 against 32 x 32) had predicted before the measurement.
    (70.0, "bf16"): StepTimes(34.57, 0.1661, 0.2082, 7.708e-05, 4.483e-06, 1024.0,
                              math.inf, 36.16),
    (70.0, "fp8"): StepTimes(19.40, 0.1439, 0.1226, 7.708e-05, 4.513e-06, 1024.0,
                             180_730.0, 21.55),
}
DEFAULT_STEP_TIMES = SEED_STEP_TIMES[(8.0, "bf16")]


def seed_step_times(model_size_b: float | None, precision: str, hardware: str = "",
                    gpus_per_replica: int = 1) -> StepTimes:
    """Seed step times for a model size, precision and GPU, scaled from the nearest profile."""
    prec = "fp8" if precision == "fp8" else "bf16"  # fp16 streams the same bytes as bf16
    seed = SEED_STEP_TIMES[(8.0, prec)]
    if model_size_b is not None and model_size_b > 0:
        size, seed = min(
            ((s, t) for (s, p), t in SEED_STEP_TIMES.items() if p == prec),
            key=lambda st: abs(math.log(model_size_b / st[0])),
        )
        # Decode is memory-bound and prefill compute-bound: both scale with parameter bytes
        # (and so, roughly, do the KV bytes per token: the cache holds fewer tokens).
        f = model_size_b / size
        seed = replace(seed, base_ms=seed.base_ms * f, per_seq_ms=seed.per_seq_ms * f,
                       prefill_ms_per_token=seed.prefill_ms_per_token * f,
                       kv_ms_per_token=seed.kv_ms_per_token * f,
                       attn_ms_per_token2=seed.attn_ms_per_token2 * f,
                       kv_tokens=seed.kv_tokens / f, floor_ms=seed.floor_ms * f)
    bandwidth, compute = hardware_ratios(hardware, prec)
    memory = memory_ratio(hardware)
    return replace(seed, base_ms=seed.base_ms / bandwidth, per_seq_ms=seed.per_seq_ms / bandwidth,
                   prefill_ms_per_token=seed.prefill_ms_per_token / compute,
                   kv_ms_per_token=seed.kv_ms_per_token / bandwidth,
                   attn_ms_per_token2=seed.attn_ms_per_token2 / compute,
                   kv_tokens=seed.kv_tokens * memory * max(1, gpus_per_replica),
                   floor_ms=seed.floor_ms / bandwidth)


def memory_ratio(hardware: str) -> float:
    """GPU memory of ``hardware`` relative to the seed's GPU (1 when unknown): the KV
    cache grows with it (the weights' share is ignored: a first-order seed)."""
    if not hardware:
        return 1.0
    mine, ref = resolve_product(hardware).hardware, resolve_product(SEED_PRODUCT).hardware
    if mine is None or ref is None or not mine.memory_gib or not ref.memory_gib:
        return 1.0
    return mine.memory_gib / ref.memory_gib


def hardware_ratios(hardware: str, precision: str = "bf16") -> tuple[float, float]:
    """(memory bandwidth, dense compute) of ``hardware`` relative to the seed's GPU;
    (1, 1) when either is unknown to the catalogue."""
    if not hardware:
        return 1.0, 1.0
    mine, ref = resolve_product(hardware).hardware, resolve_product(SEED_PRODUCT).hardware
    if mine is None or ref is None or not mine.memory_bandwidth_gbps \
            or not ref.memory_bandwidth_gbps:
        return 1.0, 1.0
    bandwidth = mine.memory_bandwidth_gbps / ref.memory_bandwidth_gbps
    attr = "dense_fp8_tflops" if precision == "fp8" and mine.dense_fp8_tflops \
        else "dense_bf16_tflops"
    a, b = getattr(mine, attr), getattr(ref, attr)
    return bandwidth, (a / b if a and b else bandwidth)


@dataclass(frozen=True)
class Capacity:
    """What the model says one replica can do for the current request shape."""

    batch: int  # SLO-feasible batch b* (the batch limit the model would set)
    rate: float  # sustainable requests per second per replica (utilisation applied)
    itl_ms: float  # predicted inter-token latency at b* and that load
    feasible: bool  # False when even the smallest batch misses a latency target
    best_itl_ms: float  # predicted inter-token latency at the smallest batch


def rate_at_batch(st: StepTimes, batch: int, prompt_tokens: float, output_tokens: float,
                  utilization: float = TARGET_UTILIZATION, *, cached_share: float = 0.0,
                  chunk_tokens: int | None = None) -> float:
    """Sustainable requests per second of a replica whose batch is capped at ``batch``
    (``chunk_tokens``: its ``--max-num-batched-tokens``, see :func:`_mu`)."""
    return utilization * _mu(st, max(1, batch), max(0.0, prompt_tokens), max(1.0, output_tokens),
                             cached_share, chunk_tokens)


def pooled_replicas(busy: float, batch: int, quantile: float) -> float:
    """Replicas for ``busy`` replicas' worth of load (the rate over one replica's full
    rate at ``batch``) when routing pools the requests.

    By Little's law ``busy x batch`` sequences are in flight on average; arrivals of
    independent clients make that count about Poisson, so its ``quantile`` lies ``z``
    deviations, ``z sqrt(busy x batch)``, above the mean (``z`` the normal quantile). A
    load-aware router spreads the count over every replica, so the replicas' batches must
    hold it: ``n = busy + z sqrt(busy / batch)``, the square-root staffing rule of pooled
    servers. Headroom grows as the square root of the load, so a large service runs closer
    to full than ``TARGET_UTILIZATION``; a small one never plans below it (random routing
    fills each replica from its own share, and pooling never needs more)."""
    busy = max(0.0, busy)
    q = min(max(POOLED_MIN_QUANTILE, quantile), 1.0 - 1e-9)
    z = NormalDist().inv_cdf(q)
    return min(busy / TARGET_UTILIZATION, busy + z * math.sqrt(busy / max(1, batch)))


def decode_context(prompt: float, output: float) -> float:
    """Mean tokens a decoding sequence holds: its prompt and half its output."""
    return max(0.0, prompt) + max(1.0, output) / 2.0


def kv_batch(st: StepTimes, prompt_tokens: float, output_tokens: float) -> int:
    """Most sequences of this shape the KV cache holds at ``KV_PLAN_SHARE`` (a sequence
    grows to its prompt and output), at least 1; a larger batch preempts."""
    if not math.isfinite(st.kv_tokens):
        return FIT_MAX_BATCH * 1024
    per = max(1.0, prompt_tokens + output_tokens)
    return max(1, int(KV_PLAN_SHARE * st.kv_tokens // per))


def _mu(st: StepTimes, b: int, prompt: float, output: float, cached: float = 0.0,
        chunk: int | None = None) -> float:
    """Requests per second of a saturated replica at batch ``b``: each request costs its
    share of the engine steps and its prefill work. A request needs ``output / b`` steps
    to decode beside ``b - 1`` others, and ``computed prompt / (chunk - b)`` steps to get
    its prompt through a ``chunk``-token budget (the decode tokens take ``b`` of it): the
    larger count paces it (small chunks and long prompts make prefill the bottleneck,
    each extra step paying the weight read again)."""
    ctx = decode_context(prompt, output)
    steps = output / b
    if chunk is not None and chunk > 0:
        computed = max(0.0, prompt) * (1.0 - max(0.0, min(1.0, cached)))
        steps = max(steps, computed / max(1.0, chunk - b))
    per_request_ms = steps * st.step_ms(b, context=ctx) + st.prefill_request_ms(prompt, cached)
    return 1000.0 / per_request_ms if per_request_ms > 0 else math.inf


def _itl(st: StepTimes, b: int, prompt: float, output: float, util: float,
         cached: float = 0.0, chunk: int | None = None) -> float:
    prefill_share = min(0.9, util * _mu(st, b, prompt, output, cached, chunk)
                        * st.prefill_request_ms(prompt, cached) / 1000.0)
    return st.step_ms(b, context=decode_context(prompt, output)) / (1.0 - prefill_share)


def tail_tokens(output: float, answer_tail: float | None = None) -> float:
    """Tokens of the tail answer the end-to-end target must hold: ``TAIL_OUTPUT_FACTOR``
    times the mean, or the answers' tail measured (``answer_tail``: a length the answers at
    the end-to-end percentile are not below) where that is longer."""
    measured = answer_tail if answer_tail is not None and math.isfinite(answer_tail) else 0.0
    return max(TAIL_OUTPUT_FACTOR * output, measured)


def itl_budget_ms(e2e_ms: float, ttft_ms: float, itl_ms: float | None, output: float,
                  answer_tail: float | None = None) -> float:
    """Per-token latency the targets leave for decoding (margin applied), over the tail
    answer's tokens after its first (:func:`tail_tokens`)."""
    tail = max(1.0, tail_tokens(output, answer_tail) - 1.0)
    budget = LATENCY_MARGIN * max(0.0, e2e_ms - ttft_ms) / tail
    if itl_ms is not None:
        budget = min(budget, LATENCY_MARGIN * itl_ms)
    return budget


def replica_capacity(
    st: StepTimes,
    *,
    prompt_tokens: float,
    output_tokens: float,
    itl_budget: float,
    min_batch: int,
    max_batch: int,
    utilization: float = TARGET_UTILIZATION,
    cached_share: float = 0.0,
    chunk_tokens: int | None = None,
) -> Capacity:
    """Largest batch within the per-token budget and the KV cache, and the rate a replica
    then sustains (``chunk_tokens``: its ``--max-num-batched-tokens``, see :func:`_mu`)."""
    p = max(0.0, prompt_tokens)
    g = max(1.0, output_tokens)
    h = max(0.0, min(1.0, cached_share))
    c = chunk_tokens
    lo = max(1, min_batch)
    hi = max(lo, min(max(1, max_batch), kv_batch(st, p, g)))
    best_itl = _itl(st, lo, p, g, utilization, h, c)
    if best_itl > itl_budget:
        # Targets out of reach at any batch: size on throughput at the knee (a batch whose
        # step is at most 1.5x the smallest), since more replicas cannot shorten a step.
        ctx = decode_context(p, g)
        knee = lo
        smallest = st.step_ms(lo, context=ctx)
        while knee * 2 <= hi and st.step_ms(knee * 2, context=ctx) <= 1.5 * smallest:
            knee *= 2
        return Capacity(knee, utilization * _mu(st, knee, p, g, h, c),
                        _itl(st, knee, p, g, utilization, h, c), False, best_itl)
    # _itl grows with b (longer steps and a larger prefill share): binary search.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _itl(st, mid, p, g, utilization, h, c) <= itl_budget:
            lo = mid
        else:
            hi = mid - 1
    if c is not None and c > 0 and p * (1.0 - h) / max(1.0, c - lo) > g / lo:
        # Decode tokens fill the budget first: past some batch the prompts get too little
        # of it and the rate falls again. Run the batch that serves most, among those
        # that keep the budget.
        lo = max(range(max(1, min_batch), lo + 1), key=lambda b: (_mu(st, b, p, g, h, c), -b))
    return Capacity(lo, utilization * _mu(st, lo, p, g, h, c),
                    _itl(st, lo, p, g, utilization, h, c), True, best_itl)


def predicted_tokens_per_s(st: StepTimes, running: float) -> float:
    """Generated tokens per second of a replica decoding ``running`` sequences."""
    b = max(1.0, running)
    return 1000.0 * b / st.step_ms(b)


# The ITL lever: chunked-prefill budgets are multiples of this many tokens (vLLM's KV
# block is 16; a coarser grid keeps rolling updates for small drifts away), and never
# below this many (a smaller chunk spends more steps on the weight read than on prompts).
CHUNK_GRID = 256
MIN_CHUNK = 512


# The context a budget-sized chunk is planned to attend to, as a multiple of the mean
# prompt: prompt lengths are long-tailed (log-normal spreads of sigma 1-1.5 put the 95th
# to 98th percentile at 3-5x the mean), and a P99 inter-token objective is set by the
# steps that carry late chunks of those long prompts, not of the mean one. On short
# prompts (a few thousand tokens) the attention term stays a few milliseconds a chunk.
CHUNK_PROMPT_TAIL = 4.0


def chunk_step_ms(st: StepTimes, decode_batch: int, budget: int, prompt_tokens: float = 0.0,
                  output_tokens: float = 0.0) -> float:
    """A step carrying a full chunk of ``budget`` tokens, ``decode_batch`` of them decode
    tokens (see :func:`chunk_budget_for_itl`)."""
    b = max(1, decode_batch)
    p = max(0.0, prompt_tokens)
    context = decode_context(p, output_tokens) if p > 0 or output_tokens > 0 else None
    attended = min(CHUNK_PROMPT_TAIL * p, st.kv_tokens)
    chunk = max(0, budget - b)
    return st.step_ms(b, context=context) \
        + (st.prefill_ms_per_token + st.attn_ms_per_token2 * attended) * chunk


def chunk_budget_for_itl(st: StepTimes, itl_target_ms: float | None, decode_batch: int,
                         *, default: int, floor: int, prompt_tokens: float = 0.0,
                         output_tokens: float = 0.0) -> tuple[int, bool]:
    """``--max-num-batched-tokens`` whose longest step fits the inter-token objective.

    A step that carries a full prefill chunk delays every decoding sequence by the whole
    chunk: with ``decode_batch`` sequences decoding (each reading its KV at the context
    of a ``prompt_tokens`` + ``output_tokens`` request, ``decode_context``), the step with
    the budget ``C`` takes ``step(b) + (prefill_ms_per_token + attn x P) * (C - b)``, a
    chunk's tokens attending to ``P`` = ``CHUNK_PROMPT_TAIL x prompt_tokens`` earlier
    tokens (a late chunk of a long prompt: long prompts make chunks dearer). The budget
    is the largest
    multiple of ``CHUNK_GRID`` whose such step keeps ``LATENCY_MARGIN`` of the objective,
    at most ``default`` (vLLM's own for the GPU: more buys little prefill efficiency) and
    at least ``max(floor, MIN_CHUNK)`` (vLLM requires the budget to hold ``--max-num-seqs``).
    Returns (budget, fits): ``fits`` is False when even the smallest budget misses the
    objective (the objective is then out of reach of this lever).
    """
    lo = max(floor, MIN_CHUNK)
    if itl_target_ms is None or itl_target_ms <= 0:
        return max(default, floor), True
    b = max(1, decode_batch)
    room = LATENCY_MARGIN * itl_target_ms - chunk_step_ms(st, b, b, prompt_tokens,
                                                          output_tokens)
    per = chunk_step_ms(st, b, b + 1, prompt_tokens, output_tokens) \
        - chunk_step_ms(st, b, b, prompt_tokens, output_tokens)
    if per <= 0:
        return max(default, floor), room > 0
    tokens = b + room / per if room > 0 else 0.0
    budget = int(tokens // CHUNK_GRID) * CHUNK_GRID
    if budget < lo:
        return lo, False
    return max(lo, min(max(default, floor), budget)), True
