"""The inter-token and jitter levers: ``--max-num-batched-tokens`` from the policy (pure).

Every engine step that carries a full prefill chunk delays each decoding sequence by the
whole chunk, so a tight ``objectives.interTokenLatencyMs`` cannot be met by any in-flight
limit while the chunked-prefill budget stays at vLLM's default. When the bound policy has
an inter-token objective (and the user set no budget: ``spec.engine.maxNumBatchedTokens``
or ``--max-num-batched-tokens`` in ``extraArgs`` wins), each variant's budget is
``control.capacity.chunk_budget_for_itl`` of:

- step times: the law's learnt ones where it has learnt a speed on this GPU and precision
  (``status.control.state``: ``speed`` with ``speedSamples > 0`` and ``speedKey``
  ``<product>/<precision>``, the law's own key), else the seed step times for the model
  size, precision and GPU, shortened for tensor parallelism as placement does
  (``control.placement.TP_EFFICIENCY``);
- the decode batch: the capacity model's SLO-feasible batch at the objectives (the batch
  the law plans a replica to run, ``replica_capacity``), for the request shape the law has
  learnt (``promptTokens``, ``outputTokens``) or its defaults, capped at ``--max-num-seqs``:
  the sequences that decode while a chunk is prefilled at the planned load;
- ``default``: vLLM's API-server default for the GPU class; ``floor``: ``--max-num-seqs``.

The budget is an engine argument: moving it is a rolling update of the variant's
Deployment. So a chosen budget is kept in ``status.control.chunkBudget`` (per variant,
with the objective and the engine settings it was chosen for and when) and moved:

- at once when the objective changed, or the precision, tensor parallelism or
  ``--max-num-seqs`` it was planned for did (those roll the Deployment anyway), or the
  kept budget is below ``--max-num-seqs`` (vLLM would refuse it);
- otherwise (the step times or the request shape drifted) at most once per
  :data:`CHANGE_INTERVAL_S`, and only across a hysteresis band: lowered when the objective's
  budget is at least a grid step (``CHUNK_GRID``) below the kept one, raised only when a
  budget planned with :data:`RAISE_SLACK` of the objective to spare is at least a grid step
  above it. A learnt speed that wobbles around a grid boundary moves nothing;
- sooner, after :data:`MISS_INTERVAL_S`, only to lower it, when the measured inter-token
  percentile is over the objective (the law's ``itlOver`` above 1) and the budget planned
  from what the law has learnt is at least a grid step lower: the kept budget was planned
  for a shape the traffic does not have (long prompts whose chunks attend to long
  contexts), and waiting out the rate limit would spend the error budget. A service that
  meets its objective is never rolled by this rule.

**The jitter lever.** Where the policy sets ``objectives.throughputCVMax``, jitter (the
spread of per-request time per output token, ``slo.histogram``) is mostly the prefill chunks
a stream meets while it decodes: a step carrying a chunk of ``C`` prompt tokens is longer
than a decode step by a time ``d`` about proportional to ``C``, and a request meets a
share ``p`` of such steps. With the prefill work fixed, ``p x d`` is the replica's share of
time spent on prefill and does not move with ``C``; the number of chunk steps in a stream of
``m`` steps is binomial, so its time per token spreads by ``d sqrt(p / m)``: the spread
falls as ``sqrt(d)``, the square root of the budget. No replica count changes it. So when
the law last read the jitter over its bound (``jitterOver`` in its state, from a window of
20 requests or more), the budget the replicas run comes down to
``C x (JITTER_MARGIN / over)^2`` on the grid (at least ``max(MIN_CHUNK, --max-num-seqs)``),
and only by a grid step or more: at once for a variant whose budget was never moved, else
:data:`MISS_INTERVAL_S` after its last move. The lowered budget is kept as a cap beside the
inter-token one (``jitterCap``; the replicas run the lower) until the bound changes; it is
never raised for jitter (the answers' lengths that made a stream meet few steps may come
back). A policy whose jitter stays within its bound is never rolled by this rule, and one
without the bound renders vLLM's default as before.

Each move of a running variant's budget is announced by a ``ChunkBudgetChanged`` Event
(:func:`chunk_events`); the planned budget and why are in ``status.engineNotes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slo_operator.api.conditions import CHUNK_BUDGET_CHANGED
from slo_operator.api.models import Objectives
from slo_operator.control.capacity import (
    CHUNK_GRID,
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    LATENCY_MARGIN,
    MIN_CHUNK,
    StepTimes,
    chunk_budget_for_itl,
    chunk_step_ms,
    itl_budget_ms,
    replica_capacity,
    seed_step_times,
)
from slo_operator.control.placement import TP_EFFICIENCY
from slo_operator.control.state import ControlState
from slo_operator.engine import ChunkBudget
from slo_operator.reconcile.status import EventSpec

# The least time between two moves of a variant's budget that only the step times or the
# request shape asked for: each is a rolling update (every replica restarts, minutes of
# cold start each), and the learnt speed needs tens of passes to settle after one.
# Thirty minutes bounds the restarts a drifting estimate causes to two an hour.
CHANGE_INTERVAL_S = 1800.0
# A raise must keep this share of the objective to spare (planned at 90% of it): the band
# between the lowering and the raising threshold is what keeps a budget from going up and
# down as the estimate crosses a grid boundary and back.
RAISE_SLACK = 0.1
# The least time between a budget's choice and a lowering for a measured miss: a cold
# start (the law's 60 s) and two one-minute windows, so the replicas started with the
# budget have been measured. A miss moves the budget to the one planned from the learnt
# shape, so a second lowering needs a shape that moved further, not the same miss read
# again. Ten minutes (the first choice) kept a budget planned before any traffic through
# the first ten minutes of long prompts: the benchmark's long-context workload missed its
# inter-token objective at minutes 10-13 on four of its five fleets.
MISS_INTERVAL_S = 180.0
# The jitter lever lowers a budget to bring the jitter measured back to this share of
# its bound, the planning margin of every other objective (capacity.LATENCY_MARGIN).
JITTER_MARGIN = LATENCY_MARGIN
# Where the kept budgets live in status.control, beside the law's "state" and "slo".
MEMORY_KEY = "chunkBudget"


@dataclass(frozen=True)
class ChunkMemory:
    """A variant's chosen budget and what it was chosen from, as kept in status.

    ``tokens`` is the budget planned for the inter-token objective (vLLM's default for the
    GPU class where there is none); ``cap``, where measured jitter lowered it, the jitter
    lever's budget for the bound ``cv_max``, set when the jitter measured was ``cap_over``
    times the bound. The replicas run :attr:`running`, the lower of the two."""

    tokens: int
    itl_ms: float | None  # the inter-token objective it was chosen for (None: none)
    engine: str  # precision, tensor parallelism and --max-num-seqs it was planned with
    time: float  # when it was last moved (seconds since the epoch)
    step_ms: float  # estimated longest step: a full chunk while ``batch`` sequences decode
    batch: int
    fits: bool
    source: str  # where the step times came from
    cv_max: float | None = None
    cap: int | None = None
    cap_over: float | None = None

    @property
    def running(self) -> int:
        """The budget the replicas run."""
        return self.tokens if self.cap is None else min(self.tokens, self.cap)

    def budget(self) -> ChunkBudget:
        """The engine planner's input."""
        capped = self.cap is not None and self.cap < self.tokens
        return ChunkBudget(tokens=self.running, itl_target_ms=self.itl_ms, step_ms=self.step_ms,
                           decode_batch=self.batch, fits=self.fits, basis=self.source,
                           jitter_max=self.cv_max if capped else None,
                           jitter_measured=(self.cap_over * self.cv_max
                                            if capped and self.cap_over is not None
                                            and self.cv_max is not None else None))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": self.tokens, "itlMs": self.itl_ms,
                               "engine": self.engine, "time": self.time,
                               "stepMs": self.step_ms, "batch": self.batch, "fits": self.fits,
                               "source": self.source, "cvMax": self.cv_max,
                               "jitterCap": self.cap, "jitterOver": self.cap_over}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_dict(cls, data: Any) -> ChunkMemory | None:
        """Read a kept budget back; None when it cannot be read (a budget is then chosen
        afresh, as for a new variant)."""
        if not isinstance(data, Mapping):
            return None
        try:
            tokens, time = int(data["tokens"]), float(data["time"])
            itl, cv = _positive(data.get("itlMs")), _positive(data.get("cvMax"))
            cap = None if data.get("jitterCap") is None else int(data["jitterCap"])
            mem = cls(tokens, itl, str(data.get("engine", "")), time,
                      float(data.get("stepMs", 0.0)), int(data.get("batch", 1)),
                      bool(data.get("fits", True)), str(data.get("source", "")),
                      cv, cap if cv is not None and cap is not None and cap > 0 else None,
                      _positive(data.get("jitterOver")))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        return mem if tokens > 0 and math.isfinite(time) and (itl or mem.cap) else None


def _positive(value: Any) -> float | None:
    """A finite number above zero, else None (TypeError/ValueError for a non-number)."""
    if value is None:
        return None
    x = float(value)
    return x if math.isfinite(x) and x > 0 else None


def read_memory(control: Mapping[str, Any] | None) -> dict[str, ChunkMemory]:
    """The kept budgets by variant id from ``status.control``."""
    raw = (control or {}).get(MEMORY_KEY)
    if not isinstance(raw, Mapping):
        return {}
    out = {}
    for vid, data in raw.items():
        mem = ChunkMemory.from_dict(data)
        if mem is not None:
            out[str(vid)] = mem
    return out


def with_memory(control: Mapping[str, Any] | None,
                memory: Mapping[str, ChunkMemory]) -> dict[str, Any] | None:
    """``status.control`` with the kept budgets replaced by ``memory`` (dropped when
    empty; None when nothing else is kept either)."""
    out = {k: v for k, v in (control or {}).items() if k != MEMORY_KEY}
    if memory:
        out[MEMORY_KEY] = {vid: m.to_dict() for vid, m in sorted(memory.items())}
    return out if out or control is not None else None


def engine_basis(precision: str, tp: int, max_seqs: int) -> str:
    """The engine settings a budget is planned with (a change of any rolls the Deployment)."""
    return f"{precision} tp{tp} seqs{max_seqs}"


def step_times(model_size_b: float | None, precision: str, product: str, tp: int,
               state: ControlState) -> tuple[StepTimes, str]:
    """The step times to plan with and where they came from: learnt (the law's speed on
    this GPU and precision, which already holds the tensor parallelism's effect) or seed."""
    seed = seed_step_times(model_size_b, precision, product, gpus_per_replica=tp)
    if state.speed_samples > 0 and state.speed_key == f"{product}/{precision}":
        return seed.scaled(state.speed), f"step times learnt on {product} {precision}: " \
            f"speed {state.speed:.2f} of the seed"
    if tp > 1:
        return seed.scaled(1.0 + TP_EFFICIENCY * (tp - 1)), \
            f"seed step times for {product} {precision}, tensor parallel {tp}"
    return seed, f"seed step times for {product} {precision}"


def itl_missed(state: ControlState) -> bool:
    """Whether the law last measured the inter-token percentile over its objective."""
    return state.itl_over is not None and state.itl_over > 1.0


def request_shape(state: ControlState) -> tuple[float, float]:
    """Mean prompt and output tokens the law has learnt, or its defaults."""
    return (state.prompt_tokens or DEFAULT_PROMPT_TOKENS,
            state.output_tokens or DEFAULT_OUTPUT_TOKENS)


def decode_batch(st: StepTimes, objectives: Objectives, state: ControlState, min_batch: int,
                 max_seqs: int) -> int:
    """The sequences decoding beside a prefill chunk: the capacity model's SLO-feasible
    batch for the objectives and the learnt request shape, capped at ``--max-num-seqs``."""
    prompt, output = request_shape(state)
    itl = objectives.inter_token_latency_ms
    budget = itl_budget_ms(float(objectives.e2e_latency_ms), float(objectives.ttft_ms),
                           None if itl is None else float(itl), output, state.answer_tail)
    cap = replica_capacity(st, prompt_tokens=prompt, output_tokens=output, itl_budget=budget,
                           min_batch=max(1, min(min_batch, max_seqs)), max_batch=max_seqs)
    return max(1, min(cap.batch, max_seqs))


def jitter_missed(state: ControlState) -> float | None:
    """The jitter the law last measured over its bound, as a multiple of the bound (None
    where it was within it, or not read)."""
    over = state.jitter_over
    return over if over is not None and over > 1.0 else None


def jitter_budget(tokens: int, over: float, lowest: int) -> int:
    """The budget that brings jitter measured at ``over`` times its bound with ``tokens``
    back to :data:`JITTER_MARGIN` of the bound (module docstring: the spread falls as the
    square root of the budget), on the grid and at least ``lowest``."""
    target = tokens * (JITTER_MARGIN / max(over, 1e-9)) ** 2
    return max(lowest, int(target // CHUNK_GRID) * CHUNK_GRID)


def choose(*, st: StepTimes, source: str, itl_ms: float | None, batch: int, default: int,
           floor: int, engine: str, held: ChunkMemory | None, now: float | None,
           shape: tuple[float, float] = (0.0, 0.0), missed: bool = False,
           cv_max: float | None = None, jitter_over: float | None = None
           ) -> ChunkMemory | None:
    """The budget to run and keep: a fresh one, or ``held`` while the rate limit and the
    hysteresis band hold it (module docstring); None where neither objective asks for one.
    ``now`` None: no drift moves (a caller that only wants the budget the replicas run).
    ``shape``: the mean prompt and output tokens (``request_shape``) whose context the
    steps read and attend to. ``missed``: the measured inter-token percentile is over the
    objective (a lowering may come sooner). ``cv_max``: the jitter bound;
    ``jitter_over``: the jitter measured over it (``jitter_missed``)."""
    planned = None if itl_ms is None else _for_itl(
        st=st, source=source, itl_ms=itl_ms, batch=batch, default=default, floor=floor,
        engine=engine, held=held, now=now, shape=shape, missed=missed)
    if cv_max is None:
        return planned
    base = planned or ChunkMemory(
        max(default, floor), None, engine, held.time if held is not None else 0.0,
        round(chunk_step_ms(st, batch, max(default, floor), *shape), 2), batch, True, source)
    lowest = max(floor, MIN_CHUNK)
    cap, over = (max(held.cap, lowest), held.cap_over) \
        if held is not None and held.cv_max == cv_max and held.cap is not None else (None, None)
    when = base.time
    running = base.tokens if cap is None else min(base.tokens, cap)
    if jitter_over is not None and jitter_over > 1.0 and now is not None \
            and (held is None or now - held.time >= MISS_INTERVAL_S):
        lower = jitter_budget(running, jitter_over, lowest)
        if lower <= running - CHUNK_GRID:
            cap, over, when, running = lower, round(jitter_over, 3), round(now, 3), lower
    if cap is None:
        return planned
    return replace(base, time=when, cv_max=cv_max, cap=cap, cap_over=over,
                   step_ms=round(chunk_step_ms(st, batch, running, *shape), 2))


def _for_itl(*, st: StepTimes, source: str, itl_ms: float, batch: int, default: int,
             floor: int, engine: str, held: ChunkMemory | None, now: float | None,
             shape: tuple[float, float], missed: bool) -> ChunkMemory:
    """:func:`choose` for the inter-token objective alone."""

    def fresh(target: float) -> ChunkMemory:
        tokens, fits = chunk_budget_for_itl(st, target, batch, default=default, floor=floor,
                                            prompt_tokens=shape[0], output_tokens=shape[1])
        when = now if now is not None else (held.time if held is not None else 0.0)
        # Rounded as status keeps them, so a budget read back reads (and notes) the same.
        return ChunkMemory(tokens, itl_ms, engine, round(when, 3),
                           round(chunk_step_ms(st, batch, tokens, *shape), 2), batch, fits,
                           source)

    if held is None or held.itl_ms != itl_ms or held.engine != engine or held.tokens < floor:
        return fresh(itl_ms)
    kept = replace(held, cv_max=None, cap=None, cap_over=None)  # a jitter cap is choose's
    if now is None or now - held.time < (MISS_INTERVAL_S if missed else CHANGE_INTERVAL_S):
        return kept
    lower = fresh(itl_ms)
    if lower.tokens <= held.tokens - CHUNK_GRID:
        return lower
    if now - held.time < CHANGE_INTERVAL_S:
        return kept  # a miss only lowers
    higher = fresh(itl_ms * (1.0 - RAISE_SLACK))
    if higher.tokens >= held.tokens + CHUNK_GRID:
        return higher
    return kept


@dataclass(frozen=True)
class ChunkChange:
    """A variant's budget moved from ``old`` to ``new`` tokens, and why."""

    variant: str
    old: int
    new: int
    why: str


def change(variant: str, held: ChunkMemory | None, kept: ChunkMemory | None, old: int,
           new: int, user_set: bool) -> ChunkChange | None:
    """Why a variant's budget moves from ``old`` (the kept budget, or the one it ran
    without the lever) to ``new``; None when it does not move."""
    if old == new:
        return None
    if kept is None:
        gone = ("throughputCVMax removed" if held is not None and held.itl_ms is None
                else "interTokenLatencyMs removed")
        why = ("set by the user (spec.engine.maxNumBatchedTokens or extraArgs)" if user_set
               else f"{gone}: vLLM's default for the GPU class")
    elif kept.cap is not None and kept.cap_over is not None and kept.cv_max is not None \
            and (held is None or held.cap != kept.cap) and new == kept.cap:
        why = (f"jitter measured {kept.cap_over * kept.cv_max:.2f}, over throughputCVMax "
               f"{kept.cv_max:g}: the prefill chunks a stream meets while it decodes spread "
               "its pace, and the spread falls as the square root of the budget")
    elif held is None or (held.itl_ms is None and kept.itl_ms is not None):
        why = f"interTokenLatencyMs set to {kept.itl_ms:g} ms"
    elif kept.itl_ms is None and held.itl_ms is not None:
        why = (f"interTokenLatencyMs removed; jitter cap {kept.cap} tokens for "
               f"throughputCVMax {kept.cv_max:g}")
    elif held.itl_ms != kept.itl_ms:
        why = f"interTokenLatencyMs changed from {held.itl_ms:g} to {kept.itl_ms:g} ms"
    elif held.engine != kept.engine:
        why = f"engine settings changed from {held.engine} to {kept.engine}"
    elif held.cap is not None and (kept.cap is None or kept.cv_max != held.cv_max):
        why = "throughputCVMax changed or removed: the jitter cap is dropped"
    elif kept.itl_ms is None:
        why = f"jitter cap {kept.cap} tokens for throughputCVMax {kept.cv_max:g}"
    else:
        why = (f"re-planned from {kept.source}: a step filled to the budget with "
               f"{kept.batch} decoding sequences takes about {kept.step_ms:.1f} ms against "
               f"interTokenLatencyMs {kept.itl_ms:g} ms")
    return ChunkChange(variant, old, new, why)


def chunk_events(changes: Sequence[ChunkChange], running: Sequence[str]) -> list[EventSpec]:
    """A Normal ``ChunkBudgetChanged`` Event for each moved budget of a variant whose
    Deployment exists (``running``): a new variant's first budget is no change."""
    return [EventSpec("Normal", CHUNK_BUDGET_CHANGED,
                      f"Chunked-prefill budget of variant {c.variant} changed from {c.old} to "
                      f"{c.new} tokens (--max-num-batched-tokens; a rolling update): {c.why}")
            for c in changes if c.variant in running]
