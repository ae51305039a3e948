"""``slo-operator bench``: run the benchmark with a progress bar and write the report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from slo_devtools.sim import fleet
from slo_devtools.sim.bench import (
    TARGETS,
    TRACES,
    WorkloadResult,
    run_workload,
    steps_per_workload,
)
from slo_devtools.sim.report import render

SCENARIOS = ("slo", "mixed-fleet")


def check(traces: Sequence[str], target_sets: Sequence[str]) -> None:
    """Reject unknown workload or target-set names, naming the option."""
    for t in traces:
        if t not in TRACES:
            raise ValueError(f"--trace: unknown workload {t!r}; known: {', '.join(TRACES)}")
    for s in target_sets:
        if s not in TARGETS:
            raise ValueError(f"--targets: unknown set {s!r}; known: {', '.join(TARGETS)}")


def _one(args: tuple[str, str, int]) -> WorkloadResult:
    return run_workload(*args)


def compute(traces: Sequence[str], target_sets: Sequence[str], seed: int = 0, jobs: int = 1,
            tick: Callable[[str, int], None] | None = None) -> list[WorkloadResult]:
    """Every (trace, target set) pair, in order; ``jobs`` > 1 runs pairs in processes
    (results are identical: every run is seeded)."""
    check(traces, target_sets)
    pairs = [(t, s, seed) for t in traces for s in target_sets]
    if jobs <= 1:
        out = []
        for t, s, sd in pairs:
            def step(what: str, t: str = t, s: str = s) -> None:
                if tick:
                    tick(f"{t} [{s}] {what}", 1)
            out.append(run_workload(t, s, sd, step))
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_one, p) for p in pairs]
        results = []
        for p, f in zip(pairs, futures, strict=True):
            results.append(f.result())
            if tick:
                tick(f"{p[0]} [{p[1]}] done", steps_per_workload())
        return results


def run(traces: Sequence[str], target_sets: Sequence[str], out: Path, seed: int = 0,
        jobs: int = 1) -> Path:
    """Compute with a progress bar, then write the report and plots to ``out``."""
    check(traces, target_sets)
    cpu0 = time.process_time()
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    with Progress(*cols) as bar:
        task = bar.add_task("bench", total=len(traces) * len(target_sets) * steps_per_workload())

        def tick(what: str, n: int) -> None:
            bar.update(task, advance=n, description=what)

        results = compute(traces, target_sets, seed, jobs, tick)
    cpu = time.process_time() - cpu0
    if jobs > 1:
        cpu = sum(e.run.cpu_s for r in results for e in r.entries)
    kept = _fleet_section(out / "report.md")
    path = render(results, out, cpu)
    if kept:
        fleet.upsert(path, kept)  # the mixed-fleet scenario's section survives a rerun
    return path


def _fleet_section(path: Path) -> str:
    text = path.read_text() if path.exists() else ""
    if fleet.BEGIN not in text or fleet.END not in text:
        return ""
    return fleet.BEGIN + text.split(fleet.BEGIN, 1)[1].split(fleet.END, 1)[0] + fleet.END + "\n"


def run_fleet(target_sets: Sequence[str], out: Path, seed: int = 0) -> Path:
    """The mixed-fleet scenario for each target set, with a progress bar; its section is
    written into ``out/report.md`` (replacing the previous one, other sections kept)."""
    check([], target_sets)
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
