"""``slo-operator bench``: run the benchmark with a progress bar and write the report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from slo_operator.sim.bench import TARGETS, TRACES, WorkloadResult, run_workload, steps_per_workload
from slo_operator.sim.report import render


def run(traces: Sequence[str], target_sets: Sequence[str], out: Path, seed: int = 0) -> Path:
    """Every (trace, target set) pair; the report and plots go to ``out``."""
    for t in traces:
        if t not in TRACES:
            raise ValueError(f"--trace: unknown workload {t!r}; known: {', '.join(TRACES)}")
    for s in target_sets:
        if s not in TARGETS:
            raise ValueError(f"--targets: unknown set {s!r}; known: {', '.join(TARGETS)}")
    cpu0 = time.process_time()
    results: list[WorkloadResult] = []
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    with Progress(*cols) as bar:
        task = bar.add_task("bench", total=len(traces) * len(target_sets) * steps_per_workload())
        for t in traces:
            for s in target_sets:
                def tick(what: str, t: str = t, s: str = s) -> None:
                    bar.update(task, advance=1, description=f"{t} [{s}] {what}")
                results.append(run_workload(t, s, seed, tick))
    return render(results, out, time.process_time() - cpu0)
