"""The load generator against real replica-model servers on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from slo_devtools.devenv.loadgen import (
    Arrival,
    LoadSpec,
    RoundRobin,
    constant_rate,
    replay,
)
from slo_devtools.replica.server import LinearSteps, Replica
from slo_runtime.gateway import start_site

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def two_replicas() -> AsyncIterator[list[tuple[Replica, str]]]:
    out, runners = [], []
    for _ in range(2):
        rep = Replica("m", LinearSteps(base_ms=1, per_seq_ms=0, prefill_ms_per_token=0))
        runner, port = await start_site(rep.app, "127.0.0.1", 0)
        runners.append(runner)
        out.append((rep, f"http://127.0.0.1:{port}"))
    yield out
    for r in runners:
        await r.cleanup()


@pytest.mark.parametrize("stream", [True, False])
async def test_replay_round_robins_and_records_latencies(
        two_replicas: list[tuple[Replica, str]], stream: bool) -> None:
    urls = [u for _, u in two_replicas]
    reqs = constant_rate(rate=20, duration_s=1.0, prompt=30, output=4)
    res = await replay(reqs, lambda: urls, LoadSpec(model="m", speed=4, stream=stream))
    assert len(res.ok) == 20
    assert {u: sum(r.endpoint == u for r in res.records) for u in urls} == \
        dict.fromkeys(urls, 10)
    assert [rep.engine.completed for rep, _ in two_replicas] == [10, 10]
    assert all(r.tokens == 4 for r in res.ok)
    # Never sent before its compressed arrival time.
    assert all(r.sent >= a.t / 4 - 1e-3 for r, a in zip(res.records, reqs, strict=True))
    if stream:
        assert all(r.ttft is not None and r.ttft <= r.e2e for r in res.ok if r.e2e)
        # One gap between each two streamed tokens, together the time from the first
        # token to the last (the client may read two tokens at once: a gap can be ~0).
        assert all(len(r.gaps) == 3 and min(r.gaps) >= 0.0
                   and sum(r.gaps) <= r.e2e - r.ttft + 1e-6 for r in res.ok if r.e2e and r.ttft)
    else:
        assert all(r.ttft is None and r.gaps == () for r in res.ok)
    s = res.summary()
    assert s["ok"] == 20 and s["errors"] == 0 and s["speed"] == 4


async def test_no_endpoint_is_recorded_not_raised() -> None:
    res = await replay([Arrival(0.0, 5, 5)], lambda: [], LoadSpec(speed=100))
    assert [r.status for r in res.records] == [0]
    assert res.summary()["errors"] == 1


def test_round_robin_follows_a_changing_endpoint_list() -> None:
    eps = ["a", "b"]
    rr = RoundRobin(lambda: eps)
    assert [rr.next() for _ in range(4)] == ["a", "b", "a", "b"]
    eps.append("c")
    assert {rr.next() for _ in range(3)} == {"a", "b", "c"}
    eps.clear()
    assert rr.next() is None


def test_percentiles_nearest_rank() -> None:
    from slo_devtools.devenv.loadgen import LoadResult, Record
    res = LoadResult(1.0, [Record(0, "u", 1, 1, 200, None, float(i)) for i in range(1, 101)])
    assert res.percentile("e2e", 0.99) == 99.0
    assert res.percentile("e2e", 0.5) == 50.0
    assert res.percentile("ttft", 0.5) is None


async def test_replays_the_packaged_azure_trace_time_compressed(
        two_replicas: list[tuple[Replica, str]]) -> None:
    """The benchmark's traces replay as they are (objects with t, prompt and output)."""
    from slo_devtools.sim import traces

    trace = traces.azure("azure-conv")
    head = list(trace.requests[:12])
    assert head[-1].t > head[0].t
    urls = [u for _, u in two_replicas]
    res = await replay(head, lambda: urls, LoadSpec(speed=50, stream=True, max_output=8))
    assert len(res.ok) == len(head)
    assert [r.prompt for r in res.records] == [min(h.prompt, 8192) for h in head]
    assert all(r.tokens == min(h.output, 8) for r, h in zip(res.records, head, strict=True))
    assert sum(rep.engine.completed for rep, _ in two_replicas) == len(head)
