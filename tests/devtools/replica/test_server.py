"""The replica model: vLLM's metric contract, the OpenAI API, and a capacity."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slo_devtools.replica.server import LinearSteps
from slo_runtime.stepmodel import StepModel
from tests.runtime.rt_support import FIXTURES_VLLM, PROFILES, Servers, wait_until

pytestmark = pytest.mark.timeout(60)

FAMILY_LINE = re.compile(
    r"^(?P<name>\S+) \[(?P<type>\w+)\] labels=(?P<labels>\[.*?\]) series=\d+"
    r"(?: buckets\(\d+\)=(?P<buckets>\S+))?$")


def fixture_families() -> dict[str, dict]:
    out = {}
    for line in (FIXTURES_VLLM / "metric-families-vllm-0.32.0.txt").read_text().splitlines():
        m = FAMILY_LINE.match(line.strip())
        assert m, f"unparsed fixture line: {line}"
        buckets = m["buckets"].split(",") if m["buckets"] else None
        out[m["name"]] = {
            "type": m["type"],
            "labels": sorted(json.loads(m["labels"].replace("'", '"'))),
            "buckets": [float(b) for b in buckets] if buckets else None,
        }
    return out


def served_families(text: str) -> dict[str, dict]:
    out = {}
    for fam in text_string_to_metric_families(text):
        # `_created` timestamps are exposed as separate gauges by prometheus_client, in
        # vLLM as here; the fixture's family list leaves them out (checked by TYPE below).
        if not fam.name.startswith("vllm:") or fam.name.endswith("_created"):
            continue
        main = [s for s in fam.samples if not s.name.endswith("_created")]
        labels = sorted({k for s in main for k in s.labels if k != "le"})
        buckets = sorted({float(s.labels["le"]) for s in main if s.name.endswith("_bucket")})
        out[fam.name] = {"type": fam.type, "labels": labels,
                         "buckets": buckets if fam.type == "histogram" else None}
    return out


# The captured server's context: its token-count histograms stop at 500 (vLLM's 1-2-5
# boundaries up to --max-model-len), so it was at least 500 and under 1,000 tokens.
FIXTURE_MAX_MODEL_LEN = 512


async def test_metrics_match_vllm_0_32_0_families_exactly(servers: Servers) -> None:
    _, url = await servers.replica(max_model_len=FIXTURE_MAX_MODEL_LEN)
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    want, got = fixture_families(), served_families(text)
    assert sorted(got) == sorted(want), "family names differ from vLLM 0.32.0"
    for name, w in want.items():
        assert got[name] == w, name
    raw = (FIXTURES_VLLM / "metrics-vllm-0.32.0.txt").read_text()
    assert type_lines(text) == type_lines(raw)


def type_lines(exposition: str) -> set[str]:
    """Every `# TYPE vllm:...` line, `_created` and `_total` spellings included."""
    return {line for line in exposition.splitlines() if line.startswith("# TYPE vllm:")}


async def test_metrics_follow_served_requests(servers: Servers) -> None:
    _, url = await servers.replica(model_name="llama")
    async with aiohttp.ClientSession() as s:
        for _ in range(3):
            async with s.post(url + "/v1/completions",
                              json={"prompt": "a b c d", "max_tokens": 5}) as r:
                assert r.status == 200
        async with s.get(url + "/metrics") as r:
            text = await r.text()
    samples = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
               for fam in text_string_to_metric_families(text) for smp in fam.samples}
    lbl = (("engine", "0"), ("model_name", "llama"))
    assert samples[("vllm:generation_tokens_total", lbl)] == 15
    assert samples[("vllm:prompt_tokens_total", lbl)] == 12
    assert samples[("vllm:e2e_request_latency_seconds_count", lbl)] == 3
    assert samples[("vllm:time_to_first_token_seconds_count", lbl)] == 3
    assert samples[("vllm:inter_token_latency_seconds_count", lbl)] == 12
    ok = (("engine", "0"), ("finished_reason", "length"), ("model_name", "llama"))
    assert samples[("vllm:request_success_total", ok)] == 3
    assert samples[("vllm:num_requests_running", lbl)] == 0


async def test_openai_endpoints(servers: Servers) -> None:
    _, url = await servers.replica(model_name="served")
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/health") as r:
            assert r.status == 200
        async with s.get(url + "/v1/models") as r:
            assert (await r.json())["data"][0]["id"] == "served"
        async with s.post(url + "/v1/chat/completions", json={
                "model": "served", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3, "stream": True,
                "stream_options": {"include_usage": True}}) as r:
            events = [e for e in (await r.read()).decode().split("\n\n") if e]
        async with s.post(url + "/v1/completions",
                          json={"model": "other", "prompt": "x"}) as r:
            assert r.status == 404
        async with s.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 0}) as r:
            assert r.status == 400
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content", "")
                      for c in chunks if c["choices"])
    assert content == " tok1 tok2 tok3"
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finals[-1] == "length" and finals.count("length") == 1
    assert chunks[-1]["usage"] == {"prompt_tokens": 1, "completion_tokens": 3,
                                   "total_tokens": 4}


async def test_capacity_caps_running_and_queues_the_rest(servers: Servers) -> None:
    rep, url = await servers.replica(max_num_seqs=4, steps=LinearSteps(
        base_ms=5, per_seq_ms=0, prefill_ms_per_token=0))
    async with aiohttp.ClientSession() as s:
        async def one() -> float:
            async with s.post(url + "/v1/completions",
                              json={"prompt": "p", "max_tokens": 10}) as r:
                assert r.status == 200
                return (await r.json())["usage"]["completion_tokens"]
        tasks = [asyncio.create_task(one()) for _ in range(12)]
        await wait_until(lambda: len(rep.engine.waiting) == 8 and len(rep.engine.running) == 4)
        assert await asyncio.gather(*tasks) == [10] * 12
    assert rep.engine.max_running_seen == 4
    # 12 requests of 10 tokens through 4 slots: three waves of 10 steps (+ admission).
    assert 30 <= rep.engine.step_count <= 33


def test_linear_steps_grow_with_batch_and_prefill() -> None:
    m = LinearSteps(base_ms=5.0, per_seq_ms=0.05, prefill_ms_per_token=0.025)
    assert m.step_ms(1) == pytest.approx(5.05)
    assert m.step_ms(256) == pytest.approx(17.8)
    assert m.step_ms(1, prefill_tokens=2048) == pytest.approx(5.05 + 51.2)


def scrape(text: str) -> dict[tuple[str, tuple], float]:
    return {(smp.name, tuple(sorted((k, v) for k, v in smp.labels.items()
                                    if k not in ("engine", "model_name")))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


async def get_metrics(url: str) -> dict[tuple[str, tuple], float]:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        return scrape(await r.text())


async def test_chunked_prefill_splits_a_long_prompt_under_the_token_budget(
        servers: Servers) -> None:
    rep, url = await servers.replica(max_num_batched_tokens=64, steps=LinearSteps(
        base_ms=1, per_seq_ms=0, prefill_ms_per_token=0))
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/completions", json={
            "prompt": list(range(200)), "max_tokens": 3}) as r:
        assert (await r.json())["usage"] == {"prompt_tokens": 200, "completion_tokens": 3,
                                             "total_tokens": 203}
    # 200 prompt tokens in chunks of at most 64: 4 steps (the last samples token 1),
    # then two decode steps.
    assert rep.engine.step_count == 6
    m = await get_metrics(url)
    assert m[("vllm:iteration_tokens_total_count", ())] == 6
    assert m[("vllm:iteration_tokens_total_sum", ())] == 202
    assert m[("vllm:iteration_tokens_total_bucket", (("le", "64.0"),))] == 6
    assert m[("vllm:prompt_tokens_total", ())] == 200


async def test_decoding_shares_each_step_with_a_prefill_chunk(servers: Servers) -> None:
    """A step carries decode tokens first, then prefill up to the budget."""
    rep, url = await servers.replica(max_num_batched_tokens=32, steps=LinearSteps(
        base_ms=2, per_seq_ms=0, prefill_ms_per_token=0))
    async with aiohttp.ClientSession() as s:
        async def one(prompt: int, n: int) -> None:
            async with s.post(url + "/v1/completions",
                              json={"prompt": list(range(prompt)), "max_tokens": n}) as r:
                assert r.status == 200
        first = asyncio.create_task(one(4, 40))
        await wait_until(lambda: rep.engine.completed == 0 and any(
            r.generated > 2 for r in rep.engine.running))
        await asyncio.gather(one(310, 1), first)
    # The long prompt needed ceil(310 / 31) = 10 steps at 31 tokens beside the decoder.
    m = await get_metrics(url)
    assert m[("vllm:iteration_tokens_total_bucket", (("le", "32.0"),))] == \
        m[("vllm:iteration_tokens_total_count", ())]


async def test_full_kv_cache_preempts_and_recomputes(servers: Servers) -> None:
    # 4 blocks of 16 tokens; two sequences growing to 56 tokens cannot both stay.
    rep, url = await servers.replica(kv_capacity_tokens=64, steps=LinearSteps(
        base_ms=1, per_seq_ms=0, prefill_ms_per_token=0))
    async with aiohttp.ClientSession() as s:
        async def one() -> int:
            async with s.post(url + "/v1/completions",
                              json={"prompt": list(range(16)), "max_tokens": 40}) as r:
                return (await r.json())["usage"]["completion_tokens"]
        assert await asyncio.gather(one(), one()) == [40, 40]
    m = await get_metrics(url)
    assert m[("vllm:num_preemptions_total", ())] >= 1
    assert m[("vllm:request_num_preemptions_sum", ())] == m[("vllm:num_preemptions_total", ())]
    assert rep.engine.used_blocks == 0
    assert m[("vllm:kv_cache_usage_perc", ())] == 0.0


async def test_kv_usage_gauge_tracks_blocks(servers: Servers) -> None:
    rep, url = await servers.replica(kv_capacity_tokens=160, steps=LinearSteps(
        base_ms=20, per_seq_ms=0, prefill_ms_per_token=0))
    async with aiohttp.ClientSession() as s:
        task = asyncio.create_task(s.post(url + "/v1/completions",
                                          json={"prompt": list(range(48)), "max_tokens": 50}))
        await wait_until(lambda: rep.engine.used_blocks >= 3)
        m = await get_metrics(url)
        assert 0.3 <= m[("vllm:kv_cache_usage_perc", ())] <= 1.0
        (await task).release()


async def test_cold_start_answers_503_until_ready(servers: Servers) -> None:
    rep, url = await servers.replica(cold_start_s=0.5)
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/health") as r:
            assert r.status == 503
        async with s.get(url + "/metrics") as r:
            assert r.status == 503
        statuses: list[int] = []

        async def healthy() -> bool:
            async with s.get(url + "/health") as r:
                statuses.append(r.status)
                return r.status == 200
        deadline = asyncio.get_running_loop().time() + 10
        while not await healthy():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
    assert rep.ready


async def test_replica_runs_on_the_shared_step_model(servers: Servers) -> None:
    prof = json.loads((PROFILES / "h200-llama-3.1-8b-ctx1024.json").read_text())
    steps = StepModel.from_profile(prof, "fp8").sped_up(4)
    _, url = await servers.replica(steps=steps, kv_capacity_tokens=steps.kv_capacity_tokens,
                                   max_num_batched_tokens=2048)
    async with aiohttp.ClientSession() as s:
        async def one() -> int:
            async with s.post(url + "/v1/completions",
                              json={"prompt": list(range(500)), "max_tokens": 8}) as r:
                return (await r.json())["usage"]["completion_tokens"]
        assert await asyncio.gather(*(one() for _ in range(6))) == [8] * 6
    m = await get_metrics(url)
    assert m[("vllm:e2e_request_latency_seconds_count", ())] == 6
    assert m[("vllm:generation_tokens_total", ())] == 48
