"""Thousands of generated InferenceService and SLOPolicy documents, hostile names and values
included, through ``slo-operator render`` in process.

Every document is either refused with exit status 2 and a message naming the field (or file)
to fix, or yields objects that obey the API server's rules for names, labels, env, tolerations
and resources. Never a traceback. ``tests/integration/test_hostile.py`` sends a sample of the
same documents, and what render prints for them, to a real API server.

Example counts come from a hypothesis settings profile: ``SLO_HYPOTHESIS_PROFILE`` = ``ci``
(the default under ``CI``: 500 per property, two thousand documents in all), ``dev`` (the
default elsewhere: 700 per property) or
``thorough``.
"""

from __future__ import annotations

import math
import os
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slo_operator.api.cluster import NodeInfo, Snapshot
from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec
from slo_operator.cli import main
from slo_operator.reconcile.desired import Problem, discover_pools, plan_service
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from slo_operator.render.names import is_dns1035_label, is_label_value, is_object_name
from slo_operator.render.objects import build_all
from tests.operator.reconcile.fake import FakeKube
from tests.support.paths import NODE_LABELS, REPO

settings.register_profile(
    "ci", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "dev", max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=10000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
settings.load_profile(os.environ.get("SLO_HYPOTHESIS_PROFILE", "ci" if _CI else "dev"))

GROUP_VERSION = "inference.slo-operator.io/v1alpha1"

# ------------------------------------------------------------------ strategies

_DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
VALID_NAMES = st.one_of(
    st.sampled_from(["chat", "llama-3.1-8b", "qwen2.5-7b", "8b", "a" * 63, "a" * 64,
                     "a" * 253, "x." * 126 + "y"]),
    st.lists(_DNS_LABEL, min_size=1, max_size=4).map(".".join),
)
HOSTILE_STRINGS = st.one_of(
    st.sampled_from(["", "-", "--help", "-x", " lead", "trail ", "UPPER", "under_score",
                     "dot.", ".dot", "a/b", "名前", "a\nb", "a" * 300, "\x00", "--model"]),
    st.text(max_size=40),
)
NAMES = st.one_of(VALID_NAMES, VALID_NAMES, HOSTILE_STRINGS)
HUGE = [2**31, 2**63, 10**30, -(2**63) - 1]
NUMBERS = st.one_of(
    st.integers(-3, 70), st.sampled_from(HUGE),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, 1, 0.5, 1.5, -1]),
)
JUNK = st.one_of(st.none(), st.text(max_size=8), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), st.booleans())


def maybe(value: st.SearchStrategy[Any], junk_weight: int = 1) -> st.SearchStrategy[Any]:
    """Mostly ``value``, sometimes a value of the wrong type."""
    return st.one_of(*([value] * 4), *([JUNK] * junk_weight))


FLAG_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "8", "16", "2k", "8k", "1e400k", "inf", "nan", "-0.5",
                     "0.95", "99999999999999999999999k", "auto", "9" * 40 + "T", "1.5", "fp8",
                     "bfloat16", "", "1e999999999", "1e-999999999k"]),
    # Numbers as vLLM's human-readable ints and floats, exponents of any size.
    st.from_regex(r"-?[0-9]{1,4}(\.[0-9]{1,3})?(e-?[0-9]{1,10})?(k|K|m|M|g|Gi|T)?",
                  fullmatch=True),
)
FLAGS = st.sampled_from([
    "--tensor-parallel-size", "-tp", "--gpu-memory-utilization", "--max-num-seqs",
    "--max-num-batched-tokens", "--max-model-len", "--cudagraph-capture-sizes", "--dtype",
    "--kv-cache-dtype", "--quantization", "--pipeline-parallel-size", "--model",
    "--served-model-name", "--enforce-eager", "--no-such-flag", "--seed"])
EXTRA_ARGS = st.lists(
    st.one_of(st.tuples(FLAGS, FLAG_VALUES).map(list), FLAGS.map(lambda f: [f]),
              st.tuples(FLAGS, FLAG_VALUES).map(lambda t: [f"{t[0]}={t[1]}"])),
    max_size=4,
).map(lambda groups: [tok for g in groups for tok in g])

ENV_NAMES = st.sampled_from(["HF_TOKEN", "VLLM_LOGGING_LEVEL", "PYTHONPATH", "POD_NAME",
                             "SLO_ENGINE_ARGS", "HOME", "1BAD", "with space", "A", "A"])
ENV = st.lists(st.fixed_dictionaries({"name": ENV_NAMES}, optional={"value": maybe(
    st.text(max_size=10))}), max_size=4)

TAINT_KEYS = st.sampled_from(["", "nvidia.com/gpu", "dedicated", "bad key", "a/b/c",
                              "x" * 70, "example.com/" + "k" * 63])
TOLERATIONS = st.lists(st.fixed_dictionaries({}, optional={
    "key": TAINT_KEYS,
    "operator": st.sampled_from(["Exists", "Equal", "In", ""]),
    "value": st.sampled_from(["", "true", "gpu", "bad value", "v" * 64]),
    "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", "Never"]),
    "tolerationSeconds": st.one_of(st.integers(-10, 3600), st.sampled_from(HUGE)),
}), max_size=3)
NODE_SELECTOR = st.dictionaries(
    st.sampled_from(["zone", "example.com/pool", "bad key", "-x", "a/b/c", "k" * 70]),
    maybe(st.sampled_from(["a", "b", "bad value", "v" * 64, "", "ok.value"])), max_size=3)

PRODUCTS = st.sampled_from(["H100", "A100", "A100-80GB", "T4", "L4", "L40S", "V100",
                            "MI300X", "Gaudi3", "Z9000", "", "h100-80gb"])

MODEL = st.fixed_dictionaries(
    {"name": maybe(st.one_of(st.sampled_from(["meta-llama/Llama-3.1-8B-Instruct",
                                              "Qwen/Qwen2.5-7B-Instruct", "/models/x"]),
                             HOSTILE_STRINGS))},
    optional={
        "servedName": maybe(NAMES),
        "sizeBillions": maybe(st.one_of(st.sampled_from([0.5, 1, 7.6, 8, 70, 405]), NUMBERS)),
        "maxModelLen": maybe(st.one_of(st.sampled_from([2048, 8192, 131072]), NUMBERS)),
        "numLayers": maybe(NUMBERS), "numKVHeads": maybe(NUMBERS),
        "numAttentionHeads": maybe(st.one_of(st.sampled_from([28, 32, 64]), NUMBERS)),
        "headDim": maybe(NUMBERS),
        "quantizedCheckpoint": maybe(st.sampled_from(["fp8", "awq", "gptq", "weird", ""])),
    },
)
ENGINE = st.fixed_dictionaries({}, optional={
    "image": maybe(st.sampled_from(["vllm/vllm-openai:v0.32.0", "", "has space", "a" * 600])),
    "precision": maybe(st.sampled_from(["auto", "bf16", "fp16", "fp8", "fp4"])),
    "kvCacheDtype": maybe(st.sampled_from(["auto", "fp8", "fp8_e5m2", "bf16", "int4"])),
    "tensorParallelSize": maybe(NUMBERS),
    "gpuMemoryUtilization": maybe(NUMBERS),
    "maxNumBatchedTokens": maybe(NUMBERS),
    "extraArgs": maybe(EXTRA_ARGS),
    "env": maybe(ENV),
})
HARDWARE = st.fixed_dictionaries({}, optional={
    "gpuProducts": maybe(st.lists(PRODUCTS, max_size=3)),
    "gpusPerReplica": maybe(NUMBERS),
    "nodeSelector": maybe(NODE_SELECTOR),
    "tolerations": maybe(TOLERATIONS),
})
POLICY_SPEC = st.fixed_dictionaries({}, optional={
    "objectives": maybe(st.fixed_dictionaries({}, optional={
        "e2eLatencyMs": NUMBERS, "ttftMs": NUMBERS, "throughputCVMax": NUMBERS,
        "interTokenLatencyMs": NUMBERS, "e2ePercentile": NUMBERS})),
    "window": maybe(st.sampled_from(["60s", "5m", "0s", "1d", "-1s", "99999999999999h"])),
    "attainmentTarget": maybe(NUMBERS),
    "scaling": maybe(st.fixed_dictionaries({}, optional={
        "minReplicas": NUMBERS, "maxReplicas": NUMBERS, "scaleToZero": st.booleans()})),
    "batching": maybe(st.fixed_dictionaries({}, optional={
        "mode": st.sampled_from(["live", "restart", "off", "fast"]),
        "minBatch": NUMBERS, "maxBatch": NUMBERS})),
    "priority": maybe(NUMBERS), "gpuBudget": maybe(NUMBERS),
    "allowQuantization": maybe(st.booleans()),
    "tenant": maybe(st.one_of(NAMES, st.sampled_from(["gold", "team-a"]))),
})


# Field paths of an InferenceService or SLOPolicy document and what may land there.
MUTATIONS: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("svc", "metadata"): JUNK,
    ("svc", "metadata", "name"): NAMES,
    ("svc", "metadata", "namespace"): maybe(NAMES),
    ("svc", "spec"): JUNK,
    ("svc", "spec", "model"): maybe(MODEL),
    ("svc", "spec", "model", "name"): maybe(HOSTILE_STRINGS),
    ("svc", "spec", "model", "servedName"): maybe(NAMES),
    ("svc", "spec", "model", "sizeBillions"): maybe(NUMBERS),
    ("svc", "spec", "model", "maxModelLen"): maybe(NUMBERS),
    ("svc", "spec", "model", "numKVHeads"): maybe(NUMBERS),
    ("svc", "spec", "model", "numAttentionHeads"): maybe(NUMBERS),
    ("svc", "spec", "engine"): maybe(ENGINE),
    ("svc", "spec", "engine", "extraArgs"): EXTRA_ARGS,
    ("svc", "spec", "engine", "env"): ENV,
    ("svc", "spec", "engine", "tensorParallelSize"): NUMBERS,
    ("svc", "spec", "engine", "gpuMemoryUtilization"): NUMBERS,
    ("svc", "spec", "hardware"): maybe(HARDWARE),
    ("svc", "spec", "hardware", "tolerations"): TOLERATIONS,
    ("svc", "spec", "hardware", "nodeSelector"): NODE_SELECTOR,
    ("svc", "spec", "hardware", "gpuProducts"): maybe(st.lists(PRODUCTS, max_size=3)),
    ("svc", "spec", "replicas"): maybe(st.fixed_dictionaries({}, optional={
        "min": NUMBERS, "max": NUMBERS})),
    ("svc", "spec", "sloPolicyRef", "name"): NAMES,
    ("svc", "spec", "unknownField"): JUNK,
    ("policy", "metadata"): JUNK,
    ("policy", "spec"): maybe(POLICY_SPEC),
}
_PATHS = sorted(MUTATIONS)


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = doc
    for key in path[:-1]:
        if not isinstance(node, dict):
            return  # an earlier mutation replaced the parent with junk
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        node[path[-1]] = value


@st.composite
def documents(draw: st.DrawFn) -> list[Any]:
    """A valid SLOPolicy and InferenceService pair with zero to three hostile mutations."""
    name = draw(VALID_NAMES)
    policy_name = draw(VALID_NAMES)
    base: dict[str, Any] = {
        "policy": {"apiVersion": GROUP_VERSION, "kind": "SLOPolicy",
                   "metadata": {"name": policy_name}, "spec": {}},
        "svc": {"apiVersion": GROUP_VERSION, "kind": "InferenceService",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"model": {"name": draw(st.sampled_from([
                    "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-0.5B", "/models/llama"])),
                    "sizeBillions": draw(st.sampled_from([0.5, 1, 7.6, 8, 70])),
                    "maxModelLen": draw(st.sampled_from([1024, 4096, 8192]))},
                    "hardware": {"gpuProducts": [draw(st.sampled_from(
                        ["H100", "A100", "L40S", "T4", "MI300X", "H200"]))]},
                    "sloPolicyRef": {"name": policy_name}}},
    }
    for path in draw(st.lists(st.sampled_from(_PATHS), max_size=3, unique=True)):
        _set(base, path, draw(MUTATIONS[path]))
    return [base["policy"], base["svc"]]


def _node_label_files(tmp: Path) -> list[str]:
    entries = yaml.safe_load(NODE_LABELS.read_text())
    picked = [e for e in entries if any(w in str(e["product"]) for w in (
        "MIG", "SHARED", "Tesla-T4", "H100", "MI300X", "L40S"))]
    paths = []
    for i, entry in enumerate(picked):
        path = tmp / f"nodes-{i}.yaml"
        path.write_text(yaml.safe_dump({str(k): str(v) for k, v in entry["labels"].items()}))
        paths.append(str(path))
    return paths


RENDER_TARGET = st.one_of(st.just([]), PRODUCTS.map(lambda p: ["--gpu-product", p] if p else []),
                          st.integers(0, 100).map(lambda i: ["--node-labels", i]))

# ------------------------------------------------------------------ what must hold

_FIELD_RE = re.compile(r"(spec\.|metadata|--gpu-product|--node-labels|expected one "
                       r"InferenceService|SLOPolicy|spec:)")


def render_docs(docs: list[Any], target: list[Any], label_files: list[str]
                ) -> tuple[int, str, list[dict[str, Any]]]:
    """Render in process; (exit status, stderr+stdout, objects). Fails on any traceback."""
    args = list(target)
    if args[:1] == ["--node-labels"]:
        args[1] = label_files[int(args[1]) % len(label_files)]
    text = yaml.safe_dump_all(docs, allow_unicode=True)
    res = CliRunner().invoke(main, ["render", "-f", "-", *args], input=text)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"render raised {res.exception!r} for:\n{text}") from res.exception
    assert res.exit_code in (0, 2), (res.exit_code, res.output, text)
    objects = list(yaml.safe_load_all(res.stdout)) if res.exit_code == 0 else []
    return res.exit_code, res.output, objects


def check_objects(objects: list[dict[str, Any]]) -> None:
    """The API server's rules for what render prints (names, labels, env, tolerations)."""
    assert [o["kind"] for o in objects] == ["Deployment", "Service", "PodDisruptionBudget"]
    for o in objects:
        meta = o["metadata"]
        assert is_dns1035_label(meta["name"]), meta["name"]
        assert all(is_label_value(v) for v in meta["labels"].values()), meta["labels"]
    dep = objects[0]
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"][
        "metadata"]["labels"].items()
    for c in pod["containers"]:
        names = [e["name"] for e in c.get("env", [])]
        assert len(names) == len(set(names)), names
        for q in c["resources"].get("requests", {}).values():
            assert re.fullmatch(r"[0-9]+(m|Mi|Gi)?", str(q)), q
    for t in pod["tolerations"]:
        assert t.get("key") or t.get("operator") == "Exists", t
        assert not (t.get("operator") == "Exists" and t.get("value")), t
        assert "tolerationSeconds" not in t or t.get("effect") == "NoExecute", t
    args = yaml.safe_load(next(e["value"] for e in pod["containers"][0]["env"]
                               if e["name"] == "SLO_ENGINE_ARGS"))
    tp = int(_last_value(args, "--tensor-parallel-size", "-tp"))
    gpus = next(int(v) for k, v in pod["containers"][0]["resources"]["limits"].items())
    assert 1 <= tp == gpus, (tp, gpus)
    gmu = float(_last_value(args, "--gpu-memory-utilization"))
    assert math.isfinite(gmu) and 0 < gmu <= 1


def _last_value(args: list[str], *flags: str) -> str:
    """The value of the last of ``flags`` in ``args`` (``--flag v`` or ``--flag=v``)."""
    found = None
    for i, tok in enumerate(args):
        name, eq, value = tok.partition("=")
        if name in flags:
            found = value if eq else args[i + 1]
    assert found is not None, (flags, args)
    return found


@pytest.fixture(scope="module")
def label_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return _node_label_files(tmp_path_factory.mktemp("nodes"))


@given(docs=documents(), target=RENDER_TARGET)
def test_render_refuses_with_a_field_or_yields_valid_objects(
    docs: list[Any], target: list[Any], label_files: list[str]
) -> None:
    status, output, objects = render_docs(docs, target, label_files)
    if status == 2:
        assert _FIELD_RE.search(output), output
    else:
        check_objects(objects)


@given(policy=POLICY_SPEC, name=NAMES)
def test_any_policy_is_refused_with_a_field_or_renders(policy: dict[str, Any], name: str,
                                                       label_files: list[str]) -> None:
    docs = yaml.safe_load_all((REPO / "examples" /
                               "llama-8b-h100.yaml").read_text())
    pol, svc = list(docs)
    pol["metadata"]["name"] = svc["spec"]["sloPolicyRef"]["name"] = "gold"
    pol["spec"] = policy
    svc["metadata"]["name"] = name
    status, output, objects = render_docs([pol, svc], [], label_files)
    if status == 2:
        assert _FIELD_RE.search(output), output
    else:
        check_objects(objects)


# ------------------------------------------------------------------ the operator's reconcile

_NOW = datetime(2026, 1, 1, tzinfo=UTC)


@cache
def _fixture_nodes() -> tuple[NodeInfo, ...]:
    entries = yaml.safe_load(NODE_LABELS.read_text())
    picked = [e for e in entries if any(w in str(e["product"]) for w in (
        "MIG", "SHARED", "H100", "MI300X", "L40S"))]
    return tuple(NodeInfo(f"n{i}", {str(k): str(v) for k, v in e["labels"].items()})
                 for i, e in enumerate(picked))


@given(docs=documents())
def test_operator_reconcile_reports_instead_of_raising(docs: list[Any]) -> None:
    """The same documents, as stored objects, through the operator's reconcile: a status
    with conditions comes back (and objects obeying the API's rules), never an exception."""
    policy, svc = docs
    if not isinstance(svc.get("metadata"), dict) or not isinstance(policy.get("metadata"), dict):
        return  # the API server stores only objects with metadata
    meta = {**svc["metadata"], "namespace": "ns", "uid": "u-1", "generation": 1}
    if not isinstance(meta.get("name"), str) or not is_object_name(meta["name"]):
        return  # the API server stores only valid names
    body = {**svc, "metadata": meta}
    pol_name = policy["metadata"].get("name")
    policies = ({("ns", pol_name): {**policy, "metadata": {"name": pol_name, "namespace": "ns"}}}
                if isinstance(pol_name, str) else {})
    kube = FakeKube()
    outcome = reconcile_service_sync(kube, body, Snapshot(policies=policies,
                                                          nodes=_fixture_nodes()),
                                     _NOW, Settings())
    assert outcome.status.get("conditions"), outcome.status
    applied = [kube.objects[k] for k in sorted(kube.objects, key=lambda k: (
        ["Deployment", "Service", "PodDisruptionBudget"].index(k[0]), k[2]))]
    if applied:
        check_objects(applied)


# ------------------------------------------------------------------ hostile node labels

_LABEL_KEYS = st.sampled_from([
    "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
    "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor", "nvidia.com/gpu.family",
    "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy", "nvidia.com/mig.strategy",
    "nvidia.com/mig-1g.10gb.count", "nvidia.com/mig-1g.10gb.memory",
    "nvidia.com/mig-1g.10gb.product", "amd.com/gpu.product-name", "amd.com/gpu.device-id",
    "amd.com/gpu.vram", "amd.com/gpu.count", "habana.ai/gaudi.product", "habana.ai/gaudi.count"])
_LABEL_VALUES = st.one_of(
    st.sampled_from(["NVIDIA-H100-80GB-HBM3", "Tesla-T4-SHARED", "A100-SXM4-40GB-MIG-1g.5gb",
                     "mixed", "single", "time-slicing", "mps", "hopper", "0x74a1", "192G",
                     "Gaudi3", "AMD_Instinct_MI300X_OAM", "", "-1", "0", "1", "8", "9", "81559",
                     "99999999999999999999", "1e9", "NaN", "junk"]),
    st.integers(-5, 10**13).map(str), st.text(max_size=12))


@given(labels=st.lists(st.dictionaries(_LABEL_KEYS, _LABEL_VALUES, max_size=8), min_size=1,
                       max_size=3),
       alloc=st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared",
                                              "nvidia.com/mig-1g.10gb", "amd.com/gpu"]),
                             st.one_of(st.integers(-2, 10**12).map(str), st.text(max_size=4)),
                             max_size=2))
def test_any_node_labels_plan_or_report(labels: list[dict[str, str]],
                                        alloc: dict[str, str]) -> None:
    """Whatever nodes claim, planning ends in a plan or a Problem naming a field."""
    nodes = [NodeInfo(f"n{i}", lab, alloc) for i, lab in enumerate(labels)]
    spec = InferenceServiceSpec.model_validate(
        {"model": {"name": "m", "sizeBillions": 0.5, "maxModelLen": 1024}})
    result = plan_service(name="svc", namespace="ns", uid="", spec=spec, policy=SLOPolicySpec(),
                          policy_name="", pools=discover_pools(nodes), nodes=nodes, replicas=1)
    if isinstance(result, Problem):
        assert result.field.startswith("spec."), result
    else:
        objects = build_all(result.render)
        check_objects(objects)
