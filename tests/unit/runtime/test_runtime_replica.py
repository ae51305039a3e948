"""The replica model: vLLM's metric contract, the OpenAI API, and a capacity."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rt_support import FIXTURES_VLLM, PROFILES, Servers, wait_until

from slo_runtime.replica import StepModel

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


async def test_metrics_match_vllm_0_32_0_families_exactly(servers: Servers) -> None:
    _, url = await servers.replica()
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
    rep, url = await servers.replica(max_num_seqs=4, model=StepModel(
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
    assert 30 <= rep.engine.steps <= 33


def test_step_model_grows_with_batch_and_prefill() -> None:
    m = StepModel(base_ms=5.0, per_seq_ms=0.05, prefill_ms_per_token=0.025)
    assert m.step_ms(1) == pytest.approx(5.05)
    assert m.step_ms(256) == pytest.approx(17.8)
    assert m.step_ms(1, prefill_tokens=2048) == pytest.approx(5.05 + 51.2)


def test_step_model_fitted_from_the_committed_h200_profile() -> None:
    prof = json.loads((PROFILES / "h200-llama-3.1-8b-ctx1024.json").read_text())
    m = StepModel.from_profile(prof, "bf16")
    for b, t in prof["decode_ms"]["bf16"].items():
        # A line through a convex curve: within 20% at every measured batch.
        assert m.step_ms(int(b)) == pytest.approx(t, rel=0.2), b
    assert m.prefill_ms_per_token * 8192 == pytest.approx(prof["prefill_ms"]["bf16"]["8192"])
