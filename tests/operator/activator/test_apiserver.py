"""What the activator reads from a Service and an EndpointSlice (the watches' bodies)."""

from __future__ import annotations

from typing import Any

from slo_operator.activator.apiserver import default_address, service_route, slice_entry
from slo_operator.activator.routes import ServiceRoute
from slo_operator.api.activation import LABEL_SERVICE_NAME
from slo_operator.render.names import ANNOTATION_SERVICE_NAME
from slo_runtime.contract import LABEL_SERVICE


def _slice(endpoints: list[dict[str, Any]], port_name: str = "http") -> dict[str, Any]:
    return {"metadata": {"name": "chat-abcde", "namespace": "team-a",
                         "labels": {LABEL_SERVICE_NAME: "chat"}},
            "ports": [{"name": port_name, "port": 8000}], "endpoints": endpoints}


def test_slice_lists_ready_and_unset_endpoints_not_unready_ones() -> None:
    entry = slice_entry(_slice([
        {"addresses": ["10.0.0.2"], "conditions": {"ready": True}},
        {"addresses": ["10.0.0.1"], "conditions": {}},
        {"addresses": ["10.0.0.3"], "conditions": {"ready": False}},
    ]))
    assert entry == ("team-a", "chat", "chat-abcde",
                     ("http://10.0.0.1:8000", "http://10.0.0.2:8000"))


def test_slice_without_the_http_port_lists_nothing() -> None:
    entry = slice_entry(_slice([{"addresses": ["10.0.0.1"]}], port_name="metrics"))
    assert entry == ("team-a", "chat", "chat-abcde", ())


def test_slice_of_no_service_is_ignored() -> None:
    assert slice_entry({"metadata": {"name": "x", "namespace": "team-a"}}) is None


def test_address_hook_and_ipv6() -> None:
    assert default_address("fd00::5", 8000) == "http://[fd00::5]:8000"
    entry = slice_entry(_slice([{"addresses": ["10.0.0.1"]}]),
                        lambda ip, port: f"http://127.0.0.1:{port + 1}")
    assert entry is not None and entry[3] == ("http://127.0.0.1:8001",)


def test_service_route_takes_the_full_name_from_the_annotation() -> None:
    body = {"metadata": {"name": "chat-v2-f5101bcf", "namespace": "team-a",
                         "labels": {LABEL_SERVICE: "chat-v2-f5101bcf"},
                         "annotations": {ANNOTATION_SERVICE_NAME: "chat.v2"}},
            "spec": {"clusterIP": "10.96.0.7"}}
    assert service_route(body) == ServiceRoute("team-a", "chat-v2-f5101bcf", "chat.v2",
                                               "10.96.0.7")
    assert service_route({"metadata": {"name": "other", "namespace": "team-a"}}) is None
