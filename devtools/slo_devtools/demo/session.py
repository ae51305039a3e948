"""``slo-operator demo``: start everything, replay the trace, watch, summarize, clean up."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
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

from slo_devtools.demo import scenario, timeline, truth, view
from slo_devtools.demo.build import ensure_binaries, format_duration
from slo_devtools.demo.plots import plot_all
from slo_devtools.demo.replay import Replay, Target
from slo_devtools.demo.scenario import ScenarioError
from slo_devtools.demo.stack import DemoError, Stack, policy_of
from slo_devtools.devenv.replica_pods import ReplicaHarness
from slo_devtools.sim.command import writable
from slo_devtools.sim.traces import Trace

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
    """SIGTERM stops the demo as Ctrl-C does; and Ctrl-C (SIGINT) does, even where the
    demo was started with SIGINT ignored (a shell starts background jobs so, and Python
    then installs no KeyboardInterrupt handler): ``kill -INT`` must still stop it."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


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


@dataclass(frozen=True)
class Result:
    out: Path  # the results folder
    interrupted: bool  # stopped early by Ctrl-C or SIGTERM


def run_demo(opts: Options, console: Console) -> Result:
    """Run the whole demo; return where its results are."""
    t_start = time.monotonic()
    tenants = scenario.tenants(opts.trace)
    manifests = scenario.manifests(tenants)
    traces = {t.service: scenario.load(t, opts.speed, opts.duration) for t in tenants}
    out = (opts.out or default_out(dt.datetime.now(dt.UTC))).resolve()
    try:
        writable(out)
    except ValueError as err:
        raise ScenarioError(str(err)) from err
    console.print(f"[bold]slo-operator demo[/]: results will be written to {out}")
    with _logs_to(out / "demo.log"):
        return _run(opts, console, out, traces, manifests, t_start)


@contextlib.contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """Send log records (replica harness, Prometheus runner) to a file: on the terminal they
    would tear through the live view."""
    root = logging.getLogger()
    saved = root.handlers[:]
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.handlers = [handler]
    try:
        yield
    finally:
        root.handlers = saved
        handler.close()


def _run(opts: Options, console: Console, out: Path, traces: dict[str, Trace],
         manifests: Sequence[Path], t_start: float) -> Result:
    duration = opts.duration or max(tr.duration for tr in traces.values())
    for svc, tr in traces.items():
        console.print(f"  {svc} <- {tr.name}: {len(tr.requests)} requests in "
                      f"{format_duration(tr.duration)}: time compressed x{opts.speed:g}, "
                      f"request rate x{tr.rate_factor:g} of the source's "
                      f"(source requests kept x{tr.rate_scale:.3g})")

    samples: list[timeline.Sample] = []
    startup: dict[str, float] = {}
    interrupted = False
    workdir: Path | None = None
    load: Replay | None = None
    with _terminate_as_interrupt():
        try:
            t0 = time.monotonic()
            binaries = ensure_binaries(scenario.ROOT, console)
            startup["binaries"] = round(time.monotonic() - t0, 2)
            stack = Stack(binaries, console, out)
            workdir = stack.workdir
            try:
                harness, services = _start(stack, manifests, opts.speed)
                startup.update(stack.timings.phases)
                startup["total_to_replay"] = round(time.monotonic() - t_start, 2)
                console.print(f"Ready to replay after {format_duration(startup['total_to_replay'])}"
                              " (binaries, control plane, chart, operator, tenants, replicas).")
                load = Replay([_target(svc, traces, harness) for svc in services])
                stack.on_close("trace replay", load.stop)
                _watch(stack, load, traces, duration, duration + scenario.COOL_DOWN_S,
                       opts.speed, console, samples)
                if opts.keep:
                    _keep(stack, console)
            finally:
                with _no_interrupts():
                    console.print("Stopping every process the demo started...")
                    stack.close()
        except (KeyboardInterrupt, Interrupted):
            interrupted = True
            console.print("[yellow]Interrupted: everything the demo started has been stopped.[/]")
    goals = truth.goals({t.service: scenario.EXAMPLES / t.file
                         for t in scenario.TENANTS if t.service in traces})
    client = dict(load.client_summary(goals)) if load is not None else {}
    _report(out, samples, traces, opts, duration, startup, interrupted, workdir, client, console)
    return Result(out, interrupted)


def _start(stack: Stack, manifests: Sequence[Path], speed: float
           ) -> tuple[ReplicaHarness, list[dict[str, Any]]]:
    """Start everything up to the first ready replica of every service."""
    stack.start_cluster()
    prometheus = stack.start_prometheus()
    _, sa = stack.install_chart()
    stack.start_operator(sa, prometheus.url)
    harness = stack.start_replicas(prometheus, scenario.REAL_COLD_START_S / speed)
    services = stack.apply_tenants(manifests)
    stack.wait_first_replicas(harness, services)
    return harness, services


def _target(svc: dict[str, Any], traces: dict[str, Trace], harness: ReplicaHarness
            ) -> Target:
    key = timeline.service_key(svc)
    ns, name = key.split("/", 1)
    model = (svc.get("spec") or {}).get("model") or {}
    return Target(key, str(model.get("servedName") or model.get("name") or name), traces[key],
                  lambda: harness.endpoints(ns, name))


def _watch(stack: Stack, load: Replay, traces: dict[str, Trace], replay_s: float,
           total_s: float, speed: float, console: Console,
           samples: list[timeline.Sample]) -> None:
    """Start the replay and sample every service once a second into ``samples`` (kept if
    interrupted) until ``total_s`` has passed: the replay, then a quiet cool-down."""
    arrivals = {svc: [r.t for r in tr.requests] for svc, tr in traces.items()}
    names = ", ".join(f"{svc} <- {tr.name}" for svc, tr in traces.items())
    latest: dict[str, timeline.Sample] = {}
    stop = threading.Event()

    def header(elapsed: float) -> view.Header:
        return view.Header(elapsed, replay_s, total_s, speed, names)

    with Live(view.render([], header(0.0)), console=console, refresh_per_second=2,
              transient=False) as live:
        t0 = time.monotonic()
        load.start()
        while True:
            elapsed = time.monotonic() - t0
            stack.check_operator()
            if load.error is not None:
                raise DemoError(f"the trace replay failed: {load.error!r}")
            svcs, policies = stack.list_objects()
            for svc in svcs:
                key = timeline.service_key(svc)
                offered = (timeline.offered_rate(arrivals[key], elapsed, scenario.LOAD_WINDOW_S)
                           if key in arrivals else None)
                s = timeline.sample(elapsed, svc, policy_of(svc, policies), offered)
                samples.append(s)
                latest[key] = s
            live.update(view.render(list(latest.values()), header(elapsed)))
            if elapsed >= total_s:
                break
            stop.wait(min(SAMPLE_INTERVAL_S, max(0.0, total_s - elapsed)))


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
            workdir: Path | None, client: dict[str, Any], console: Console) -> None:
    summaries = timeline.summarize(samples)
    doc: dict[str, Any] = {
        "interrupted": interrupted,
        "speed": opts.speed,
        "duration_s": duration,
        "cool_down_s": scenario.COOL_DOWN_S,
        "traces": {svc: {"name": tr.name, "requests": len(tr.requests),
                         "rate_factor": tr.rate_factor, "notes": list(tr.notes)}
                   for svc, tr in traces.items()},
        "startup_s": startup,
        # Everything the run started lived here; it is removed on the way out.
        "workdir": str(workdir) if workdir else None,
        "services": [s.to_json() for s in summaries],
        # What the load generator saw: requests sent, answered, failed; client latencies.
        "client": client,
    }
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    with (out / "samples.jsonl").open("w") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")
    if summaries:
        console.print(view.summary_table(summaries, client))
        plots = plot_all(samples, out, opts.speed)
        console.print("Plots: " + ", ".join(str(p) for p in plots))
    console.print(f"Results: {out / 'summary.json'}")
