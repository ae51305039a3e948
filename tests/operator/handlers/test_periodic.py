"""One actor, always: the periodic loop follows kopf's peering pause (the loop is no kopf
handler, so kopf does not stop it), a pass in flight at the pause writes nothing after it,
and the first pass after a resume reads caches kopf has re-listed, not a pre-pause view."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import kopf
import pytest
from prometheus_client import CollectorRegistry

from slo_operator.api.cluster import Snapshot
from slo_operator.handlers import periodic
from slo_operator.handlers.setup import Context, PeeringGate
from slo_operator.monitoring import operator_metrics
from slo_operator.monitoring.operator_metrics import METRICS, OperatorMetrics, PeeringState
from slo_operator.reconcile.caches import snapshot
from slo_operator.reconcile.service import Settings
from slo_operator.settings import OperatorSettings
from tests.operator.handlers.test_handlers import index_kwargs
from tests.operator.reconcile.fake import FakeKube
from tests.operator.reconcile.test_loop import planned

INTERVAL = 0.02
SETTLE = 0.15


def passes(result: str = "ok") -> float:
    return float(METRICS.passes.labels(result)._value.get())


def writes(result: str) -> float:
    return float(METRICS.pass_writes.labels(result)._value.get())


class Replica:
    """The loop of one replica over fake caches and a fake API server, recording every
    snapshot a pass takes (a pass takes exactly one, first)."""

    def __init__(self, acting: bool, kube: FakeKube | None = None) -> None:
        _, self.snap, _ = planned()
        self.kube = kube or FakeKube()
        self.memo = kopf.Memo()
        self.ctx = Context(kube=cast(Any, self.kube), settings=Settings(),
                           config=OperatorSettings(interval=INTERVAL),
                           gate=PeeringGate(acting))
        self.ctx.ready.set()
        self.memo.slo = self.ctx
        self.memo.slo_indexes = index_kwargs(self.snap)
        self.reads: list[tuple[float, Snapshot]] = []

    def record(self, indexes: Mapping[str, Any]) -> Snapshot:
        snap = snapshot(indexes)
        self.reads.append((time.monotonic(), snap))
        return snap

    def reads_since(self, t: float) -> list[tuple[float, Snapshot]]:
        return [(at, s) for at, s in self.reads if at >= t]


@pytest.fixture
def replica_factory(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Replica]]:
    monkeypatch.setattr(periodic, "RESUME_SETTLE_S", SETTLE)
    made: list[Replica] = []

    class Recorded(Replica):
        def __init__(self, acting: bool, kube: FakeKube | None = None) -> None:
            super().__init__(acting, kube)
            made.append(self)

    def recording(indexes: Mapping[str, Any]) -> Snapshot:
        owner = next(r for r in made if r.memo.slo_indexes is indexes)
        return owner.record(indexes)

    monkeypatch.setattr(periodic, "snapshot", recording)
    yield Recorded


async def until(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def test_a_paused_replica_runs_no_pass_and_writes_nothing(
        replica_factory: type[Replica]) -> None:
    r = replica_factory(acting=False)
    before = passes()
    loop = asyncio.create_task(periodic._loop(r.memo))
    try:
        await asyncio.sleep(20 * INTERVAL)
        assert r.reads == [] and r.kube.writes == 0 and passes() == before
        # kopf resumes it: passes start, but only after the caches had time to be re-listed.
        resumed = time.monotonic()
        r.ctx.gate.turn(True)
        await until(lambda: r.reads)
        assert r.reads[0][0] - resumed >= SETTLE
    finally:
        loop.cancel()


async def test_a_replica_paused_while_acting_stops_passing_at_once(
        replica_factory: type[Replica]) -> None:
    r = replica_factory(acting=True)
    loop = asyncio.create_task(periodic._loop(r.memo))
    try:
        await until(lambda: len(r.reads) >= 3)
        r.ctx.gate.turn(False)
        paused_at, writes_at_pause = time.monotonic(), r.kube.writes
        await asyncio.sleep(20 * INTERVAL)
        # 20 intervals paused: not one pass started and not one write was made.
        assert r.reads_since(paused_at) == [] and r.kube.writes == writes_at_pause
    finally:
        loop.cancel()


async def test_after_a_resume_the_next_pass_reads_the_relisted_caches(
        replica_factory: type[Replica]) -> None:
    r = replica_factory(acting=True)
    loop = asyncio.create_task(periodic._loop(r.memo))
    try:
        await until(lambda: len(r.reads) >= 2)
        r.ctx.gate.turn(False)
        await asyncio.sleep(5 * INTERVAL)
        applies_before = len(r.kube.applies)
        # While paused, a peer scaled the service; kopf re-lists it only after the resume,
        # a moment later than the resume itself.
        resumed = time.monotonic()
        r.ctx.gate.turn(True)
        await asyncio.sleep(SETTLE / 3)
        svc = next(iter(r.memo.slo_indexes["service_index"].values()))[0]
        relisted = {**svc, "status": {**svc["status"], "desiredReplicas": 5}}
        r.memo.slo_indexes["service_index"] = {k: [relisted]
                                               for k in r.memo.slo_indexes["service_index"]}
        await until(lambda: r.reads_since(resumed))
        first_at, first = r.reads_since(resumed)[0]
        assert first_at - resumed >= SETTLE
        assert next(iter(first.services.values()))["status"]["desiredReplicas"] == 5
        # What it applied before the pause is forgotten (a peer acted since): re-applied.
        await until(lambda: len(r.kube.applies) > applies_before)
    finally:
        loop.cancel()


class PausedMidPass(FakeKube):
    """An API server during whose first write kopf pauses this replica."""

    gate: PeeringGate
    loop: asyncio.AbstractEventLoop

    def apply(self, obj: Mapping[str, Any]) -> None:
        super().apply(obj)
        if len(self.applies) == 1:  # the writes run in a worker thread: pause on the loop
            turned = threading.Event()

            def pause() -> None:
                self.gate.turn(False)
                turned.set()
            self.loop.call_soon_threadsafe(pause)
            assert turned.wait(5)


async def test_a_pass_in_flight_when_the_pause_comes_writes_nothing_after_it() -> None:
    kube = PausedMidPass()
    r = Replica(acting=True, kube=kube)
    kube.gate, kube.loop = r.ctx.gate, asyncio.get_running_loop()
    cancelled, refused = passes("cancelled"), writes("refused")
    assert await periodic.run_gated_pass(r.memo) is None  # cut short
    # Cancelling the pass does not stop its worker thread: the gate refuses its next write.
    await until(lambda: writes("refused") == refused + 1)
    # The pass had three objects, a status and an Event to write; only the first got out.
    assert kube.applies == [("Deployment", "chat-vllm-h100-sxm-80gb")]
    assert kube.statuses == [] and kube.events == [] and kube.writes == 1
    assert passes("cancelled") == cancelled  # counted by the loop, not by one pass


def test_a_writer_of_an_earlier_acting_period_writes_nothing_after_a_quick_pause() -> None:
    kube, gate = FakeKube(), PeeringGate(acting=True)
    stale = periodic.GatedWriter(kube, gate)
    gate.turn(False)
    gate.turn(True)  # resumed before the cancelled pass's thread got to its next write
    with pytest.raises(periodic.Paused):
        stale.patch_status("InferenceService", "ns", "x", {})
    periodic.GatedWriter(kube, gate).patch_status("InferenceService", "ns", "x", {})
    assert kube.writes == 1


async def test_an_uninterrupted_pass_writes_through_the_gate() -> None:
    r = Replica(acting=True)
    sent = writes("sent")
    assert await periodic.run_gated_pass(r.memo) == 3
    assert r.kube.writes == 5 and writes("sent") == sent + 5


async def test_stopping_the_loop_during_a_pass_cancels_it_instead_of_swallowing() -> None:
    r = Replica(acting=True)
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow_pass(memo: kopf.Memo, kube: Any = None) -> int:
        started.set()
        await release.wait()
        return 0

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(periodic, "run_pass", slow_pass)
        task = asyncio.create_task(periodic.run_gated_pass(r.memo))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_the_gated_writer_refuses_every_kind_of_write_while_paused() -> None:
    kube, gate = FakeKube(), PeeringGate(acting=False)
    w = periodic.GatedWriter(kube, gate)
    body = {"kind": "Service", "metadata": {"namespace": "ns", "name": "x"}}
    attempts: list[Callable[[], None]] = [
        lambda: w.apply(body), lambda: w.delete("Deployment", "ns", "x"),
        lambda: w.patch_pod("ns", "p", {}), lambda: w.patch_status("X", "ns", "x", {}),
        lambda: w.event(body, "Normal", "R", "m", cast(Any, None))]
    for write in attempts:
        with pytest.raises(periodic.Paused):
            write()
    assert kube.writes == 0 and kube.attempts == []


async def test_kopf_pause_and_resume_lines_turn_the_gate_in_the_same_step() -> None:
    state = PeeringState()
    m = OperatorMetrics(CollectorRegistry())
    operator_metrics.track_peering(True, m, state)
    log = logging.getLogger(operator_metrics.PEERING_LOGGER)
    gate = PeeringGate()
    unfollow = gate.follow(state)
    try:
        assert not gate.is_acting()  # kopf starts paused until it has read the peering object
        log.info("Resuming operations after the pause. Conflicting operators ... are gone.")
        assert gate.is_acting() and gate.resumes == 1
        log.info("Pausing operations in favour of [<Peer a: priority=-1>].")
        assert not gate.is_acting() and gate.paused.is_set()
        log.warning("Pausing all operators, including self: [<Peer b>]")
        log.info("Resuming operations after the pause. Conflicting operators ... are gone.")
        assert gate.is_acting() and gate.resumes == 2
        assert m.peering_active._value.get() == 1
        unfollow()
        log.info("Pausing operations in favour of [<Peer a: priority=-1>].")
        assert gate.is_acting()  # no longer following
    finally:
        for h in [h for h in log.handlers if isinstance(h, operator_metrics._PeeringStateHandler)]:
            log.removeHandler(h)


def test_kopf_loggers_quietened_above_info_still_deliver_pause_lines() -> None:
    log = logging.getLogger(operator_metrics.PEERING_LOGGER)
    old = log.level
    log.setLevel(logging.WARNING)
    state = PeeringState()
    try:
        operator_metrics.track_peering(True, OperatorMetrics(CollectorRegistry()), state)
        log.info("Resuming operations after the pause.")
        assert state.active
    finally:
        log.setLevel(old)
        for h in [h for h in log.handlers if isinstance(h, operator_metrics._PeeringStateHandler)]:
            log.removeHandler(h)


@pytest.mark.parametrize(("peering", "overrun", "want"), [
    pytest.param(None, 600.0, False, id="standalone-has-no-peer-to-fear"),
    pytest.param("p", 4.0, False, id="a-lag-within-the-lifetime"),
    pytest.param("p", 6.0, True, id="a-stop-longer-than-the-lifetime"),
])
def test_a_stall_longer_than_the_peering_lifetime_counts_as_a_resume(
        peering: str | None, overrun: float, want: bool) -> None:
    config = OperatorSettings(peering=peering, peering_lifetime=5)
    assert periodic.stalled(config, overrun) is want


@pytest.mark.parametrize(("interval", "peering", "lifetime", "want"), [
    pytest.param(20.0, "p", 15, 20.0, id="default-settings-one-interval"),
    pytest.param(1.0, "p", 15, 10.0, id="fast-pass-long-lifetime-one-keepalive"),
    pytest.param(1.0, "p", 5, 2.0, id="short-lifetime-the-relisting-floor"),
    pytest.param(1.0, None, 15, 2.0, id="standalone-no-peer-keepalive"),
])
def test_after_a_resume_the_loop_waits_out_a_relisting_and_a_peer_keepalive(
        interval: float, peering: str | None, lifetime: int, want: float) -> None:
    config = OperatorSettings(interval=interval, peering=peering, peering_lifetime=lifetime)
    assert periodic.settle_time(config) == want


def test_the_context_reads_the_loop_settings_from_config_only() -> None:
    assert not hasattr(Context, "loop")
