"""The activator over real HTTP: loopback servers for the activator and for a replica,
an in-memory route table standing in for the cluster's watches, a fake wake writer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from slo_operator.activator.app import (
    Activator,
    ActivatorConfig,
    HostAddress,
    HostName,
    NotFound,
    parse_host,
)
from slo_operator.activator.routes import RouteTable, ServiceRoute
from slo_operator.api.activation import RETRY_AFTER_S, SERVICE_HEADER, Wake
from slo_operator.api.cluster import ObjKey
from slo_operator.render.objects import service_name
from slo_runtime.proxy import start_site
from tests.runtime.rt_support import wait_until

pytestmark = pytest.mark.timeout(60)

NS = "team-a"
NAME = "chat.v2"  # a dotted name: its Service's name differs (render.objects.service_name)
SVC = service_name(NAME)
KEY = (NS, NAME)
CLUSTER_IP = "10.96.0.10"
HOST = f"{SVC}.{NS}"
T0 = 1_700_000_000.0


class FakeWaker:
    def __init__(self) -> None:
        self.calls: list[tuple[ObjKey, Wake]] = []
        self.gone: set[ObjKey] = set()
        self.refuse = 0  # the next writes the API server refuses

    async def wake(self, namespace: str, name: str, wake: Wake) -> None:
        if (namespace, name) in self.gone:
            raise NotFound(f"{namespace}/{name}")
        if self.refuse:
            self.refuse -= 1
            raise ConnectionError("the API server is unavailable")
        self.calls.append(((namespace, name), wake))

    @property
    def wakes(self) -> list[Wake]:
        return [w for _, w in self.calls]


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def upstream_app(release: asyncio.Event, cancelled: asyncio.Event) -> web.Application:
    async def completions(request: web.Request) -> web.Response:
        return web.json_response({"from": "upstream", "path": request.path_qs,
                                  "body": (await request.read()).decode()})

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: first\n\n")
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.set()  # the activator closed the connection: the engine aborts
            raise
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/stream", stream)
    return app


class Stack:
    """An activator and one replica upstream, on loopback."""

    def __init__(self) -> None:
        self.table = RouteTable()
        self.waker = FakeWaker()
        self.clock = Clock()
        self.release = asyncio.Event()
        self.upstream_cancelled = asyncio.Event()
        self.runners: list[web.AppRunner] = []
        self.upstream = ""
        self.url = ""
        self.activator: Activator | None = None
        self.client = aiohttp.ClientSession()

    async def start(self, synced: bool = True, **config: Any) -> Stack:
        upstream = upstream_app(self.release, self.upstream_cancelled)
        runner, port = await start_site(upstream, "127.0.0.1", 0)
        self.runners.append(runner)
        self.upstream = f"http://127.0.0.1:{port}"
        self.table.set_service(ServiceRoute(NS, SVC, NAME, CLUSTER_IP))
        if synced:
            self.table.mark_synced()
        self.activator = Activator(self.table, self.waker, ActivatorConfig(
            pod_name="activator-0", **config), now=self.clock)
        runner, port = await start_site(self.activator.app, "127.0.0.1", 0)
        self.runners.append(runner)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def ready(self) -> None:
        self.table.set_slice(NS, SVC, f"{SVC}-abcde", [self.upstream])

    async def post(self, host: str = HOST, path: str = "/v1/completions",
                   headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any],
                                                                   dict[str, str]]:
        async with self.client.post(self.url + path, data=b'{"prompt":"hi"}',
                                    headers={"Host": host, **(headers or {})}) as r:
            return r.status, await r.json(), dict(r.headers)

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with self.client.get(self.url + "/metrics") as r:
            text = await r.text()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    async def held(self) -> float:
        return (await self.metrics()).get(
            ("slo_activator_held_requests", (("namespace", NS), ("service", NAME))), 0.0)

    async def wait_held(self, n: int) -> None:
        deadline = time.monotonic() + 10
        while await self.held() != n:
            assert time.monotonic() < deadline, f"never {n} held"
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self.release.set()
        await self.client.close()
        for r in reversed(self.runners):
            await r.cleanup()


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    s = Stack()
    yield s
    await s.close()


def _labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"namespace": NS, "service": NAME, **kw}.items()))


async def test_held_request_is_forwarded_once_a_replica_is_ready(stack: Stack) -> None:
    await stack.start()
    req = asyncio.create_task(stack.post())
    await stack.wait_held(1)
    await wait_until(lambda: len(stack.waker.calls) == 1)
    assert stack.waker.calls[0] == (KEY, Wake(requested_at=T0, held=1, by="activator-0"))
    assert not req.done()

    stack.clock.t = T0 + 42.5
    stack.ready()
    status, body, _ = await req
    assert status == 200
    assert body == {"from": "upstream", "path": "/v1/completions", "body": '{"prompt":"hi"}'}
    await wait_until(lambda: len(stack.waker.calls) == 2)
    assert stack.waker.calls[1] == (KEY, Wake(requested_at=T0, held=1, served_at=T0 + 42.5,
                                              waited_s=42.5, by="activator-0"))
    m = await stack.metrics()
    assert m[("slo_activator_held_requests", _labels())] == 0
    assert m[("slo_activator_hold_seconds_count", _labels())] == 1
    assert m[("slo_activator_wakes_total", _labels())] == 1
    assert m[("slo_activator_requests_total", _labels(code="200"))] == 1


async def test_ready_service_is_forwarded_without_a_wake(stack: Stack) -> None:
    await stack.start()
    stack.ready()
    status, body, _ = await stack.post()
    assert (status, body["from"]) == (200, "upstream")
    assert stack.waker.calls == []
    assert ("slo_activator_hold_seconds_count", _labels()) not in await stack.metrics()


async def test_later_arrivals_update_the_held_count_but_not_at_once(stack: Stack) -> None:
    await stack.start(update_interval_s=3600)
    reqs = []
    for n in (1, 2, 3):
        reqs.append(asyncio.create_task(stack.post()))
        await stack.wait_held(n)
    stack.ready()
    assert [r[0] for r in await asyncio.gather(*reqs)] == [200, 200, 200]
    await wait_until(lambda: len(stack.waker.calls) == 2)
    first, served = stack.waker.wakes
    assert first == Wake(requested_at=T0, held=1, by="activator-0")
    # No write for the 2nd and 3rd arrival within the interval; the served record has them.
    assert (served.requested_at, served.held, served.served_at) == (T0, 3, T0)


async def test_later_arrivals_are_written_after_the_interval(stack: Stack) -> None:
    await stack.start(update_interval_s=0.05)
    reqs = [asyncio.create_task(stack.post()) for _ in range(3)]
    await stack.wait_held(3)
    await wait_until(lambda: stack.waker.wakes[-1].held == 3)
    assert {w.requested_at for w in stack.waker.wakes} == {T0}
    stack.ready()
    await asyncio.gather(*reqs)


async def test_full_queue_answers_429_with_retry_after(stack: Stack, golden: Any) -> None:
    await stack.start(queue_per_service=2)
    held = [asyncio.create_task(stack.post()) for _ in range(2)]
    await stack.wait_held(2)
    status, body, headers = await stack.post()
    assert status == 429
    assert headers["Retry-After"] == str(RETRY_AFTER_S)
    golden.check("activator", "queue-full", body["error"]["message"])
    stack.ready()
    assert [r[0] for r in await asyncio.gather(*held)] == [200, 200]


async def test_no_ready_replica_within_the_timeout_answers_504(stack: Stack,
                                                               golden: Any) -> None:
    await stack.start(timeout_s=0.3)
    results = await asyncio.gather(stack.post(), stack.post())
    assert [r[0] for r in results] == [504, 504]
    golden.check("activator", "timeout", results[0][1]["error"]["message"])
    await wait_until(lambda: any(w.timed_out_at for w in stack.waker.wakes))
    timed_out = [w for w in stack.waker.wakes if w.timed_out_at is not None]
    assert len(timed_out) == 1
    assert (timed_out[0].requested_at, timed_out[0].held, timed_out[0].served_at) == (T0, 2,
                                                                                     None)
    m = await stack.metrics()
    assert m[("slo_activator_wake_timeouts_total", _labels())] == 1
    assert m[("slo_activator_requests_total", _labels(code="504"))] == 2
    assert m[("slo_activator_held_requests", _labels())] == 0


async def test_a_refused_record_of_the_timeout_is_written_again(stack: Stack) -> None:
    await stack.start(timeout_s=0.3)
    req = asyncio.create_task(stack.post())
    await wait_until(lambda: len(stack.waker.wakes) == 1)  # the wake, recorded at once
    stack.waker.refuse = 2  # the API server refuses the end twice
    assert (await req)[0] == 504
    await wait_until(lambda: any(w.timed_out_at for w in stack.waker.wakes))
    assert stack.waker.refuse == 0


async def test_a_refused_record_of_the_first_served_request_is_written_again(
        stack: Stack) -> None:
    await stack.start()
    req = asyncio.create_task(stack.post())
    await wait_until(lambda: len(stack.waker.wakes) == 1)
    stack.waker.refuse = 1
    stack.ready()
    assert (await req)[0] == 200
    await wait_until(lambda: any(w.served_at for w in stack.waker.wakes))
    served = [w for w in stack.waker.wakes if w.served_at is not None]
    assert len(served) == 1 and served[0].requested_at == T0


@pytest.mark.parametrize("how", ["service-removed", "annotation-write-404"])
async def test_deleted_while_held_answers_404_at_once(stack: Stack, golden: Any,
                                                      how: str) -> None:
    await stack.start(timeout_s=30)
    if how == "annotation-write-404":
        stack.waker.gone.add(KEY)
    started = time.monotonic()
    req = asyncio.create_task(stack.post())
    if how == "service-removed":
        await stack.wait_held(1)
        stack.table.remove_service(NS, SVC)
    status, body, _ = await req
    assert status == 404
    assert time.monotonic() - started < 5  # not at the 30 s timeout
    golden.check("activator", "deleted-while-held", body["error"]["message"])
    assert all(w.timed_out_at is None for w in stack.waker.wakes)


async def test_streamed_chunks_arrive_before_the_upstream_finishes(stack: Stack) -> None:
    await stack.start()

    async def first_chunk_then_rest() -> tuple[bytes, bytes]:
        async with stack.client.post(stack.url + "/v1/stream", data=b"{}",
                                     headers={"Host": HOST}) as r:
            first = await r.content.readany()
            assert not stack.release.is_set()  # the upstream has not finished
            stack.release.set()
            return first, await r.content.read()

    req = asyncio.create_task(first_chunk_then_rest())
    await stack.wait_held(1)
    stack.ready()
    first, rest = await req
    assert first == b"data: first\n\n"
    assert rest == b"data: [DONE]\n\n"


async def test_client_that_leaves_during_forwarding_cancels_the_upstream(
        stack: Stack) -> None:
    await stack.start()

    async def leave_after_the_first_chunk() -> bytes:
        async with stack.client.post(stack.url + "/v1/stream", data=b"{}",
                                     headers={"Host": HOST}) as r:
            first = await r.content.readany()
            r.close()  # the client goes away mid-stream
            return first

    req = asyncio.create_task(leave_after_the_first_chunk())
    await stack.wait_held(1)
    stack.ready()
    assert await req == b"data: first\n\n"
    await asyncio.wait_for(stack.upstream_cancelled.wait(), timeout=10)
    await wait_until(lambda: stack.activator is not None and not stack.activator.holds)
    m = await stack.metrics()
    assert m[("slo_activator_abandoned_requests_total", _labels())] == 1


async def test_client_that_leaves_while_held_leaves_the_queue(stack: Stack) -> None:
    await stack.start()
    port = int(stack.url.rsplit(":", 1)[1])
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 2\r\n"
                 "\r\n{}".encode())
    await writer.drain()
    await stack.wait_held(1)
    writer.close()
    await writer.wait_closed()
    await stack.wait_held(0)
    m = await stack.metrics()
    assert m[("slo_activator_abandoned_requests_total", _labels())] == 1
    # The wake goes on: a replica that comes up serves the next request at once.
    stack.ready()
    assert (await stack.post())[0] == 200


@pytest.mark.parametrize("host", [
    f"{SVC}.{NS}", f"{SVC}.{NS}:8000", f"{SVC}.{NS}.svc", f"{SVC}.{NS}.svc:8000",
    f"{SVC}.{NS}.svc.cluster.local", f"{SVC}.{NS}.svc.cluster.local.",
    f"{SVC.upper()}.{NS}", CLUSTER_IP, f"{CLUSTER_IP}:8000",
])
async def test_accepted_host_forms_reach_the_service(stack: Stack, host: str) -> None:
    await stack.start()
    stack.ready()
    status, body, _ = await stack.post(host=host)
    assert (status, body.get("from")) == (200, "upstream")


async def test_service_header_wins_over_the_host(stack: Stack) -> None:
    await stack.start()
    stack.ready()
    status, body, _ = await stack.post(host="elsewhere.other",
                                       headers={SERVICE_HEADER: f"{NS}/{NAME}"})
    assert (status, body.get("from")) == (200, "upstream")


@pytest.mark.parametrize(("case", "host", "headers", "status"), [
    ("bare-name", SVC, {}, 400),
    ("not-a-service-name", f"{SVC}.{NS}.example.com", {}, 400),
    ("bad-header", HOST, {SERVICE_HEADER: NAME}, 400),
    ("unknown-name", HOST, {SERVICE_HEADER: f"{NS}/nope"}, 404),
    ("unknown-service", f"{SVC}.other", {}, 404),
    ("unknown-cluster-ip", "10.96.0.99:8000", {}, 404),
])
async def test_requests_naming_no_known_service_are_refused(
        stack: Stack, golden: Any, case: str, host: str, headers: dict[str, str],
        status: int) -> None:
    await stack.start()
    stack.ready()
    got, body, _ = await stack.post(host=host, headers=headers)
    assert got == status
    golden.check("activator", case, body["error"]["message"])
    assert stack.waker.calls == []


async def test_not_ready_until_the_first_listing(stack: Stack, golden: Any) -> None:
    await stack.start(synced=False)
    async with stack.client.get(stack.url + "/healthz") as r:
        assert r.status == 200
    async with stack.client.get(stack.url + "/readyz") as r:
        assert r.status == 503
    status, body, headers = await stack.post()
    assert status == 503
    assert headers["Retry-After"] == str(RETRY_AFTER_S)
    golden.check("activator", "starting", body["error"]["message"])
    stack.table.mark_synced()
    async with stack.client.get(stack.url + "/readyz") as r:
        assert r.status == 200


async def test_own_endpoints_answer_only_requests_naming_no_service(stack: Stack) -> None:
    await stack.start()
    stack.ready()
    async with stack.client.get(stack.url + "/metrics") as r:  # Host: the pod's address
        assert "slo_activator_requests" in await r.text()
    async with stack.client.get(stack.url + "/healthz", headers={"Host": HOST}) as r:
        assert r.status == 404  # the replica's answer: the upstream has no /healthz


@pytest.mark.parametrize(("host", "want"), [
    ("chat.team-a", HostName("team-a", "chat")),
    ("chat.team-a.svc.cluster.local:80", HostName("team-a", "chat")),
    ("10.0.0.1", HostAddress("10.0.0.1")),
    ("[fd00::10]:8000", HostAddress("fd00::10")),
    ("fd00::10", HostAddress("fd00::10")),
    ("chat", None),
    ("chat.team-a.example.com", None),
    (".team-a", None),
    ("", None),
])
def test_parse_host(host: str, want: HostName | HostAddress | None) -> None:
    assert parse_host(host) == want
