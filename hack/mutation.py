#!/usr/bin/env python3
"""Mutation testing of the pure packages with mutmut 2.x (outside CI; see docs/mutation-testing.md).

    python hack/mutation.py control/law.py            # run one module
    python hack/mutation.py --package engine          # every module of a package
    python hack/mutation.py --summary                 # counts of every module run so far
    python hack/mutation.py --survivors control/law.py  # the surviving mutants as diffs

Each module runs in its own copy of the repository under $MUTATION_WORK (default
/tmp/slo-mutation/<module>), refreshed from this checkout before every run, so mutmut never
edits the working tree and several modules can run at once. The runner is the unit tests
named in TESTS below, with every failure (collection errors and hangs included) reported as
exit status 1: mutmut 2.x counts any other status as "tests pass".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "operator" / "slo_operator"
WORK = Path(os.environ.get("MUTATION_WORK", "/tmp/slo-mutation"))
TOOLS = Path(os.environ.get("MUTATION_TOOLS", "/tmp/slo-mutation/tools"))
PURE_PACKAGES = ("api", "slo", "hardware", "engine", "control", "render")

U = "tests/unit"
C = f"{U}/control"
S = f"{U}/slo"
ENGINE = (f"{U}/test_engine.py", f"{U}/test_plan.py", f"{U}/test_vllm_args.py",
          f"{U}/test_profiles.py", f"{U}/test_policy.py", f"{U}/test_render.py",
          f"{U}/test_render_runtime_contract.py")
HARDWARE = (f"{U}/test_hardware.py", f"{U}/test_engine.py", f"{U}/test_plan.py")
LAW = (f"{C}/test_control_decide.py", f"{C}/test_control_closed_loop.py",
       f"{C}/test_control_properties.py", f"{C}/test_law_edges.py",
       f"{C}/test_tuning_documented.py")

# module (relative to operator/slo_operator) -> the unit tests that exercise it. A module not
# listed runs every test file under tests/unit that names its package.
TESTS: dict[str, tuple[str, ...]] = {
    "slo/histogram.py": (f"{S}/test_slo_histogram.py", f"{S}/test_slo_histogram_edges.py",
                         f"{U}/sim/test_sim_metrics.py", f"{U}/ship/test_rules.py"),
    "slo/promql.py": (f"{S}/test_slo_promql.py", f"{S}/test_slo_promql_edges.py",
                      f"{S}/test_slo_signals.py", f"{S}/test_slo_docs.py",
                      f"{S}/test_slo_signals_properties.py"),
    "slo/signals.py": (f"{S}/test_slo_signals.py", f"{S}/test_slo_signals_edges.py",
                       f"{S}/test_slo_signals_properties.py"),
    "slo/evaluate.py": (f"{S}/test_slo_evaluate.py", f"{S}/test_slo_evaluate_edges.py",
                        f"{U}/reconcile/test_status.py"),
    # The fast, targeted tests first: most mutants die there, in a second or two.
    "control/law.py": (f"{C}/test_law_mutants.py", f"{C}/test_control_decide.py",
                       f"{C}/test_law_edges.py", f"{C}/test_tuning_documented.py",
                       f"{C}/test_control_closed_loop.py", f"{C}/test_control_properties.py"),
    "control/policy.py": (f"{C}/test_policy_mutants.py", f"{C}/test_replica_bounds.py", *LAW),
    "control/capacity.py": (f"{C}/test_control_capacity.py", f"{C}/test_capacity_edges.py",
                            f"{C}/test_control_decide.py", f"{C}/test_control_closed_loop.py"),
    "control/arbitrate.py": (f"{C}/test_arbitrate_mutants.py", f"{C}/test_control_arbitrate.py",
                             f"{C}/test_arbitrate_edges.py", f"{C}/test_control_properties.py"),
    "control/state.py": (f"{C}/test_control_state.py", f"{C}/test_state_edges.py",
                         f"{C}/test_control_decide.py"),
    "control/placement.py": (f"{C}/test_placement_mutants.py", f"{C}/test_placement.py",
                             f"{U}/reconcile/test_placing.py"),
    "control/prices.py": (f"{C}/test_prices_mutants.py", f"{C}/test_placement.py",
                          f"{U}/reconcile/test_placing.py"),
    "control/reasons.py": (f"{S}/test_slo_docs.py",),
    "control/__init__.py": (f"{C}/test_init_mutants.py",),
    "render/names.py": (f"{U}/test_names.py", f"{U}/test_render.py"),
    "render/objects.py": (f"{U}/test_render.py", f"{U}/test_render_runtime_contract.py"),
}
# Engine rules: their own boundary tests kill what ENGINE kills (survivors checked against it).
for _m in ("precision", "parallel", "batching", "overrides"):
    TESTS[f"engine/{_m}.py"] = (f"{U}/test_{_m}_mutants.py",)
# The planner's own modules: their boundary tests first, then the suite of plans they feed.
for _m, _suite in (("plan", "engine"), ("sizing", "engine"), ("limits", "engine"),
                   ("types", "engine"), ("profiles", "profiles"), ("vllm_args", "vllm_args")):
    TESTS[f"engine/{_m}.py"] = (f"{U}/test_{_m}_mutants.py", f"{U}/test_{_suite}.py")
TESTS["engine/fields.py"] = (f"{U}/test_fields_mutants.py",)
TESTS["engine/__init__.py"] = (f"{U}/test_engine_init_mutants.py",)
for _m in ("precision", "parallel", "batching", "overrides", "plan", "sizing", "limits",
           "profiles", "types", "vllm_args", "fields", "__init__"):
    TESTS.setdefault(f"engine/{_m}.py", ENGINE)
for _m in ("labels", "catalogue"):
    TESTS.setdefault(f"hardware/{_m}.py", (f"{U}/test_{_m}_mutants.py", *HARDWARE))
TESTS.setdefault("hardware/__init__.py", (f"{U}/test_hardware_init_mutants.py", *HARDWARE))
# api: the CRD staleness test first (it holds every schema fact); test_<stem>_mutants.py joins
# (and alone covers the value modules).
TESTS.setdefault("api/models.py", (f"{U}/test_crds.py", f"{U}/test_api.py"))
TESTS.setdefault("api/crd.py", (f"{U}/test_crds.py",))
TESTS.setdefault("api/errors.py", (f"{U}/test_errors_mutants.py",))
TESTS.setdefault("api/observe.py", (f"{U}/test_observe_mutants.py",))
TESTS.setdefault("api/cluster.py", (f"{U}/test_cluster_mutants.py",))
TESTS.setdefault("api/conditions.py", (f"{U}/test_conditions.py",))

RUNNER = """#!/bin/bash
timeout -k 5 {timeout} "{python}" -m pytest -x -q -p no:cacheprovider "$@" || exit 1
"""


# Runtime modules: their tests are asynchronous and need the asyncio plugin, which the
# runner does not autoload.
RUNTIME_TESTS: dict[str, tuple[str, ...]] = {
    "admission.py": (f"{U}/runtime/test_admission_mutants.py",
                     f"{U}/runtime/test_runtime_gateway.py"),
    "contract.py": (f"{U}/runtime/test_contract.py", f"{U}/test_render_runtime_contract.py",
                    f"{U}/test_vllm_args.py"),
}
PLUGINS = ("-p", "pytest_asyncio.plugin")


def source(module: str) -> str:
    """The file a module name stands for: operator/slo_operator/<module>, or a runtime path."""
    if module.startswith("runtime/"):
        return module
    return f"operator/slo_operator/{module}"


def tests_for(module: str) -> list[str]:
    """The test files a module's mutants run against, those that exist in this checkout."""
    listed = TESTS.get(module) or RUNTIME_TESTS.get(module.removeprefix("runtime/slo_runtime/"))
    if listed is None:
        package = module.split("/")[0]
        needle = f"slo_operator.{package}"
        listed = tuple(str(p.relative_to(ROOT)) for p in sorted((ROOT / U).rglob("test_*.py"))
                       if needle in p.read_text())
    extra = sorted(str(p.relative_to(ROOT)) for p in (ROOT / U).rglob("test_*mutants*.py")
                   if Path(module).stem in p.name)
    return [t for t in dict.fromkeys((*listed, *extra)) if (ROOT / t).exists()]


def plugins_for(module: str) -> tuple[str, ...]:
    """Pytest plugins a module's tests need (autoloading is off in the runner)."""
    return PLUGINS if module.startswith("runtime/") else ()


def workdir(module: str) -> Path:
    """The module's own copy of the repository."""
    return WORK / module.replace("/", "_").removesuffix(".py")


def refresh(work: Path) -> None:
    """Copy the checkout's tracked and new files over the work copy (its mutmut cache stays)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src, dst = ROOT / rel, work / rel
        if not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def ensure_tools() -> None:
    """Install mutmut 2.x into its own folder (it is not a project dependency)."""
    if (TOOLS / "mutmut").is_dir():
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(TOOLS),
                    "mutmut<3"], check=True)


def env_for(work: Path) -> dict[str, str]:
    """Imports from the work copy, no bytecode (stale .pyc gives false survivors), no plugins."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(work / "operator"), str(work / "runtime"), str(work), str(TOOLS)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def run(module: str, timeout: int) -> int:
    """Run mutmut over one module; return its exit status."""
    if not (ROOT / source(module)).is_file():
        sys.exit(f"no module {source(module)}")
    tests = tests_for(module)
    if not tests:
        sys.exit(f"no unit tests found for {module}")
    ensure_tools()
    work = workdir(module)
    work.mkdir(parents=True, exist_ok=True)
    refresh(work)
    runner = work / "mutation-runner.sh"
    runner.write_text(RUNNER.format(timeout=timeout, python=sys.executable))
    runner.chmod(0o755)
    cmd = [sys.executable, "-m", "mutmut", "run",
           "--paths-to-mutate", source(module), "--test-time-multiplier", "10",
           "--runner", " ".join([str(runner), *plugins_for(module), *tests])]
    log = work / "mutmut.log"
    print(f"{module}: {len(tests)} test files, work copy {work}, log {log}", flush=True)
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=work, env=env_for(work), stdout=out,
                            stderr=subprocess.STDOUT).returncode
    print(json.dumps(counts(module)), flush=True)
    return rc


def counts(module: str) -> dict[str, object]:
    """Mutant statuses of one module from its mutmut cache."""
    cache = workdir(module) / ".mutmut-cache"
    out: dict[str, object] = {"module": module}
    if not cache.exists():
        return out
    with sqlite3.connect(cache) as db:
        rows = db.execute(
            "select m.status, count(*) from Mutant m join Line l on m.line = l.id "
            "join SourceFile s on l.sourcefile = s.id where s.filename = ? group by 1",
            (source(module),)).fetchall()
    status = dict(rows)
    total = sum(status.values())
    # "suspicious" is mutmut's name for a mutant the tests failed on, slowly: killed too; a
    # timeout (the runner's, or mutmut's 10 x the baseline) is a mutant that made the tests hang.
    killed = sum(status.get(k, 0) for k in ("ok_killed", "ok_suspicious", "bad_timeout"))
    out.update(total=total, killed=killed, survived=status.get("bad_survived", 0),
               timeout=status.get("bad_timeout", 0), untested=status.get("untested", 0),
               score=round(100 * killed / total, 1) if total else None)
    return out


def summary() -> None:
    """Print every module run so far and the total over them."""
    total = killed = 0
    runtime = ROOT / "runtime" / "slo_runtime"
    for module in [*sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")),
                   *sorted(str(p.relative_to(ROOT)) for p in runtime.glob("*.py"))]:
        row = counts(module)
        if "total" not in row:
            continue
        total += int(row["total"])  # type: ignore[arg-type]
        killed += int(row["killed"])  # type: ignore[arg-type]
        print(f"{module:28} {row['total']:5} mutants {row['killed']:5} killed "
              f"{row['survived']:4} survived {row['timeout']:3} timeout "
              f"{row['untested']:4} untested  {row['score']}%")
    if total:
        print(f"{'all':28} {total:5} mutants {killed:5} killed  {100 * killed / total:.1f}%")


def survivors(module: str) -> None:
    """Show each surviving mutant of a module as a diff."""
    work = workdir(module)
    env = env_for(work)
    ids = subprocess.run([sys.executable, "-m", "mutmut", "result-ids", "survived"], cwd=work,
                         env=env, capture_output=True, text=True).stdout.split()
    for mid in ids:
        subprocess.run([sys.executable, "-m", "mutmut", "show", mid], cwd=work, env=env)


def main() -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*", help="paths under operator/slo_operator")
    ap.add_argument("--package", choices=PURE_PACKAGES, action="append", default=[])
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--survivors", action="store_true")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per mutant's test run")
    args = ap.parse_args()
    modules = list(args.modules)
    for package in args.package:
        modules += sorted(str(p.relative_to(PKG)) for p in (PKG / package).glob("*.py"))
    if args.summary:
        summary()
        return 0
    if args.survivors:
        for module in modules:
            survivors(module)
        return 0
    rc = 0
    for module in modules:
        rc = max(rc, run(module, args.timeout))
    return rc


if __name__ == "__main__":
    sys.exit(main())
