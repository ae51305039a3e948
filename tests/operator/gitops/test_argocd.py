"""The Argo CD health checks, run in gopher-lua (the Lua 5.1 dialect Argo CD embeds).

Each case is a sample object as the API server returns it; the Lua sees it as the global
``obj`` exactly as Argo CD passes it (maps as tables, lists 1-based, numbers as floats).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.tools import ROOT, glua

HEALTH = ROOT / "deploy" / "argocd" / "health"
CM = ROOT / "deploy" / "argocd" / "argocd-cm.yaml"
PREFIX = "resource.customizations.health.inference.slo-operator.io_"
KEYS = {"inferenceservice.lua": f"{PREFIX}InferenceService", "slopolicy.lua": f"{PREFIX}SLOPolicy"}


def lua_literal(value: Any) -> str:
    """A Lua table constructor for JSON-like data (Argo CD's own conversion, in Lua text)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(float(value))
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid Lua escapes for this text
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{json.dumps(k)}] = {lua_literal(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(type(value))


def run_health(script: Path, obj: dict[str, Any], tmp_path: Path) -> tuple[str, str]:
    driver = tmp_path / "driver.lua"
    driver.write_text(
        f"obj = {lua_literal(obj)}\n"
        f"local hs = dofile({json.dumps(str(script))})\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    proc = subprocess.run([str(glua()), str(driver)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    status, _, message = proc.stdout.partition("\n")
    return status, message


def cond(ctype: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2}


def obj(kind: str, status: dict[str, Any] | None, generation: int = 2) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": "inference.slo-operator.io/v1alpha1", "kind": kind,
        "metadata": {"name": "x", "namespace": "team-a", "generation": generation},
        "spec": {},
    }
    if status is not None:
        out["status"] = status
    return out


def isvc(*conds: dict[str, Any], observed: int | None = 2, generation: int = 2,
         **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conds), **extra}
    if observed is not None:
        status["observedGeneration"] = observed
    return obj("InferenceService", status, generation)


ISVC_CASES = [
    pytest.param(obj("InferenceService", None), "Missing", "has not reconciled",
                 id="no-status-yet-is-missing"),
    pytest.param(isvc(), "Missing", "No Ready condition", id="status-without-conditions"),
    pytest.param(obj("InferenceService", {"kopf": {"progress": {}}}), "Missing", "",
                 id="only-kopf-bookkeeping-is-missing"),
    pytest.param(isvc(cond("Ready", "True", "Available", "3/3 replicas ready"), observed=1),
                 "Progressing", "generation 2", id="spec-change-not-observed-yet"),
    pytest.param(isvc(cond("Ready", "True", "Available", "3/3 replicas ready"), observed=None),
                 "Progressing", "generation 2", id="no-observed-generation"),
    pytest.param(isvc(cond("Ready", "True", "Available", "3/3 replicas ready"),
                      cond("SLOCompliant", "True", "Met")),
                 "Healthy", "3/3 replicas ready", id="ready-and-compliant"),
    pytest.param(isvc(cond("Ready", "True", "ScaledToZero", "Scaled to zero replicas")),
                 "Healthy", "Scaled to zero", id="scaled-to-zero-is-healthy"),
    pytest.param(isvc(cond("Ready", "True", "Available", "2/2 replicas ready"),
                      cond("SLOCompliant", "False", "Violated", "p99 950ms > 800ms")),
                 "Healthy", "SLO not met: p99 950ms", id="slo-miss-while-scaling-is-healthy"),
    pytest.param(isvc(cond("Ready", "True", "Available", "8/8 replicas ready"),
                      cond("SLOCompliant", "False", "Violated", "p99 950ms > 800ms"),
                      cond("ScalingLimited", "True", "MaxReplicas", "at spec.scaling.max 8")),
                 "Degraded", "MaxReplicas", id="slo-miss-at-max-replicas-is-degraded"),
    pytest.param(isvc(cond("Ready", "False", "ReplicasNotReady", "1/3 replicas ready"),
                      cond("Progressing", "True", "RollingOut")),
                 "Progressing", "1/3 replicas ready", id="rolling-out"),
    pytest.param(isvc(cond("Ready", "Unknown", "AwaitingMetrics")),
                 "Progressing", "", id="ready-unknown"),
    *[
        pytest.param(isvc(cond("Ready", "False", reason, "explained")), "Degraded",
                     f"{reason}: explained", id=f"needs-action-{reason}")
        for reason in ("InvalidSpec", "PolicyNotFound", "PolicyInvalid", "NoMatchingNodes",
                       "UnknownGPUProduct", "EngineInfeasible", "InsufficientGPUs",
                       "PodsPending")
    ],
]


@pytest.mark.parametrize(("sample", "want_status", "want_message"), ISVC_CASES)
def test_inference_service_health(sample: dict[str, Any], want_status: str, want_message: str,
                                  tmp_path: Path) -> None:
    status, message = run_health(HEALTH / "inferenceservice.lua", sample, tmp_path)
    assert status == want_status
    assert want_message in message


def policy(*conds: dict[str, Any], observed: int | None = 2, **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conds), **extra}
    if observed is not None:
        status["observedGeneration"] = observed
    return obj("SLOPolicy", status)


POLICY_CASES = [
    pytest.param(obj("SLOPolicy", None), "Missing", "not validated", id="no-status-yet"),
    pytest.param(policy(cond("Ready", "True", "Valid"), observed=1), "Progressing",
                 "generation 2", id="spec-change-not-observed"),
    pytest.param(policy(cond("Ready", "False", "InvalidSpec", "spec.window: bad")),
                 "Degraded", "InvalidSpec: spec.window: bad", id="invalid-spec"),
    pytest.param(policy(cond("Ready", "True", "Valid"), boundCount=3, attainment=0.995),
                 "Healthy", "3 services bound; attainment 0.9950", id="valid-with-services"),
    pytest.param(policy(cond("Ready", "True", "Valid")), "Healthy", "0 services bound",
                 id="valid-unbound"),
    pytest.param(policy(cond("Ready", "Unknown", "Checking")), "Progressing", "",
                 id="ready-unknown"),
]


@pytest.mark.parametrize(("sample", "want_status", "want_message"), POLICY_CASES)
def test_slo_policy_health(sample: dict[str, Any], want_status: str, want_message: str,
                           tmp_path: Path) -> None:
    status, message = run_health(HEALTH / "slopolicy.lua", sample, tmp_path)
    assert status == want_status
    assert want_message in message


def test_argocd_cm_snippet_embeds_the_tested_scripts() -> None:
    cm = yaml.safe_load(CM.read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    for file, key in KEYS.items():
        assert cm["data"][key] == (HEALTH / file).read_text(), (
            f"{CM} differs from {file}: run `python -m slo_operator.gitops.argocd`")


def test_scripts_use_only_libraries_argo_cd_opens() -> None:
    # Argo CD's VM opens base, table, string and math only (no os, io, require).
    for file in KEYS:
        text = (HEALTH / file).read_text()
        for banned in ("os.", "io.", "require", "debug."):
            assert banned not in text, f"{file} uses {banned}"
