"""The scale-to-zero scenario: many models, most of them idle most of the hour.

A platform that serves many models pays mostly for its long tail. The workload
(:func:`workload`, ``many-models``) is :data:`N_SERVICES` services over one hour:

* the head, from the shipped Azure 2023 traces (:data:`HEAD`): the conversation and code
  hours at their own rates, and each thinned to x0.1 (every request kept with probability
  0.1, ``traces.scale_rate``: the bursts and idle gaps of the source stay, longer);
* the tail, :data:`N_SERVICES` - 4 services whose rates follow a Zipf law by rank:
  service k (1-based) gets ``TAIL_TOP_PER_HOUR / k ** TAIL_ZIPF`` requests per hour
  (60/h down to 1.3/h, median about 2.6/h), arrivals a Gamma renewal process with CV
  :data:`TAIL_CV` (ServeGen's rate-weighted median over its production clients, as
  elsewhere in the benchmark), lengths drawn jointly from the Azure conversation trace.

Everything is seeded (``seed``) and deterministic.

Every service runs the same policy family in one run (:func:`runs`): slo-operator without
scale to zero (``minReplicas: 1``), with it (``scaleToZero: true`` at the default idle time
and at a shorter ``idleBeforeZero``, an activator with the cluster's defaults in front of
every service), and a static replica per service. All start warm with one replica each.

Cold starts and the SLO: as in the cluster (``docs/scale-to-zero.md``), the SLO windows
judge what the pods serve (*pod-side*: a held request counts from when the activator
forwarded it); the cold starts are reported apart (count, the wait of each held request,
504s and 429s) and as *client-side* attainment: the same windows judged from when each
client sent its request, a window in which the activator answered 429 or 504 not good.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from slo_devtools.sim import traces as T
from slo_devtools.sim.bench import MAX_REPLICAS, TARGETS, step_model
from slo_devtools.sim.discrete_event import Activator
from slo_devtools.sim.policies import Policy, SloOperator, Static, policy_spec
from slo_devtools.sim.run import (
    WARMUP_S,
    RunResult,
    Tenant,
    TenantResult,
    Workload,
    percentile,
    simulate,
)

NAME = "scale-to-zero"
WORKLOAD = "many-models"
N_SERVICES = 50
DURATION_S = 3600.0
# The head: (service, Azure trace, rate factor, objectives kind of bench.TARGETS).
HEAD: tuple[tuple[str, str, float, str], ...] = (
    ("conv", "azure-conv", 1.0, "chat"),
    ("code", "azure-code", 1.0, "code"),
    ("conv-thin", "azure-conv", 0.1, "chat"),
    ("code-thin", "azure-code", 0.1, "code"),
)
TAIL_TOP_PER_HOUR = 60.0
TAIL_ZIPF = 1.0
TAIL_CV = T.SERVEGEN_DEFAULT_CV
# idleBeforeZero of the shorter settings (the default is the policy's: the longer of its
# 60 s window and its 300 s scale-down stabilization). 60 s is shorter than a cold start
# plus a pass: docs/benchmark.md (Scale to zero) says what it shows.
SHORT_IDLES = ("120s", "60s")


def tail_rates(n: int, top_per_hour: float = TAIL_TOP_PER_HOUR,
               exponent: float = TAIL_ZIPF) -> list[float]:
    """Requests per second of the ``n`` tail services, Zipf by rank."""
    return [top_per_hour / (k ** exponent) / 3600.0 for k in range(1, n + 1)]


def many_models(n_services: int = N_SERVICES, *, seed: int = 0,
                duration_s: float = DURATION_S) -> T.Trace:
    """The head (:data:`HEAD`) and ``n_services - len(HEAD)`` tail services, merged."""
    if n_services <= len(HEAD):
        raise ValueError(f"services: must be more than the {len(HEAD)} of the head, "
                         f"got {n_services}")
    parts = [T.azure(src, rate_scale=f, seed=seed, tenant=name) for name, src, f, _ in HEAD]
    pairs = T.length_sampler("azure-conv")
    rng = random.Random(seed)
    tail = []
    for k, rate in enumerate(tail_rates(n_services - len(HEAD)), start=1):
        name = tail_name(k)
        times = T.gamma_arrivals([rate], duration_s, TAIL_CV, rng)
        tail += [T.Request(t, *pairs[rng.randrange(len(pairs))], name) for t in times]
    tail.sort(key=lambda r: r.t)
    tr = T.merge(WORKLOAD, [*parts, T.Trace("tail", tuple(tail), duration_s)])
    notes = (
        "head: the Azure LLM inference traces 2023 (CC-BY 4.0): " + ", ".join(
            f"{name} = {src} x{f:g}" for name, src, f, _ in HEAD)
        + " (x0.1 keeps each request with probability 0.1)",
        f"tail: {n_services - len(HEAD)} services, service k at {TAIL_TOP_PER_HOUR:g} / "
        f"k^{TAIL_ZIPF:g} requests per hour (Zipf by rank), Gamma renewal arrivals "
        f"(CV {TAIL_CV:g}), lengths drawn from azure-conv, seed {seed}",
    )
    return replace(tr, duration=max(duration_s, tr.duration), notes=notes)


def tail_name(k: int) -> str:
    return f"tail-{k:02d}"


def workload(target_set: str = "loose", seed: int = 0, n_services: int = N_SERVICES,
             duration_s: float = DURATION_S) -> Workload:
    """The many-models workload with the objectives of ``target_set`` (head services by
    their kind, the tail as chat)."""
    if target_set not in TARGETS:
        raise ValueError(f"targets: unknown set {target_set!r}; known: {sorted(TARGETS)}")
    obj = TARGETS[target_set]
    tr = many_models(n_services, seed=seed, duration_s=duration_s)
    kinds = {name: kind for name, _, _, kind in HEAD}
    m = step_model()
    tenants = tuple(Tenant(name, m, obj[kinds.get(name, "chat")], max_replicas=MAX_REPLICAS,
                           budget_settable=True)
                    for name in [h[0] for h in HEAD] + [tail_name(k) for k in
                                                       range(1, n_services - len(HEAD) + 1)])
    return Workload(WORKLOAD, tr, tenants)


@dataclass(frozen=True)
class Setting:
    """One run of the scenario: the policy every service gets, and whether an activator
    fronts the services (scale to zero)."""

    label: str
    make: Callable[[Tenant], Policy]
    activator: Activator | None = None


def _operator(scale_to_zero: bool, idle: str | None = None) -> Callable[[Tenant], Policy]:
    def make(t: Tenant) -> Policy:
        return SloOperator(policy_spec(t.objectives, t.max_replicas, scale_to_zero=scale_to_zero,
                                       idle_before_zero=idle))
    return make


def _static(t: Tenant) -> Policy:
    return Static(1)


BASELINE = "slo-operator, minReplicas 1"


def settings(short_idles: Sequence[str] = SHORT_IDLES, activator: Activator | None = None,
             static: bool = True) -> list[Setting]:
    """The runs compared: the first is the baseline every ratio is taken against."""
    act = activator or Activator()
    out = [Setting(BASELINE, _operator(False)),
           Setting("slo-operator, scale to zero (idle default)", _operator(True), act)]
    out += [Setting(f"slo-operator, scale to zero (idle {idle})", _operator(True, idle), act)
            for idle in short_idles]
    if static:
        out.append(Setting("static, 1 replica per service", _static))
    return out


def run_setting(wl: Workload, s: Setting) -> RunResult:
    """Every service of ``wl`` under ``s``."""
    wl = replace(wl, tenants=tuple(replace(t, activator=s.activator) for t in wl.tenants))
    return simulate(wl, {t.name: s.make(t) for t in wl.tenants}, label=s.label)


# --- what a run comes to -------------------------------------------------------------------
def _pooled(results: Sequence[TenantResult], client: bool, start: float) -> float | None:
    """Good (service, window) pairs over pairs with finished (or failed) requests, of the
    windows starting at or after ``start``; ``client``: the client-side windows."""
    good = busy = 0
    for t in results:
        wins = t.client_windows if client and t.client_windows is not None else t.windows
        for w in wins:
            if w.finished and w.start >= start:
                busy += 1
                good += w.good
    return good / busy if busy else None


@dataclass
class Summary:
    """One run over a group of services."""

    label: str
    services: int
    gpu_hours: float
    pod_attainment: float | None  # pooled over (service, window), after the warm-up
    client_attainment: float | None
    cold_starts: int  # wakes that ended with a Ready replica
    held: int  # requests held by the activator and then served
    wait_p50: float | None  # seconds a held request waited (served ones)
    wait_p95: float | None
    wait_max: float | None
    timeouts: int  # 504
    rejected: int  # 429
    at_zero: int  # services that went to zero at least once
    mean_at_zero: float  # services at zero on average over the hour
    requests: int


def summarize(run: RunResult, names: Sequence[str] | None = None,
              warmup_s: float = WARMUP_S) -> Summary:
    """``run`` over the services ``names`` (default: all)."""
    ts = [run.tenants[n] for n in names] if names is not None else list(run.tenants.values())
    waits = [w for t in ts for w in t.held_waits]
    return Summary(
        label=run.policy, services=len(ts), gpu_hours=sum(t.gpu_seconds for t in ts) / 3600,
        pod_attainment=_pooled(ts, False, warmup_s),
        client_attainment=_pooled(ts, True, warmup_s),
        cold_starts=sum(1 for t in ts for c in t.cold_starts if c.served_at is not None),
        held=len(waits), wait_p50=percentile(waits, 0.5), wait_p95=percentile(waits, 0.95),
        wait_max=max(waits) if waits else None,
        timeouts=sum(1 for t in ts for f in t.failed if f.status == 504),
        rejected=sum(1 for t in ts for f in t.failed if f.status == 429),
        at_zero=sum(1 for t in ts if t.zero_s > 0),
        mean_at_zero=sum(t.zero_s for t in ts) / run.sim_s if run.sim_s else 0.0,
        requests=sum(w.arrivals for t in ts for w in t.windows))


@dataclass
class ScenarioResult:
    target_set: str
    workload: Workload
    runs: list[RunResult] = field(default_factory=list)
    cpu_s: float = 0.0

    def groups(self) -> dict[str, list[str]]:
        """Service names: all, the head (from the Azure traces), the tail."""
        names = [t.name for t in self.workload.tenants]
        head = {h[0] for h in HEAD}
        return {"all": names, "head": [n for n in names if n in head],
                "tail": [n for n in names if n not in head]}


def run_scenario(target_set: str = "loose", seed: int = 0, *, wl: Workload | None = None,
                 runs: Sequence[Setting] | None = None,
                 tick: Callable[[str], None] | None = None) -> ScenarioResult:
    """Every setting of :func:`settings` (or ``runs``) on the many-models workload (or
    ``wl``)."""
    wl = wl or workload(target_set, seed)
    res = ScenarioResult(target_set, wl)
    for s in runs if runs is not None else settings():
        run = run_setting(wl, s)
        res.runs.append(run)
        res.cpu_s += run.cpu_s
        if tick:
            tick(s.label)
    return res


# --- the report ------------------------------------------------------------------------------
def _f(v: float | None, fmt: str = ".1f", scale: float = 1.0) -> str:
    return "-" if v is None else format(v * scale, fmt)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def table(res: ScenarioResult, group: str = "all") -> list[str]:
    """One row per run over ``group``'s services, ratios against the first run."""
    names = res.groups()[group]
    sums = [summarize(r, names) for r in res.runs]
    base = sums[0]
    lines = ["| run | GPU-h | x GPU-h | pod-side attainment % | client-side attainment % | "
             "x client-side | services at zero: ever / mean | cold starts | held requests "
             "(% of all) | wait p50 / p95 / max s | 504 | 429 |",
             "|" + "---|" * 12]
    for s in sums:
        share = s.held / s.requests if s.requests else None
        lines.append(
            f"| {s.label} | {s.gpu_hours:.2f} | {_ratio(s.gpu_hours, base.gpu_hours)} | "
            f"{_f(s.pod_attainment, '.1f', 100)} | {_f(s.client_attainment, '.1f', 100)} | "
            f"{_ratio(s.client_attainment, base.client_attainment)} | {s.at_zero} / "
            f"{s.mean_at_zero:.1f} | {s.cold_starts} | {s.held} ({_f(share, '.1f', 100)}) | "
            f"{_f(s.wait_p50)} / {_f(s.wait_p95)} / {_f(s.wait_max)} | {s.timeouts} | "
            f"{s.rejected} |")
    return lines


def render(results: Sequence[ScenarioResult]) -> str:
    """The Markdown report of the scenario."""
    first = results[0]
    wl = first.workload
    act = Activator()
    cpu = sum(r.cpu_s for r in results)
    lines = [
        "# Scale to zero: many models, mostly idle", "",
        f"Generated by `slo-operator bench --scenario {NAME}`; method and assumptions: "
        "`docs/benchmark.md` (Scale to zero).", "",
        f"- workload `{WORKLOAD}`: {len(wl.tenants)} services, "
        f"{len(wl.trace.requests):,} requests over {wl.trace.duration / 60:.0f} min",
        *[f"- {n}" for n in wl.trace.notes],
        "- every service starts warm with 1 replica, at most "
        f"{wl.tenants[0].max_replicas}; Llama-3.1-8B BF16 on one H200 per replica, cold "
        f"start {wl.tenants[0].model.cold_start_s:.0f} s (the step model's)",
        f"- scale to zero: an activator per service with the cluster's defaults (queue "
        f"{act.queue}, timeout {act.timeout_s:g} s from the first held request, wake count "
        f"updates every {act.update_interval_s:g} s at most); each wake runs the operator's "
        "decision at once; idle default = the longer of the 60 s window and the 300 s "
        "scale-down stabilization",
        f"- attainment: good (service, 1-minute window) pairs over pairs with requests, "
        f"windows starting after {WARMUP_S / 60:.0f} min, pooled over the services. "
        "Pod-side: what the cluster's SLO windows judge (a held request from when the "
        "activator forwarded it). Client-side: from when the client sent it; a window with "
        "a 504 or 429 is not good",
        "- wait: seconds from a held request's arrival to its forward (served wakes); "
        "x columns: ratio to the first row",
        f"- the scenario took {cpu:.0f} s of CPU", ""]
    for res in results:
        obj = TARGETS[res.target_set]
        lines += [f"## {res.target_set} targets (chat: {obj['chat'].describe()}; code: "
                  f"{obj['code'].describe()})", ""]
        for group, title in (("all", "All services"), ("head", "Head (Azure traces)"),
                             ("tail", "Tail (Zipf)")):
            n = len(res.groups()[group])
            if n:
                lines += [f"### {title}: {n} services", "", *table(res, group), ""]
    return "\n".join(lines).rstrip() + "\n"


def write(results: Sequence[ScenarioResult], out: Path) -> Path:
    """Write ``out/scale-to-zero.md`` (a report of its own; the main report is untouched)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{NAME}.md"
    path.write_text(render(results))
    return path
