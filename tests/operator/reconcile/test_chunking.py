"""The inter-token and jitter levers' memory: when a kept chunked-prefill budget moves, and
why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slo_operator.api.conditions import CHUNK_BUDGET_CHANGED
from slo_operator.api.models import Objectives
from slo_operator.control.capacity import StepTimes, chunk_budget_for_itl
from slo_operator.control.state import ControlState
from slo_operator.reconcile.chunking import (
    CHANGE_INTERVAL_S,
    JITTER_MARGIN,
    MEMORY_KEY,
    MISS_INTERVAL_S,
    ChunkMemory,
    change,
    choose,
    chunk_events,
    decode_batch,
    itl_missed,
    jitter_budget,
    jitter_missed,
    read_memory,
    step_times,
    with_memory,
)
from tests.support.golden import Golden

T0 = 1_767_225_600.0  # 2026-01-01
ENGINE = "fp8 tp1 seqs256"
# One decoding sequence and 10 ms of fixed step cost: at 50 ms (40 ms planned) the room
# is 30 ms, i.e. 3000 prompt tokens at 0.01 ms each -> 2816 on the 256-token grid, and
# 2560 when planned with 10 % to spare (45 ms -> 36 ms planned, 26 ms of room).
SEED = StepTimes(10.0, 0.0, 0.01)
FASTER = StepTimes(10.0, 0.0, 0.008)  # 3584 at the objective, 3072 with the slack
SLOWER = StepTimes(10.0, 0.0, 0.012)  # 2304 at the objective


def pick(st: StepTimes, held: ChunkMemory | None, now: float | None, itl: float = 50.0,
         engine: str = ENGINE, floor: int = 256, missed: bool = False) -> ChunkMemory:
    got = choose(st=st, source="seed step times for H100-SXM-80GB fp8", itl_ms=itl, batch=1,
                 default=8192, floor=floor, engine=engine, held=held, now=now, missed=missed)
    assert got is not None
    return got


def jitter_pick(held: ChunkMemory | None, now: float | None, over: float | None,
                itl: float | None = None, cv: float | None = 0.5, floor: int = 256,
                st: StepTimes = SEED) -> ChunkMemory | None:
    return choose(st=st, source="seed step times for H100-SXM-80GB fp8", itl_ms=itl, batch=1,
                  default=8192, floor=floor, engine=ENGINE, held=held, now=now,
                  cv_max=cv, jitter_over=over)


HELD = replace(pick(SEED, None, T0), tokens=2560)  # chosen earlier, at a slower estimate


def test_a_first_budget_is_the_objectives_at_once() -> None:
    got = pick(SEED, None, T0)
    assert (got.tokens, got.fits) == chunk_budget_for_itl(SEED, 50.0, 1, default=8192,
                                                          floor=256)
    assert (got.tokens, got.itl_ms, got.time, got.engine) == (2816, 50.0, T0, ENGINE)
    assert got.step_ms == round(SEED.step_ms(1, 2815), 2)


@pytest.mark.parametrize(
    ("st", "after", "want"),
    [
        pytest.param(SLOWER, CHANGE_INTERVAL_S - 1, 2560, id="lower-waits-for-the-interval"),
        pytest.param(SLOWER, CHANGE_INTERVAL_S, 2304, id="lower-after-the-interval"),
        pytest.param(FASTER, CHANGE_INTERVAL_S - 1, 2560, id="raise-waits-for-the-interval"),
        pytest.param(FASTER, CHANGE_INTERVAL_S, 3072, id="raise-lands-with-slack-to-spare"),
        # One grid step up at the objective, none with the slack: the band holds it.
        pytest.param(SEED, 10 * CHANGE_INTERVAL_S, 2560, id="one-step-drift-up-held"),
    ],
)
def test_drift_moves_the_budget_at_most_once_an_interval_across_the_band(
        st: StepTimes, after: float, want: int) -> None:
    got = pick(st, HELD, T0 + after)
    assert got.tokens == want
    assert got.time == (T0 if want == HELD.tokens else T0 + after)


@pytest.mark.parametrize(
    ("st", "after", "want"),
    [
        pytest.param(SLOWER, MISS_INTERVAL_S - 1, 2560, id="a-miss-waits-for-its-interval"),
        pytest.param(SLOWER, MISS_INTERVAL_S, 2304, id="a-miss-lowers-before-the-rate-limit"),
        # The model says the kept budget fits: a miss alone moves nothing (the law's
        # replicas and limit answer it).
        pytest.param(SEED, MISS_INTERVAL_S, 2560, id="a-miss-the-model-does-not-explain"),
        pytest.param(FASTER, MISS_INTERVAL_S, 2560, id="a-miss-never-raises-early"),
    ],
)
def test_a_measured_inter_token_miss_lowers_the_budget_sooner_never_raises_it(
        st: StepTimes, after: float, want: int) -> None:
    got = pick(st, HELD, T0 + after, missed=True)
    assert got.tokens == want
    assert got.time == (T0 if want == HELD.tokens else T0 + after)


@pytest.mark.parametrize(("over", "missed"), [(None, False), (0.8, False), (1.0, False),
                                              (1.2, True)])
def test_a_miss_is_the_laws_measured_percentile_over_the_objective(over: float | None,
                                                                    missed: bool) -> None:
    assert itl_missed(ControlState(itl_over=over)) is missed


def test_a_budget_raised_with_slack_is_not_lowered_by_the_estimate_it_was_raised_at() -> None:
    raised = pick(FASTER, HELD, T0 + CHANGE_INTERVAL_S)
    again = pick(FASTER, raised, T0 + 3 * CHANGE_INTERVAL_S)
    assert again == raised


@pytest.mark.parametrize(
    ("kw", "want_tokens"),
    [
        pytest.param({"itl": 30.0}, 1280, id="objective-changed"),
        pytest.param({"engine": "bf16 tp1 seqs256"}, 2816, id="engine-settings-changed"),
        pytest.param({"floor": 3000}, 3000, id="kept-budget-below-max-num-seqs"),
    ],
)
def test_a_new_objective_or_engine_moves_the_budget_at_once(kw: dict[str, float | str],
                                                             want_tokens: int) -> None:
    got = pick(SEED, HELD, T0 + 1, **kw)  # type: ignore[arg-type]
    assert (got.tokens, got.time) == (want_tokens, T0 + 1)


def test_without_a_clock_a_kept_budget_only_follows_the_objective() -> None:
    assert pick(SLOWER, HELD, None) == HELD
    assert pick(SEED, HELD, None, itl=30.0).tokens == 1280


def test_memory_round_trips_through_status_beside_the_laws() -> None:
    control = {"state": {"v": 1, "speed": 0.9}, "slo": {"runs": "g1"}}
    kept = with_memory(control, {"h100": HELD})
    assert kept is not None and kept["state"] == control["state"]
    assert read_memory(kept) == {"h100": HELD}
    assert with_memory(kept, {}) == control
    assert with_memory(None, {}) is None


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("garbage", id="not-a-map"),
        pytest.param({"tokens": "many", "itlMs": 50, "time": T0}, id="tokens-not-a-number"),
        pytest.param({"tokens": 2048, "time": T0}, id="no-objective"),
        pytest.param({"tokens": 0, "itlMs": 50, "time": T0}, id="no-budget"),
        pytest.param({"tokens": 2048, "itlMs": 10**400, "time": T0}, id="beyond-any-float"),
        pytest.param({"tokens": float("inf"), "itlMs": 50, "time": T0}, id="infinite-budget"),
        pytest.param({"tokens": 2048, "itlMs": float("inf"), "time": T0},
                     id="infinite-objective"),
    ],
)
def test_an_unreadable_kept_budget_is_chosen_afresh(raw: object) -> None:
    assert read_memory({MEMORY_KEY: {"h100": raw}}) == {}


def test_learnt_speed_is_used_only_where_the_law_learnt_it() -> None:
    seed, source = step_times(8.0, "fp8", "H100-SXM-80GB", 1, ControlState())
    learnt = ControlState(speed=0.5, speed_key="H100-SXM-80GB/fp8", speed_samples=3)
    st, learnt_source = step_times(8.0, "fp8", "H100-SXM-80GB", 1, learnt)
    assert st.prefill_ms_per_token == pytest.approx(2 * seed.prefill_ms_per_token)
    assert (source, learnt_source) == (
        "seed step times for H100-SXM-80GB fp8",
        "step times learnt on H100-SXM-80GB fp8: speed 0.50 of the seed")
    # Learnt on another precision, or not yet from any sample: the seed.
    for other in (replace(learnt, speed_key="H100-SXM-80GB/bf16"),
                  replace(learnt, speed_samples=0)):
        assert step_times(8.0, "fp8", "H100-SXM-80GB", 1, other)[0] == seed
    # Tensor parallelism shortens the seed's steps.
    tp2, _ = step_times(8.0, "fp8", "H100-SXM-80GB", 2, ControlState())
    assert tp2.base_ms < seed.base_ms


def test_decode_batch_is_the_feasible_batch_capped_at_max_num_seqs() -> None:
    st, _ = step_times(8.0, "fp8", "H100-SXM-80GB", 1, ControlState())
    tight = decode_batch(st, Objectives(inter_token_latency_ms=30), ControlState(), 1, 256)
    loose = decode_batch(st, Objectives(e2e_latency_ms=60_000, ttft_ms=5000,
                                        inter_token_latency_ms=500), ControlState(), 1, 256)
    assert 1 <= tight < loose == 256


def test_events_only_for_moves_of_running_variants(golden: Golden) -> None:
    new = replace(HELD, tokens=1792, itl_ms=30.0)
    moves = [change("h100", HELD, new, 2560, 1792, user_set=False),
             change("a100", None, new, 2048, 1792, user_set=False)]
    assert change("l4", HELD, HELD, 2560, 2560, user_set=False) is None
    events = chunk_events([m for m in moves if m is not None], running=["h100"])
    assert [(e.type, e.reason) for e in events] == [("Normal", CHUNK_BUDGET_CHANGED)]
    golden.check("engine", "chunk-event-objective-changed", events[0].message)


@pytest.mark.parametrize(
    ("held", "kept", "user_set"),
    [
        pytest.param(None, "kept", False, id="objective-set"),
        pytest.param(HELD, None, False, id="objective-removed"),
        pytest.param(HELD, None, True, id="user-set-the-budget"),
        pytest.param(HELD, "engine", False, id="engine-settings-changed"),
        pytest.param(HELD, "drift", False, id="re-planned"),
    ],
)
def test_each_move_says_why(held: ChunkMemory | None, kept: str | None, user_set: bool,
                            golden: Golden, request: pytest.FixtureRequest) -> None:
    new = {"kept": HELD, "engine": replace(HELD, engine="bf16 tp1 seqs256"),
           "drift": replace(HELD, tokens=2304, step_ms=39.5)}.get(kept or "")
    moved = change("h100", held, new, 2560 if held else 8192, 2304, user_set)
    assert moved is not None
    golden.check("engine", f"chunk-why-{request.node.callspec.id}", moved.why)


# --- the jitter lever ---------------------------------------------------------------------


@pytest.mark.parametrize(("over", "want"), [(None, None), (0.8, None), (1.0, None),
                                            (1.4, 1.4)])
def test_jitter_is_missed_where_the_law_read_it_over_its_bound(over: float | None,
                                                               want: float | None) -> None:
    assert jitter_missed(ControlState(jitter_over=over)) == want


@pytest.mark.parametrize(
    ("tokens", "over", "want"),
    [
        # The spread falls as the square root of the budget: twice the bound asks for a
        # quarter of the budget and the margin's square of that.
        pytest.param(8192, 2.0, 8192 * (JITTER_MARGIN / 2.0) ** 2 // 256 * 256,
                     id="twice-the-bound"),
        pytest.param(8192, 1.25, 3328, id="a-quarter-over"),
        pytest.param(2048, 3.0, 512, id="never-below-the-least-chunk"),
    ],
)
def test_a_jitter_miss_asks_for_the_budget_whose_spread_is_inside_the_margin(
        tokens: int, over: float, want: int) -> None:
    got = jitter_budget(tokens, over, 512)
    assert got == want
    assert got % 256 == 0
    # Within the margin by the square-root law, unless held up by the least chunk.
    assert over * (got / tokens) ** 0.5 <= JITTER_MARGIN or got == 512


def test_a_bound_that_holds_renders_no_budget_and_rolls_nothing() -> None:
    assert jitter_pick(None, T0, over=None) is None
    assert jitter_pick(None, T0, over=0.9) is None
    assert jitter_pick(None, T0, over=2.0, cv=None) is None  # no bound, no lever


def test_jitter_over_its_bound_lowers_a_default_budget_at_once() -> None:
    got = jitter_pick(None, T0, over=2.0)
    assert got is not None
    want = jitter_budget(8192, 2.0, 512)
    assert (got.running, got.tokens, got.cap, got.itl_ms, got.time) == (want, 8192, want,
                                                                          None, T0)
    assert (got.cv_max, got.cap_over) == (0.5, 2.0)
    assert got.step_ms == round(SEED.step_ms(1, want - 1), 2)
    budget = got.budget()
    assert (budget.tokens, budget.jitter_max, budget.jitter_measured) == (want, 0.5, 1.0)


def test_a_second_jitter_lowering_waits_for_the_miss_interval_and_never_raises() -> None:
    first = jitter_pick(None, T0, over=2.0)
    assert first is not None
    held_on = jitter_pick(first, T0 + MISS_INTERVAL_S - 1, over=1.6)
    assert held_on == first
    lower = jitter_pick(first, T0 + MISS_INTERVAL_S, over=1.6)
    assert lower is not None and lower.running == jitter_budget(first.running, 1.6, 512)
    assert lower.time == T0 + MISS_INTERVAL_S
    # Inside the bound for hours: the cap stays (answers that made streams short may return).
    later = jitter_pick(lower, T0 + 100 * CHANGE_INTERVAL_S, over=0.3)
    assert later == lower


def test_a_jitter_cap_holds_under_an_inter_token_budget_that_re_plans() -> None:
    capped = jitter_pick(HELD, T0 + MISS_INTERVAL_S, over=1.1, itl=50.0)
    assert capped is not None
    assert (capped.tokens, capped.running) == (HELD.tokens, jitter_budget(2560, 1.1, 512))
    # The objective's budget moves at the interval; the replicas still run the lower.
    replanned = jitter_pick(capped, capped.time + CHANGE_INTERVAL_S, over=None, itl=50.0,
                            st=SLOWER)
    assert replanned is not None
    assert (replanned.tokens, replanned.running) == (2304, capped.running)
    # An inter-token budget planned below the cap runs as planned.
    tight = jitter_pick(capped, capped.time + 1, over=None, itl=20.0)
    assert tight is not None and tight.running == tight.tokens < capped.running


def test_a_changed_or_removed_bound_drops_the_cap() -> None:
    capped = jitter_pick(None, T0, over=2.0)
    assert capped is not None
    assert jitter_pick(capped, T0 + 1, over=None, cv=None) is None
    assert jitter_pick(capped, T0 + 1, over=None, cv=0.6) is None
    with_itl = jitter_pick(HELD, T0 + 1, over=None, itl=50.0, cv=0.6)
    assert with_itl is not None and with_itl.cap is None


def test_a_jitter_cap_is_never_below_max_num_seqs() -> None:
    got = jitter_pick(None, T0, over=10.0, floor=1024)
    assert got is not None and got.running == 1024


def test_a_jitter_cap_round_trips_through_status() -> None:
    capped = jitter_pick(None, T0, over=2.0)
    assert capped is not None
    wire = with_memory(None, {"h100": capped})
    assert wire is not None and wire[MEMORY_KEY]["h100"]["jitterCap"] == capped.cap
    assert "itlMs" not in wire[MEMORY_KEY]["h100"]
    assert read_memory(wire) == {"h100": capped}


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"tokens": 8192, "time": T0, "cvMax": 0.5}, id="a-bound-without-a-cap"),
        pytest.param({"tokens": 8192, "time": T0, "jitterCap": 1024}, id="a-cap-without-bound"),
        pytest.param({"tokens": 8192, "time": T0, "cvMax": "x", "jitterCap": 1024},
                     id="bound-not-a-number"),
        pytest.param({"tokens": 8192, "time": T0, "cvMax": 0.5, "jitterCap": 0},
                     id="no-cap"),
    ],
)
def test_an_unreadable_jitter_cap_is_chosen_afresh(raw: object) -> None:
    assert read_memory({MEMORY_KEY: {"h100": raw}}) == {}


@pytest.mark.parametrize("case", ["jitter-lowered", "bound-removed", "cap-dropped"])
def test_each_jitter_move_says_why(case: str, golden: Golden) -> None:
    capped = jitter_pick(None, T0, over=2.0)
    assert capped is not None
    if case == "jitter-lowered":
        moved = change("h100", None, capped, 8192, capped.running, user_set=False)
    elif case == "bound-removed":
        moved = change("h100", capped, None, capped.running, 8192, user_set=False)
    else:  # the bound goes, the inter-token budget stays
        under = jitter_pick(HELD, T0 + MISS_INTERVAL_S, over=1.1, itl=50.0)
        kept = pick(SEED, under, T0 + MISS_INTERVAL_S + 1)
        assert under is not None and kept.cap is None
        moved = change("h100", under, kept, under.running, kept.running, user_set=False)
    assert moved is not None
    golden.check("engine", f"chunk-why-{case}", moved.why)
