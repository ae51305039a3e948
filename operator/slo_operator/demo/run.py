"""``slo-operator demo``: start everything, replay the trace, watch, summarize, clean up."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live

from slo_operator.demo import scenario, timeline, view
from slo_operator.demo.build import ensure_binaries, format_duration
from slo_operator.demo.plots import plot_all
from slo_operator.demo.stack import Stack, policy_of
from slo_operator.sim.traces import Trace

SAMPLE_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Options:
    duration: float | None  # wall seconds of replay (None: the whole trace at this speed)
    trace: str | None  # one trace for every tenant (None: each tenant's own)
    speed: float  # trace seconds per wall second
    out: Path | None  # results folder (None: ./_out/demo-<timestamp>)
    keep: bool  # leave the cluster up at the end until Ctrl-C


def default_out(now: dt.datetime) -> Path:
    """``_out/demo-<UTC timestamp>`` under the current directory."""
    return Path("_out") / f"demo-{now:%Y%m%dT%H%M%SZ}"


class Interrupted(Exception):
    """SIGTERM, turned into the same orderly shutdown as Ctrl-C."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """Shield the cleanup from a second Ctrl-C (it would leave processes behind)."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def run_demo(opts: Options, console: Console) -> Path:
    """Run the whole demo; return the results folder."""
    t_start = time.monotonic()
    tenants = scenario.tenants(opts.trace)
    manifests = scenario.manifests(tenants)
    traces = {t.service: scenario.load(t, opts.speed, opts.duration) for t in tenants}
    duration = opts.duration or max(tr.duration for tr in traces.values())
    out = (opts.out or default_out(dt.datetime.now(dt.UTC))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    console.print(f"[bold]slo-operator demo[/]: results will be written to {out}")
    for svc, tr in traces.items():
        console.print(f"  {svc} <- {tr.name}: {len(tr.requests)} requests in "
                      f"{format_duration(tr.duration)}, time compressed x{opts.speed:g} "
                      f"(rate factor x{tr.rate_factor:g} against the source)")

    samples: list[timeline.Sample] = []
    startup: dict[str, float] = {}
    interrupted = False
    with _terminate_as_interrupt():
        try:
            t0 = time.monotonic()
            binaries = ensure_binaries(scenario.ROOT, console)
            startup["binaries"] = round(time.monotonic() - t0, 2)
            stack = Stack(binaries, console, out)
            try:
                notes = _start(stack, manifests)
                startup.update(stack.timings.phases)
                startup["total_to_replay"] = round(time.monotonic() - t_start, 2)
                console.print(f"Ready to replay after {format_duration(startup['total_to_replay'])}"
                              " (binaries, control plane, chart, operator, tenants).")
                samples = _watch(stack, traces, duration, opts.speed, notes, console)
                if opts.keep:
                    _keep(stack, console)
            finally:
                with _no_interrupts():
                    console.print("Stopping every process the demo started...")
                    stack.close()
        except (KeyboardInterrupt, Interrupted):
            interrupted = True
            console.print("[yellow]Interrupted: everything the demo started has been stopped.[/]")
    _report(out, samples, traces, opts, duration, startup, interrupted, console)
    return out


def _start(stack: Stack, manifests: Sequence[Path]) -> tuple[str, ...]:
    """Start the stack; return notes about parts this checkout cannot start yet."""
    notes: list[str] = []
    stack.start_cluster()
    prometheus_url = None  # the Prometheus runner plugs in here
    notes.append("Prometheus, replica models and trace replay are not started by this "
                 "checkout yet: load is the trace's offered rate; latencies stay empty.")
    _, sa = stack.install_chart()
    stack.start_operator(sa, prometheus_url)
    stack.apply_tenants(manifests)
    return tuple(notes)


def _watch(stack: Stack, traces: dict[str, Trace], duration: float, speed: float,
           notes: tuple[str, ...], console: Console) -> list[timeline.Sample]:
    arrivals = {svc: [r.t for r in tr.requests] for svc, tr in traces.items()}
    names = ", ".join(f"{svc} <- {tr.name}" for svc, tr in traces.items())
    samples: list[timeline.Sample] = []
    latest: dict[str, timeline.Sample] = {}
    stop = threading.Event()
    t0 = time.monotonic()

    def header(elapsed: float) -> view.Header:
        return view.Header(elapsed, duration, speed, names, notes)

    with Live(view.render([], header(0.0)), console=console, refresh_per_second=2,
              transient=False) as live:
        while True:
            elapsed = time.monotonic() - t0
            stack.check_operator()
            svcs, policies = stack.list_objects()
            for svc in svcs:
                key = timeline.service_key(svc)
                offered = (timeline.offered_rate(arrivals[key], elapsed, scenario.LOAD_WINDOW_S)
                           if key in arrivals else None)
                s = timeline.sample(elapsed, svc, policy_of(svc, policies), offered)
                samples.append(s)
                latest[key] = s
            live.update(view.render(list(latest.values()), header(elapsed)))
            if elapsed >= duration:
                break
            stop.wait(min(SAMPLE_INTERVAL_S, max(0.0, duration - elapsed)))
    return samples


def _keep(stack: Stack, console: Console) -> None:
    kc = stack.cluster.kubeconfig
    console.print(f"""
[bold]The cluster stays up until Ctrl-C.[/] In another terminal:

  export KUBECONFIG={kc}
  {stack.binaries.kubectl} get infsvc -A -w
  {stack.binaries.kubectl} describe infsvc -n tenant-chat chat
  {stack.binaries.kubectl} get slo -A
  {stack.binaries.kubectl} edit slo -n tenant-chat chat-gold   # change an objective
  {stack.binaries.kubectl} get pods -A -o wide
""")
    # Ctrl-C is the normal way out of --keep, not an interruption of the demo.
    with contextlib.suppress(KeyboardInterrupt, Interrupted):
        while True:
            stack.check_operator()
            time.sleep(1.0)


def _report(out: Path, samples: Sequence[timeline.Sample], traces: dict[str, Trace],
            opts: Options, duration: float, startup: dict[str, float], interrupted: bool,
            console: Console) -> None:
    summaries = timeline.summarize(samples)
    doc: dict[str, Any] = {
        "interrupted": interrupted,
        "speed": opts.speed,
        "duration_s": duration,
        "traces": {svc: {"name": tr.name, "requests": len(tr.requests),
                         "rate_factor": tr.rate_factor, "notes": list(tr.notes)}
                   for svc, tr in traces.items()},
        "startup_s": startup,
        "services": [s.to_json() for s in summaries],
    }
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    with (out / "samples.jsonl").open("w") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")
    if summaries:
        console.print(view.summary_table(summaries))
        plots = plot_all(samples, out, opts.speed)
        console.print("Plots: " + ", ".join(str(p) for p in plots))
    console.print(f"Results: {out / 'summary.json'}")
