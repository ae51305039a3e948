"""`slo-operator render`, `crds` and `profiles`: what a GitOps reviewer runs before merging."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from slo_operator.api.activation import (
    ACTIVATOR_PORT,
    DEFAULT_QUEUE_PER_SERVICE,
    DEFAULT_WAKE_TIMEOUT_S,
)
from slo_operator.cli import main
from tests.support.paths import NODE_LABELS, REPO

ROOT = REPO
EXAMPLE_8B = str(ROOT / "examples" / "llama-8b-h100.yaml")
EXAMPLE_70B = str(ROOT / "examples" / "llama-70b-a100.yaml")
FIXTURES = ROOT / "tests" / "fixtures"


def run(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), input=input)


def engine_args(output: str) -> list[str]:
    dep = json.loads(output)["items"][0]
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    value = next(e["value"] for e in env if e["name"] == "SLO_ENGINE_ARGS")
    args: list[str] = json.loads(value)
    return args


def opt(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize(
    ("gpu", "want_dtype", "want_quant", "want_kv"),
    [
        pytest.param(None, "bfloat16", "fp8", "fp8", id="h100-from-spec-gets-fp8"),
        pytest.param("A100", "bfloat16", None, "auto", id="a100-bf16-no-fp8-weights"),
        pytest.param("T4", "half", None, "auto", id="t4-fp16"),
        pytest.param("V100", "half", None, "auto", id="v100-fp16"),
        pytest.param("L40S", "bfloat16", "fp8", "fp8", id="ada-fp8"),
        pytest.param("MI300X", "bfloat16", "fp8", "fp8_e4m3", id="mi300x-fnuz-family"),
    ],
)
def test_render_engine_args_by_gpu(gpu: str | None, want_dtype: str, want_quant: str | None,
                                   want_kv: str) -> None:
    extra = ["--gpu-product", gpu] if gpu else []
    res = run("render", "-f", EXAMPLE_8B, "-o", "json", *extra)
    assert res.exit_code == 0, res.output
    args = engine_args(res.stdout)
    assert opt(args, "--dtype") == want_dtype
    assert opt(args, "--quantization") == want_quant
    assert opt(args, "--kv-cache-dtype") == want_kv


def test_render_yaml_has_deployment_service_pdb() -> None:
    res = run("render", "-f", EXAMPLE_70B)
    assert res.exit_code == 0, res.output
    kinds = [d["kind"] for d in yaml.safe_load_all(res.stdout)]
    assert kinds == ["Deployment", "Service", "PodDisruptionBudget"]


def test_render_from_real_node_labels(tmp_path: Path) -> None:
    labels = yaml.safe_load(NODE_LABELS.read_text())
    # Pick the first NVIDIA label set from the shared fixture that is an H100 without MIG.
    sets = labels if isinstance(labels, list) else list(labels.values())
    flat = []
    for s in sets:
        lab = s.get("labels", s) if isinstance(s, dict) else {}
        if "H100" in str(lab.get("nvidia.com/gpu.product", "")) and "MIG" not in str(lab):
            flat.append({k: str(v) for k, v in lab.items()})
    assert flat, "fixture has an H100 label set"
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(flat[0]))
    res = run("render", "-f", EXAMPLE_8B, "--node-labels", str(nodes), "-o", "json")
    assert res.exit_code == 0, res.output
    assert opt(engine_args(res.stdout), "--quantization") == "fp8"


@pytest.mark.parametrize(
    ("patch", "extra", "want"),
    [
        pytest.param({}, ["--gpu-product", "Z9000"], "--gpu-product: ", id="unknown-gpu"),
        pytest.param({"model": {"name": "m"}}, [], "spec.model.sizeBillions", id="missing-size"),
        pytest.param({"engine": {"precision": "fp4"}}, [], "spec.engine.precision",
                     id="unknown-precision"),
        pytest.param({"replicas": {"min": 3, "max": 1}}, [], "spec.replicas.min",
                     id="min-gt-max"),
        pytest.param({"engine": {"precision": "bf16"}}, ["--gpu-product", "T4"],
                     "spec.engine.precision", id="bf16-on-t4"),
        pytest.param({"engine": {"extraArgs": ["--no-such-flag"]}}, [],
                     "spec.engine.extraArgs[0]", id="unknown-extra-arg"),
    ],
)
def test_render_bad_input_names_the_field(patch: dict[str, Any], extra: list[str],
                                          want: str) -> None:
    docs = list(yaml.safe_load_all(Path(EXAMPLE_8B).read_text()))
    svc = docs[1]
    for k, v in patch.items():
        svc["spec"][k] = {**svc["spec"].get(k, {}), **v} if k != "model" else v
    res = run("render", "-f", "-", *extra, input=yaml.safe_dump_all(docs))
    assert res.exit_code == 2, res.output
    assert want in res.output


def test_policy_min_gt_max_in_render() -> None:
    docs = list(yaml.safe_load_all(Path(EXAMPLE_8B).read_text()))
    docs[0]["spec"]["scaling"] = {"minReplicas": 9, "maxReplicas": 2}
    res = run("render", "-f", "-", input=yaml.safe_dump_all(docs))
    assert res.exit_code == 2
    assert "spec.scaling.minReplicas (9) must be <= spec.scaling.maxReplicas (2)" in res.output


def test_crds_command_matches_committed_files() -> None:
    res = run("crds")
    assert res.exit_code == 0
    committed = sorted((ROOT / "crds").glob("*.yaml"))
    assert res.stdout == "---\n".join(p.read_text() for p in committed)


def test_profiles_command_writes_the_packaged_set(tmp_path: Path) -> None:
    shipped = ROOT / "operator" / "slo_operator" / "data" / "profiles"
    # A measurement run: the profiles plus what the profiler writes beside them.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for path in shipped.glob("*.json"):
        (run_dir / path.name).write_text(path.read_text())
    for name in ("h200-probe.json", "plan-h200.json"):
        (run_dir / name).write_text((ROOT / "profiles" / name).read_text())
    out = tmp_path / "packaged"
    out.mkdir()
    (out / "withdrawn.json").write_text("{}")
    (out / "README.md").write_text("kept")
    res = run("profiles", "--from", str(run_dir), "--out-dir", str(out))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.glob("*.json")) == sorted(
        p.name for p in shipped.glob("*.json"))
    for path in out.glob("*.json"):
        assert path.read_text() == (shipped / path.name).read_text()
    assert (out / "README.md").read_text() == "kept"
    listed = run("profiles", "--from", str(run_dir))
    assert listed.stdout.split() == sorted(p.name for p in out.glob("*.json"))


def test_profiles_command_needs_its_source_named(tmp_path: Path) -> None:
    res = run("profiles", "--out-dir", str(tmp_path))
    assert res.exit_code == 2
    assert "--from" in res.output


def test_profiles_command_refuses_to_write_over_its_source(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text("[]")
    res = run("profiles", "--from", str(tmp_path), "--out-dir", str(tmp_path))
    assert res.exit_code == 2
    assert (tmp_path / "plan.json").exists()


def _example_docs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(Path(EXAMPLE_8B).read_text()))


@pytest.mark.parametrize(
    ("setup", "want"),
    [
        pytest.param(lambda p: None, "no such file", id="missing-file"),
        pytest.param(lambda p: p.mkdir(), "is a directory", id="directory"),
        pytest.param(lambda p: p.write_bytes(b"kind: \xff\xfe\n"), "not UTF-8", id="not-utf8"),
        pytest.param(lambda p: p.write_text("a: [\n"), "not valid YAML", id="broken-yaml"),
    ],
)
def test_render_unreadable_files_exit_2_naming_the_file(
    tmp_path: Path, setup: Any, want: str
) -> None:
    path = tmp_path / "svc.yaml"
    setup(path)
    res = run("render", "-f", str(path))
    assert res.exit_code == 2, res.output
    assert str(path) in res.output and want in res.output


@pytest.mark.parametrize(
    ("mutate", "want"),
    [
        pytest.param(lambda d: d.update(metadata="hello"), "InferenceService.metadata: must be "
                     "a mapping", id="metadata-string"),
        pytest.param(lambda d: d["metadata"].update(name="Bad_Name"),
                     "InferenceService.metadata.name", id="invalid-name"),
        pytest.param(lambda d: d["metadata"].update(namespace=7),
                     "InferenceService.metadata.namespace", id="namespace-not-string"),
        pytest.param(lambda d: d["spec"]["hardware"].update(
            tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
            "spec.hardware.tolerations[0].value", id="exists-with-value"),
        pytest.param(lambda d: d["spec"]["hardware"].update(
            tolerations=[{"key": "k", "tolerationSeconds": 30}]),
            "spec.hardware.tolerations[0].tolerationSeconds", id="seconds-without-noexecute"),
        pytest.param(lambda d: d["spec"]["engine"].update(
            env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
            "spec.engine.env[1].name", id="env-repeated"),
        pytest.param(lambda d: d["spec"]["engine"].update(env=[{"name": "POD_NAME"}]),
                     "spec.engine.env[0].name", id="env-operator-owned"),
        pytest.param(lambda d: d["spec"]["model"].update(name="--trust-remote-code"),
                     "spec.model.name", id="model-name-is-a-flag"),
    ],
)
def test_render_wrong_shapes_exit_2_naming_the_field(mutate: Any, want: str) -> None:
    docs = _example_docs()
    mutate(docs[1])
    res = run("render", "-f", "-", input=yaml.safe_dump_all(docs))
    assert res.exit_code == 2, res.output
    assert want in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                      "nvidia.com/gpu.count": 8}, "nvidia.com/gpu.count: must be a string",
                     id="label-value-int"),
        pytest.param("just text", "must be a mapping", id="labels-not-a-mapping"),
        pytest.param({"kind": "Node", "metadata": {"labels": ["a"]}}, "metadata.labels: must "
                     "be a mapping", id="node-labels-list"),
    ],
)
def test_render_bad_node_labels_exit_2(tmp_path: Path, labels: Any, want: str) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(labels))
    res = run("render", "-f", EXAMPLE_8B, "--node-labels", str(nodes))
    assert res.exit_code == 2, res.output
    assert want in res.output and str(nodes) in res.output


def test_render_natural_and_long_names_give_valid_objects() -> None:
    from slo_operator.render.names import ANNOTATION_SERVICE_NAME, is_dns1035_label, is_label_value

    for name in ("llama-3.1-8b", "a" * 253):
        docs = _example_docs()
        docs[1]["metadata"]["name"] = name
        docs[0]["metadata"]["name"] = docs[1]["spec"]["sloPolicyRef"]["name"] = "p" * 253
        res = run("render", "-f", "-", input=yaml.safe_dump_all(docs))
        assert res.exit_code == 0, res.output
        objs = list(yaml.safe_load_all(res.stdout))
        assert [o["kind"] for o in objs] == ["Deployment", "Service", "PodDisruptionBudget"]
        for o in objs:
            assert is_dns1035_label(o["metadata"]["name"]), o["metadata"]["name"]
            assert all(is_label_value(v) for v in o["metadata"]["labels"].values())
            assert o["metadata"]["annotations"][ANNOTATION_SERVICE_NAME] == name
            assert "ownerReferences" not in o["metadata"]  # a preview has no owner UID


def test_render_yaml_has_no_aliases() -> None:
    res = run("render", "-f", EXAMPLE_8B)
    assert res.exit_code == 0
    assert "&id" not in res.stdout and "*id" not in res.stdout


def test_render_honours_node_selector_when_choosing_a_pool(tmp_path: Path) -> None:
    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "81559", "zone": "a"}
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "81920", "zone": "b"}
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all([h100, a100]))
    docs = _example_docs()
    docs[1]["spec"]["hardware"] = {"nodeSelector": {"zone": "b"}}
    res = run("render", "-f", "-", "--node-labels", str(nodes), "-o", "json",
              input=yaml.safe_dump_all(docs))
    assert res.exit_code == 0, res.output
    dep = json.loads(res.stdout)["items"][0]
    assert dep["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "b"}
    terms = dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["NVIDIA-A100-SXM4-80GB"]


def test_run_kubeconfig_option_logs_kopf_in_to_that_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kopf

    for var in ("KUBECONFIG", "SLO_KUBECONFIG"):
        monkeypatch.setenv(var, "unset")  # so the test's end restores the variable
        monkeypatch.delenv(var)
    seen: dict[str, Any] = {}
    monkeypatch.setattr(kopf, "run", lambda **kw: seen.update(kw))
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://10.1.2.3:6443",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "abc123"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    res = run("run", "--kubeconfig", str(cfg), "--liveness", "")
    assert res.exit_code == 0, res.output
    logins = [h.fn for h in kopf.get_default_registry()._activities.get_all_handlers()
              if h.fn.__name__ == "login"]
    info = logins[-1]()
    assert (info.server, info.token, info.insecure) == ("https://10.1.2.3:6443", "abc123", True)
    assert "KUBECONFIG" not in os.environ, "the option is not written to the environment"


# --- slo-operator activator -------------------------------------------------------------------
def test_activator_help_names_every_option_its_variable_and_default() -> None:
    out = CliRunner().invoke(main, ["activator", "--help"], terminal_width=200).output
    for flag, env in [("--port", "SLO_ACTIVATOR_PORT"), ("--host", "SLO_ACTIVATOR_HOST"),
                      ("--queue-per-service", "SLO_ACTIVATOR_QUEUE_PER_SERVICE"),
                      ("--timeout", "SLO_ACTIVATOR_TIMEOUT"), ("--kubeconfig", "SLO_KUBECONFIG"),
                      ("--pod-name", "POD_NAME")]:
        assert flag in out and env in out
    for default in (ACTIVATOR_PORT, DEFAULT_QUEUE_PER_SERVICE, DEFAULT_WAKE_TIMEOUT_S):
        assert f"default: {default}" in out


@pytest.mark.parametrize(("args", "env", "names"), [
    (["--timeout", "0"], {}, "--timeout"),
    ([], {"SLO_ACTIVATOR_TIMEOUT": "-3"}, "--timeout"),
    ([], {"SLO_ACTIVATOR_QUEUE_PER_SERVICE": "0"}, "--queue-per-service"),
    (["--port", "70000"], {}, "--port"),
])
def test_activator_bad_values_exit_2_naming_the_option(args: list[str], env: dict[str, str],
                                             names: str) -> None:
    result = CliRunner().invoke(main, ["activator", *args], env=env)
    assert result.exit_code == 2
    assert names in result.output


def test_activator_unreadable_kubeconfig_is_one_line_not_a_traceback() -> None:
    result = CliRunner().invoke(main, ["activator", "--kubeconfig", "/nonexistent/config"])
    assert result.exit_code == 2
    assert "cannot load the Kubernetes configuration" in result.output
    assert "Traceback" not in result.output
