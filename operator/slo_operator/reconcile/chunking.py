"""The inter-token lever: ``--max-num-batched-tokens`` from the policy's ITL objective (pure).

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

Each move of a running variant's budget is announced by a ``ChunkBudgetChanged`` Event
(:func:`chunk_events`); the planned budget and why are in ``status.engineNotes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slo_operator.api.conditions import CHUNK_BUDGET_CHANGED
from slo_operator.api.models import Objectives
from slo_operator.control.capacity import (
    CHUNK_GRID,
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
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
# Where the kept budgets live in status.control, beside the law's "state" and "slo".
MEMORY_KEY = "chunkBudget"
# Event reason for a moved budget (Normal).


@dataclass(frozen=True)
class ChunkMemory:
    """A variant's chosen budget and what it was chosen from, as kept in status."""

    tokens: int
    itl_ms: float  # the objective it was chosen for
    engine: str  # precision, tensor parallelism and --max-num-seqs it was planned with
    time: float  # when it was chosen (seconds since the epoch)
    step_ms: float  # estimated longest step: a full chunk while ``batch`` sequences decode
    batch: int
    fits: bool
    source: str  # where the step times came from

    def budget(self) -> ChunkBudget:
        """The engine planner's input."""
        return ChunkBudget(tokens=self.tokens, itl_target_ms=self.itl_ms, step_ms=self.step_ms,
                           decode_batch=self.batch, fits=self.fits, basis=self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "itlMs": self.itl_ms, "engine": self.engine,
                "time": self.time, "stepMs": self.step_ms,
                "batch": self.batch, "fits": self.fits, "source": self.source}

    @classmethod
    def from_dict(cls, data: Any) -> ChunkMemory | None:
        """Read a kept budget back; None when it cannot be read (a budget is then chosen
        afresh, as for a new variant)."""
        if not isinstance(data, Mapping):
            return None
        try:
            tokens, itl, time = int(data["tokens"]), float(data["itlMs"]), float(data["time"])
            mem = cls(tokens, itl, str(data.get("engine", "")), time,
                      float(data.get("stepMs", 0.0)), int(data.get("batch", 1)),
                      bool(data.get("fits", True)), str(data.get("source", "")))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        return mem if tokens > 0 and itl > 0 and math.isfinite(itl) else None


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


def choose(*, st: StepTimes, source: str, itl_ms: float, batch: int, default: int,
           floor: int, engine: str, held: ChunkMemory | None, now: float | None,
           shape: tuple[float, float] = (0.0, 0.0), missed: bool = False) -> ChunkMemory:
    """The budget to run and keep: a fresh one, or ``held`` while the rate limit and the
    hysteresis band hold it (module docstring). ``now`` None: no drift moves (a caller
    that only wants the budget the replicas run). ``shape``: the mean prompt and output
    tokens (``request_shape``) whose context the steps read and attend to. ``missed``: the
    measured inter-token percentile is over the objective (a lowering may come sooner)."""

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
    if now is None or now - held.time < (MISS_INTERVAL_S if missed else CHANGE_INTERVAL_S):
        return held
    lower = fresh(itl_ms)
    if lower.tokens <= held.tokens - CHUNK_GRID:
        return lower
    if now - held.time < CHANGE_INTERVAL_S:
        return held  # a miss only lowers
    higher = fresh(itl_ms * (1.0 - RAISE_SLACK))
    if higher.tokens >= held.tokens + CHUNK_GRID:
        return higher
    return held


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
        why = ("set by the user (spec.engine.maxNumBatchedTokens or extraArgs)" if user_set
               else "interTokenLatencyMs removed: vLLM's default for the GPU class")
    elif held is None:
        why = f"interTokenLatencyMs set to {kept.itl_ms:g} ms"
    elif held.itl_ms != kept.itl_ms:
        why = f"interTokenLatencyMs changed from {held.itl_ms:g} to {kept.itl_ms:g} ms"
    elif held.engine != kept.engine:
        why = f"engine settings changed from {held.engine} to {kept.engine}"
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
