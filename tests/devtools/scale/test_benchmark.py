"""The scale benchmark's pure parts: layout, parsing of counters, logs and /proc."""

from __future__ import annotations

from slo_devtools.scale import benchmark as b

API_METRICS = """\
# HELP apiserver_request_total x
apiserver_request_total{code="200",resource="inferenceservices",subresource="status",\
verb="PATCH"} 12
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 99
apiserver_request_total{code="200",resource="pods",subresource="",verb="PATCH"} 3
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 50
apiserver_request_total{code="200",resource="deployments",subresource="",verb="WATCH"} 4
apiserver_request_total{code="201",resource="events",subresource="",verb="POST"} 2
apiserver_request_total{code="200",resource="events",subresource="",verb="POST"} 1
"""


def test_layout_spreads_services_over_50_namespaces_and_20_policies() -> None:
    rows = b.layout(1000)
    assert len(rows) == 1000 and len({r[1] for r in rows}) == 1000
    assert len({r[0] for r in rows}) == 50
    assert len({r[2] for r in rows}) == 20
    assert len(b.layout(10)) == 10 and len({r[0] for r in b.layout(10)}) == 10
    pols, svcs = b.manifests(100)
    # One policy object per namespace; every service refers to one in its namespace.
    have = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pols}
    for s in svcs:
        assert (s["metadata"]["namespace"], s["spec"]["sloPolicyRef"]["name"]) in have


def test_fleet_has_room_for_every_replica() -> None:
    for n in (10, 100, 1000):
        (group,) = b.fleet(n)
        room = group.count * min(group.type.gpus, int(group.type.pods))
        assert room >= 2 * n


def test_request_counts_keep_the_operators_kinds_only() -> None:
    counts = b.request_counts(b.parse_metrics(API_METRICS))
    assert counts == {("PATCH", "inferenceservices", "status"): 12,
                      ("PATCH", "pods", ""): 3, ("POST", "events", ""): 3}


def test_total_matches_labels() -> None:
    samples = b.parse_metrics(
        'slo_operator_periodic_passes_total{result="ok"} 7.0\n'
        'slo_operator_periodic_passes_total{result="error"} 1.0\n'
        "plain 2\n")
    assert b.total(samples, "slo_operator_periodic_passes_total", result="ok") == 7.0
    assert b.total(samples, "slo_operator_periodic_passes_total") == 8.0
    assert b.total(samples, "plain") == 2.0


def test_pass_lines_and_durations() -> None:
    log = ("2026-12-03 15:17:14,500 INFO slo_operator.handlers.periodic: "
           "Finished periodic pass 2: 10 objects applied or patched\n"
           "2026-12-03 15:17:14,600 INFO kopf.objects: Handler 'x' succeeded.\n"
           "2026-12-03 15:17:18,000 INFO slo_operator.handlers.periodic: "
           "Finished periodic pass 3: 0 objects applied or patched\n")
    lines = b.pass_lines(log)
    assert [(n, w) for _, n, w in lines] == [(2, 10), (3, 0)]
    (d,) = b.pass_durations(lines, interval=2.0)
    assert abs(d - 1.5) < 1e-6


def test_proc_parsing() -> None:
    stat = "1234 (python3 x) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0"
    assert b.cpu_seconds(stat, 100) == 3.0
    assert b.rss_mb("Name: x\nVmRSS:\t  102400 kB\n") == 104.8576


def test_reconciled_needs_generation_and_both_conditions() -> None:
    def svc(gen: int, observed: int, types: tuple[str, ...]) -> dict[str, object]:
        return {"metadata": {"generation": gen},
                "status": {"observedGeneration": observed,
                           "conditions": [{"type": t} for t in types]}}
    items = [svc(1, 1, ("Ready", "Progressing")), svc(2, 1, ("Ready", "Progressing")),
             svc(1, 1, ("Ready",)), {"metadata": {"generation": 1}}]
    assert b.reconciled(items) == 1


def test_markdown_has_a_row_per_result() -> None:
    r = b.Result(n=10, namespaces=10, policies=10, nodes=2, interval=2.0, workers=8,
                 reconciled_s=6.0, pass_s=[0.8, 1.0], requests_per_pass={"PATCH/pods": 1.0})
    text = b.markdown([r])
    assert text.count("\n| 10 |") == 1 and "PATCH/pods 1.0" in text


def test_changed_paths() -> None:
    a = {"observed": {"time": 1, "e2eMs": 400}, "control": {"x": [1]}, "replicas": 1}
    b = {"observed": {"time": 2, "e2eMs": 400}, "control": {"x": [1, 2]}, "replicas": 1}
    assert b_paths(a, b) == ["control.x", "observed.time"]


def b_paths(a: object, b_: object) -> list[str]:
    return b.changed_paths(a, b_)
