"""The gateway's API surface is computed from the descriptor: the REST route table and the
JSON-RPC method table cover exactly the service's methods, and a method added to the
descriptor appears on both bindings with no gateway change. Plus the pure pieces:
template matching, query transcoding, conditional card requests, header forwarding."""

from __future__ import annotations

import httpx
import pytest
from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2, message_factory

from gateway.app import build_app
from gateway.card import if_none_match_hits
from gateway.invoker import InProcessInvoker
from gateway.jsonrpc import method_table
from gateway.params import forwarded_metadata
from gateway.rest import build_router
from gateway.routes import Router, route_table, with_post_aliases
from gateway.transcode import build_request, to_json_dict
from gen import a2a_pb2 as pb
from service.api import A2AApi
from service.protocol.errors import A2AError

SERVICE = pb.DESCRIPTOR.services_by_name["A2AService"]


def _rules(method) -> list[http_pb2.HttpRule]:
    rule = method.GetOptions().Extensions[annotations_pb2.http]
    return [rule, *rule.additional_bindings]


def test_route_table_is_exactly_the_descriptor_rules():
    routes = route_table(SERVICE)
    expected = sorted(
        (r.WhichOneof("pattern").upper(), getattr(r, r.WhichOneof("pattern")), r.body, m.name)
        for m in SERVICE.methods
        for r in _rules(m)
    )
    assert sorted((r.http_method, r.template, r.body, r.method.name) for r in routes) == expected
    assert {r.method.name for r in routes} == {m.name for m in SERVICE.methods}
    # Every RPC has its tenant-prefixed twin.
    for method in SERVICE.methods:
        templates = [r.template for r in routes if r.method is method]
        assert any(t.startswith("/{tenant}/") for t in templates), method.name


def test_jsonrpc_table_is_the_service_methods():
    table = method_table(SERVICE)
    assert set(table) == {m.name for m in SERVICE.methods}
    for name, (method, cls) in table.items():
        assert method.name == name and cls.DESCRIPTOR is method.input_type


def test_every_rpc_has_an_api_method():
    assert all(callable(getattr(A2AApi, m.name, None)) for m in SERVICE.methods)


def test_router_matches_templates_verbs_and_tenants():
    router = Router(with_post_aliases(route_table(SERVICE)))

    def match(method, path):
        found = router.match(method, path)
        return (found.route.method.name, found.path_vars) if found else None

    assert match("POST", "/message:send") == ("SendMessage", {})
    assert match("POST", "/acme/message:stream") == ("SendStreamingMessage", {"tenant": "acme"})
    assert match("GET", "/tasks/t1") == ("GetTask", {"id": "t1"})
    assert match("GET", "/tasks/a%2Fb") == ("GetTask", {"id": "a/b"})
    assert match("GET", "/tasks/ns:7") == ("GetTask", {"id": "ns:7"})
    assert match("POST", "/tasks/ns:7:cancel") == ("CancelTask", {"id": "ns:7"})
    assert match("GET", "/acme/tasks/t1:subscribe") == (
        "SubscribeToTask",
        {"tenant": "acme", "id": "t1"},
    )
    assert match("POST", "/tasks/t1:subscribe") == (
        "SubscribeToTask",
        {"id": "t1"},
    )  # a2a-sdk's verb
    assert match("DELETE", "/acme/tasks/t1/pushNotificationConfigs/c1") == (
        "DeleteTaskPushNotificationConfig",
        {"tenant": "acme", "task_id": "t1", "id": "c1"},
    )
    assert match("GET", "/extendedAgentCard") == ("GetExtendedAgentCard", {})
    assert match("GET", "/tasks/") is None  # a variable never matches an empty segment
    assert match("GET", "/a/b/c/d") is None
    assert router.allowed_methods("/tasks/t1/pushNotificationConfigs") == ["POST", "GET"]


def _with_extra_method() -> tuple[object, type]:
    """A copy of the contract with one more RPC (and HTTP rule), in a private pool."""
    pool = descriptor_pool.DescriptorPool()
    for dep in pb.DESCRIPTOR.dependencies:
        _add_with_deps(pool, dep)
    file = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file)
    file.name = "extra/a2a_extra.proto"
    ping = file.message_type.add(name="PingRequest")
    ping.field.add(name="tenant", number=1, type=9, label=1, json_name="tenant")
    ping.field.add(name="echo_text", number=2, type=9, label=1, json_name="echoText")
    ping.field.add(name="times", number=3, type=5, label=3, json_name="times")
    service = next(s for s in file.service if s.name == "A2AService")
    rpc = service.method.add(
        name="Ping", input_type=".lf.a2a.v1.PingRequest", output_type=".lf.a2a.v1.PingRequest"
    )
    rule = http_pb2.HttpRule(get="/ping/{echo_text=*}")
    rule.additional_bindings.add(get="/{tenant}/ping/{echo_text=*}")
    rpc.options.Extensions[annotations_pb2.http].CopyFrom(rule)
    pool.Add(file)
    fd = pool.FindFileByName("extra/a2a_extra.proto")
    return fd.services_by_name["A2AService"], message_factory.GetMessageClass(
        fd.message_types_by_name["PingRequest"]
    )


def _add_with_deps(pool, fd):
    try:
        pool.FindFileByName(fd.name)
        return
    except KeyError:
        pass
    for dep in fd.dependencies:
        _add_with_deps(pool, dep)
    proto = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(proto)
    pool.Add(proto)


class _ApiWithPing(A2AApi):
    def __init__(self):  # no engine needed: only Ping is called
        pass

    async def Ping(self, request, call):
        return request


async def test_a_new_rpc_appears_on_both_bindings_without_gateway_changes():
    service, ping_cls = _with_extra_method()
    assert "Ping" in {r.method.name for r in route_table(service)}
    assert "Ping" in method_table(service)
    invoker = InProcessInvoker(_ApiWithPing(), service)
    app = build_app(
        invoker=invoker, service=service, card=pb.AgentCard(name="x"), is_serving=lambda: True
    )
    headers = {"A2A-Version": "1.0"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw"
    ) as client:
        r = await client.get("/acme/ping/hello", params={"times": ["1", "2"]}, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json() == {"tenant": "acme", "echoText": "hello", "times": [1, 2]}
        r = await client.post(
            "/", json={"jsonrpc": "2.0", "id": 1, "method": "Ping", "params": {"echoText": "hi"}}
        )
        assert r.json()["result"] == {"echoText": "hi", "tenant": ""}


def test_an_api_without_the_method_fails_at_startup():
    service, _ = _with_extra_method()
    with pytest.raises(TypeError, match="Ping"):
        InProcessInvoker(object.__new__(A2AApi), service)


def test_rules_naming_missing_fields_fail_at_startup():
    file = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file)
    file.name = "extra/a2a_broken.proto"
    service = next(s for s in file.service if s.name == "A2AService")
    rule = service.method[2].options.Extensions[annotations_pb2.http]  # GetTask
    rule.additional_bindings.add(get="/v9/{nope=*}")
    pool = descriptor_pool.DescriptorPool()
    for dep in pb.DESCRIPTOR.dependencies:
        _add_with_deps(pool, dep)
    pool.Add(file)
    broken = pool.FindFileByName("extra/a2a_broken.proto").services_by_name["A2AService"]
    with pytest.raises(ValueError, match="nope"):
        build_router(broken)


# ------------------------------------------------------------------------------ transcoding


def test_query_parameters_follow_grpc_gateway_rules():
    config = build_request(
        pb.SendMessageConfiguration,
        query=[
            ("acceptedOutputModes", "text/plain"),
            ("accepted_output_modes", "application/json"),
            ("returnImmediately", "true"),
            ("history_length", "3"),
        ],
    )
    assert list(config.accepted_output_modes) == ["text/plain", "application/json"]
    assert config.return_immediately and config.history_length == 3
    nested = build_request(
        pb.SendMessageRequest,
        query=[("configuration.historyLength", "2"), ("message.messageId", "m1")],
    )
    assert nested.configuration.history_length == 2 and nested.message.message_id == "m1"
    listed = build_request(
        pb.ListTasksRequest,
        query=[
            ("statusTimestampAfter", "2024-05-06T07:08:09.5+02:00"),
            ("status", "TASK_STATE_WORKING"),
            ("A2A-Version", "1.0"),
        ],
    )
    assert listed.status_timestamp_after.ToJsonString() == "2024-05-06T05:08:09.500Z"
    assert listed.status == pb.TASK_STATE_WORKING
    with pytest.raises(A2AError) as info:
        build_request(pb.SendMessageRequest, query=[("message", "x")])
    assert info.value.field_violations[0][0] == "message"


def test_rendering_keeps_top_level_scalars():
    assert to_json_dict(pb.ListTasksResponse()) == {
        "nextPageToken": "",
        "pageSize": 0,
        "totalSize": 0,
    }
    assert to_json_dict(empty_pb2.Empty()) == {}
    task = to_json_dict(pb.Task(id="t"))
    assert "history" not in task and "artifacts" not in task  # only scalars are forced


@pytest.mark.parametrize(
    "header,hit",
    [
        ('"abc"', True),
        ('W/"abc"', True),
        ('"x", "abc"', True),
        ('"x",W/"abc"', True),
        ("*", True),
        ('"x"', False),
        ('"abcd"', False),
        ("", False),
        ('"a,b", "abc"', True),
        ('W/"x", "y"', False),
    ],
)
def test_if_none_match(header, hit):
    assert if_none_match_hits(header, '"abc"') is hit


def test_forwarded_metadata():
    headers = [
        (b"A2A-Version", b"1.0"),
        (b"A2A-Extensions", b"urn:a"),
        (b"A2A-Extensions", b"urn:b"),
        (b"Authorization", b"Bearer t"),
        (b"X-API-Key", b"k"),
        (b"Grpc-Metadata-Trace-Id", b"42"),
        (b"Cookie", b"secret"),
        (b"Content-Type", b"application/json"),
    ]
    assert forwarded_metadata(headers, {}) == {
        "a2a-version": "1.0",
        "a2a-extensions": "urn:a,urn:b",
        "authorization": "Bearer t",
        "x-api-key": "k",
        "trace-id": "42",
    }
    assert forwarded_metadata([], {"A2A-Version": "1.0"}) == {"a2a-version": "1.0"}
