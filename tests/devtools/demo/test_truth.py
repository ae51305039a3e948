"""The demo's ground truth: SLO windows judged from the client's exact latencies."""

from __future__ import annotations

import pytest

from slo_devtools.demo import scenario, truth
from slo_devtools.devenv.loadgen import Record

GOAL = truth.Goal(window_s=10.0, e2e_ms=5000.0, e2e_q=0.99, ttft_ms=1000.0, ttft_q=0.95,
                  itl_ms=50.0, itl_q=0.99, jitter=None)


def rec(sent: float, ttft: float = 0.2, e2e: float = 1.0, status: int = 200,
        gaps: tuple[float, ...] = (0.02, 0.02)) -> Record:
    return Record(sent, "http://r", 100, 3, status, ttft if status == 200 else None,
                  e2e if status == 200 else None, 3, gaps)


def test_goal_is_read_from_the_tenant_policy() -> None:
    code = truth.goal_of(scenario.EXAMPLES / "tenant-code.yaml")
    chat = truth.goal_of(scenario.EXAMPLES / "tenant-chat.yaml")
    assert (code.window_s, code.ttft_ms, code.ttft_q, code.itl_ms) == (10.0, 2000.0, 0.95, None)
    assert (chat.ttft_ms, chat.itl_ms, chat.jitter) == (500.0, 28.0, 0.2)


def test_a_manifest_without_a_policy_is_an_error(tmp_path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("kind: Namespace\n")
    with pytest.raises(ValueError, match="no SLOPolicy"):
        truth.goal_of(f)


def test_an_unreadable_manifest_leaves_only_that_service_unjudged(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: SLOPolicy\nspec: {objectives: {ttftMs: -1}}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    got = truth.goals({"a/code": scenario.EXAMPLES / "tenant-code.yaml", "b/bad": bad,
                       "c/broken": broken, "d/gone": tmp_path / "gone.yaml"})
    assert list(got) == ["a/code"]


def test_windows_hold_the_requests_finished_in_them_at_the_policy_percentile() -> None:
    # 20 requests finishing in window 0: one slow first token is the 5% P95 leaves out.
    fast = [rec(i * 0.1) for i in range(19)]
    w = truth.client_windows([*fast, rec(2.0, ttft=3.0, e2e=3.5)], GOAL)
    assert [x.start for x in w] == [0.0] and w[0].finished == 20 and w[0].good
    # Two slow ones among twenty: the P95 is slow.
    w = truth.client_windows([*fast[:18], rec(2.0, ttft=3.0, e2e=3.5),
                              rec(2.1, ttft=3.0, e2e=3.5)], GOAL)
    assert w[0].missed == ("ttft",) and w[0].ttft_ms == pytest.approx(3000.0)


def test_a_request_counts_in_the_window_it_finished_in() -> None:
    w = truth.client_windows([rec(1.0), rec(8.0, ttft=0.5, e2e=6.0)], GOAL)
    assert [(x.start, x.finished) for x in w] == [(0.0, 1), (10.0, 1)]
    assert w[1].missed == ("e2e",)


def test_token_gaps_judge_inter_token_latency_only_where_the_policy_sets_it() -> None:
    slow = rec(1.0, gaps=(0.02, 0.08))
    assert truth.client_windows([slow], GOAL)[0].missed == ("itl",)
    no_itl = truth.Goal(**{**GOAL.__dict__, "itl_ms": None})
    assert truth.client_windows([slow], no_itl)[0].good


def test_a_failed_request_makes_its_window_bad_and_empty_windows_are_not_judged() -> None:
    w = truth.client_windows([rec(1.0), rec(35.0, status=-1)], GOAL)
    assert [(x.start, x.failed, x.missed) for x in w] == [(0.0, 0, ()), (30.0, 1, ("failed",))]
    s = truth.summary(w, GOAL)
    assert (s["windows"], s["good"], s["attainment"]) == (2, 1, 0.5)
    assert [m["start"] for m in s["missed"]] == [30.0]
    assert truth.summary([], GOAL)["attainment"] is None
