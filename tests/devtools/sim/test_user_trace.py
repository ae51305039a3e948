"""Your own traffic as a workload: trace and rate files read, checked and turned into the
benchmark's workloads; requests no replica could serve are dropped and counted."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slo_devtools.sim import traces as T
from slo_devtools.sim import user_trace as U
from slo_devtools.sim.bench import TARGETS, step_model
from slo_runtime.stepmodel import GIB, kv_capacity_tokens

REQS = [(12.5, 6758, 500), (13.0, 120, 30), (20.25, 900, 0)]


def write_jsonl(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(path: Path, time_scale: float = 1.0) -> U.Loaded:
    _, rows = U.read_rows(path)
    return U.requests_from_rows(rows, str(path), time_scale)


def triples(loaded: U.Loaded) -> list[tuple[float, int, int]]:
    return [(r.t, r.prompt, r.output) for r in loaded.requests]


# The same three requests, first arrival at 0, a 0-token output counted as 1.
WANT = [(0.0, 6758, 500), (0.5, 120, 30), (7.75, 900, 1)]


@pytest.mark.parametrize("keys", [
    ("timestamp", "prompt_tokens", "output_tokens"),
    ("arrival_time", "input_length", "output_length"),
    ("time", "input_tokens", "output_tokens"),
    ("TIMESTAMP", "num_prompt_tokens", "num_generated_tokens"),
    ("Timestamp", "Request tokens", "Response tokens"),
])
def test_a_jsonl_trace_reads_under_every_alias(tmp_path: Path, keys: tuple[str, ...]) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [dict(zip(keys, r, strict=True)) for r in REQS])
    got = load(path)
    assert triples(got) == WANT
    assert got.columns == keys
    assert got.zero_tokens == 1 and got.out_of_order == 0


def test_a_csv_trace_with_iso_timestamps_reads_as_the_azure_files(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.5000000,6758,500\n"
                    "2023-11-16 18:15:47.0000000,120,30\n"
                    "2023-11-16 18:15:54.2500000,900,0\n")
    got = load(path)
    assert triples(got) == WANT  # these fractions are exact in binary
    assert got.time_unit == "ISO 8601"


def test_the_shipped_azure_trace_read_as_a_user_file_matches_its_own_loader() -> None:
    path = Path(str(T._data_dir() / T.AZURE_FILES["azure-code"]))
    got = load(path).requests
    ref = T.read_azure("azure-code")
    assert len(got) == len(ref)
    # Same requests; ties within a microsecond may swap (the two parse times differently).
    assert Counter((r.prompt, r.output) for r in got) == Counter((r.prompt, r.output)
                                                                  for r in ref)
    assert got[-1].t == pytest.approx(ref[-1].t, abs=1e-3)


def test_tab_separated_gzip_and_a_tenant_column(tmp_path: Path) -> None:
    text = "time\tprompt_tokens\toutput_tokens\ttenant\n0\t10\t5\tchat\n1\t20\t6\tcode/v2\n"
    path = tmp_path / "t.tsv.gz"
    path.write_bytes(gzip.compress(text.encode()))
    reqs = U.rename_tenants(load(path).requests, str(path))
    assert [r.tenant for r in reqs] == ["chat", "code-v2"]  # safe in a plot's file name


def test_rows_out_of_order_are_sorted_and_counted(tmp_path: Path) -> None:
    rows = [{"t": 5, "isl": 10, "osl": 1}, {"t": 1, "isl": 20, "osl": 2},
            {"t": 3, "isl": 30, "osl": 3}]
    got = load(write_jsonl(tmp_path / "t.jsonl", rows))
    assert triples(got) == [(0.0, 20, 2), (2.0, 30, 3), (4.0, 10, 1)]
    assert got.out_of_order == 3


def test_milliseconds_from_the_column_name_or_the_time_unit(tmp_path: Path) -> None:
    named = write_jsonl(tmp_path / "a.jsonl", [{"timestamp_ms": 0, "isl": 1, "osl": 1},
                                               {"timestamp_ms": 2500, "isl": 1, "osl": 1}])
    plain = write_jsonl(tmp_path / "b.jsonl", [{"timestamp": 0, "isl": 1, "osl": 1},
                                               {"timestamp": 2500, "isl": 1, "osl": 1}])
    assert load(named).requests[-1].t == 2.5
    assert load(named).time_unit == "ms"
    assert load(plain).requests[-1].t == 2500.0
    assert load(plain, time_scale=1e-3).requests[-1].t == 2.5


@pytest.mark.parametrize(("text", "line", "field", "what"), [
    ('{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}\n'
     '\n'
     '{"timestamp": 2, "prompt_tokens": -3, "output_tokens": 5}\n',
     3, "prompt_tokens", "whole number >= 0"),
    ('{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}\n'
     '{"timestamp": "soon", "prompt_tokens": 1, "output_tokens": 5}\n',
     2, "timestamp", "ISO 8601"),
    ('{"timestamp": 1, "prompt_tokens": 10.5, "output_tokens": 5}\n', 1, "prompt_tokens",
     "whole number"),
    ('{"timestamp": 1, "prompt_tokens": true, "output_tokens": 5}\n', 1, "prompt_tokens",
     "whole number"),
    ('{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}\n'
     '{"timestamp": 2, "prompt_tokens": 10, "output_tokens": null}\n',
     2, "output_tokens", "missing value"),
    ('{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}\n'
     '{"timestamp": 2, "prompt_tokens": 10\n', 2, None, "not valid JSON"),
    ('{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}\n'
     '{"timestamp": 2, "prompt_tokens": 10}\n', 2, None, "no output tokens field"),
    ('{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}\n'
     '{"timestamp": "2023-11-16 18:15:46", "prompt_tokens": 10, "output_tokens": 5}\n',
     2, "timestamp", "mixes ISO timestamps"),
    ('{"timestamp": 1, "time": 2, "prompt_tokens": 10, "output_tokens": 5}\n', 1, None,
     "'timestamp', 'time' name the same thing"),
    ('[1, 2]\n', 1, None, "JSON object per line"),
    ('{"timestamp": NaN, "prompt_tokens": 10, "output_tokens": 5}\n', 1, "timestamp",
     "finite"),
    ('{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5, "tenant": {"id": 7}}\n', 1,
     "tenant", "must be a name"),
    ('{"timestamp": 1700000000000, "prompt_tokens": 10, "output_tokens": 5}\n'
     '{"timestamp": 1700086400000, "prompt_tokens": 10, "output_tokens": 5}\n', 2,
     "timestamp", "arrivals span 1,000 days from line 1; at most 7 days (times in "
     "milliseconds need --time-unit ms"),
    ('{"timestamp": 0, "prompt_tokens": 10, "output_tokens": 5}\n'
     '{"timestamp": 1e300, "prompt_tokens": 10, "output_tokens": 5}\n', 2,
     "timestamp", "arrivals span 1.16e+295 days from line 1"),
])
def test_a_malformed_jsonl_file_is_rejected_with_its_line_and_field(
        tmp_path: Path, text: str, line: int, field: str | None, what: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(U.TraceFileError) as err:
        load(path)
    assert err.value.line == line and err.value.field == field
    msg = str(err.value)
    assert msg.startswith(f"{path}, line {line}") and what in msg
    if field:
        assert f"field {field!r}" in msg


def test_a_csv_without_an_output_column_is_rejected_at_its_header(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("arrival_time,input_length\n1,10\n2,20\n")
    with pytest.raises(U.TraceFileError, match=r"bad\.csv, line 1: no output tokens field"):
        load(path)


def test_a_csv_non_number_names_the_row_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.68,374,44\n\n"
                    "2023-11-16 18:15:50.99,abc,109\n")
    with pytest.raises(U.TraceFileError, match=r"line 4, field 'ContextTokens'.*'abc'"):
        load(path)


def test_an_empty_or_unreadable_file_is_rejected(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("timestamp,prompt_tokens,output_tokens\n")
    with pytest.raises(U.TraceFileError, match="no requests"):
        load(empty)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(U.TraceFileError, match="not UTF-8"):
        U.read_rows(binary)
    with pytest.raises(U.TraceFileError, match="no such file"):
        U.read_rows(tmp_path / "nothing.jsonl")


def test_too_many_tenants_are_refused_naming_the_limit() -> None:
    reqs = [T.Request(float(i), 10, 10, f"user{i}") for i in range(U.MAX_TENANTS + 1)]
    with pytest.raises(U.TraceFileError, match=f"{U.MAX_TENANTS + 1} tenants; at most"):
        U.rename_tenants(reqs, "f.jsonl")


# --- requests a replica cannot serve -------------------------------------------------------
def test_requests_beyond_max_model_len_or_the_kv_cache_are_dropped_and_counted() -> None:
    reqs = [T.Request(0.0, 100, 10), T.Request(1.0, 5000, 100), T.Request(2.0, 3000, 200),
            T.Request(3.0, 900, 100)]
    kept, dropped = U.fit_requests(reqs, max_model_len=4096, kv_capacity=3100)
    assert [r.t for r in kept] == [0.0, 3.0]
    assert (dropped.too_long, dropped.beyond_kv, dropped.total) == (1, 1, 2)
    text = dropped.describe(len(reqs))
    assert "2 of 4 requests dropped" in text
    assert "max-model-len 4,096" in text and "KV cache (3,100 tokens)" in text
    assert U.fit_requests(reqs, None, 0)[1].total == 0


def test_an_oversize_prompt_in_a_file_is_reported_and_not_simulated(tmp_path: Path) -> None:
    rows = [{"timestamp": i * 0.5, "prompt_tokens": 500, "output_tokens": 50}
            for i in range(20)]
    rows.append({"timestamp": 3.2, "prompt_tokens": 200_000, "output_tokens": 10})
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    spec = U.TrafficSpec(trace_file=path)
    prep = U.build(spec, U.read_rows(path)[1], U.replica_setup())
    assert prep.read == 21 and len(prep.trace.requests) == 20
    assert prep.dropped.too_long == 1
    assert all(r.prompt < 200_000 for r in prep.trace.requests)
    assert any("1 of 21 requests dropped" in w and str(path) in w for w in prep.warnings)
    assert any("1 of 21 requests dropped" in n for n in prep.trace.notes)


def test_a_trace_file_becomes_one_workload_per_objective_set(tmp_path: Path) -> None:
    rows = [{"timestamp": i, "prompt_tokens": 100, "output_tokens": 10,
             "tenant": "a" if i % 2 else "b"} for i in range(10)]
    path = write_jsonl(tmp_path / "ramp.jsonl", rows)
    spec = U.TrafficSpec(trace_file=path, rate_scale=2.0, max_replicas=5)
    prep = U.build(spec, U.read_rows(path)[1], U.replica_setup())
    assert prep.trace.name == "ramp-file"  # never judged as the built-in ramp
    assert len(prep.trace.requests) == 20  # x2: each request kept twice
    assert Counter(r.tenant for r in prep.trace.requests) == {"a": 10, "b": 10}
    custom = U.parse_objectives("20000,3000,100")
    [(name, wl)] = prep.workloads(U.objective_sets(custom, ["strict", "loose"]))
    assert name == "custom"
    assert [t.name for t in wl.tenants] == ["b", "a"]
    assert all(t.max_replicas == 5 and t.objectives == custom for t in wl.tenants)
    both = prep.workloads(U.objective_sets(None, ["strict", "loose"]))
    assert [(s, wl.tenants[0].objectives) for s, wl in both] == [
        ("strict", TARGETS["strict"]["chat"]), ("loose", TARGETS["loose"]["chat"])]


# --- rate files -----------------------------------------------------------------------------
def test_rate_windows_by_start_time_by_index_and_by_count(tmp_path: Path) -> None:
    def windows(text: str, interval: float | None = None) -> list[tuple[float, float, float]]:
        path = tmp_path / "r.csv"
        path.write_text(text)
        rows = U.read_rows(path)[1]
        return [(w.start, w.length, w.rate)
                for w in U.rate_windows_from_rows(rows, "r.csv", interval)]

    # ServeGen's own column names; the last interval as long as the median spacing.
    assert windows("window_start_s,total_rate_rps_sum_over_clients\n600,2\n1200,4\n"
                   "1800,1\n") == [(0, 600, 2), (600, 600, 4), (1200, 600, 1)]
    assert windows("interval,rps\n3,2\n4,5\n") == [(0, 60, 2), (60, 60, 5)]
    assert windows("interval,rps\n0,2\n", interval=10) == [(0, 10, 2)]
    assert windows("time,count\n0,120\n60,30\n") == [(0, 60, 2), (60, 60, 0.5)]


@pytest.mark.parametrize(("text", "what"), [
    ("time,rate\n0,1\n60,-2\n", "line 3, field 'rate': must be a number >= 0"),
    ("time,rate\n0,1\n0,2\n", "line 3, field 'time': a second rate for the same interval"),
    ("time,rate\n0,1\n", "one interval only"),
    ("interval,rate\n0.5,1\n", "line 2, field 'interval': must be a whole interval index"),
    ("time,interval,rate\n0,0,1\n", "line 1: both a start time"),
    ("time,load\n0,1\n", "line 1: no rate field"),
    ("interval,rate\n0,1\n20000,1\n", "line 3, field 'interval': intervals span 13.9 days; "
                                      "at most 7 days \\(each index is one interval of 60 s"),
])
def test_a_malformed_rate_file_is_rejected_with_its_line(tmp_path: Path, text: str,
                                                         what: str) -> None:
    path = tmp_path / "r.csv"
    path.write_text(text)
    with pytest.raises(U.TraceFileError, match=what):
        U.rate_windows_from_rows(U.read_rows(path)[1], str(path))


def test_rate_trace_follows_each_window_rate_with_shipped_lengths() -> None:
    wins = [U.RateWindow(0.0, 600.0, 2.0), U.RateWindow(600.0, 600.0, 6.0)]
    pairs = [(100, 10), (2000, 300)]
    reqs = U.rate_trace(wins, lengths=pairs, cv=1.0, rate_scale=0.5, rng=random.Random(1))
    first = sum(1 for r in reqs if r.t < 600)
    second = len(reqs) - first
    assert first == pytest.approx(600, rel=0.15)  # 2 req/s x 0.5 for 600 s
    assert second == pytest.approx(1800, rel=0.1)
    assert {(r.prompt, r.output) for r in reqs} == set(pairs)
    assert all(a.t <= b.t for a, b in itertools.pairwise(reqs))


def test_a_rate_file_workload_states_its_assumptions(tmp_path: Path) -> None:
    path = tmp_path / "rates.jsonl"
    write_jsonl(path, [{"interval": 0, "rate": 1.0}, {"interval": 1, "rate": 3.0}])
    spec = U.TrafficSpec(rate_file=path, cv=1.0, rate_interval=30.0)
    prep = U.build(spec, U.read_rows(path)[1], U.replica_setup(),
                   lengths=lambda name: [(300, 40)])
    assert prep.trace.duration >= 60.0
    assert 60 < len(prep.trace.requests) < 180  # 30 + 90 expected
    notes = " ".join(prep.trace.notes)
    assert "Gamma renewal per interval, CV 1" in notes and "azure-conv" in notes


def test_a_trace_in_epoch_milliseconds_reads_with_the_time_unit(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "ms.jsonl", [
        {"timestamp": 1_700_000_000_000 + ms, "prompt_tokens": 10, "output_tokens": 5}
        for ms in (0, 1500, 86_400_000)])
    assert [r.t for r in load(path, time_scale=1e-3).requests] == [0.0, 1.5, 86_400.0]


@pytest.mark.parametrize(("rows", "rate_scale", "option"), [
    pytest.param([{"interval": 0, "rate": 1e6}, {"interval": 1, "rate": 1.0}], 1.0,
                 "rates.jsonl at --rate-scale 1 would simulate 60,000,060 requests",
                 id="a-rate-file-too-busy"),
    pytest.param([{"interval": 0, "rate": 100.0}, {"interval": 1, "rate": 1.0}], 1e3,
                 "rates.jsonl at --rate-scale 1000 would simulate 6,060,000 requests",
                 id="a-rate-scale-too-large"),
])
def test_more_requests_than_a_report_simulates_are_refused_before_they_are_made(
        tmp_path: Path, rows: list[dict[str, float]], rate_scale: float, option: str) -> None:
    path = write_jsonl(tmp_path / "rates.jsonl", rows)
    spec = U.TrafficSpec(rate_file=path, rate_scale=rate_scale)
    made: list[str] = []
    with pytest.raises(ValueError, match=f"{option}; at most 2,000,000"):
        U.build(spec, U.read_rows(path)[1], U.replica_setup(),
                lengths=lambda name: made.append(name) or [(300, 40)])
    assert made == []  # refused before any request was drawn


def test_a_trace_rate_scale_beyond_the_request_bound_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": t, "prompt_tokens": 10, "output_tokens": 5} for t in range(3)])
    spec = U.TrafficSpec(trace_file=path, rate_scale=1e6)
    with pytest.raises(ValueError, match=r"--rate-scale 1e\+06 of 3 requests would simulate "
                                         r"3,000,000 requests"):
        U.build(spec, U.read_rows(path)[1], U.replica_setup())


# --- options ------------------------------------------------------------------------------
def test_objectives_parse_three_positive_numbers_only() -> None:
    o = U.parse_objectives(" 20000, 3000 ,100")
    assert (o.e2e_ms, o.ttft_ms, o.itl_p99_ms) == (20000, 3000, 100)
    for bad in ("20000,3000", "20000,3000,100,5", "20000,-1,100", "a,b,c", "0,1,1", "1,inf,1"):
        with pytest.raises(ValueError, match="--objectives: expected three positive"):
            U.parse_objectives(bad)


def test_check_spec_names_the_option_at_fault(tmp_path: Path) -> None:
    f = tmp_path / "x.jsonl"
    for spec, opt in [(U.TrafficSpec(), "--trace-file"),
                      (U.TrafficSpec(trace_file=f, rate_scale=0.0), "--rate-scale"),
                      (U.TrafficSpec(trace_file=f, cv=-1.0), "--cv"),
                      (U.TrafficSpec(rate_file=f, lengths="sharegpt"), "--lengths"),
                      (U.TrafficSpec(trace_file=f, max_replicas=0), "--max-replicas"),
                      (U.TrafficSpec(trace_file=f, max_replicas=100_000),
                       "--max-replicas: the SLOPolicy would refuse it: spec.scaling.maxReplicas")]:
        with pytest.raises(ValueError, match=opt):
            U.check_spec(spec)


@pytest.mark.parametrize(("text", "field"), [
    ("1e308,1e308,1e308", "spec.objectives.e2eLatencyMs"),
    ("6000,500,7000", "spec.objectives.interTokenLatencyMs must be below"),
])
def test_objectives_the_slo_policy_refuses_are_refused_before_any_policy_runs(
        text: str, field: str) -> None:
    with pytest.raises(ValueError, match=f"--objectives: the SLOPolicy would refuse it: {field}"):
        U.parse_objectives(text)


def test_the_default_replica_is_the_built_in_benchmark_one() -> None:
    r = U.replica_setup()
    ref = step_model()
    assert r.model.kv_capacity_tokens == ref.kv_capacity_tokens
    assert r.model.decode_ms(32) == ref.decode_ms(32)
    assert r.tensor_parallel == 1 and r.max_model_len == 131072


def test_another_gpu_moves_the_step_model_by_the_catalogue() -> None:
    h200, h100 = U.replica_setup(), U.replica_setup(gpu="NVIDIA H100 80GB HBM3")
    assert h100.gpu == "H100-SXM-80GB"
    # H100 SXM streams 3.35 TB/s against the H200's 4.8: decode about 1.4x slower.
    assert h100.model.decode_ms(64) / h200.model.decode_ms(64) == pytest.approx(4.8 / 3.35,
                                                                                 rel=0.02)
    # KV cache from the catalogue's 80 GiB, not the profiled H200's memory.
    m = h100.model
    assert m.kv_capacity_tokens == kv_capacity_tokens(80 * GIB, m.weight_bytes,
                                                      m.kv_token_bytes_per_gpu)
    assert m.kv_capacity_tokens < h200.model.kv_capacity_tokens


def test_the_70b_model_gets_the_operators_tensor_parallel_size() -> None:
    r = U.replica_setup("llama-3.1-70b", "NVIDIA H200")
    assert r.tensor_parallel == 2  # 141 GB of BF16 weights do not fit one H200
    assert r.model.kv_capacity_tokens > 0
    assert "tensor parallel 2" in r.describe()


@pytest.mark.parametrize(("model", "gpu", "opt"), [
    ("gpt-5", "NVIDIA H200", "--model: unknown model 'gpt-5'; known: llama-3.1-70b"),
    ("llama-3.1-8b", "B999", "--gpu: GPU product 'B999' is not in the catalogue"),
    ("llama-3.1-70b", "T4", "--gpu: llama-3.1-70b cannot run on NVIDIA Tesla T4"),
])
def test_unknown_model_or_gpu_is_refused_naming_the_option(model: str, gpu: str,
                                                           opt: str) -> None:
    with pytest.raises(ValueError, match=opt):
        U.replica_setup(model, gpu)


def test_rate_scale_copies_each_tenant_apart() -> None:
    reqs = [T.Request(float(i), 10, 10, "a" if i < 50 else "b") for i in range(100)]
    out = U.scale_requests(reqs, 3.0, random.Random(0))
    assert Counter(r.tenant for r in out) == {"a": 150, "b": 150}
    # Copies of a's requests stay within a's span (its last one's within a second).
    assert max(r.t for r in out if r.tenant == "a") < 49.0 + U.TAIL_S
    assert statistics.fmean(r.prompt for r in out) == 10


def test_the_benchmark_docs_state_the_bounds_the_reader_enforces() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "benchmark.md").read_text()
    span = re.search(r"spanning more than (\d+) days are refused", doc)
    most = re.search(r"At most ([\d,]+) requests are simulated per report", doc)
    tenants = re.search(r"becomes a service with the same objectives \(at most (\d+)\)", doc)
    assert span and most and tenants, "docs/benchmark.md no longer states the bounds"
    assert int(span.group(1)) * 86400 == U.MAX_SPAN_S
    assert int(most.group(1).replace(",", "")) == U.MAX_REQUESTS
    assert int(tenants.group(1)) == U.MAX_TENANTS
