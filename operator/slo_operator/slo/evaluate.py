"""SLO evaluation: good/bad/unknown windows, rolling attainment, error budget, burn rate.

A window is **good** when every objective with data holds: e2e latency at its percentile
<= target, TTFT at its percentile <= target, and, where the policy sets them, jitter <=
``throughputCVMax`` and inter-token latency <= target. It is **bad** when any of them is
over target, or when requests wait while none finishes (a stuck service has no latency
samples but is not fine). It is **unknown** when the data to judge is missing (outage,
stale, empty, partial latency) and when the service was idle: unknown windows neither earn
nor spend budget.

History is one character per window (``g``, ``b``, ``u``), oldest first, for the last
``attainmentPeriod``; it is stored run-length encoded (``g58b2u1``) in status, so a
restarted operator continues where it left. Each cycle overwrites the outcome of the
window it falls in (the trailing-window signals at the window's end then decide it);
windows no cycle saw (operator down) are unknown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from slo_operator.api.models import Objectives
from slo_operator.api.observe import MetricsState, Signals


class Outcome(StrEnum):
    """A window's verdict as one history character: good, bad or unknown."""

    GOOD = "g"
    BAD = "b"
    UNKNOWN = "u"


@dataclass(frozen=True)
class Verdict:
    """The judgement of one window: its outcome, the objectives it violated and why."""

    outcome: Outcome
    violations: tuple[str, ...] = ()
    message: str = ""


def evaluate_window(signals: Signals, objectives: Objectives) -> Verdict:
    """Judge one window of one service against its objectives."""
    s = signals
    if s.state in (MetricsState.UNAVAILABLE, MetricsState.STALE, MetricsState.EMPTY):
        return Verdict(Outcome.UNKNOWN, message=f"metrics {s.state.value}")
    if s.state == MetricsState.NO_TRAFFIC:
        return Verdict(Outcome.UNKNOWN, message="no traffic")
    if not s.request_rate and (s.waiting or 0) > 0:
        return Verdict(Outcome.BAD, ("stuck",), f"{s.waiting:.0f} request(s) waiting, none "
                       "finished in the window")
    checks: list[tuple[str, float | None, float, str]] = [
        ("e2e", s.e2e_ms, float(objectives.e2e_latency_ms), "ms"),
        ("ttft", s.ttft_ms, float(objectives.ttft_ms), "ms"),
    ]
    if objectives.throughput_cv_max is not None:
        checks.append(("jitter", s.jitter, objectives.throughput_cv_max, ""))
    if objectives.inter_token_latency_ms is not None:
        checks.append(("itl", s.itl_ms, float(objectives.inter_token_latency_ms), "ms"))
    missing = [n for n, v, _, _ in checks if v is None and n != "jitter"]
    bad = [(n, v, t, u) for n, v, t, u in checks if v is not None and v > t]
    if bad:
        text = ", ".join(f"{n} {_num(v)}{u} > {_num(t)}{u}" for n, v, t, u in bad
                         if v is not None)
        return Verdict(Outcome.BAD, tuple(n for n, *_ in bad), text)
    if missing:
        return Verdict(Outcome.UNKNOWN, message="no samples for " + ", ".join(missing))
    return Verdict(Outcome.GOOD, message="all objectives met")


def _num(x: float) -> str:
    """Three significant digits, never in exponent notation (users read "1234ms", not
    "1.23e+03ms")."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


_RUN = re.compile(r"([gbu])(\d+)")


def encode_runs(outcomes: str) -> str:
    """Run-length form of an outcome string (``gggbb`` -> ``g3b2``)."""
    out: list[str] = []
    i = 0
    while i < len(outcomes):
        j = i
        while j < len(outcomes) and outcomes[j] == outcomes[i]:
            j += 1
        out.append(f"{outcomes[i]}{j - i}")
        i = j
    return "".join(out)


def decode_runs(runs: str, limit: int = 1_000_000) -> str:
    """Inverse of ``encode_runs``; malformed input yields what parses, at most ``limit``."""
    out: list[str] = []
    total = 0
    for ch, n in _RUN.findall(runs):
        k = min(int(n), limit - total)
        out.append(ch * k)
        total += k
        if total >= limit:
            break
    return "".join(out)


@dataclass(frozen=True)
class SLOHistory:
    """Outcomes of the most recent windows, oldest first, ending at ``last_index``."""

    window_s: int = 60
    last_index: int | None = None  # floor(time / window_s) of the newest outcome
    outcomes: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Compact JSON-able form for status."""
        out: dict[str, Any] = {"windowSeconds": self.window_s, "runs": encode_runs(self.outcomes)}
        if self.last_index is not None:
            out["lastIndex"] = self.last_index
        return out

    @classmethod
    def from_dict(cls, data: Any, max_windows: int = 100_000) -> SLOHistory:
        """Read back; anything malformed yields an empty history."""
        if not isinstance(data, Mapping):
            return cls()
        w, last, runs = data.get("windowSeconds"), data.get("lastIndex"), data.get("runs")
        if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
            return cls()
        if not isinstance(last, int) or isinstance(last, bool) or not isinstance(runs, str):
            return cls(window_s=w)
        return cls(w, last, decode_runs(runs, max_windows))


def record(history: SLOHistory, outcome: Outcome, now: float, window_s: float,
           period_s: float) -> SLOHistory:
    """History with ``outcome`` as the verdict of the window ``now`` falls in."""
    w = max(1, int(window_s))
    keep = max(1, int(period_s) // w)
    idx = math.floor(now / w)
    if history.window_s != w or history.last_index is None:
        return SLOHistory(w, idx, outcome.value)  # new or re-windowed policy: start over
    if idx < history.last_index:
        return history  # a clock going backwards never rewrites the past
    if idx == history.last_index:
        outcomes = history.outcomes[:-1] + outcome.value
    else:
        gap = min(idx - history.last_index - 1, keep)
        outcomes = history.outcomes + Outcome.UNKNOWN.value * gap + outcome.value
    return SLOHistory(w, idx, outcomes[-keep:])


@dataclass(frozen=True)
class SLOReport:
    """Summarise the SLO period: window counts, attainment, error budget, burn rates."""

    good: int
    bad: int
    unknown: int
    attainment: float | None  # good / (good + bad); None before any known window
    error_budget_remaining: float | None  # 1 - bad / allowed bad windows in the period
    burn_rate_short: float | None  # bad share of the short span / (1 - target)
    burn_rate_long: float | None
    meets_target: bool | None  # attainment >= target
    current: Outcome  # the newest window's outcome


def report(history: SLOHistory, target: float, period_s: float, now: float) -> SLOReport:
    """Attainment, error budget and burn rates over the period ending at ``now``."""
    w = history.window_s
    n = max(1, int(period_s) // w)
    idx = math.floor(now / w)
    recent = history.outcomes
    if history.last_index is not None:
        recent += Outcome.UNKNOWN.value * max(0, min(idx - history.last_index, n))
    period = recent[-n:].rjust(n, Outcome.UNKNOWN.value)
    good, bad = period.count("g"), period.count("b")
    unknown = n - good - bad
    allowed = (1.0 - target) * n
    attainment = good / (good + bad) if good + bad else None
    if good + bad == 0:
        budget = None
    elif allowed > 0:
        budget = 1.0 - bad / allowed
    else:
        budget = 1.0 if bad == 0 else 0.0  # a target of 1 has no budget to overspend
    short_n = max(1, n // 12)
    current = Outcome(period[-1]) if history.last_index == idx else Outcome.UNKNOWN
    return SLOReport(
        good=good, bad=bad, unknown=unknown, attainment=attainment,
        error_budget_remaining=budget,
        burn_rate_short=_burn(period[-short_n:], target),
        burn_rate_long=_burn(period, target),
        meets_target=None if attainment is None else attainment >= target,
        current=current,
    )


def _burn(span: str, target: float) -> float | None:
    good, bad = span.count("g"), span.count("b")
    if good + bad == 0:
        return None
    share = bad / (good + bad)
    return share / (1.0 - target) if target < 1.0 else None  # no budget: no rate to burn
