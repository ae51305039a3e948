"""The SLO loop end to end: load steps, Prometheus outages and live limits, as a user sees
them in the InferenceService's status, its Events and its pods.

Compressed time: 10 s SLO windows, 1 s scrapes, a 2 s operator pass, 15 s scale-down
stabilization, replicas ready 1 s after their pod runs. Every wait polls with a deadline.
Load is prefill-heavy (3000-token prompts) at real step speed: one H100 replica of the
8B model prefills about 35,000 tokens/s, so 25 requests/s need several replicas while
2 requests/s need one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from slo_devtools.devenv.loadgen import Arrival, LoadResult, LoadSpec, constant_rate, replay
from slo_operator.api import conditions as C
from slo_operator.control import reasons as R
from tests.e2e.e2e_support import E2E, GROUP
from tests.e2e.test_e2e_chain import policy, service
from tests.integration.operator_support import conditions, events_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

PROMPT, OUTPUT = 3000, 16
LOW_RPS, HIGH_RPS = 2.0, 25.0
STABILIZE_DOWN_S = 15.0
STEP_AT, DROP_AT = 10.0, 80.0      # replay seconds: low -> high -> low
WINDOW_S = 10.0
LIMIT_REASONS = {R.LIMIT_LOWERED, R.LIMIT_RAISED, R.LIMIT_RESTORED, R.LIMIT_RESIZED}
SCALE_OUT_WITHIN_S = 30.0           # stated: scale-out within 30 s of the load step
SLO_MET_WITHIN_S = 60.0             # stated: the SLO holds again within 60 s of the step


@dataclass
class Background:
    """A load replay running in its own thread (its own event loop) while the test polls."""

    requests: list[Arrival]
    e2e: E2E
    namespace: str
    service: str
    started: float = 0.0
    result: LoadResult | None = None
    _stop: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> Background:
        ready = threading.Event()

        def run() -> None:
            async def main() -> LoadResult:
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                ready.set()
                return await replay(self.requests,
                                    lambda: self.e2e.harness.endpoints(self.namespace,
                                                                       self.service),
                                    LoadSpec(stream=False), stop=self._stop)
            self.result = asyncio.run(main())

        self.started = time.monotonic()
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def stop(self) -> LoadResult | None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):     # the replay already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(60)
        return self.result


@pytest.fixture
def load() -> Iterator[list[Background]]:
    running: list[Background] = []
    yield running
    for b in running:
        b.stop()


def status(e: E2E, ns: str, name: str) -> dict[str, Any]:
    return dict(e.isvc(ns, name).get("status") or {})


def deployment_replicas(e: E2E, ns: str, name: str) -> int:
    dep = e.cluster.apps.list_namespaced_deployment(
        ns, label_selector=f"{GROUP}/service={name}").items
    return int(dep[0].spec.replicas) if dep and dep[0].spec else 0


def loop_policy(name: str, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "objectives": {"e2eLatencyMs": 5000, "ttftMs": 1500},
        "window": "10s", "attainmentPeriod": "5m",
        "scaling": {"minReplicas": 1, "maxReplicas": 4, "scaleUpStabilization": "0s",
                    "scaleDownStabilization": f"{STABILIZE_DOWN_S:g}s", "maxScaleDownStep": 1},
        "batching": {"mode": "live", "minBatch": 8, "maxBatch": 64},
    }
    spec.update(overrides)
    return policy(name, **spec)


def test_load_step_scales_out_meets_the_slo_then_scales_in_after_stabilization(
        e2e: E2E, namespace: str, load: list[Background]) -> None:
    e2e.apply(namespace, loop_policy("fast"), service("burst", "fast", replicas=(1, 4)))
    e2e.harness.wait_replicas(namespace, "burst", 1, timeout=90)

    schedule = (constant_rate(LOW_RPS, STEP_AT, PROMPT, OUTPUT)
                + constant_rate(HIGH_RPS, DROP_AT - STEP_AT, PROMPT, OUTPUT, start=STEP_AT)
                + constant_rate(LOW_RPS, 250, PROMPT, OUTPUT, start=DROP_AT))
    bg = Background(schedule, e2e, namespace, "burst").start()
    load.append(bg)

    # Scale-out: one replica cannot serve the step; more replicas come.
    e2e.cluster.wait_for(lambda: deployment_replicas(e2e, namespace, "burst") > 1, timeout=60,
                         desc="scale-out after the load step")
    scaled_at = bg.elapsed()
    st = status(e2e, namespace, "burst")
    assert st["lastDecisions"][-1]["replicas"] > 1, st["lastDecisions"]
    assert scaled_at - STEP_AT < SCALE_OUT_WITHIN_S

    # Every change of the Deployment's replicas seen from here on: (replay seconds, replicas).
    changes: list[tuple[float, int]] = [(scaled_at, deployment_replicas(e2e, namespace, "burst"))]

    def replicas_now() -> int:
        n = deployment_replicas(e2e, namespace, "burst")
        if n != changes[-1][1]:
            changes.append((bg.elapsed(), n))
        return n

    # The SLO is met under the high load, judged on a whole window after the scale-out.
    seen: list[dict[str, Any]] = []

    def compliant() -> bool:
        replicas_now()
        st = status(e2e, namespace, "burst")
        now = bg.elapsed()
        seen.append({"t": round(now, 1), "ok": st.get("sloCompliant"),
                     "replicas": st.get("replicas"), "observed": st.get("observed")})
        return st.get("sloCompliant") is True and scaled_at + WINDOW_S <= now < DROP_AT

    try:
        e2e.cluster.wait_for(compliant, timeout=max(1.0, DROP_AT - bg.elapsed()),
                             desc="SLO met under the high load after the scale-out")
    except TimeoutError:
        for row in seen[::5]:
            print(row)
        print(status(e2e, namespace, "burst").get("lastDecisions"))
        raise
    met_at = bg.elapsed()
    assert met_at - STEP_AT <= SLO_MET_WITHIN_S

    # Scale-in: down to one replica after the drop, never inside the stabilization window
    # of a scale-out (a scale-out is a recommendation of at least that many replicas, and a
    # scale-in needs every recommendation of the window below the current count). Whether
    # the first scale-in comes before the drop or after it depends on how far the high-load
    # replicas exceeded the need; the window holds either way.
    e2e.cluster.wait_for(lambda: replicas_now() and bg.elapsed() >= DROP_AT, timeout=DROP_AT,
                         desc="the load drop")
    drop = bg.elapsed()
    assert replicas_now() > 1
    e2e.cluster.wait_for(lambda: replicas_now() == 1, timeout=240,
                         desc="scale-in to one replica")
    ups = [t for (t, n), (_, before) in zip(changes[1:], changes, strict=False) if n > before]
    downs = [t for (t, n), (_, before) in zip(changes[1:], changes, strict=False) if n < before]
    first_down = min(downs)
    last_up = max(t for t in [scaled_at, *ups] if t < first_down)
    print(f"scale-out at {scaled_at:.1f}s (step at {STEP_AT:g} s), SLO met at {met_at:.1f}s, "
          f"load drop at {drop:.1f}s, replicas over time {changes}")
    assert first_down - last_up >= STABILIZE_DOWN_S - 2.0, changes
    scaled = [e["message"] for e in events_for(e2e.cluster, namespace, "burst")
              if e["reason"] == C.SCALED]
    assert any("from 1 to" in m for m in scaled), scaled


def test_prometheus_outage_holds_replicas_and_says_why(e2e: E2E, namespace: str,
                                                       load: list[Background]) -> None:
    e2e.apply(namespace, loop_policy("hold", scaling={
        "minReplicas": 1, "maxReplicas": 4, "scaleDownStabilization": "0s"}),
        service("steady", "hold", replicas=(1, 4)))
    e2e.harness.wait_replicas(namespace, "steady", 1, timeout=90)
    bg = Background(constant_rate(HIGH_RPS, 90, PROMPT, OUTPUT), e2e, namespace,
                    "steady").start()
    load.append(bg)
    e2e.cluster.wait_for(lambda: deployment_replicas(e2e, namespace, "steady") > 1,
                         timeout=60, desc="scale-out under load")
    # Load and metrics stop together: an operator that read "no data" as "no load" would
    # scale in at once (stabilization 0 s).
    bg.stop()
    e2e.prometheus.stop_process()
    try:
        cond = e2e.cluster.wait_for(
            lambda: (c := conditions(e2e.isvc(namespace, "steady")).get("MetricsAvailable"))
            and c["status"] == "False" and c, timeout=60, desc="MetricsAvailable=False")
        assert cond["reason"] and cond["message"]
        held = deployment_replicas(e2e, namespace, "steady")
        assert held > 1
        pods = {p["metadata"]["uid"] for p in e2e.pods(namespace, "steady")}
        # Three operator passes (2 s each) without data: nothing moves, no pod is replaced.
        deadline = time.monotonic() + 3 * 2.0 + 1.0
        while time.monotonic() < deadline:
            assert deployment_replicas(e2e, namespace, "steady") == held
            time.sleep(0.5)
        assert {p["metadata"]["uid"] for p in e2e.pods(namespace, "steady")} == pods
    finally:
        e2e.prometheus.start()
    e2e.cluster.wait_for(
        lambda: (c := conditions(e2e.isvc(namespace, "steady")).get("MetricsAvailable"))
        and c["status"] == "True", timeout=60, desc="MetricsAvailable=True after the outage")


def test_burst_on_one_replica_moves_the_live_limit_without_restarting_pods(
        e2e: E2E, namespace: str, load: list[Background]) -> None:
    # One replica at most and an inter-token target that long prefill chunks break: the
    # only lever left is the in-flight limit.
    e2e.apply(namespace, loop_policy("tight", objectives={
        "e2eLatencyMs": 5000, "ttftMs": 1500, "interTokenLatencyMs": 40},
        scaling={"minReplicas": 1, "maxReplicas": 1}),
        service("solo", "tight", replicas=(1, 1)))
    (rep,) = e2e.harness.wait_replicas(namespace, "solo", 1, timeout=90)
    dep = e2e.cluster.apps.list_namespaced_deployment(
        namespace, label_selector=f"{GROUP}/service=solo").items[0]
    assert dep.metadata is not None and dep.spec is not None
    generation, template = dep.metadata.generation, dep.spec.template.to_dict()
    (pod,) = e2e.pods(namespace, "solo")
    uid = pod["metadata"]["uid"]
    before = e2e.cluster.wait_for(lambda: status(e2e, namespace, "solo").get("batchLimit"),
                                  timeout=60, desc="a first batch limit in status")

    bg = Background(constant_rate(HIGH_RPS, 90, PROMPT, OUTPUT), e2e, namespace,
                    "solo").start()
    load.append(bg)

    def moved() -> dict[str, Any] | None:
        st = status(e2e, namespace, "solo")
        lim = st.get("batchLimit")
        return st if lim is not None and lim != before else None

    st = e2e.cluster.wait_for(moved, timeout=90, desc="the live limit moved by the loop")
    limit = st["batchLimit"]
    last = st["lastDecisions"][-1]
    assert last["batchLimit"] == limit
    # The decision that moved it says why (replicas cannot move: maxReplicas 1).
    assert last["reason"] in LIMIT_REASONS, st["lastDecisions"]
    want = f"from {before} to {limit}: {last['reason']}"
    e2e.cluster.wait_for(
        lambda: any(e["reason"] == C.BATCH_LIMIT_CHANGED and want in e["message"]
                    for e in events_for(e2e.cluster, namespace, "solo")),
        timeout=15, desc=f"a BatchLimitChanged Event '{want}'")

    # The pod's annotation carries it, and the gateway in the pod applies it within seconds.
    e2e.cluster.wait_for(
        lambda: e2e.pods(namespace, "solo")[0]["metadata"]["annotations"].get(
            f"{GROUP}/inflight-limit") == str(limit), timeout=30, desc="annotation on the pod")
    e2e.cluster.wait_for(
        lambda: [r.limit for r in e2e.harness.replicas() if r.pod == rep.pod] == [limit],
        timeout=5, desc="the gateway's live limit")
    # Same pod, same template, same generation: nothing restarted.
    (after,) = e2e.pods(namespace, "solo")
    assert after["metadata"]["uid"] == uid
    dep = e2e.cluster.apps.list_namespaced_deployment(
        namespace, label_selector=f"{GROUP}/service=solo").items[0]
    assert dep.metadata is not None and dep.spec is not None
    assert dep.metadata.generation == generation
    assert dep.spec.template.to_dict() == template
