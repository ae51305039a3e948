"""Module-level helpers over the packaged vLLM capture, and the names the module exports."""

from __future__ import annotations

from slo_operator.engine import vllm_args


def test_extra_args_problems_name_the_crd_field_by_default() -> None:
    problems = vllm_args.validate_extra_args(["--enforce-eager", "--warp-speed"])
    assert [p.path for p in problems] == ["spec.engine.extraArgs[1]"]


def test_extra_args_problems_name_a_given_path() -> None:
    problems = vllm_args.validate_extra_args(["--warp-speed"], "spec.x")
    assert [p.path for p in problems] == ["spec.x[0]"]


def test_exports() -> None:
    assert sorted(vllm_args.__all__) == [
        "ArgAction", "ParsedOption", "Problem", "VllmArgSpec", "is_option", "normalize_flag",
        "validate", "validate_extra_args",
    ]
    for name in vllm_args.__all__:
        assert getattr(vllm_args, name) is not None
