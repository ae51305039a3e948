"""Planning: pools from node labels, pool choice, and the API/engine agreement."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.models import InferenceServiceSpec, KvCacheDtype, Precision, SLOPolicySpec
from slo_operator.engine import KV_CACHE_DTYPES, PRECISIONS
from slo_operator.reconcile.chunking import (
    CHANGE_INTERVAL_S,
    MISS_INTERVAL_S,
    jitter_budget,
    with_memory,
)
from slo_operator.reconcile.desired import (
    NodeInfo,
    Problem,
    ServicePlan,
    discover_pools,
    initial_replicas,
    live_limit,
    plan_service,
)

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.count": "8"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": "8"}
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.compute.major": "8",
      "nvidia.com/gpu.compute.minor": "9", "nvidia.com/gpu.memory": "23034",
      "nvidia.com/gpu.count": "8"}
GPU8 = {"nvidia.com/gpu": "8"}

FLEET = [
    NodeInfo("h100-a", {**H100, "zone": "a"}, GPU8),
    NodeInfo("h100-b", {**H100, "zone": "b"}, GPU8),
    NodeInfo("a100-a", {**A100, "zone": "a"}, GPU8),
    NodeInfo("l4-a", L4, GPU8),
    NodeInfo("cpu-a", {"kubernetes.io/os": "linux"}, {}),
    NodeInfo("h100-cordoned", H100, GPU8, schedulable=False),
]


def make_spec(**kw: Any) -> InferenceServiceSpec:
    spec: dict[str, Any] = {"model": {"name": "org/m", "sizeBillions": 8, "maxModelLen": 4096}}
    spec.update(kw)
    return InferenceServiceSpec.model_validate(spec)


def plan(spec: InferenceServiceSpec, policy: SLOPolicySpec | None = None,
         nodes: list[NodeInfo] = FLEET) -> ServicePlan | Problem:
    return plan_service(name="svc", namespace="ns", uid="u", spec=spec,
                        policy=policy or SLOPolicySpec(), policy_name="", pools=discover_pools(
                            nodes), nodes=nodes, replicas=1)


def test_pools_group_nodes_by_hardware_and_skip_cpu_and_cordoned() -> None:
    pools = {p.product: p for p in discover_pools(FLEET)}
    assert set(pools) == {"H100-SXM-80GB", "A100-SXM4-80GB", "L4-24GB"}
    assert pools["H100-SXM-80GB"].nodes == ("h100-a", "h100-b")
    assert pools["H100-SXM-80GB"].total_gpus == 16


@pytest.mark.parametrize(
    ("spec", "want_product", "want_problem"),
    [
        pytest.param(make_spec(hardware={"gpuProducts": ["A100-80GB", "H100"]}),
                     "A100-SXM4-80GB", None, id="first-preference-wins"),
        pytest.param(make_spec(hardware={"gpuProducts": ["B200", "H100"]}), "H100-SXM-80GB",
                     None, id="absent-preference-falls-through"),
        pytest.param(make_spec(hardware={"gpuProducts": ["B200"]}), None, C.NO_MATCHING_NODES,
                     id="no-preferred-pool"),
        pytest.param(make_spec(hardware={"gpuProducts": ["Z9000"]}), None, C.UNKNOWN_GPU,
                     id="unknown-product-name"),
        pytest.param(make_spec(hardware={"nodeSelector": {"zone": "b"}}), "H100-SXM-80GB", None,
                     id="node-selector-narrows-pools"),
        pytest.param(make_spec(hardware={"nodeSelector": {"zone": "c"}}), None,
                     C.NO_MATCHING_NODES, id="node-selector-matches-nothing"),
        pytest.param(make_spec(model={"name": "org/big", "sizeBillions": 400},
                               hardware={"gpuProducts": ["L4"]}), None, C.ENGINE_INFEASIBLE,
                     id="model-too-big-for-pool"),
    ],
)
def test_pool_choice(spec: InferenceServiceSpec, want_product: str | None,
                     want_problem: str | None) -> None:
    got = plan(spec)
    if want_problem:
        assert isinstance(got, Problem) and got.reason == want_problem, got
        assert got.field.startswith("spec.")
    else:
        assert isinstance(got, ServicePlan), got
        assert got.pool.product == want_product


def test_without_preference_fewest_gpus_per_replica_wins() -> None:
    got = plan(make_spec(model={"name": "org/70b", "sizeBillions": 70, "maxModelLen": 4096}))
    assert isinstance(got, ServicePlan)
    # 70B in FP8 needs two H100s; in BF16 it needs four A100s (L4s: more still).
    assert got.pool.product == "H100-SXM-80GB"
    assert got.engine.tensor_parallel_size == 2


def test_policy_forbidding_quantization_reaches_the_engine() -> None:
    strict = SLOPolicySpec(allow_quantization=False)
    got = plan(make_spec(hardware={"gpuProducts": ["H100"]}), strict)
    assert isinstance(got, ServicePlan)
    assert got.engine.quantization is None
    assert "--quantization" not in got.engine.args


def test_render_input_carries_pool_and_tenant() -> None:
    got = plan(make_spec(hardware={"gpuProducts": ["H100"]}),
               SLOPolicySpec.model_validate({"tenant": "gold"}))
    assert isinstance(got, ServicePlan)
    assert got.render.pool_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert got.render.tenant == "gold"
    assert got.render.expected_compute_capability == "9.0"
    assert got.hardware_status.fp8 is True


@pytest.mark.parametrize(
    ("policy", "bounds", "want"),
    [
        pytest.param({}, {}, (1, 8), id="policy-defaults"),
        pytest.param({"scaling": {"minReplicas": 2, "maxReplicas": 6}}, {"min": 3, "max": 4},
                     (3, 4), id="service-narrows-policy"),
        pytest.param({"scaling": {"minReplicas": 2, "maxReplicas": 6}}, {"max": 10}, (2, 6),
                     id="service-cannot-widen-policy"),
    ],
)
def test_initial_replicas(policy: dict[str, Any], bounds: dict[str, Any],
                          want: tuple[int, int]) -> None:
    assert initial_replicas(make_spec(replicas=bounds),
                            SLOPolicySpec.model_validate(policy)) == want


def test_api_enums_match_the_engine() -> None:
    assert set(typing.get_args(Precision)) == set(PRECISIONS)
    assert set(typing.get_args(KvCacheDtype)) == set(KV_CACHE_DTYPES)


@pytest.mark.parametrize(
    ("wanted", "want_products"),
    [
        pytest.param("A100", {"A100-SXM4-80GB"}, id="family-name-covers-variants"),
        pytest.param("a100-80gb", {"A100-SXM4-80GB"}, id="case-and-memory-words"),
        pytest.param("L4", {"L4-24GB"}, id="l4-does-not-cover-l40s"),
        pytest.param("NVIDIA-H100-80GB-HBM3", {"H100-SXM-80GB"}, id="exact-gfd-label"),
        pytest.param("H200", set(), id="absent-product"),
    ],
)
def test_product_names_match_pools(wanted: str, want_products: set[str]) -> None:
    from slo_operator.hardware import resolve_product
    from slo_operator.reconcile.desired import product_matches

    nodes = [*FLEET, NodeInfo("l40s", {**L4, "nvidia.com/gpu.product": "NVIDIA-L40S",
                                       "nvidia.com/gpu.memory": "46068"}, GPU8)]
    got = {p.product for p in discover_pools(nodes)
           if product_matches(wanted, resolve_product(wanted), p)}
    assert got == want_products


def plan_with_limit(mode: str, limit: int) -> Any:
    """The render input for a default service whose controller state holds ``limit``."""
    policy = SLOPolicySpec.model_validate({"batching": {"mode": mode, "minBatch": 8,
                                                        "maxBatch": 128}})
    result = plan_service(name="svc", namespace="ns", uid="u", spec=make_spec(), policy=policy,
                          policy_name="", pools=discover_pools(FLEET), nodes=FLEET, replicas=1,
                          restart_limit=limit)
    assert isinstance(result, ServicePlan)
    return result.render


@pytest.mark.parametrize(
    ("mode", "state_limit", "want_max_num_seqs"),
    [
        pytest.param("live", 16, 128, id="live-pins-max-num-seqs-to-max-batch"),
        pytest.param("off", 16, 128, id="off-pins-max-num-seqs-to-max-batch"),
        pytest.param("restart", 16, 16, id="restart-bakes-the-limit-into-max-num-seqs"),
        pytest.param("restart", 999, 128, id="restart-clamps-to-max-batch"),
    ],
)
def test_max_num_seqs_follows_batching_mode(mode: str, state_limit: int,
                                            want_max_num_seqs: int) -> None:
    args = list(plan_with_limit(mode, state_limit).engine_args)
    assert args[args.index("--max-num-seqs") + 1] == str(want_max_num_seqs)
    # CUDA graphs cover every limit the controller may choose, whatever the mode.
    sizes = [int(a) for a in args[args.index("--cudagraph-capture-sizes") + 1:]
             if a.isdigit()]
    assert max(sizes) == 128


@pytest.mark.parametrize(
    ("mode", "wanted", "want"),
    [
        pytest.param("live", 40, 40, id="live-follows-the-controller"),
        pytest.param("live", None, 128, id="live-starts-at-the-ceiling"),
        pytest.param("live", 1, 8, id="live-clamped-to-min-batch"),
        pytest.param("live", 500, 128, id="live-clamped-to-ceiling"),
        pytest.param("restart", 40, 128, id="restart-gateway-holds-the-ceiling"),
        pytest.param("off", 40, 128, id="off-never-moves"),
    ],
)
def test_live_limit_by_mode(mode: str, wanted: int | None, want: int) -> None:
    policy = SLOPolicySpec.model_validate({"batching": {"mode": mode, "minBatch": 8,
                                                        "maxBatch": 128}})
    assert live_limit(policy, 128, wanted) == want


# ------------------------------------------------------------ the inter-token lever

T0 = 1_767_225_600.0  # 2026-01-01
H100_ONLY = {"gpuProducts": ["H100"]}


def itl_policy(itl: int | None) -> SLOPolicySpec:
    objectives = {} if itl is None else {"interTokenLatencyMs": itl}
    return SLOPolicySpec.model_validate({"objectives": objectives})


def planned(policy: SLOPolicySpec, control: dict[str, Any] | None = None,
            now: float | None = T0, **spec: Any) -> ServicePlan:
    got = plan_service(name="svc", namespace="ns", uid="u",
                       spec=make_spec(hardware=H100_ONLY, **spec), policy=policy,
                       policy_name="", pools=discover_pools(FLEET), nodes=FLEET, replicas=1,
                       control=control, now=now)
    assert isinstance(got, ServicePlan), got
    return got


def budget(p: ServicePlan) -> int:
    args = list(p.engine.args)
    return int(args[len(args) - 1 - args[::-1].index("--max-num-batched-tokens") + 1])


def test_itl_objective_sets_the_budget_its_longest_step_keeps() -> None:
    loose, tight = planned(itl_policy(50)), planned(itl_policy(25))
    for p, itl in ((loose, 50), (tight, 25)):
        (mem,) = p.chunk_memory.values()
        assert budget(p) == p.engine.max_num_batched_tokens == mem.tokens
        # 80 % of the objective for the percentile (control.capacity.LATENCY_MARGIN).
        assert mem.step_ms <= 0.8 * itl
        assert [n.reason for n in p.engine.notes if n.field.endswith("BatchedTokens")] == [
            "ChunkedPrefillBudget"]
    assert budget(tight) < budget(loose) < 8192


def test_without_an_itl_objective_the_budget_is_vllms_default() -> None:
    p = planned(itl_policy(None))
    assert budget(p) == 8192
    assert p.chunk_memory == {} and p.chunk_changes == ()


@pytest.mark.parametrize(
    ("engine", "want"),
    [
        pytest.param({"maxNumBatchedTokens": 6000}, 6000, id="spec-field"),
        pytest.param({"extraArgs": ["--max-num-batched-tokens", "3000"]}, 3000,
                     id="extra-args"),
    ],
)
def test_a_user_budget_wins_over_the_objective(engine: dict[str, Any], want: int) -> None:
    p = planned(itl_policy(25), engine=engine)
    assert budget(p) == p.engine.max_num_batched_tokens == want
    assert p.chunk_memory == {}


def _control(p: ServicePlan, **state: Any) -> dict[str, Any]:
    """status.control as the reconciler writes it after plan ``p``."""
    out = with_memory({"state": state} if state else None, p.chunk_memory)
    assert out is not None
    return out


def test_an_objective_edit_moves_the_budget_at_once() -> None:
    first = planned(itl_policy(50))
    edited = planned(itl_policy(25), _control(first), now=T0 + 60)
    assert budget(edited) < budget(first)
    (moved,) = edited.chunk_changes
    assert (moved.old, moved.new) == (budget(first), budget(edited))
    assert moved.why == "interTokenLatencyMs changed from 50 to 25 ms"
    # Removing the objective returns to vLLM's default, also at once.
    removed = planned(itl_policy(None), _control(edited), now=T0 + 120)
    assert budget(removed) == 8192
    assert [(c.old, c.new) for c in removed.chunk_changes] == [(budget(edited), 8192)]


def test_learnt_speed_moves_the_budget_only_after_the_rate_limit() -> None:
    first = planned(itl_policy(50))
    slow = {"speed": 0.7, "speedKey": "H100-SXM-80GB/fp8", "speedSamples": 12}
    control = _control(first, **slow)
    held = planned(itl_policy(50), control, now=T0 + CHANGE_INTERVAL_S - 1)
    assert budget(held) == budget(first)
    assert held.chunk_changes == ()
    assert held.engine.notes == first.engine.notes  # nothing to rewrite in status
    moved = planned(itl_policy(50), control, now=T0 + CHANGE_INTERVAL_S)
    assert budget(moved) < budget(first)
    (change,) = moved.chunk_changes
    assert change.why.startswith("re-planned from step times learnt on H100-SXM-80GB fp8")


def jitter_policy(cv: float | None, itl: int | None = None) -> SLOPolicySpec:
    objectives: dict[str, Any] = {} if cv is None else {"throughputCVMax": cv}
    if itl is not None:
        objectives["interTokenLatencyMs"] = itl
    return SLOPolicySpec.model_validate({"objectives": objectives})


def test_jitter_over_its_bound_lowers_the_budget_and_says_why_in_notes() -> None:
    """A policy with a jitter bound and no inter-token objective runs vLLM's default (no
    memory, nothing to roll) until status says the law read jitter over the bound
    (``jitterOver``); then the plan lowers the budget at once, keeps it in status, and its
    notes and move say the bound; a second reading waits ``MISS_INTERVAL_S``."""
    quiet = planned(jitter_policy(0.5), {"state": {"jitterOver": 0.9}})
    assert budget(quiet) == 8192 and quiet.chunk_memory == {} and quiet.chunk_changes == ()
    missed = planned(jitter_policy(0.5), {"state": {"jitterOver": 2.0}}, now=T0)
    assert budget(missed) == jitter_budget(8192, 2.0, 512)
    (moved,) = missed.chunk_changes
    assert (moved.old, moved.new) == (8192, budget(missed))
    assert moved.why.startswith("jitter measured 1.00, over throughputCVMax 0.5")
    assert any(n.reason == "ChunkedPrefillBudget" and "throughputCVMax 0.5" in n.message
               for n in missed.engine.notes)
    again = _control(missed, jitterOver=1.5)
    held = planned(jitter_policy(0.5), again, now=T0 + MISS_INTERVAL_S - 1)
    assert budget(held) == budget(missed) and held.chunk_changes == ()
    lower = planned(jitter_policy(0.5), again, now=T0 + MISS_INTERVAL_S)
    assert budget(lower) == jitter_budget(budget(missed), 1.5, 512) < budget(missed)
    # The bound removed: back to vLLM's default, at once.
    removed = planned(jitter_policy(None), _control(lower), now=T0 + MISS_INTERVAL_S + 1)
    assert budget(removed) == 8192
    assert [c.why for c in removed.chunk_changes] == [
        "throughputCVMax removed: vLLM's default for the GPU class"]


def test_a_jitter_cap_lowers_an_inter_token_budget_and_outlives_its_re_plans() -> None:
    first = planned(jitter_policy(0.5, itl=50))
    capped = planned(jitter_policy(0.5, itl=50), _control(first, jitterOver=1.3),
                     now=T0 + MISS_INTERVAL_S)
    assert budget(capped) == jitter_budget(budget(first), 1.3, 512) < budget(first)
    slow = {"speed": 0.7, "speedKey": "H100-SXM-80GB/fp8", "speedSamples": 12}
    later = planned(jitter_policy(0.5, itl=50), _control(capped, **slow),
                    now=T0 + MISS_INTERVAL_S + CHANGE_INTERVAL_S)
    assert budget(later) == min(budget(capped), later.chunk_memory["h100-sxm-80gb"].tokens)


def test_a_measured_inter_token_miss_moves_the_budget_before_the_rate_limit() -> None:
    """Status says the law measured the percentile over the objective (``itlOver``) and
    has learnt long prompts: the plan lowers the budget once ``MISS_INTERVAL_S`` passed,
    not ``CHANGE_INTERVAL_S``; the same shape without a miss waits for the rate limit."""
    first = planned(itl_policy(50))
    long_prompts = {"promptTokens": 16000.0, "outputTokens": 200.0}
    missed = _control(first, **long_prompts, itlOver=1.3)
    early = planned(itl_policy(50), missed, now=T0 + MISS_INTERVAL_S - 1)
    assert budget(early) == budget(first) and early.chunk_changes == ()
    moved = planned(itl_policy(50), missed, now=T0 + MISS_INTERVAL_S)
    assert budget(moved) < budget(first)
    (change,) = moved.chunk_changes
    assert change.why.startswith("re-planned from seed step times")
    inside = planned(itl_policy(50), _control(first, **long_prompts, itlOver=0.9),
                     now=T0 + MISS_INTERVAL_S)
    assert budget(inside) == budget(first)
