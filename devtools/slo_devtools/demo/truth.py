"""The demo's ground truth: each tenant's SLO windows judged from what its clients saw.

The operator judges windows from Prometheus histograms, whose buckets are coarse where an
objective falls between two bounds (a P95 TTFT of 2 s is interpolated inside vLLM's
1-2.5 s bucket). The demo also judges them as the benchmark does: from every request's
exact latencies as the load generator measured them (streamed, so the first token and
each token gap are seen), over consecutive windows of the policy's length, each at the
percentiles the policy asks for. A window is judged when requests finished in it; it is
good when every objective the policy sets holds, and no request in it failed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from slo_devtools.devenv.loadgen import Record
from slo_devtools.sim.discrete_event import Finished
from slo_devtools.sim.run import jitter_of, percentile
from slo_operator.api.models import SLOPolicySpec, parse_duration


@dataclass(frozen=True)
class Goal:
    """A tenant's objectives as its SLOPolicy states them."""

    window_s: float
    e2e_ms: float
    e2e_q: float
    ttft_ms: float
    ttft_q: float
    itl_ms: float | None
    itl_q: float
    jitter: float | None


@dataclass(frozen=True)
class ClientWindow:
    start: float  # replay seconds
    finished: int
    failed: int
    e2e_ms: float | None
    ttft_ms: float | None
    itl_ms: float | None
    jitter: float | None
    missed: tuple[str, ...]  # the objectives that did not hold ("failed" for a failure)

    @property
    def good(self) -> bool:
        return not self.missed


def goal_of(manifest: Path) -> Goal:
    """The objectives of the (first) SLOPolicy in ``manifest``."""
    for doc in yaml.safe_load_all(manifest.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "SLOPolicy":
            spec = SLOPolicySpec.model_validate(doc.get("spec") or {})
            o = spec.objectives
            return Goal(window_s=float(parse_duration(spec.window)),
                        e2e_ms=float(o.e2e_latency_ms), e2e_q=o.e2e_percentile,
                        ttft_ms=float(o.ttft_ms), ttft_q=o.ttft_percentile,
                        itl_ms=None if o.inter_token_latency_ms is None
                        else float(o.inter_token_latency_ms),
                        itl_q=o.inter_token_percentile, jitter=o.throughput_cv_max)
    raise ValueError(f"{manifest}: no SLOPolicy")


def goals(files: Mapping[str, Path]) -> dict[str, Goal]:
    """The goal of each service whose manifest can be read (service -> manifest file); one
    that cannot is left out (its windows are then not judged), never an error at the end
    of a run."""
    out = {}
    for svc, f in files.items():
        try:
            out[svc] = goal_of(f)
        except (OSError, ValueError, yaml.YAMLError):
            continue
    return out


def client_windows(records: Sequence[Record], goal: Goal) -> list[ClientWindow]:
    """Consecutive windows of ``goal.window_s`` from the replay's start, each holding the
    requests that finished in it (failures by when they were sent); windows in which
    nothing finished or failed are not judged."""
    w = goal.window_s
    done: dict[int, list[Record]] = {}
    failed: dict[int, int] = {}
    for r in records:
        if r.status == 200 and r.e2e is not None:
            done.setdefault(int((r.sent + r.e2e) // w), []).append(r)
        else:
            k = int(r.sent // w)
            failed[k] = failed.get(k, 0) + 1
    out = []
    for k in sorted(set(done) | set(failed)):
        rs = done.get(k, [])
        e2e = percentile([r.e2e * 1e3 for r in rs if r.e2e is not None], goal.e2e_q)
        ttft = percentile([r.ttft * 1e3 for r in rs if r.ttft is not None], goal.ttft_q)
        itl = percentile([g * 1e3 for r in rs for g in r.gaps], goal.itl_q)
        jit = jitter_of([Finished(r.sent, r.sent + r.ttft, r.sent + r.e2e, r.prompt, r.tokens, 0)
                         for r in rs if r.ttft is not None and r.e2e is not None])
        missed = [name for name, value, bound in (
            ("e2e", e2e, goal.e2e_ms), ("ttft", ttft, goal.ttft_ms),
            ("itl", itl, goal.itl_ms), ("jitter", jit, goal.jitter))
            if value is not None and bound is not None and value > bound]
        if failed.get(k):
            missed.append("failed")
        out.append(ClientWindow(k * w, len(rs), failed.get(k, 0), e2e, ttft, itl, jit,
                                tuple(missed)))
    return out


def summary(windows: Sequence[ClientWindow], goal: Goal) -> dict[str, Any]:
    """What summary.json keeps: the count, the share good, and every missed window."""
    good = sum(w.good for w in windows)
    return {"window_s": goal.window_s, "windows": len(windows), "good": good,
            "attainment": good / len(windows) if windows else None,
            "missed": [{k: (round(v, 3) if isinstance(v, float) and math.isfinite(v) else v)
                        for k, v in asdict(w).items()} for w in windows if not w.good]}
