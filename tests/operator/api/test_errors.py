"""Validation messages name the CRD field as kubectl users write it (api.errors).

Field paths are asserted here; the messages users read are pinned in tests/golden/api.yaml.
Crafted errors (``_crafted``) carry placeholder messages: those tests are about the path.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from pydantic import ValidationError

from slo_operator.api.errors import FieldProblem, field_problems, summarize
from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec

MODEL = {"name": "m", "sizeBillions": 8}


def _problems(cls: Any, data: dict[str, Any], **kw: str) -> list[FieldProblem]:
    with pytest.raises(ValidationError) as exc:
        cls.model_validate(data)
    return field_problems(exc.value, **kw)


def _crafted(loc: tuple[int | str, ...], message: str) -> ValidationError:
    return ValidationError.from_exception_data(
        "Spec", [{"type": "value_error", "loc": loc, "input": None,
                  "ctx": {"error": ValueError(message)}}])


def test_a_problem_prints_as_field_colon_message() -> None:
    assert str(FieldProblem("spec.window", "bad")) == "spec.window: bad"


def test_a_problem_is_an_immutable_value() -> None:
    p = FieldProblem("spec.window", "bad")
    with pytest.raises(FrozenInstanceError):
        p.field = "spec.other"  # type: ignore[misc]
    assert {p, FieldProblem("spec.window", "bad")} == {p}


def test_summary_joins_problems_with_semicolons() -> None:
    problems = [FieldProblem("spec.a", "x"), FieldProblem("spec.b[0]", "y")]
    assert summarize(problems) == "spec.a: x; spec.b[0]: y"
    assert summarize([]) == ""


def test_list_indexes_are_bracketed_and_names_dotted(golden: Any) -> None:
    (problem,) = _problems(InferenceServiceSpec, {
        "model": MODEL, "hardware": {"tolerations": [{"key": "a"}, {"key": "b", "value": "UP",
                                                                    "operator": "Exists"}]}})
    assert problem.field == "spec.hardware.tolerations[1].value"
    golden.check("api", "errors.model-validator-in-a-list", problem.message)


def test_plain_field_errors_keep_pydantics_message_under_the_default_prefix(
    golden: Any,
) -> None:
    (problem,) = _problems(InferenceServiceSpec, {"model": {**MODEL, "sizeBillions": 0}})
    assert problem.field == "spec.model.sizeBillions"
    golden.check("api", "errors.pydantic-bound", problem.message)


@pytest.mark.parametrize(("prefix", "want_field"), [
    pytest.param("", "model.sizeBillions", id="no-prefix"),
    pytest.param("x.spec", "x.spec.model.sizeBillions", id="dotted-prefix"),
])
def test_the_prefix_is_the_path_root(prefix: str, want_field: str) -> None:
    problems = _problems(InferenceServiceSpec, {"model": {"name": "m"}}, prefix=prefix)
    assert [p.field for p in problems] == [want_field]


def test_an_index_at_the_root_is_bracketed_after_the_prefix() -> None:
    problems = field_problems(_crafted((2, "name"), "bad"), prefix="")
    assert [str(p) for p in problems] == ["[2].name: bad"]


def test_value_error_prefix_is_dropped_from_field_validator_messages(golden: Any) -> None:
    (problem,) = _problems(InferenceServiceSpec, {"model": {**MODEL, "servedName": "-x"}})
    assert problem.field == "spec.model.servedName"
    assert not problem.message.startswith("Value error")
    golden.check("api", "errors.field-validator", problem.message)


def test_cross_field_messages_naming_spec_paths_are_used_as_they_are(golden: Any) -> None:
    (problem,) = _problems(SLOPolicySpec, {"scaling": {"minReplicas": 5, "maxReplicas": 2}})
    assert problem.field == "spec.scaling.minReplicas"
    golden.check("api", "errors.cross-field-spec-path", problem.message)


def test_a_validator_naming_its_own_field_is_joined_to_the_objects_path(golden: Any) -> None:
    (problem,) = _problems(InferenceServiceSpec, {
        "model": MODEL, "engine": {"env": [{"name": "A"}, {"name": "A"}]}})
    assert problem.field == "spec.engine.env[1].name"
    golden.check("api", "errors.relative-field-path", problem.message)


def test_a_leading_dot_without_a_colon_is_an_ordinary_message() -> None:
    problems = field_problems(_crafted(("engine",), ".5 is not allowed"))
    assert [(p.field, p.message) for p in problems] == [("spec.engine", ".5 is not allowed")]


def test_a_message_starting_with_spec_but_not_a_path_still_names_its_first_word() -> None:
    problems = field_problems(_crafted(("scaling",), "spec.scaling.maxReplicas too low"))
    assert [(p.field, p.message) for p in problems] == [
        ("spec.scaling.maxReplicas", "spec.scaling.maxReplicas too low")]


@pytest.mark.parametrize("tag", ["function-after", "function-before"])
def test_validator_wrapper_tags_are_not_part_of_the_path(tag: str) -> None:
    problems = field_problems(_crafted(("model", tag, "name"), "bad"))
    assert [str(p) for p in problems] == ["spec.model.name: bad"]


def test_one_problem_per_error_in_order(golden: Any) -> None:
    problems = _problems(SLOPolicySpec, {"window": "soon", "priority": -1})
    assert [p.field for p in problems] == ["spec.window", "spec.priority"]
    golden.check("api", "errors.two-problems", summarize(problems))


@pytest.mark.parametrize(("cls", "data", "want_fields"), [
    pytest.param(SLOPolicySpec, {"objectives": {"e2eLatencyMs": 500, "interTokenLatencyMs": 600},
                                 "window": "soon"},
                 ["spec.objectives.interTokenLatencyMs", "spec.window"], id="after-a-spec-path"),
    pytest.param(InferenceServiceSpec, {"model": MODEL,
                                        "engine": {"env": [{"name": "A"}, {"name": "A"}]},
                                        "hardware": {"gpusPerReplica": 0}},
                 ["spec.engine.env[1].name", "spec.hardware.gpusPerReplica"],
                 id="after-a-relative-path"),
])
def test_problems_after_a_validator_message_are_kept(cls: Any, data: dict[str, Any],
                                                     want_fields: list[str]) -> None:
    assert [p.field for p in _problems(cls, data)] == want_fields
