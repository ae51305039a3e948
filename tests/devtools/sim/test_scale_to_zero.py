"""Scale to zero in the simulator: the activator's hold (queue bound, timeout, forward on
the first Ready replica), the wake the operator's law reads, and the many-models scenario."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from slo_devtools.sim import scale_to_zero as Z
from slo_devtools.sim.bench import TARGETS, step_model
from slo_devtools.sim.discrete_event import Activator, Service, Simulation
from slo_devtools.sim.policies import SloOperator, policy_spec
from slo_devtools.sim.run import RunResult, Tenant, Workload, simulate, zero_seconds
from slo_devtools.sim.traces import Request, Trace
from slo_operator.cli import main as operator_main

OBJ = TARGETS["loose"]["chat"]
COLD = step_model().cold_start_s
EPS = 1e-6  # float rounding of times a cold start apart


def _trace(times: Mapping[str, Sequence[float]], duration: float) -> Trace:
    reqs = sorted((Request(t, 400, 40, name) for name, ts in times.items() for t in ts),
                  key=lambda r: r.t)
    return Trace("t", tuple(reqs), duration)


def _tenant(name: str, activator: Activator | None = None) -> Tenant:
    return Tenant(name, step_model(), OBJ, max_replicas=4, activator=activator)


def _operator(zero: bool, idle: str = "120s") -> SloOperator:
    return SloOperator(policy_spec(OBJ, 4, scale_to_zero=zero,
                                   idle_before_zero=idle if zero else None))


def _run(times: Mapping[str, Sequence[float]], duration: float, activator: Activator | None,
         zero: bool) -> tuple[RunResult, dict[str, SloOperator]]:
    wl = Workload("w", _trace(times, duration),
                  tuple(_tenant(n, activator) for n in times))
    pols = {n: _operator(zero) for n in times}
    return simulate(wl, pols), pols


def _at_zero_ever(run: RunResult, name: str) -> bool:
    """Whether ``name`` ran zero replicas at some point of the trace (not its tail)."""
    return any(n == 0 for at, n, _, _ in run.tenants[name].series if at < run.sim_s)


# --- the law through the simulator --------------------------------------------------------
def test_idle_services_go_to_zero_and_gpu_hours_drop_while_a_busy_one_stays_up() -> None:
    busy = [i * 0.5 for i in range(int(1200 / 0.5))]
    times = {"busy": busy, "quiet-a": [20.0, 700.0], "quiet-b": [25.0]}
    without, _ = _run(times, 1200.0, None, zero=False)
    with_zero, pols = _run(times, 1200.0, Activator(), zero=True)
    for name in ("quiet-a", "quiet-b"):
        assert _at_zero_ever(with_zero, name)
        assert any(r == "ScaledToZero" for _, r, _ in pols[name].reasons)
        assert not _at_zero_ever(without, name)
    assert not _at_zero_ever(with_zero, "busy")
    assert with_zero.tenants["busy"].zero_s == 0.0
    # quiet-b's one request at 25 s: zero after the window and the idle time, until the end.
    assert 1200.0 - 25.0 - 60.0 - 120.0 - 40.0 <= with_zero.tenants["quiet-b"].zero_s \
        <= 1200.0 - 25.0 - 60.0 - 120.0
    assert with_zero.gpu_hours < without.gpu_hours
    for name in ("quiet-a", "quiet-b"):
        assert with_zero.tenants[name].gpu_seconds < without.tenants[name].gpu_seconds
    # The wake of quiet-a is served, nothing is refused.
    assert [c.held for c in with_zero.tenants["quiet-a"].cold_starts] == [1]
    assert all(t.failed == () for t in with_zero.tenants.values())


def test_a_request_at_zero_wakes_the_service_at_once_and_waits_the_cold_start() -> None:
    run, pols = _run({"a": [20.0, 700.0]}, 1200.0, Activator(), zero=True)
    t = run.tenants["a"]
    # Zero before the second request; the wake decides at its arrival, not at a pass.
    zero_at = next(at for at, r, _ in pols["a"].reasons if r == "ScaledToZero")
    assert zero_at < 700.0
    woken = [(at, msg) for at, r, msg in pols["a"].reasons if r == "Woken"]
    assert woken[0][0] == 700.0 and "1 request(s) held" in woken[0][1]
    assert len(t.cold_starts) == 1
    cs = t.cold_starts[0]
    assert cs.requested_at == 700.0 and cs.held == 1
    assert cs.served_at is not None and cs.served_at - 700.0 >= COLD - EPS
    assert t.held_waits == (cs.served_at - 700.0,)
    assert t.failed == ()
    # Pod-side the request counts from its forward (a good window); client-side from its
    # arrival, the cold start in: over the 10 s end-to-end target.
    served = next(w for w in t.windows if w.start <= cs.served_at < w.start + 60.0)
    assert served.finished == 1 and served.good
    assert served.e2e_p99 is not None and served.e2e_p99 < COLD
    client = [w for w in t.client_windows or () if w.finished and w.start >= 600.0]
    assert len(client) == 1 and not client[0].good
    assert client[0].e2e_p99 is not None and client[0].e2e_p99 >= COLD - EPS


def test_without_scale_to_zero_nothing_is_held() -> None:
    run, _ = _run({"a": [20.0, 700.0]}, 1200.0, None, zero=False)
    t = run.tenants["a"]
    assert t.cold_starts == () and t.held_waits == () and t.client_windows is None


def test_zero_seconds_add_up_the_spans_at_zero_desired_replicas_within_the_trace() -> None:
    events = [(0.0, 1, 8), (100.0, 0, 8), (150.0, 0, 16), (200.0, 2, 16), (900.0, 0, 16)]
    assert zero_seconds(events, 1000.0) == 100.0 + 100.0
    assert zero_seconds(events, 120.0) == 20.0
    assert zero_seconds([(0.0, 1, 8)], 1000.0) == 0.0


# --- the activator ------------------------------------------------------------------------
def _at_zero(activator: Activator) -> tuple[Simulation, Service]:
    """A service at zero whose wakes start one replica at once (as the law's would)."""
    sim = Simulation()
    svc = Service(sim, "a", step_model(), replicas=0, activator=activator)
    sim.services = {"a": svc}

    def woken(now: float) -> None:
        if svc.desired == 0:
            svc.set_replicas(1, now)

    svc.on_wake = woken
    return sim, svc


def test_the_queue_bound_rejects_what_does_not_fit_and_serves_the_rest() -> None:
    sim, svc = _at_zero(Activator(queue=3))
    reqs = [Request(10.0 + i, 400, 40, "a") for i in range(5)]
    sim.run(reqs, lambda r: svc, 400.0)
    assert [(f.arrived, f.status) for f in svc.failed] == [(13.0, 429), (14.0, 429)]
    assert len(svc.finished) == 3
    assert all(f.t >= 10.0 + COLD - EPS and f.arrived in (10.0, 11.0, 12.0) for f in svc.finished)
    assert svc.cold_starts[0].held == 3


def test_the_timeout_answers_every_held_request_504_from_the_first_held_one() -> None:
    sim, svc = _at_zero(Activator(timeout_s=30.0))
    reqs = [Request(t, 400, 40, "a") for t in (10.0, 25.0, 39.0, 45.0, 200.0)]
    sim.run(reqs, lambda r: svc, 400.0)
    # The hold of 10 s times out at 40 s: the three held then get 504; 45 s starts a new
    # hold, served when the replica started at 10 s is Ready.
    assert [(f.arrived, f.at, f.status) for f in svc.failed] == [
        (10.0, 40.0, 504), (25.0, 40.0, 504), (39.0, 40.0, 504)]
    assert [(c.requested_at, c.held, c.timed_out) for c in svc.cold_starts] == [
        (10.0, 3, 3), (45.0, 1, 0)]
    assert svc.cold_starts[1].served_at == pytest.approx(10.0 + COLD)
    # The replica is Ready at 200 s: that request is not held.
    assert sorted(f.arrived for f in svc.finished) == [45.0, 200.0]
    assert [f.t for f in svc.finished if f.arrived == 200.0] == [200.0]


def test_the_wake_is_written_at_the_first_held_request_and_its_count_at_most_every_interval(
        ) -> None:
    sim, svc = _at_zero(Activator(update_interval_s=5.0))
    reqs = [Request(t, 400, 40, "a") for t in (10.0, 11.0, 12.0, 30.0)]
    seen: list[tuple[float, int]] = []

    def watch(now: float) -> None:
        assert svc.wake is not None
        seen.append((now, svc.wake.held))
        if svc.desired == 0:
            svc.set_replicas(1, now)

    svc.on_wake = watch
    sim.run(reqs, lambda r: svc, 400.0)
    assert seen[:3] == [(10.0, 1), (15.0, 3), (30.0, 4)]
    assert svc.wake is not None and svc.wake.requested_at == 10.0
    assert svc.wake.served_at == pytest.approx(10.0 + COLD)


# --- the scenario -------------------------------------------------------------------------
def test_the_many_models_workload_is_seeded_and_its_tail_follows_the_zipf_rates() -> None:
    a = Z.many_models(8, seed=3, duration_s=3600.0)
    b = Z.many_models(8, seed=3, duration_s=3600.0)
    assert a.requests == b.requests
    assert len(a.tenants) == 8
    rates = Z.tail_rates(4)
    assert rates == pytest.approx([60 / 3600, 30 / 3600, 20 / 3600, 15 / 3600])
    wl = Z.workload("loose", seed=3, n_services=8)
    assert [t.name for t in wl.tenants][:4] == [h[0] for h in Z.HEAD]
    assert {t.name for t in wl.tenants} == set(a.tenants)
    with pytest.raises(ValueError, match="services"):
        Z.many_models(4)


def _tiny() -> Workload:
    times = {"busy": [i * 1.0 for i in range(900)], "tail-01": [30.0, 600.0],
             "tail-02": [40.0]}
    return Workload(Z.WORKLOAD, _trace(times, 900.0), tuple(_tenant(n) for n in times))


def test_the_scenario_report_has_a_row_per_setting_with_ratios_to_the_baseline(
        tmp_path: Path) -> None:
    runs = Z.settings(short_idles=("120s",))
    res = Z.run_scenario("loose", wl=_tiny(), runs=runs)
    assert [r.policy for r in res.runs] == [s.label for s in runs]
    lines = Z.table(res)
    rows = lines[2:]
    assert len(rows) == len(runs)
    assert rows[0].split(" | ")[2] == "1.00"
    base, zero = (Z.summarize(r) for r in res.runs[:2])
    assert zero.gpu_hours < base.gpu_hours and zero.cold_starts >= 1
    assert zero.wait_p50 is not None and zero.wait_p50 >= COLD - EPS
    assert base.cold_starts == 0 and base.held == 0
    path = Z.write([res], tmp_path)
    text = path.read_text()
    assert path.name == "scale-to-zero.md" and "| run | GPU-h |" in text


def test_bench_scale_to_zero_scenario_writes_its_own_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Z, "workload", lambda target_set, seed=0: _tiny())
    r = CliRunner().invoke(operator_main, ["bench", "--scenario", "scale-to-zero",
                                           "--targets", "loose", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "scale-to-zero.md").exists()
    assert not (tmp_path / "report.md").exists()


def test_bench_scale_to_zero_scenario_refuses_a_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "prompt_tokens": 10, "output_tokens": 5}\n')
    r = CliRunner().invoke(operator_main, ["bench", "--scenario", "scale-to-zero",
                                           "--trace-file", str(trace), "--out",
                                           str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "--scenario: scale-to-zero runs its own workload" in r.output
    assert "Traceback" not in r.output


def test_a_woken_service_stays_up_while_the_requests_it_was_woken_for_run() -> None:
    # Woken at 3073 s: the next pass (3080.5) starts the idle clock; the replica is Ready
    # at 3135.1, just after the scrape of 3135; the pass of 3140.5 reads that scrape.
    wl = Workload("w", Trace("t", (Request(20.0, 400, 40, "a"),
                                   Request(3073.0, 400, 2000, "a")), 3300.0),
                  (_tenant("a", Activator()),))
    pol = _operator(True, "60s")
    run = simulate(wl, {"a": pol})
    served = run.tenants["a"].cold_starts[-1].served_at
    assert served is not None
    assert not [at for at, r, _ in pol.reasons
                if r == "ScaledToZero" and served <= at < served + 60.0]
