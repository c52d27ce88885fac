"""Callback URL safety: hostile URLs are refused at create time with a clear InvalidParams
error (on CreateTaskPushNotificationConfig and inside SendMessage), and connections are
pinned to the checked addresses."""

from __future__ import annotations

import grpc
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.push.ssrf import CallbackPolicy, CallbackRefused, CallbackUnresolvable
from service.push.transport import CallbackClient
from tests.conftest import user_message
from tests.grpc_util import error_details, expect_error
from tests.push_util import Receiver, eventually

# A test-local resolver: what these names "resolve" to.
DNS = {
    "public.example.com": ["93.184.216.34"],
    "internal.example.com": ["10.0.0.5"],
    "rebind.example.com": ["93.184.216.34", "127.0.0.1"],  # one bad address is enough
    "v6private.example.com": ["2606:4700::1111", "fd00::1"],
    "metadata.example.com": ["169.254.169.254"],
    "mapped.example.com": ["::ffff:10.0.0.1"],
    "127.0.0.1.nip.io": ["127.0.0.1"],
    "cgnat.example.com": ["100.100.100.100"],
    "hook.test.example": ["127.0.0.1"],
}


async def fake_resolver(host: str, port: int) -> list[str]:
    if host not in DNS:
        raise OSError(f"no such host {host}")
    return DNS[host]


HOSTILE = [
    # IPv4 loopback in every spelling
    "http://127.0.0.1/hook",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://0x7f.1/",
    "http://１２７．０．０．１/",  # full-width digits and dots
    "http://%31%32%37.0.0.1/",
    # other special IPv4 ranges
    "http://0/",
    "http://0.0.0.0:8080/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata service
    "http://100.64.0.1/",  # CGNAT
    "http://224.0.0.1/",  # multicast
    "http://240.0.0.1/",  # reserved
    "http://255.255.255.255/",
    "http://198.18.0.1/",  # benchmarking
    "http://256.0.0.1/",  # malformed
    # IPv6 forms
    "http://[::1]/",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[64:ff9b::10.0.0.1]/",  # NAT64 of a private address
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata address
    "http://[2002:7f00:1::]/",  # 6to4 of loopback
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://[fd00:ec2::254]/",  # AWS IPv6 metadata
    "http://[ff02::1]/",
    "https://[::ffff:192.168.0.1]:8443/",
    # names
    "http://localhost/",
    "http://LOCALHOST./",
    "http://api.localhost/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://printer.local/",
    "http://intranet/",  # single label: resolved through search domains
    "http://internal.example.com/",  # resolves to a private address
    "http://rebind.example.com/",
    "http://v6private.example.com/",
    "http://metadata.example.com/",
    "http://mapped.example.com/",
    "http://127.0.0.1.nip.io/",
    "http://cgnat.example.com/",
    # not http(s), or smuggling
    "ftp://public.example.com/",
    "file:///etc/passwd",
    "gopher://127.0.0.1:70/",
    "http://user:pass@public.example.com/",
    "http://public.example.com@127.0.0.1/",
    "http:///nohost",
    "http://public.example.com:0/",
    "http://public.example.com\\@127.0.0.1/",
]


@pytest.mark.parametrize("url", HOSTILE)
async def test_policy_refuses(url):
    policy = CallbackPolicy(resolver=fake_resolver)
    with pytest.raises(CallbackRefused) as info:
        await policy.check(url)
    assert not isinstance(info.value, CallbackUnresolvable), info.value
    assert str(info.value)


@pytest.mark.parametrize(
    "url, addresses",
    [
        ("https://public.example.com/hook", ("93.184.216.34",)),
        ("http://93.184.216.34:8080/x", ("93.184.216.34",)),
        ("https://[2606:4700::1111]/", ("2606:4700::1111",)),
        ("http://[64:ff9b::5db8:d822]/", ("64:ff9b::5db8:d822",)),  # NAT64 of a public address
    ],
)
async def test_policy_accepts_public_targets(url, addresses):
    target = await CallbackPolicy(resolver=fake_resolver).check(url)
    assert target.addresses == addresses


async def test_operator_allowlist_opens_exactly_what_it_names():
    policy = CallbackPolicy.from_lists(["hooks.corp"], ["127.0.0.1/32", "fd00:1::/64"])
    policy.resolver = lambda host, port: (
        fake_resolver(host, port) if host != "hooks.corp" else _const(["10.1.1.1"])
    )
    assert (await policy.check("http://127.0.0.1:9/")).addresses == ("127.0.0.1",)
    assert (await policy.check("http://[fd00:1::5]/")).addresses == ("fd00:1::5",)
    assert (await policy.check("http://hooks.corp/")).addresses == ("10.1.1.1",)
    assert (await policy.check("http://127.0.0.1.nip.io/")).addresses == ("127.0.0.1",)
    for url in ("http://127.0.0.2/", "http://localhost/", "http://[::1]/", "http://10.1.1.1/"):
        with pytest.raises(CallbackRefused):
            await policy.check(url)


async def _const(value):
    return value


async def test_unresolvable_is_its_own_kind():
    with pytest.raises(CallbackUnresolvable):
        await CallbackPolicy(resolver=fake_resolver).check("https://nowhere.example.org/")


async def test_connection_is_pinned_to_the_checked_address():
    """The client connects to the address the policy checked, never resolving again; the
    Host header keeps the name."""
    receiver = await Receiver().start()
    try:
        policy = CallbackPolicy.from_lists([], ["127.0.0.1/32"])
        policy.resolver = fake_resolver  # the system resolver does not know this name
        client = CallbackClient(policy, timeout=5)
        reply = await client.post(
            f"http://hook.test.example:{receiver.port}/x",
            [("Content-Type", "application/json")],
            b"{}",
        )
        assert reply.status == 200
        assert receiver.requests[0].headers["host"] == f"hook.test.example:{receiver.port}"
        DNS["hook.test.example"] = ["10.9.9.9"]  # "rebinding": the next check refuses it
        try:
            with pytest.raises(CallbackRefused):
                await client.post(f"http://hook.test.example:{receiver.port}/x", [], b"{}")
        finally:
            DNS["hook.test.example"] = ["127.0.0.1"]
        assert len(receiver.requests) == 1
        await client.close()
    finally:
        await receiver.stop()


# ---------------------------------------------------------------------------- over gRPC


@pytest.fixture
async def stub(start_service):
    service = await start_service(store="memory:", agent="tests.agents:ScriptedAgent")
    service.push.policy.resolver = fake_resolver
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


async def test_every_hostile_url_is_refused_at_create_time(stub):
    task = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo hi")))).task
    for url in HOSTILE:
        config = pb.TaskPushNotificationConfig(task_id=task.id, url=url)
        err = await expect_error(
            stub.CreateTaskPushNotificationConfig(config),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_PARAMS",
        )
        _, violations = error_details(err)
        assert violations and violations[0][0] == "url", (url, violations)
        assert err.details().startswith("url: "), err.details()
    listed = await stub.ListTaskPushNotificationConfigs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert list(listed.configs) == []


async def test_hostile_url_inside_send_message_is_refused_before_the_task_starts(stub):
    request = pb.SendMessageRequest(message=user_message("echo hi"))
    request.configuration.task_push_notification_config.url = (
        "http://169.254.169.254/latest/meta-data/"
    )
    err = await expect_error(
        stub.SendMessage(request), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS"
    )
    assert "link-local" in err.details()
    _, violations = error_details(err)
    assert violations[0][0] == "configuration.taskPushNotificationConfig.url"
    assert (await stub.ListTasks(pb.ListTasksRequest())).total_size == 0


async def test_public_and_unresolvable_urls_are_accepted(stub):
    task = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo hi")))).task
    for url in ("https://public.example.com/hook", "https://nowhere.example.org/hook"):
        created = await stub.CreateTaskPushNotificationConfig(
            pb.TaskPushNotificationConfig(task_id=task.id, url=url)
        )
        assert created.url == url


@pytest.mark.parametrize(
    "field, config",
    [
        (
            "token",
            pb.TaskPushNotificationConfig(
                url="https://public.example.com/", token="a\r\nX-Evil: 1"
            ),
        ),
        (
            "authentication.credentials",
            pb.TaskPushNotificationConfig(
                url="https://public.example.com/",
                authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="x\ny"),
            ),
        ),
        (
            "authentication.scheme",
            pb.TaskPushNotificationConfig(
                url="https://public.example.com/",
                authentication=pb.AuthenticationInfo(scheme="Bearer x", credentials="y"),
            ),
        ),
    ],
)
async def test_header_injection_in_secrets_is_refused(stub, field, config):
    task = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo hi")))).task
    config.task_id = task.id
    err = await expect_error(
        stub.CreateTaskPushNotificationConfig(config),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PARAMS",
    )
    assert error_details(err)[1][0][0] == field


async def test_delivery_checks_again_and_refuses_a_name_that_now_resolves_privately(start_service):
    service = await start_service(store="memory:", agent="tests.agents:ScriptedAgent")
    service.push.policy.resolver = fake_resolver
    DNS["flip.example.com"] = ["93.184.216.34"]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            task = (
                await stub.SendMessage(pb.SendMessageRequest(message=user_message("input more")))
            ).task
            await stub.CreateTaskPushNotificationConfig(
                pb.TaskPushNotificationConfig(
                    task_id=task.id, id="flip", url="http://flip.example.com/hook"
                )
            )
            DNS["flip.example.com"] = ["10.0.0.1"]  # the answer changed after the check
            await stub.SendMessage(
                pb.SendMessageRequest(message=user_message("ok", task_id=task.id))
            )

            async def dead() -> list:
                return await service.push.queue.list_dead()

            await eventually(lambda: _count(dead(), 2), what="dead letters")
            for entry in await dead():
                assert "callback URL refused" in entry.error and "10.0.0.1" in entry.error
                assert entry.job.attempts == 0  # not retried
    finally:
        DNS.pop("flip.example.com", None)


async def _count(coro, n: int) -> bool:
    return len(await coro) >= n
