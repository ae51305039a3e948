"""What each pod runs against the plan (slo.engine_info): the engine query's rows per
service and pod, the per-variant comparison, status.variants[].engineObserved and the
EngineMismatch condition."""

from __future__ import annotations

from typing import Any

from slo_operator.api import conditions as C
from slo_operator.api.observe import ServiceKey
from slo_operator.slo.engine_info import (
    EngineChange,
    PodEngine,
    compare,
    engine_condition,
    observe_variants,
    observed_status,
    parse_engine_info,
    planned_settings,
)
from slo_runtime import contract as c

PLAN_ARGS = ("--model", "m", "--dtype", "bfloat16", "--quantization", "fp8",
             "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "4", "--max-num-seqs", "64",
             "--max-num-batched-tokens", "8192")
RUNS_PLAN = {"quantization": "fp8", "kv_cache_dtype": "fp8", "dtype": "bfloat16",
             "tensor_parallel_size": "4", "max_num_seqs": "64",
             "max_num_batched_tokens": "8192"}
KV_DROPPED = {**RUNS_PLAN, "kv_cache_dtype": "auto"}
KV_CHANGE = {"setting": "--kv-cache-dtype", "requested": "fp8", "applied": "auto",
             "reason": "FP8KVCacheRisk"}


def info(pod: str, settings: dict[str, str], ns: str = "a", svc: str = "s") -> dict[str, Any]:
    return {"metric": {"namespace": ns, "service": svc, "pod": pod, "family": "info",
                       **settings}, "value": [1000.0, "1"]}


def change(pod: str, labels: dict[str, str], ns: str = "a", svc: str = "s") -> dict[str, Any]:
    return {"metric": {"namespace": ns, "service": svc, "pod": pod, "family": "change",
                       **labels}, "value": [1000.0, "1"]}


def settings_of(d: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((k, d[k]) for k in c.ENGINE_INFO_LABELS)


S = ServiceKey("a", "s")


# ---------------------------------------------------------------- parsing


def test_rows_become_settings_and_changes_per_service_and_pod() -> None:
    got = parse_engine_info([
        info("s-0", RUNS_PLAN), info("s-1", KV_DROPPED), change("s-1", KV_CHANGE),
        info("t-0", RUNS_PLAN, ns="b", svc="t"),
    ])
    assert got is not None
    assert set(got) == {S, ServiceKey("b", "t")}
    assert got[S]["s-0"] == PodEngine(settings_of(RUNS_PLAN), ())
    assert got[S]["s-1"] == PodEngine(settings_of(KV_DROPPED), (EngineChange(
        "--kv-cache-dtype", "fp8", "auto", "FP8KVCacheRisk"),))


def test_a_failed_query_is_unknown_and_an_empty_one_reports_nothing() -> None:
    assert parse_engine_info(None) is None
    assert parse_engine_info([]) == {}


def test_rows_without_service_pod_or_family_are_skipped() -> None:
    bad: list[Any] = [
        {"metric": {"namespace": "a", "service": "s", "family": "info", **RUNS_PLAN}},
        {"metric": {"namespace": "a", "pod": "p", "family": "info", **RUNS_PLAN}},
        {"metric": {"namespace": "a", "service": "s", "pod": "p", **RUNS_PLAN}},
        {"metric": "garbage"}, "garbage",
        change("p", {**KV_CHANGE, "setting": ""}),
    ]
    assert parse_engine_info(bad) == {}


def test_reported_values_are_read_as_the_launcher_reads_the_plan() -> None:
    """``half`` is ``float16``, ``none`` is no quantization, ``8k`` is 8000: the same values
    ``contract.engine_settings`` reads from the plan's arguments."""
    got = parse_engine_info([info("p", {**RUNS_PLAN, "dtype": "half", "quantization": "none",
                                        "max_num_batched_tokens": "8k"})])
    assert got is not None
    settings = dict(got[S]["p"].settings or ())
    assert (settings["dtype"], settings["quantization"], settings["max_num_batched_tokens"]) \
        == ("float16", "", "8000")
    planned = dict(planned_settings(("--model", "m", "--dtype", "half",
                                     "--quantization", "none")))
    assert (planned["dtype"], planned["quantization"]) == ("float16", "")


# ---------------------------------------------------------------- against the plan


def reports(*rows: dict[str, Any]) -> dict[str, PodEngine]:
    got = parse_engine_info(list(rows))
    assert got is not None
    return got.get(S, {})


def test_pods_that_run_the_plan_match() -> None:
    seen = observe_variants({"h100": PLAN_ARGS}, {"s-0": "h100", "s-1": "h100"},
                            reports(info("s-0", RUNS_PLAN), info("s-1", RUNS_PLAN)))
    v = seen["h100"]
    assert (v.pods, v.pods_on_plan, v.agree, v.matches_plan, v.differences) == (
        2, 2, True, True, ())
    cond = engine_condition(seen)
    assert (cond.status, cond.reason) == (False, C.ENGINE_MATCHES)


def test_a_setting_the_launcher_changed_is_a_mismatch_with_its_reason() -> None:
    seen = observe_variants({"h100": PLAN_ARGS}, {"s-0": "h100", "s-1": "h100"},
                            reports(info("s-0", RUNS_PLAN), info("s-1", KV_DROPPED),
                                    change("s-1", KV_CHANGE)))
    v = seen["h100"]
    assert (v.pods, v.pods_on_plan, v.agree, v.matches_plan) == (2, 1, False, False)
    cond = engine_condition(seen)
    assert (cond.status, cond.reason) == (True, C.ENGINE_DIFFERS)
    assert "variant h100: --kv-cache-dtype planned fp8, running auto" in cond.message
    assert "FP8KVCacheRisk" in cond.message
    assert c.ENGINE_CHANGE_REASONS["FP8KVCacheRisk"] in cond.message


def test_pods_of_an_earlier_plan_are_a_rollout_not_a_mismatch() -> None:
    """Settings no launcher changed come from the pod's template: an earlier plan's pods
    (a new chunked-prefill budget rolling out), which the rollout replaces."""
    older = {**RUNS_PLAN, "max_num_batched_tokens": "4096"}
    seen = observe_variants({"h100": PLAN_ARGS}, {"s-0": "h100"}, reports(info("s-0", older)))
    cond = engine_condition(seen)
    assert (cond.status, cond.reason) == (False, C.ROLLING_OUT)
    assert "--max-num-batched-tokens planned 8192, running 4096" in cond.message


def test_no_reporting_pod_is_not_reported() -> None:
    cond = engine_condition(observe_variants({"h100": PLAN_ARGS}, {"s-0": "h100"}, {}))
    assert (cond.status, cond.reason) == (None, C.NOT_REPORTED)


def test_only_pods_the_operator_sees_in_a_planned_variant_count() -> None:
    rows = reports(info("gone", KV_DROPPED), change("gone", KV_CHANGE),
                   info("retired", KV_DROPPED), info("s-0", RUNS_PLAN))
    seen = observe_variants({"h100": PLAN_ARGS}, {"s-0": "h100", "retired": "a100"}, rows)
    assert list(seen) == ["h100"]
    assert (seen["h100"].pods, seen["h100"].changes) == (1, ())


def test_a_pod_with_changes_but_no_settings_does_not_report() -> None:
    assert compare(planned_settings(PLAN_ARGS), [PodEngine(None, ())]) is None


def test_disagreeing_pods_show_what_most_run_and_say_they_disagree() -> None:
    rows = reports(info("s-0", KV_DROPPED), change("s-0", KV_CHANGE), info("s-1", RUNS_PLAN),
                   info("s-2", KV_DROPPED), change("s-2", KV_CHANGE))
    v = observe_variants({"h100": PLAN_ARGS}, {p: "h100" for p in rows}, rows)["h100"]
    assert dict(v.settings)["kv_cache_dtype"] == "auto"
    assert (v.agree, v.pods, v.pods_on_plan) == (False, 3, 1)
    # The same change seen in two pods is listed once.
    assert v.changes == (EngineChange("--kv-cache-dtype", "fp8", "auto", "FP8KVCacheRisk"),)


# ---------------------------------------------------------------- status


def test_engine_observed_on_the_wire() -> None:
    rows = reports(info("s-0", KV_DROPPED), change("s-0", KV_CHANGE))
    v = observe_variants({"h100": PLAN_ARGS}, {"s-0": "h100"}, rows)["h100"]
    assert observed_status(v).model_dump(by_alias=True) == {
        "quantization": "fp8", "kvCacheDtype": "auto", "dtype": "bfloat16",
        "tensorParallelSize": 4, "maxNumSeqs": 64, "maxNumBatchedTokens": 8192,
        "pods": 1, "podsOnPlan": 0, "agree": True, "matchesPlan": False,
        "changes": [KV_CHANGE]}


def test_unquantized_weights_read_none_in_status() -> None:
    plain = {**RUNS_PLAN, "quantization": ""}
    args = ("--model", "m", "--dtype", "bfloat16", "--kv-cache-dtype", "fp8",
            "--tensor-parallel-size", "4", "--max-num-seqs", "64",
            "--max-num-batched-tokens", "8192")
    v = observe_variants({"x": args}, {"p": "x"}, reports(info("p", plain)))["x"]
    assert observed_status(v).quantization == "none"
    assert v.matches_plan


def test_the_observation_is_the_same_whatever_the_order_of_rows_and_pods() -> None:
    """Status is written on any change of ``variants``: an unchanged fleet must read the
    same every pass (no pod names, no times, sorted)."""
    rows = [info("s-0", KV_DROPPED), change("s-0", KV_CHANGE), info("s-1", RUNS_PLAN),
            change("s-0", {**KV_CHANGE, "setting": "--port", "reason": "GatewayAddress"})]
    pods = {"s-0": "h100", "s-1": "h100"}

    def dumped(order: list[dict[str, Any]], pod_order: dict[str, str]) -> tuple[Any, Any]:
        seen = observe_variants({"h100": PLAN_ARGS}, pod_order, reports(*order))
        return ({k: observed_status(v).model_dump(by_alias=True) for k, v in seen.items()},
                engine_condition(seen))

    first = dumped(rows, pods)
    assert dumped(list(reversed(rows)), dict(reversed(pods.items()))) == first
    assert "s-0" not in str(first) and "s-1" not in str(first)
