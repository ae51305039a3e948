"""The benchmark report: a Markdown page and PNG plots per workload, target set and fleet.

The reference oracle (``sim.oracle``: perfect foresight, greedy per-window search) is what
GPU-hours are compared with ("x reference"); the lower bound beside it, where the oracle
computes one, is a floor no schedule can go under. Verdicts check the benchmark's targets
per section: the operator's worst tenant meets the attainment target after the warm-up
(>= 99% of windows; >= 98% on the long-context workload) and no peer at its best sweep
point is both cheaper and at >= that attainment; on the day-shaped load (servegen-day) the
operator uses <= 1.2x the reference's GPU-hours, on the long-context workload <= 1.3x,
with the gap to the lower bound stated.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from pathlib import Path

from slo_devtools.sim.bench import (
    ATTAINMENT_TARGET,
    FLEETS,
    HELD_OUT,
    MAX_REPLICAS,
    PROFILE_FLEET,
    WorkloadResult,
)
from slo_devtools.sim.run import WARMUP_S, RunResult, TenantResult

# Per-workload targets: attainment after the warm-up, and GPU-hours against the reference.
LONG_CONTEXT_ATTAINMENT = 0.98
REFERENCE_RATIO = {"servegen-day": 1.2, "long-context": 1.3}

PEERS = ("keda-waiting", "keda-outstanding", "knative-kpa", "llm-d-slo", "llm-d-wva",
         "aibrix-apa", "dynamo-planner")
SOURCES = {
    "keda-waiting": "KEDA Prometheus scaler on sum(vllm:num_requests_waiting), AverageValue "
                    "threshold swept (1, 4); HPA v2 defaults: every 15 s, tolerance 10%, "
                    "scale-up max(2x, +4 pods), scale-down stabilization 300 s; 1..16 replicas",
    "keda-outstanding": "same on running + waiting (outstanding requests), threshold swept "
                        "(16, 32, 64)",
    "knative-kpa": "Knative KPA: in-flight requests per pod, target swept (16, 32, 64), "
                   "stable 60 s / panic 6 s windows sampled every 2 s, panic at 200%, "
                   "scale-down at most halving",
    "llm-d-slo": "llm-d SLO-aware rule: max(P90 TTFT/SLO, P90 TPOT/SLO) over 45 s, "
                 "out > 0.55 (+1 per 15 s), in < 0.40 (after 300 s, -1 per 120 s)",
    "llm-d-wva": "llm-d WVA saturation analyzer every 30 s: saturated at KV 0.8 or queue 5, "
                 "out when mean spare KV < 0.1 or spare queue < 3",
    "aibrix-apa": "AIBrix APA on in-flight requests per ready pod, target swept (16, 32): "
                  "ceil(N x cur/target) outside +-10%, <= 2N, >= N/2, 300 s scale-down delay",
    "dynamo-planner": "Dynamo throughput planner: every 180 s, constant predictor, profiled "
                      "prefill/decode throughput at the TTFT/ITL targets, TTFT correction",
}


def _f(x: float | None, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:,.0f}"


def _med(ws: TenantResult, attr: str) -> float | None:
    vals = [getattr(w, attr) for w in ws.windows if getattr(w, attr) is not None]
    return statistics.median(vals) if vals else None


def lower_bound(res: WorkloadResult) -> float | None:
    """The oracle's lower bound on GPU-hours, where it computes one."""
    lb = getattr(res.oracle, "lower_bound_gpu_hours", None)
    return float(lb) if lb else None


def _ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}" if b else "-"


def _row(label: str, run: RunResult, static: RunResult, orc: RunResult,
         lb: float | None = None) -> str:
    e2e = " / ".join(_ms(t.e2e_p99) for t in run.tenants.values())
    ttft = " / ".join(_ms(t.ttft_p95) for t in run.tenants.values())
    itl = [v for t in run.tenants.values() if (v := _med(t, "itl_p99")) is not None]
    jit = [v for t in run.tenants.values() if (v := _med(t, "jitter")) is not None]
    att = " / ".join(f"{t.attainment * 100:.1f}" for t in run.tenants.values())
    warm = " / ".join(f"{t.warm_attainment * 100:.1f}" for t in run.tenants.values())
    budget = " / ".join(f"{t.budget}" + (f" ({t.budget_changes} changes)" if t.budget_changes
                                         else "") for t in run.tenants.values())
    hits = " / ".join("-" if t.prefix_hit_share is None else f"{t.prefix_hit_share * 100:.0f}"
                      for t in run.tenants.values())
    return (f"| {label} | {att} | {warm} | {run.gpu_hours:.2f} | {run.mean_replicas:.2f} | "
            f"{run.gpu_hours / static.gpu_hours:.2f} | {run.gpu_hours / orc.gpu_hours:.2f} | "
            f"{_ratio(run.gpu_hours, lb)} | "
            f"{run.scale_actions} | {run.limit_changes} | {budget} | {hits} | {e2e} | {ttft} | "
            f"{max(itl) * 1e3 if itl else 0:.0f} | "
            f"{max(jit) if jit else 0:.2f} |")


def _dist(run: RunResult, attr: str, scale: float, nd: int) -> str:
    """p50 / p90 / max over every tenant's windows of one per-window statistic."""
    vals = sorted(getattr(w, attr) * scale for t in run.tenants.values() for w in t.windows
                  if getattr(w, attr) is not None)
    if not vals:
        return "-"
    pick = [vals[int(q * (len(vals) - 1))] for q in (0.5, 0.9)] + [vals[-1]]
    return " / ".join(f"{v:,.{nd}f}" for v in pick)


DIST_HEADER = ("| policy | window P99 e2e ms | window P95 TTFT ms | window P99 ITL ms | "
               "window jitter |\n|---|---|---|---|---|")


def _dist_row(label: str, run: RunResult) -> str:
    return (f"| {label} | {_dist(run, 'e2e_p99', 1e3, 0)} | {_dist(run, 'ttft_p95', 1e3, 0)} | "
            f"{_dist(run, 'itl_p99', 1e3, 1)} | {_dist(run, 'jitter', 1.0, 2)} |")


HEADER = ("| policy | SLO attainment % (per tenant) | after warm-up % | GPU-h | "
          "mean replicas | x static | x reference | x lower bound | scale actions | "
          "limit changes | chunk budget | prefix hits % | P99 e2e ms (per tenant) | "
          "P95 TTFT ms (per tenant) | worst tenant's median window P99 ITL ms | "
          "worst tenant's median window jitter |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def attainment_target(res: WorkloadResult) -> float:
    """The attainment (after the warm-up) the workload is held to."""
    return LONG_CONTEXT_ATTAINMENT if res.workload.name == "long-context" else \
        ATTAINMENT_TARGET


def verdict(res: WorkloadResult) -> list[str]:
    """The benchmark's targets for this workload, target set and fleet, each met or
    missed, with the figures."""
    key = res.workload.name
    op = res.best("slo-operator").run
    ref = res.oracle.run
    lb = lower_bound(res)
    warm = op.min_warm_attainment
    target = attainment_target(res)
    lines = []

    def check(ok: bool, text: str) -> None:
        lines.append(f"- {'MET' if ok else 'MISSED'}: {text}")

    reach = max((t[2] for t in res.static_trials), default=None)
    within = (f"; the best static cluster simulated, up to {MAX_REPLICAS} replicas a tenant, "
              f"reached {reach * 100:.1f}% of all windows and the reference oracle "
              f"{ref.min_warm_attainment * 100:.1f}% after the warm-up"
              if reach is not None and reach < target else "")
    check(warm >= target,
          f"attainment after the {WARMUP_S / 60:.0f}-minute warm-up {warm * 100:.1f}% of "
          f"windows, worst tenant (all windows: {op.min_attainment * 100:.1f}%; target >= "
          f"{target * 100:.0f}%){within}")
    beaten = []
    for fam in PEERS:
        b = res.best(fam).run
        if b.min_warm_attainment >= warm and b.gpu_hours < op.gpu_hours:
            beaten.append(f"{b.policy} ({b.gpu_hours:.2f} GPU-h at "
                          f"{b.min_warm_attainment * 100:.1f}%)")
    check(not beaten, f"no peer at its best sweep point is both cheaper than the operator's "
                      f"{op.gpu_hours:.2f} GPU-h and at >= its {warm * 100:.1f}%"
          + (f"; beaten by {', '.join(beaten)}" if beaten else ""))
    limit = REFERENCE_RATIO.get(key)
    r_ref = op.gpu_hours / ref.gpu_hours
    gap = (f"lower bound {lb:.2f} GPU-h: operator {op.gpu_hours / lb:.2f}x, reference "
           f"{ref.gpu_hours / lb:.2f}x" if lb else "no lower bound computed")
    if limit is not None:
        check(r_ref <= limit, f"{r_ref:.2f}x the reference oracle's {ref.gpu_hours:.2f} "
                              f"GPU-h (target <= {limit:g}x); {gap}")
    else:
        lines.append(f"- {r_ref:.2f}x the reference oracle's {ref.gpu_hours:.2f} GPU-h; {gap}")
    return lines


def summary_row(res: WorkloadResult) -> str:
    """One line of the summary table: the operator's figures and its verdicts."""
    op = res.best("slo-operator").run
    met = [v.startswith("- MET") for v in verdict(res) if v.startswith(("- MET", "- MISSED"))]
    cheapest = [res.best(f).run for f in PEERS]
    ok = [r for r in cheapest if r.min_warm_attainment >= attainment_target(res)]
    peer = min(ok, key=lambda r: r.gpu_hours) if ok else None
    return (f"| {res.workload.name} | {res.target_set} | {res.fleet} | "
            f"{op.min_warm_attainment * 100:.1f} ({op.min_attainment * 100:.1f}) | "
            f"{op.gpu_hours:.2f} | {op.gpu_hours / res.oracle.run.gpu_hours:.2f} | "
            f"{_ratio(op.gpu_hours, lower_bound(res))} | "
            + (f"{peer.policy} {peer.gpu_hours:.2f}" if peer else "none")
            + f" | {sum(met)} of {len(met)} |")


SUMMARY_HEADER = ("| workload | targets | fleet | slo-operator attainment % after warm-up "
                  "(all windows) | GPU-h | x reference | x lower bound | cheapest peer at "
                  "the target | targets met |\n|---|---|---|---|---|---|---|---|---|")


def section_name(res: WorkloadResult) -> str:
    """File-name stem of a section: workload, target set and (other than the profile's)
    fleet."""
    stem = f"{res.workload.name.replace(',', '+')}-{res.target_set}"
    return stem if res.fleet == PROFILE_FLEET else f"{stem}-{res.fleet}"


# File systems allow 255 bytes a name; a trace file's name and its tenants' names are the
# user's, so a plot's name is cut well below that, with a digest keeping names apart.
PLOT_NAME_MAX = 120


def plot_name(res: WorkloadResult, tenant: str) -> str:
    """The PNG's file name for one tenant of a section, at most :data:`PLOT_NAME_MAX`
    characters (a long one keeps its start and gains a digest of the whole)."""
    stem = f"{section_name(res)}-{tenant}"
    if len(stem) + len(".png") <= PLOT_NAME_MAX:
        return f"{stem}.png"
    digest = hashlib.sha256(stem.encode()).hexdigest()[:10]
    return f"{stem[:PLOT_NAME_MAX - len(digest) - len('-.png')]}-{digest}.png"


def plot(res: WorkloadResult, out: Path) -> list[str]:
    """One PNG per tenant: load, replicas, P99 e2e and P95 TTFT per window vs target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    runs = [("reference oracle", res.oracle.run), ("static", res.static),
            ("slo-operator", res.best("slo-operator").run),
            ("llm-d-slo", res.best("llm-d-slo").run),
            ("best KEDA", min((res.best(f) for f in ("keda-waiting", "keda-outstanding")),
                              key=lambda e: (-(e.run.min_warm_attainment >= ATTAINMENT_TARGET),
                                             e.run.gpu_hours)).run)]
    for t in res.workload.tenants:
        fig, ax = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
        base = runs[0][1].tenants[t.name]
        mins = [w.start / 60 for w in base.windows]
        ax[0].plot(mins, [w.arrivals / 60 for w in base.windows], color="black")
        ax[0].set_ylabel("arrivals (req/s)")
        ax[0].set_title(f"{res.workload.name} [{res.target_set}, fleet {res.fleet}] - {t.name}")
        for label, run in runs:
            tr = run.tenants[t.name]
            ax[1].step([s[0] / 60 for s in tr.series], [s[1] for s in tr.series],
                       where="post", label=f"{label} ({run.gpu_hours:.1f} GPU-h)")
            ax[2].plot(mins, [w.e2e_p99 if w.e2e_p99 is not None else float("nan")
                              for w in tr.windows], label=label)
            ax[3].plot(mins, [w.ttft_p95 if w.ttft_p95 is not None else float("nan")
                              for w in tr.windows], label=label)
        ax[1].set_ylabel("replicas (incl. starting)")
        ax[1].legend(fontsize=8)
        ax[2].axhline(t.objectives.e2e_ms / 1e3, color="red", ls="--", lw=1)
        ax[2].set_ylabel("P99 e2e (s)")
        ax[2].set_yscale("log")
        ax[3].axhline(t.objectives.ttft_ms / 1e3, color="red", ls="--", lw=1)
        ax[3].set_ylabel("P95 TTFT (s)")
        ax[3].set_yscale("log")
        ax[3].set_xlabel("minutes")
        ax[2].legend(fontsize=8)
        fig.tight_layout()
        name = plot_name(res, t.name)
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        files.append(name)
    return files


def render(results: Sequence[WorkloadResult], out: Path, cpu_s: float) -> Path:
    """Write ``report.md`` and the plots into ``out``; return the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# slo-operator benchmark report", "",
             "Generated by `slo-operator bench`; method and assumptions: "
             "`docs/benchmark.md`. Every policy ran on the same trace, seed and simulator; "
             "attainment is judged per tenant over 1-minute windows from exact latencies "
             "(a window is good when every objective holds), over all windows and over "
             f"those after a {WARMUP_S / 60:.0f}-minute warm-up. At most {MAX_REPLICAS} "
             "replicas per service for every policy; all start from the reference oracle's "
             "first-minute replicas, warm. GPU-hours are compared with the reference oracle "
             "(perfect foresight) and, where computed, a lower bound no schedule goes under. "
             "Fleets: " + "; ".join(f"`{k}` {v}" for k, v in FLEETS.items())
             + " (policies always see the profile; the reference oracle and static run on "
             "the true fleet).", ""]
    sim_s = sum(e.run.sim_s * len(e.run.tenants) for r in results for e in r.entries)
    run_cpu = sum(e.run.cpu_s for r in results for e in r.entries)
    lines.append(f"Simulated {sim_s / 3600:.1f} service-hours of policy runs in {run_cpu:.0f} s "
                 f"of CPU ({sim_s / max(run_cpu, 1e-9):.0f}x faster than real time); the "
                 f"whole report took {cpu_s:.0f} s of CPU.")
    lines += ["", "## Summary", "", SUMMARY_HEADER, *(summary_row(r) for r in results), ""]
    for res in results:
        wl = res.workload
        held = " (held out: not used to tune the control law)" if wl.name in HELD_OUT else ""
        lines += [f"## {wl.name} - {res.target_set} targets - fleet {res.fleet}{held}", ""]
        lines.append(f"- fleet `{res.fleet}`: {FLEETS.get(res.fleet, res.fleet)}")
        lines += [f"- {n}" for n in wl.trace.notes]
        lines.append(f"- {res.n_requests:,} requests over "
                     f"{wl.trace.duration / 60:.0f} min")
        for t in wl.tenants:
            lines.append(f"- objectives of {t.name}: {t.objectives.describe()}")
        lines.append(f"- static: {', '.join(f'{k} {v}' for k, v in res.static_n.items())} "
                     f"replicas; reference oracle replay rounds: {res.oracle.rounds}")
        lb = lower_bound(res)
        lines.append(f"- reference oracle {res.oracle.run.gpu_hours:.2f} GPU-h; lower bound "
                     + (f"{lb:.2f} GPU-h" if lb else "not computed"))
        trials = "; ".join(
            f"{'+'.join(str(v) for v in n.values())}: {g:.2f} GPU-h at {a * 100:.1f}%"
            for n, g, a in sorted(res.static_trials, key=lambda t: t[1]))
        lines.append(f"- static clusters simulated (replicas per tenant): {trials}")
        lines += ["", "Verdict against the benchmark's targets:", "", *verdict(res), ""]
        lines.append(HEADER)
        st, orc = res.static, res.oracle.run
        lines.append(_row("reference oracle (perfect foresight)", orc, st, orc, lb))
        lines.append(_row("static (smallest meeting the target)", st, st, orc, lb))
        for fam in res.families():
            e = res.best(fam)
            lines.append(_row(f"{e.run.policy}" + (" **best of sweep**" if sum(
                1 for x in res.entries if x.family == fam) > 2 else ""), e.run, st, orc, lb))
        for e in res.entries:
            if e.routing == "central":
                lines.append(_row(e.run.policy, e.run, st, orc, lb))
        lines += ["", "Distributions over 1-minute windows (p50 / p90 / max, all tenants):", "",
                  DIST_HEADER, _dist_row("reference oracle", orc), _dist_row("static", st)]
        lines += [_dist_row(res.best(f).run.policy, res.best(f).run) for f in res.families()]
        lines += ["", "<details><summary>All runs (sweeps)</summary>", "", HEADER]
        for e in res.entries:
            lines.append(_row(e.run.policy + (" (central)" if e.routing == "central" else ""),
                              e.run, st, orc, lb))
        lines += ["", "</details>", ""]
        for name in plot(res, out):
            lines += [f"![{name}]({name})", ""]
    lines += ["## Peer rules as re-implemented", ""]
    lines += [f"- `{k}`: {v}" for k, v in SOURCES.items()]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
