"""The contract module against the vLLM 0.32.0 capture in tests/fixtures/vllm."""

from __future__ import annotations

import csv
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
    (c.REQUEST_SUCCESS, "counter"), (c.PREFIX_CACHE_QUERIES, "counter"),
    (c.PREFIX_CACHE_HITS, "counter"),
])
def test_loop_metric_names_and_types_are_vllms(name: str, want_type: str) -> None:
    assert FAMILIES[name][0] == want_type


def test_exposed_sample_names_follow_the_suffix_rules() -> None:
    """The raw exposition has counters as <family>_total, as the loop's queries expect."""
    text = (FIXTURES_VLLM / "metrics-vllm-0.32.0.txt").read_text()
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    for name in (c.NUM_PREEMPTIONS, c.GENERATION_TOKENS, c.PROMPT_TOKENS, c.REQUEST_SUCCESS,
                 c.PREFIX_CACHE_QUERIES, c.PREFIX_CACHE_HITS):
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


# --- precision capability rules (one home for the operator's catalogue and the launcher) ---
HW_FIXTURES = FIXTURES_VLLM.parent / "hardware"
FACTS = (HW_FIXTURES / "vllm-facts.md").read_text()


def _quantization_table() -> dict[str, dict[str, bool]]:
    """vllm-facts.md's copy of vLLM's supported_hardware.md: row -> column -> supported."""
    lines = [ln for ln in FACTS.splitlines() if ln.startswith("| ")]
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    table = {}
    for ln in lines[1:]:
        cells = [x.strip() for x in ln.strip("|").split("|")]
        table[cells[0]] = {col: cell.startswith("✅") for col, cell in zip(header[1:], cells[1:],
                                                                          strict=True)}
    return table


# "Volta refers to SM 7.0, Turing to SM 7.5, Ampere to SM 8.0/8.6, Ada to SM 8.9, and Hopper
# to SM 9.0" (the same page).
SM = {"Volta": [(7, 0)], "Turing": [(7, 5)], "Ampere": [(8, 0), (8, 6)], "Ada": [(8, 9)],
      "Hopper": [(9, 0)]}


@pytest.mark.parametrize("arch", sorted(SM))
def test_cuda_rules_follow_vllms_quantization_table(arch: str) -> None:
    table = _quantization_table()
    for cc in SM[arch]:
        sup = c.cuda_precision(cc)
        # "FP8 (W8A8)": native FP8; "Marlin (GPTQ/AWQ/FP8)": FP8 weights load weight-only.
        assert sup.fp8_compute is table["FP8 (W8A8)"][arch], cc
        assert sup.fp8_weights is (table["FP8 (W8A8)"][arch]
                                   or table["Marlin (GPTQ/AWQ/FP8)"][arch]), cc
        assert sup.fp8_weight_only is (not sup.fp8_compute and sup.fp8_weights), cc
        assert ("fp8" in sup.fp8_methods) is sup.fp8_weights, cc


def test_amd_and_gaudi_rules_follow_vllms_quantization_table() -> None:
    table = _quantization_table()
    # "AMD GPU": FP8 W8A8 yes (on the FP8 targets), Marlin no.
    assert table["FP8 (W8A8)"]["AMD GPU"] and not table["Marlin (GPTQ/AWQ/FP8)"]["AMD GPU"]
    assert c.rocm_precision("gfx942").fp8_compute
    assert not any(c.rocm_precision(g).fp8_weight_only for g in ("gfx90a", "gfx942", "gfx1100"))
    # Intel Gaudi: INC W8A8 only; no --quantization fp8.
    assert table["INC (W8A8)"]["Intel Gaudi"] and not table["FP8 (W8A8)"]["Intel Gaudi"]
    for gen in c.GAUDI_FP8_GENERATIONS:
        sup = c.gaudi_precision(gen)
        assert sup.fp8_compute and sup.fp8_methods == frozenset()
        assert sup.fp8_kv_cache_dtypes == {"fp8_inc"}


@pytest.mark.parametrize("quote", [
    'supports_fp8() -> cls.has_device_capability(89)',        # CUDA_FP8_NATIVE_MIN_CC
    "Fp8Config.get_min_capability() -> 80",                   # CUDA_FP8_WEIGHT_ONLY_MIN_CC
    "self.use_marlin = (not current_platform.has_device_capability(89)",
    '"# Disable marlin for rocm"',                             # no weight-only on ROCm
    "supports_fp8(): gfx94/gfx95/gfx12",                       # ROCM_FP8_GFX
    'is_fp8_fnuz(): "gfx94"',                                  # ROCM_FP8_FNUZ_GFX
    "gfx90a->(9,0), gfx942->(9,4)",                            # ROCm BF16 via capability
    "Bfloat16 is only supported on GPUs with compute capability of at least 8.0",
    '"fp8_e4m3": "Supported on CUDA 11.8+ and ROCm (AMD GPUs)"; "fp8_e5m2": "Supported on '
    'CUDA 11.8+"',
    "#26431", "#7714",                                          # FP8 KV default from 8.9
])
def test_the_vllm_lines_the_rules_cite_are_in_the_fixture(quote: str) -> None:
    flat = " ".join(FACTS.split())
    assert " ".join(quote.split()) in flat


def test_rules_agree_with_every_row_of_gpus_csv() -> None:
    with (HW_FIXTURES / "gpus.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    checked = 0
    for row in rows:
        target = row["compute_capability_or_gfx"].split(" ")[0]
        if target.startswith("gfx"):
            sup = c.rocm_precision(target)
        elif target.replace(".", "").isdigit():
            sup = c.cuda_precision(c.parse_cc(target))
        else:
            sup = c.gaudi_precision(c.gaudi_generation(row["gpu"]))
            assert sup.bf16 is row["bf16_support"].lower().startswith("yes"), row["gpu"]
            continue
        for col, got in (("native_fp8_tensor", sup.fp8_compute), ("bf16_support", sup.bf16)):
            cell = row[col].lower()
            if cell.startswith(("yes", "no")):
                assert got is cell.startswith("yes"), (row["gpu"], row["variant"], col)
                checked += 1
    assert checked >= 30


@pytest.mark.parametrize(("gfx", "want"), [
    ("gfx90a", (9, 0)), ("gfx908", (9, 0)), ("gfx942", (9, 4)), ("gfx950", (9, 5)),
    ("gfx1100", (11, 0)), ("gfx1201", (12, 0)), ("GFX942:sramecc+:xnack-", (9, 4)),
    ("gfx803", None), ("gfx13000", None), ("gfx", None), ("sm_90", None), (None, None),
    ("", None),
])
def test_rocm_capability_is_vllms_parse_of_the_target(gfx: str | None,
                                                     want: tuple[int, int] | None) -> None:
    # vllm/platforms/rocm.py@001eda31 _capability_from_gcn_arch (majors 9-12, else raise).
    assert c.rocm_capability(gfx) == want


@pytest.mark.parametrize(("name", "want"), [
    ("HL-225", "gaudi2"), ("HL-225H", "gaudi2"), ("Gaudi2", "gaudi2"), ("Intel Gaudi 2", "gaudi2"),
    ("HL-325L", "gaudi3"), ("HL-338", "gaudi3"), ("Habana Gaudi3", "gaudi3"), ("HL-205", None),
    ("", None), (None, None),
])
def test_gaudi_generation(name: str | None, want: str | None) -> None:
    assert c.gaudi_generation(name) == want


def test_precision_sets_are_vllm_names() -> None:
    assert c.FP8_MARLIN_METHODS <= c.FP8_QUANT_METHODS
    assert c.ROCM_FP8_METHODS <= c.FP8_QUANT_METHODS
    for kv in (c.CUDA_FP8_KV_CACHE_DTYPES, c.ROCM_FP8_KV_CACHE_DTYPES,
               c.GAUDI_FP8_KV_CACHE_DTYPES):
        assert kv <= c.FP8_KV_CACHE_DTYPES
    assert c.GAUDI_FP8_QUANT_METHOD in c.load_vllm_spec().quantization_methods
    # Safe by default implies accepted; weight-only never alongside native.
    for sup in [c.cuda_precision((x, y)) for x in range(6, 13) for y in (0, 5, 9)] + [
            c.rocm_precision(g) for g in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")] + [
            c.gaudi_precision(g) for g in ("gaudi2", "gaudi3", None)]:
        assert not (sup.fp8_compute and sup.fp8_weight_only)
        assert not sup.fp8_kv_cache or sup.fp8_kv_cache_dtypes
        assert (sup.fp8_format is not None) is sup.fp8_compute


@pytest.mark.parametrize(("vendor", "target", "want"), [
    ("nvidia", "8.0", c.cuda_precision((8, 0))), ("nvidia", "9.0", c.cuda_precision((9, 0))),
    ("nvidia", "x", c.NO_PRECISION_SUPPORT), ("amd", "gfx942", c.rocm_precision("gfx942")),
    ("intel", "gaudi3", c.gaudi_precision("gaudi3")), ("intel", "", c.gaudi_precision(None)),
    ("none", "", c.NO_PRECISION_SUPPORT),
])
def test_precision_support_for_a_probed_device(vendor: str, target: str,
                                               want: c.PrecisionSupport) -> None:
    assert c.precision_support(vendor, target) == want


# --- engine info ----------------------------------------------------------------------------
def test_engine_info_labels_are_vllm_destinations() -> None:
    spec = c.load_vllm_spec()
    for dest in c.ENGINE_INFO_LABELS:
        assert spec.by_dest(dest) is not None, dest
    assert c.RUNTIME_ENGINE_INFO.startswith("slo_runtime_")
    assert c.RUNTIME_ENGINE_CHANGE.startswith("slo_runtime_")
    assert c.ENGINE_CHANGE_LABELS == ("setting", "requested", "applied", "reason")
    assert all(code[0].isupper() and " " not in code for code in c.ENGINE_CHANGE_REASONS)


@pytest.mark.parametrize(("args", "want"), [
    ([], {"quantization": "", "kv_cache_dtype": "auto", "dtype": "auto",
          "tensor_parallel_size": "1", "max_num_seqs": "", "max_num_batched_tokens": ""}),
    (["-q", "fp8", "--quantization", "awq"], {"quantization": "awq"}),
    (["--dtype", "half"], {"dtype": "float16"}),
    (["--dtype=float"], {"dtype": "float32"}),
    (["--max_num_batched_tokens", "8K", "--max-num-seqs", "64"],
     {"max_num_batched_tokens": "8192", "max_num_seqs": "64"}),
    (["--max-num-batched-tokens", "2k"], {"max_num_batched_tokens": "2000"}),
    (["--max-num-batched-tokens", "1Ki"], {"max_num_batched_tokens": "1024"}),
    (["-tp", "4", "--kv-cache-dtype", "fp8_e4m3"],
     {"tensor_parallel_size": "4", "kv_cache_dtype": "fp8_e4m3"}),
    (["--no-such-flag", "1", "--dtype", "bfloat16"], {"dtype": "bfloat16"}),
], ids=["defaults", "last-wins-any-spelling", "half-is-float16", "float-is-float32",
        "binary-suffix-and-underscores", "decimal-suffix", "binary-i-suffix", "short-tp",
        "unknown-flags-ignored"])
def test_engine_settings(args: list[str], want: dict[str, str]) -> None:
    got = c.engine_settings(args)
    assert set(got) == set(c.ENGINE_INFO_LABELS)
    assert {k: got[k] for k in want} == want
    assert c.engine_info_labels(got) == tuple(got[k] for k in c.ENGINE_INFO_LABELS)


def test_engine_info_file_is_next_to_the_probe_file() -> None:
    assert c.engine_info_path(c.PROBE_FILE) == c.ENGINE_INFO_FILE
    assert f"{c.RUN_DIR}/{c.ENGINE_INFO_FILE_NAME}" == c.ENGINE_INFO_FILE
    assert c.engine_info_path("/tmp/x/p.json") == "/tmp/x/engine.json"
    assert c.engine_info_path("p.json") == "engine.json"
    assert c.engine_info_path(None) == c.ENGINE_INFO_FILE
