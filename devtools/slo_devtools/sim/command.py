"""``slo-operator bench``: run the benchmark with a progress bar and write the report (the
built-in workloads, or your own traffic through :mod:`slo_devtools.sim.user_trace`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from slo_devtools.sim import fleet, scale_to_zero
from slo_devtools.sim.bench import (
    PROFILE_FLEET,
    WorkloadResult,
    check_names,
    run_workload,
    runs,
    steps_per_workload,
)
from slo_devtools.sim.policies import Objectives
from slo_devtools.sim.report import render
from slo_devtools.sim.run import Workload
from slo_devtools.sim.user_trace import TrafficSpec, objective_sets, prepare

SCENARIOS = ("slo", "mixed-fleet", "scale-to-zero")


def check(traces: Sequence[str], target_sets: Sequence[str],
          fleets: Sequence[str] = ()) -> None:
    """Reject unknown workload, target-set or fleet names, naming the option."""
    check_names(traces, target_sets, fleets)


# (workload key, target set, the workload if built, fleet)
Item = tuple[str, str, Workload | None, str]


def _one(args: tuple[str, str, int, Workload | None, str]) -> WorkloadResult:
    key, target_set, seed, wl, fleet_name = args
    return run_workload(key, target_set, seed, wl=wl, fleet=fleet_name)


def _label(t: str, s: str, f: str) -> str:
    return f"{t} [{s}]" if f == PROFILE_FLEET else f"{t} [{s}, {f}]"


def _compute(items: Sequence[Item], seed: int, jobs: int,
             tick: Callable[[str, int], None] | None) -> list[WorkloadResult]:
    if jobs <= 1:
        out = []
        for t, s, wl, f in items:
            def step(what: str, label: str = _label(t, s, f)) -> None:
                if tick:
                    tick(f"{label} {what}", 1)
            out.append(run_workload(t, s, seed, step, wl=wl, fleet=f))
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_one, (t, s, seed, wl, f)) for t, s, wl, f in items]
        results = []
        for (t, s, _, f), fut in zip(items, futures, strict=True):
            results.append(fut.result())
            if tick:
                tick(f"{_label(t, s, f)} done", steps_per_workload())
        return results


def _items(traces: Sequence[str], target_sets: Sequence[str],
           fleets: Sequence[str] | None) -> list[Item]:
    check(traces, target_sets, fleets or ())
    return [(t, s, None, f) for t, s, f in runs(traces, target_sets, fleets or None)]


def compute(traces: Sequence[str], target_sets: Sequence[str], seed: int = 0, jobs: int = 1,
            tick: Callable[[str, int], None] | None = None,
            fleets: Sequence[str] | None = None) -> list[WorkloadResult]:
    """Every (trace, target set, fleet) of :func:`bench.runs`, in order; ``jobs`` > 1
    runs them in processes (results are identical: every run is seeded)."""
    return _compute(_items(traces, target_sets, fleets), seed, jobs, tick)


def writable(out: Path) -> None:
    """Create an output folder before any work (a simulation, the demo's cluster), so a
    long run never ends in results it cannot write; ValueError naming ``--out`` if not."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out: cannot create {out}: {err.strerror or err}") from err


def _report(items: Sequence[Item], out: Path, seed: int, jobs: int) -> Path:
    """Compute with a progress bar, then write the report and plots to ``out``."""
    writable(out)
    cpu0 = time.process_time()
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    with Progress(*cols) as bar:
        task = bar.add_task("bench", total=len(items) * steps_per_workload())

        def tick(what: str, n: int) -> None:
            bar.update(task, advance=n, description=what)

        results = _compute(items, seed, jobs, tick)
    cpu = time.process_time() - cpu0
    if jobs > 1:
        cpu = sum(e.run.cpu_s for r in results for e in r.entries)
    kept = _fleet_section(out / "report.md")
    path = render(results, out, cpu)
    if kept:
        fleet.upsert(path, kept)  # the mixed-fleet scenario's section survives a rerun
    return path


def run(traces: Sequence[str], target_sets: Sequence[str], out: Path, seed: int = 0,
        jobs: int = 1, fleets: Sequence[str] | None = None) -> Path:
    """Compute with a progress bar, then write the report and plots to ``out``."""
    return _report(_items(traces, target_sets, fleets), out, seed, jobs)


def run_traffic(spec: TrafficSpec, objectives: Objectives | None, target_sets: Sequence[str],
                out: Path, jobs: int = 1, warn: Callable[[str], None] | None = None,
                fleets: Sequence[str] = ()) -> Path:
    """The user's trace or rate file (``spec``) judged by ``objectives``, else by the chat
    objectives of each of ``target_sets``, on each of ``fleets`` (default: replicas as the
    profile says): the same report and plots as the built-in workloads. What the file
    loses (requests no replica could serve) goes to ``warn``."""
    check([], target_sets, fleets)
    prepared = prepare(spec)
    for w in prepared.warnings:
        if warn:
            warn(w)
    items: list[Item] = [(wl.name, s, wl, f) for s, wl in
                         prepared.workloads(objective_sets(objectives, target_sets))
                         for f in (dict.fromkeys(fleets) or (PROFILE_FLEET,))]
    return _report(items, out, spec.seed, jobs)


def _fleet_section(path: Path) -> str:
    text = path.read_text() if path.exists() else ""
    if fleet.BEGIN not in text or fleet.END not in text:
        return ""
    return fleet.BEGIN + text.split(fleet.BEGIN, 1)[1].split(fleet.END, 1)[0] + fleet.END + "\n"


def run_fleet(target_sets: Sequence[str], out: Path, seed: int = 0) -> Path:
    """The mixed-fleet scenario for each target set, with a progress bar; its section is
    written into ``out/report.md`` (replacing the previous one, other sections kept)."""
    check([], target_sets)
    writable(out)
    cpu0 = time.process_time()
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    results = []
    with Progress(*cols) as bar:
        task = bar.add_task(fleet.NAME, total=len(target_sets) * len(fleet.runs()))
        for s in target_sets:
            def tick(what: str, s: str = s) -> None:
                bar.update(task, advance=1, description=f"{fleet.NAME} [{s}] {what}")
            results.append(fleet.run_fleet(s, seed, tick=tick))
    return fleet.write(results, out, time.process_time() - cpu0)


def run_scale_to_zero(target_sets: Sequence[str], out: Path, seed: int = 0) -> Path:
    """The scale-to-zero scenario (many models, mostly idle) for each target set, with a
    progress bar; written to ``out/scale-to-zero.md`` (the main report is untouched)."""
    check([], target_sets)
    writable(out)
    runs = scale_to_zero.settings()
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    results = []
    with Progress(*cols) as bar:
        task = bar.add_task(scale_to_zero.NAME, total=len(target_sets) * len(runs))
        for s in target_sets:
            def tick(what: str, s: str = s) -> None:
                bar.update(task, advance=1, description=f"{scale_to_zero.NAME} [{s}] {what}")
            results.append(scale_to_zero.run_scenario(s, seed, runs=runs, tick=tick))
    return scale_to_zero.write(results, out)
