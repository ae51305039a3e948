"""Gateway against real loopback servers: the replica model and small upstreams."""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Iterable

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from slo_devtools.replica.server import LinearSteps
from slo_operator.slo import histogram
from slo_runtime import contract
from slo_runtime.admission import FairAdmission
from slo_runtime.gateway import (
    PICKER_METRICS_PATH,
    PICKER_QUEUE_METRIC,
    GatewayMetrics,
    TenantsConfig,
    TenantSpec,
    engine_waiting,
)
from slo_runtime.limitwatch import parse_limit
from slo_runtime.proxy import start_site
from tests.runtime.rt_support import Servers, wait_until

pytestmark = pytest.mark.timeout(60)

# An SSE body with uneven chunk sizes, multi-byte UTF-8 split across chunks and bytes a
# proxy could be tempted to normalise (CRLF, trailing spaces).
SSE_CHUNKS = [b"data: {\"t\":\"h\xc3", b"\xa9llo\"}\r\n\r\n", b"data: {\"t\":\" x \"}\n\n",
              b": keep-alive comment\n\n", b"data: [DONE]\n\n"]


def fixed_upstream() -> web.Application:
    async def sse(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "X-Upstream": "yes"})
        await resp.prepare(request)
        for c in SSE_CHUNKS:
            await resp.write(c)
            await asyncio.sleep(0.01)
        await resp.write_eof()
        return resp

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        block = bytes(range(256)) * 4096       # 1 MiB
        for _ in range(int(request.query.get("mib", "64"))):
            await resp.write(block)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/sse", sse)
    app.router.add_post("/v1/big", big)
    return app


async def collect(session: aiohttp.ClientSession, url: str, body: dict,
                  headers: dict | None = None) -> tuple[int, bytes]:
    async with session.post(url, json=body, headers=headers or {}) as r:
        return r.status, await r.read()


# --- pure pieces -------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "want"), [
    ("8", 8), ("  16\n", 16), ('"32"', 32), ("", None), ("0", None), ("-3", None),
    ("ten", None),
], ids=["plain", "whitespace-and-newline", "quoted-annotation-value", "empty-annotation",
        "zero-is-not-a-limit", "negative", "not-a-number"])
def test_parse_limit(text: str, want: int | None) -> None:
    assert parse_limit(text) == want


# --- streaming ---------------------------------------------------------------------------
async def test_streaming_passthrough_is_byte_for_byte(servers: Servers) -> None:
    up = await servers.serve(fixed_upstream())
    _, gw = await servers.gateway(up)
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        async with s.post(gw + "/v1/sse", json={"stream": True}) as r:
            via = await r.read()
            assert r.headers["X-Upstream"] == "yes"
            assert r.headers["Content-Type"] == "text/event-stream"
        async with s.post(up + "/v1/sse", json={"stream": True}) as r:
            direct = await r.read()
    assert via == direct == b"".join(SSE_CHUNKS)


async def test_tokens_reach_the_client_while_the_replica_is_still_generating(
        servers: Servers) -> None:
    rep, up = await servers.replica(steps=LinearSteps(base_ms=30, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    _, gw = await servers.gateway(up)
    async with aiohttp.ClientSession() as s, s.post(
            gw + "/v1/completions",
            json={"prompt": "hi", "max_tokens": 8, "stream": True}) as r:
        first = await r.content.readuntil(b"\n\n")
        assert json.loads(first[6:])["choices"][0]["text"] == " tok1"
        assert rep.engine.completed == 0          # not buffered until the end
        rest = await r.read()
    assert rest.endswith(b"data: [DONE]\n\n")
    assert rest.count(b"data: ") == 8             # 7 more tokens + [DONE]


# --- the live limit ----------------------------------------------------------------------
async def test_limit_file_rewrite_changes_inflight_cap_without_restart(
        servers: Servers, tmp_path) -> None:
    limit = tmp_path / "inflight-limit"
    limit.write_text("2")
    rep, up = await servers.replica(steps=LinearSteps(base_ms=20, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    gw, url = await servers.gateway(up, limit_file=str(limit), poll_interval_s=0.02)
    async with aiohttp.ClientSession() as s:
        reqs = [asyncio.create_task(collect(s, url + "/v1/completions",
                                            {"prompt": "p", "max_tokens": 15}))
                for _ in range(10)]
        await wait_until(lambda: gw.admission.queued() == 8 and len(rep.engine.running) == 2)
        assert gw.admission.in_flight == 2
        assert gw.admission.limit == 2
        # kubelet replaces the projected file; the gateway must see the new content.
        new = tmp_path / "new"
        new.write_text("6\n")
        new.replace(limit)
        await wait_until(lambda: len(rep.engine.running) == 6)
        results = await asyncio.gather(*reqs)
    assert all(status == 200 for status, _ in results)
    assert rep.engine.max_running_seen == 6
    metrics = await _metrics(url)
    assert metrics["slo_gateway_inflight_limit"] == 6


async def test_invalid_limit_file_content_keeps_the_last_limit(servers: Servers,
                                                               tmp_path) -> None:
    limit = tmp_path / "inflight-limit"
    limit.write_text("3")
    _, up = await servers.replica()
    gw, _ = await servers.gateway(up, limit_file=str(limit), poll_interval_s=0.02)
    await wait_until(lambda: gw.admission.limit == 3)
    limit.write_text("not-a-number")
    limit.write_text("")        # annotation removed
    limit.write_text("garbage")
    await asyncio.sleep(0)      # let one poll run; then prove the limit still holds
    await wait_until(lambda: gw.admission.limit == 3)
    limit.write_text("4")
    await wait_until(lambda: gw.admission.limit == 4)


# --- fairness through HTTP -----------------------------------------------------------------
async def test_weighted_fairness_between_two_tenants_under_contention(
        servers: Servers) -> None:
    rep, up = await servers.replica(steps=LinearSteps(base_ms=2, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    tenants = TenantsConfig(tenants={"gold": TenantSpec(weight=3),
                                     "bronze": TenantSpec(weight=1)})
    gw, url = await servers.gateway(up, default_limit=1, tenants=tenants)
    done: list[str] = []
    async with aiohttp.ClientSession() as s:
        async def one(tenant: str, max_tokens: int = 1) -> None:
            st, _ = await collect(s, url + "/v1/completions",
                                  {"prompt": "p", "max_tokens": max_tokens},
                                  {"X-Tenant": tenant})
            assert st == 200
            done.append(tenant)

        blocker = asyncio.create_task(one("bronze", max_tokens=25))
        await wait_until(lambda: len(rep.engine.running) == 1)
        tasks = [asyncio.create_task(one(t)) for t in ["gold"] * 30 + ["bronze"] * 30]
        await wait_until(lambda: gw.admission.queued() == 60)
        await asyncio.gather(blocker, *tasks)
    served = done[1:41]   # the first 40 after the blocker, both tenants backlogged
    gold = served.count("gold")
    assert 28 <= gold <= 32, f"gold served {gold} of 40, want ~30 (weight 3:1)"


# --- cancellation --------------------------------------------------------------------------
async def test_client_disconnect_cancels_the_upstream_request(servers: Servers) -> None:
    rep, up = await servers.replica(steps=LinearSteps(base_ms=10, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    gw, url = await servers.gateway(up)
    s = aiohttp.ClientSession()
    r = await s.post(url + "/v1/completions",
                     json={"prompt": "p", "max_tokens": 10000, "stream": True})
    await r.content.readuntil(b"\n\n")
    assert len(rep.engine.running) == 1
    r.close()
    await s.close()
    await asyncio.wait_for(rep.engine.aborted_event.wait(), 10)
    assert rep.engine.aborted == 1
    assert rep.engine.running == []
    await wait_until(lambda: gw.admission.in_flight == 0)
    assert rep.metrics.success["abort"]._value.get() == 1


async def test_client_disconnect_before_a_whole_response_cancels_upstream(
        servers: Servers) -> None:
    rep, up = await servers.replica(steps=LinearSteps(base_ms=10, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    gw, url = await servers.gateway(up)
    s = aiohttp.ClientSession()
    pending = asyncio.create_task(s.post(url + "/v1/completions",
                                         json={"prompt": "p", "max_tokens": 10000}))
    await wait_until(lambda: len(rep.engine.running) == 1)
    await s.close()
    await asyncio.gather(pending, return_exceptions=True)
    await asyncio.wait_for(rep.engine.aborted_event.wait(), 10)
    assert rep.engine.aborted == 1 and rep.engine.completed == 0
    await wait_until(lambda: gw.admission.in_flight == 0)


async def test_client_disconnect_while_queued_never_reaches_upstream(
        servers: Servers) -> None:
    rep, up = await servers.replica(steps=LinearSteps(base_ms=10, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    gw, url = await servers.gateway(up, default_limit=1)
    async with aiohttp.ClientSession() as s:
        blocker = asyncio.create_task(collect(s, url + "/v1/completions",
                                              {"prompt": "p", "max_tokens": 30}))
        await wait_until(lambda: len(rep.engine.running) == 1)
        s2 = aiohttp.ClientSession()
        queued = asyncio.create_task(s2.post(url + "/v1/completions",
                                             json={"prompt": "q", "max_tokens": 5}))
        await wait_until(lambda: gw.admission.queued() == 1)
        await s2.close()
        await asyncio.gather(queued, return_exceptions=True)
        await wait_until(lambda: gw.admission.queued() == 0)
        status, _ = await blocker
    assert status == 200
    assert rep.engine.completed == 1      # only the blocker was ever served
    await wait_until(lambda: gw.admission.in_flight == 0)


# --- rejections ------------------------------------------------------------------------------
async def test_oversized_body_is_413_and_invalid_json_is_400(servers: Servers) -> None:
    rep, up = await servers.replica()
    _, url = await servers.gateway(up, max_body_bytes=1024)
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions", data=b"{" + b" " * 2000 + b"}") as r:
            assert r.status == 413
            assert (await r.json())["error"]["code"] == 413
        async with s.post(url + "/v1/completions", data=b"{not json") as r:
            assert r.status == 400
            assert "JSON" in (await r.json())["error"]["message"]
        async with s.post(url + "/v1/completions", data=b"[1, 2]") as r:
            assert r.status == 400
        # A chunked body (no Content-Length) that grows too large is refused as well.
        async def gen():
            for _ in range(4):
                yield b" " * 512
        async with s.post(url + "/v1/completions", data=gen()) as r:
            assert r.status == 413
    assert rep.engine.completed == 0


@pytest.mark.parametrize(("policy", "headers", "want_status", "want_tenant"), [
    ("reject", {"X-Tenant": "mallory"}, 403, None),
    ("reject", {}, 403, None),
    ("reject", {"X-Tenant": "team-a"}, 200, "team-a"),
    ("reject", {"Authorization": "Bearer key-a"}, 200, "team-a"),
    ("default", {"X-Tenant": "mallory"}, 200, "default"),
    ("default", {"Authorization": "Bearer wrong"}, 200, "default"),
], ids=["reject-unknown-header", "reject-missing-tenant", "listed-header",
        "api-key-maps-to-tenant", "default-policy-serves-unknown-as-default",
        "default-policy-unknown-key"])
async def test_tenant_resolution_and_unknown_tenant_policy(
        servers: Servers, policy: str, headers: dict, want_status: int,
        want_tenant: str | None) -> None:
    _, up = await servers.replica()
    tenants = TenantsConfig(tenants={"team-a": TenantSpec(weight=2, api_keys=["key-a"])},
                            unknown_tenant=policy)
    _, url = await servers.gateway(up, tenants=tenants)
    async with aiohttp.ClientSession() as s:
        status, _ = await collect(s, url + "/v1/completions",
                                  {"prompt": "p", "max_tokens": 1}, headers)
    assert status == want_status
    m = await _metrics(url, labels=True)
    if want_tenant:
        assert m[("slo_gateway_requests_total", (("code", "200"), ("tenant", want_tenant)))] == 1


# --- slow clients -----------------------------------------------------------------------------
async def test_slow_reading_client_does_not_stall_others(servers: Servers) -> None:
    up = await servers.serve(fixed_upstream())
    _, rep_url = await servers.replica()
    # Route /v1/big to the byte upstream, everything else to the replica, via two gateways
    # sharing nothing but the process and event loop (the resource a stall would hog).
    gw_big, big_url = await servers.gateway(up)
    _, gw_url = await servers.gateway(rep_url)
    host, port = big_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = b"{}"
    writer.write(b"POST /v1/big?mib=256 HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 2\r\n\r\n" + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")      # response started; now stop reading
    assert b"200" in head.split(b"\r\n")[0]
    await wait_until(lambda: gw_big.admission.in_flight == 1)
    async with aiohttp.ClientSession() as s:
        for _ in range(5):
            status, data = await asyncio.wait_for(
                collect(s, gw_url + "/v1/completions", {"prompt": "p", "max_tokens": 3}), 10)
            assert status == 200 and b"tok3" in data
    assert gw_big.admission.in_flight == 1        # the slow one is still being served
    writer.close()
    await wait_until(lambda: gw_big.admission.in_flight == 0)


# --- metrics --------------------------------------------------------------------------------------
async def _metrics(url: str, labels: bool = False) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if labels:
                out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
            elif not smp.labels:
                out[smp.name] = smp.value
    return out


async def test_gateway_exports_ttft_e2e_and_queue_metrics(servers: Servers) -> None:
    _, up = await servers.replica(steps=LinearSteps(base_ms=5, per_seq_ms=0,
                                                  prefill_ms_per_token=0))
    _, url = await servers.gateway(up)
    async with aiohttp.ClientSession() as s:
        await collect(s, url + "/v1/completions",
                      {"prompt": "p", "max_tokens": 4, "stream": True})
        await collect(s, url + "/v1/completions", {"prompt": "p", "max_tokens": 4})
    m = await _metrics(url, labels=True)
    tenant = (("tenant", "default"),)
    assert m[("slo_gateway_time_to_first_token_seconds_count", tenant)] == 1
    assert m[("slo_gateway_e2e_request_latency_seconds_count", tenant)] == 2
    assert m[("slo_gateway_queue_wait_seconds_count", tenant)] == 2
    ttft = m[("slo_gateway_time_to_first_token_seconds_sum", tenant)]
    e2e = m[("slo_gateway_e2e_request_latency_seconds_sum", tenant)]
    assert 0.004 < ttft < e2e
    assert ("slo_gateway_queue_depth", tenant) in m
    assert m[("slo_gateway_inflight", ())] == 0


def test_gateway_families_are_the_contracts_names() -> None:
    """The gateway exposes exactly the families named in slo_runtime.contract, which the
    operator's queries read (slo.promql)."""
    metrics = GatewayMetrics(FairAdmission(limit=4))
    names = {fam.name for fam in metrics.registry.collect()}
    assert names == set(contract.GATEWAY_METRICS)
    assert len(contract.GATEWAY_METRICS) == len(names)
    assert all(n.startswith("slo_gateway_") for n in names)


def _p99(families: Iterable[Metric], family: str) -> float | None:
    """P99 as the loop reads it: PromQL's interpolation over the exposed buckets."""
    buckets = [(float(smp.labels["le"]), smp.value) for fam in families
               for smp in fam.samples if smp.name == family + "_bucket"]
    return histogram.quantile(0.99, buckets)


@pytest.mark.parametrize("objective_s", [0.3, 1.5, 3.0, 6.0, 8.0, 20.0, 60.0, 120.0])
@pytest.mark.parametrize("family", ["e2e", "ttft"])
def test_whether_a_round_objective_is_met_reads_exactly_from_the_gateways_buckets(
        family: str, objective_s: float) -> None:
    """Linear interpolation inside a wide bucket reads a tail high; with a boundary at
    every round objective, the reading meets the objective exactly when the true P99 does."""
    rng = random.Random(objective_s)
    name = {"e2e": contract.GATEWAY_E2E_LATENCY, "ttft": contract.GATEWAY_TTFT}[family]
    for spread in (0.1, 0.3, 0.6):
        metrics = GatewayMetrics(FairAdmission(limit=4))
        values = [objective_s * rng.lognormvariate(-0.5, spread) for _ in range(500)]
        for v in values:
            metrics.child(family, "t").observe(v)
        true_p99 = sorted(values)[math.ceil(0.99 * len(values)) - 1]
        read = _p99(metrics.registry.collect(), name)
        assert read is not None
        assert (read <= objective_s) == (true_p99 <= objective_s), (spread, true_p99, read)


def test_a_p99_just_past_a_wide_vllm_bucket_reads_under_the_objective_at_the_gateway() -> None:
    """985 requests at 1 s and 15 at 5.1 s: the true P99 is 5.1 s. vLLM's 5 s and 10 s
    boundaries alone read 6.7 s, a miss of a 6 s objective; the gateway's read under it."""
    metrics = GatewayMetrics(FairAdmission(limit=4))
    engine = Histogram("engine_e2e", "vLLM's boundaries", buckets=contract.REQUEST_LATENCY_BUCKETS,
                       registry=CollectorRegistry())
    for v in [1.0] * 985 + [5.1] * 15:
        metrics.child("e2e", "t").observe(v)
        engine.observe(v)
    vllm_read = _p99(engine.collect(), "engine_e2e")
    gateway_read = _p99(metrics.registry.collect(), contract.GATEWAY_E2E_LATENCY)
    assert vllm_read is not None and vllm_read > 6.0
    assert gateway_read is not None and 5.1 <= gateway_read < 6.0


def test_gateway_latency_boundaries_hold_every_one_of_vllms() -> None:
    """Every vLLM boundary is also the gateway's: the two views compare bucket by bucket."""
    assert set(contract.TTFT_BUCKETS) <= set(contract.GATEWAY_TTFT_BUCKETS)
    assert set(contract.REQUEST_LATENCY_BUCKETS) <= set(contract.GATEWAY_E2E_BUCKETS)
    for b in (contract.GATEWAY_TTFT_BUCKETS, contract.GATEWAY_E2E_BUCKETS):
        assert list(b) == sorted(set(b))


async def test_engine_metrics_are_forwarded_from_vllm(servers: Servers) -> None:
    _, up = await servers.replica(model_name="fwd")
    _, url = await servers.gateway(up)
    async with aiohttp.ClientSession() as s, s.get(url + "/engine/metrics") as r:
        assert r.status == 200
        text = await r.text()
    assert 'vllm:num_requests_running{engine="0",model_name="fwd"}' in text
    assert "slo_gateway_" not in text


async def test_probes_and_scrapes_are_not_counted_as_requests(servers: Servers) -> None:
    """Only inference requests feed the gateway's latency SLIs, never /health or scrapes."""
    _, up = await servers.replica()
    _, gw = await servers.gateway(up)
    async with aiohttp.ClientSession() as s:
        for path in ("/health", "/engine/metrics", "/v1/models"):
            async with s.get(gw + path) as r:
                assert r.status == 200, path
        async with s.post(gw + "/v1/completions", json={"prompt": "a", "max_tokens": 2}) as r:
            assert r.status == 200
        async with s.get(gw + "/metrics") as r:
            text = await r.text()
    counts = {smp.labels.get("code"): smp.value
              for fam in text_string_to_metric_families(text) for smp in fam.samples
              if smp.name == "slo_gateway_requests_total"}
    assert counts == {"200": 1.0}
    e2e = [smp.value for fam in text_string_to_metric_families(text) for smp in fam.samples
           if smp.name == "slo_gateway_e2e_request_latency_seconds_count"]
    assert e2e == [1.0]


async def test_arrivals_count_every_inference_request_before_admission(
        servers: Servers) -> None:
    """Demand as it arrives: served, queued, refused and abandoned requests all count,
    under the tenant their headers name; probes and scrapes do not."""
    rep, up = await servers.replica(steps=LinearSteps(base_ms=10, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    tenants = TenantsConfig(tenants={"team-a": TenantSpec(), "team-b": TenantSpec()},
                            unknown_tenant="reject")
    gw, url = await servers.gateway(up, default_limit=1, max_queue_per_tenant=1,
                                    max_body_bytes=1024, tenants=tenants)
    arrivals = "slo_gateway_arrivals_total"
    before = await _metrics(url, labels=True)
    # Known tenants' series exist at 0 before their first request (rate() needs a start).
    assert before[(arrivals, (("tenant", "team-a"),))] == 0
    assert before[(arrivals, (("tenant", "team-b"),))] == 0
    a = {"X-Tenant": "team-a"}
    async with aiohttp.ClientSession() as s:
        blocker = asyncio.create_task(collect(s, url + "/v1/completions",
                                              {"prompt": "p", "max_tokens": 30}, a))
        await wait_until(lambda: len(rep.engine.running) == 1)
        queued = asyncio.create_task(collect(s, url + "/v1/completions",
                                             {"prompt": "q", "max_tokens": 1}, a))
        await wait_until(lambda: gw.admission.queued("team-a") == 1)
        status, _ = await collect(s, url + "/v1/completions",
                                  {"prompt": "r", "max_tokens": 1}, a)
        assert status == 429                                  # team-a's queue is full
        async with s.post(url + "/v1/completions", data=b"{not json", headers=a) as r:
            assert r.status == 400
        status, _ = await collect(s, url + "/v1/completions", {"prompt": "x"},
                                  {"X-Tenant": "mallory"})
        assert status == 403
        s2 = aiohttp.ClientSession()
        abandoned = asyncio.create_task(s2.post(url + "/v1/completions", headers={
            "X-Tenant": "team-b"}, json={"prompt": "z", "max_tokens": 1}))
        await wait_until(lambda: gw.admission.queued("team-b") == 1)
        await s2.close()
        await asyncio.gather(abandoned, return_exceptions=True)
        for path in ("/health", "/v1/models", "/metrics"):
            async with s.get(url + path) as r:
                assert r.status == 200, path
        assert [st for st, _ in await asyncio.gather(blocker, queued)] == [200, 200]
    m = await _metrics(url, labels=True)
    assert m[(arrivals, (("tenant", "team-a"),))] == 4   # served 2, full queue, bad JSON
    assert m[(arrivals, (("tenant", "team-b"),))] == 1   # left while queued
    assert m[(arrivals, (("tenant", "unknown"),))] == 1  # refused as unknown
    answered = sum(v for (name, _), v in m.items() if name == "slo_gateway_requests_total")
    assert answered == 5                                 # the abandoned one got no answer


# --- the endpoint picker's queue ----------------------------------------------------------------
async def test_picker_queue_counts_requests_held_in_the_gateway_where_vllm_reads_zero(
        servers: Servers) -> None:
    """Requests held above the live limit wait in the gateway, not in vLLM: vLLM's own
    waiting gauge reads 0 while the picker's queue metric reads the held count."""
    rep, up = await servers.replica(steps=LinearSteps(base_ms=20, per_seq_ms=0,
                                                    prefill_ms_per_token=0))
    gw, url = await servers.gateway(up, default_limit=2)
    async with aiohttp.ClientSession() as s:
        reqs = [asyncio.create_task(collect(s, url + "/v1/completions",
                                            {"prompt": "p", "max_tokens": 40}))
                for _ in range(6)]
        await wait_until(lambda: gw.admission.queued() == 4 and len(rep.engine.running) == 2)
        async with s.get(url + PICKER_METRICS_PATH) as r:
            assert r.status == 200
            text = await r.text()
        await asyncio.gather(*reqs)
    values = {smp.name: smp.value for fam in text_string_to_metric_families(text)
              for smp in fam.samples}
    assert values[contract.NUM_REQUESTS_WAITING] == 0
    assert values[contract.NUM_REQUESTS_RUNNING] == 2
    assert values[PICKER_QUEUE_METRIC] == 4
    assert engine_waiting(text) == 0


def test_engine_waiting_sums_every_engine_and_skips_longer_names() -> None:
    text = ('vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0\n')
    assert engine_waiting(text) == 5
    assert engine_waiting("") == 0


async def test_picker_metrics_are_502_while_vllm_does_not_answer(servers: Servers) -> None:
    _, url = await servers.gateway("http://127.0.0.1:9")  # discard port: nothing listens
    async with aiohttp.ClientSession() as s, s.get(url + PICKER_METRICS_PATH) as r:
        assert r.status == 502


async def test_a_stopped_site_cuts_requests_still_in_flight_after_its_grace() -> None:
    """A pod stopped mid-answer: the runner's cleanup ends at its grace, not when the
    answer would (a streamed answer can run for a minute)."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"data: first\n\n")
        await release.wait()  # never set: the answer would go on forever
        return resp

    app = web.Application()
    app.router.add_get("/slow", slow)
    runner, port = await start_site(app, "127.0.0.1", 0, shutdown_timeout=0.2)
    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{port}/slow") as resp:
        assert await resp.content.readline() == b"data: first\n"
        # Completes although the handler never returns (the test's own timeout is 60 s).
        await asyncio.wait_for(runner.cleanup(), timeout=30)
        with pytest.raises(aiohttp.ClientError):
            await resp.content.read()
