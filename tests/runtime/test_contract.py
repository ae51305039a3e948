"""The contract module against the vLLM 0.32.0 capture in tests/fixtures/vllm."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slo_runtime import contract as c
from tests.runtime.rt_support import FIXTURES_VLLM


def families() -> dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]]:
    """metric-families-vllm-0.32.0.txt: name -> (type, labels, buckets without +Inf)."""
    out = {}
    pat = re.compile(r"^(\S+) \[(\w+)\] labels=(\[[^\]]*\]) series=\d+(?: buckets\(\d+\)=(\S+))?$")
    for line in (FIXTURES_VLLM / "metric-families-vllm-0.32.0.txt").read_text().splitlines():
        m = pat.match(line)
        assert m, line
        labels = tuple(json.loads(m[3].replace("'", '"')))
        buckets = tuple(float(b) for b in m[4].split(",") if b != "+Inf") if m[4] else ()
        out[m[1]] = (m[2], labels, buckets)
    return out


FAMILIES = families()


@pytest.mark.parametrize("name", sorted(c.HISTOGRAM_BUCKETS))
def test_histogram_buckets_are_vllms(name: str) -> None:
    typ, labels, buckets = FAMILIES[name]
    assert typ == "histogram"
    assert c.HISTOGRAM_BUCKETS[name] == buckets
    assert labels == c.METRIC_LABELS


def test_every_vllm_histogram_has_its_buckets_here() -> None:
    hist = {n for n, (t, _, _) in FAMILIES.items() if t == "histogram"}
    assert hist == set(c.HISTOGRAM_BUCKETS)


@pytest.mark.parametrize(("name", "want_type"), [
    (c.E2E_LATENCY, "histogram"), (c.TTFT, "histogram"), (c.INTER_TOKEN_LATENCY, "histogram"),
    (c.TIME_PER_OUTPUT_TOKEN, "histogram"), (c.QUEUE_TIME, "histogram"),
    (c.PREFILL_TIME, "histogram"), (c.DECODE_TIME, "histogram"),
    (c.NUM_REQUESTS_RUNNING, "gauge"), (c.NUM_REQUESTS_WAITING, "gauge"),
    (c.KV_CACHE_USAGE, "gauge"), (c.NUM_PREEMPTIONS, "counter"),
    (c.GENERATION_TOKENS, "counter"), (c.PROMPT_TOKENS, "counter"),
    (c.REQUEST_SUCCESS, "counter"),
])
def test_loop_metric_names_and_types_are_vllms(name: str, want_type: str) -> None:
    assert FAMILIES[name][0] == want_type


def test_exposed_sample_names_follow_the_suffix_rules() -> None:
    """The raw exposition has counters as <family>_total, as the loop's queries expect."""
    text = (FIXTURES_VLLM / "metrics-vllm-0.32.0.txt").read_text()
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    for name in (c.NUM_PREEMPTIONS, c.GENERATION_TOKENS, c.PROMPT_TOKENS, c.REQUEST_SUCCESS):
        assert name + c.COUNTER_SUFFIX in samples
    assert c.E2E_LATENCY + "_bucket" in samples
    reasons = {s.labels["finished_reason"] for f in text_string_to_metric_families(text)
               for s in f.samples if s.name == c.REQUEST_SUCCESS + c.COUNTER_SUFFIX}
    assert reasons == set(c.FINISHED_REASONS)


def test_legacy_names_are_not_in_0_32_0() -> None:
    for new, old in c.LEGACY_METRIC_NAMES.items():
        assert new in FAMILIES
        assert old not in FAMILIES


def test_fp8_methods_are_every_fp8_method_of_the_capture() -> None:
    spec = json.loads((FIXTURES_VLLM / "serve-args-vllm-0.32.0.json").read_text())
    methods = set(spec["quantization_methods"])
    assert methods >= c.FP8_QUANT_METHODS
    assert {m for m in methods if "fp8" in m} <= c.FP8_QUANT_METHODS
    # Not FP8: 4-bit and integer formats, and ModelOpt's FP4 / mixed checkpoints.
    assert not c.FP8_QUANT_METHODS & {"awq", "gptq", "modelopt_fp4", "modelopt_mixed", "mxfp4",
                                      "nvfp4_per_token", "int8_per_channel_weight_only"}


def test_fp8_kv_dtypes_are_choices_of_the_kv_cache_flag() -> None:
    action = c.load_vllm_spec().action("--kv-cache-dtype")
    assert action is not None and action.choices is not None
    assert set(action.choices) >= c.FP8_KV_CACHE_DTYPES
    assert {ch for ch in action.choices if ch.startswith("fp8")} == c.FP8_KV_CACHE_DTYPES


def test_packaged_flag_table_is_the_capture() -> None:
    from importlib import resources
    packaged = (resources.files("slo_runtime") / "data" / c.SERVE_ARGS_FILE).read_text()
    assert json.loads(packaged) == json.loads(
        (FIXTURES_VLLM / "serve-args-vllm-0.32.0.json").read_text())


@pytest.mark.parametrize(("flag", "want"), [
    ("-tp", "--tensor-parallel-size"), ("--max_num_seqs", "--max-num-seqs"),
    ("--max-num-batched-tokens", "--max-num-batched-tokens"), ("--no-such-flag", None),
])
def test_canonical_spelling(flag: str, want: str | None) -> None:
    assert c.load_vllm_spec().canonical(flag) == want


def test_limit_file_is_in_its_dir() -> None:
    assert f"{c.LIMIT_DIR}/{c.LIMIT_FILE_NAME}" == c.LIMIT_FILE
    assert c.ANNOTATION_INFLIGHT_LIMIT == "inference.slo-operator.io/inflight-limit"
