"""A credential sent twice in one call (two `authorization` entries, two API key headers) is
refused on every binding, whichever copy is valid and in whatever order: HTTP answers 401,
gRPC UNAUTHENTICATED. One credential of each kind is fine (the first valid one names the
caller)."""

from __future__ import annotations

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.auth.credentials import SecretTable
from service.auth.schemes import Authenticator, call_metadata
from service.protocol.errors import UnauthenticatedError
from tests.grpc_util import expect_error
from tests.security_util import API_KEYS, TOKENS, all_static_settings

ALICE = f"Bearer {TOKENS['alice']}"
BOB = f"Bearer {TOKENS['bob']}"
WRONG = "Bearer wrong-token-0123456789abcdef"
KEY = API_KEYS["ci"]

REPEATED = {
    "two valid tokens of one caller": [("authorization", ALICE), ("authorization", ALICE)],
    "two valid tokens of two callers": [("authorization", ALICE), ("authorization", BOB)],
    "wrong, then valid": [("authorization", WRONG), ("authorization", ALICE)],
    "valid, then wrong": [("authorization", ALICE), ("authorization", WRONG)],
    "two API keys": [("x-api-key", KEY), ("x-api-key", KEY)],
    "wrong API key, then valid": [("x-api-key", "nope"), ("x-api-key", KEY)],
    "a valid token and two API keys": [
        ("authorization", ALICE),
        ("x-api-key", KEY),
        ("x-api-key", KEY),
    ],
    "mixed case names": [("Authorization", ALICE), ("authorization", ALICE)],
}


@pytest.fixture
async def secured(start_service):
    return await start_service(
        http_port=0, store="memory:", push_notifications=False, **all_static_settings()
    )


async def test_repeated_credentials_are_refused_on_grpc_as_on_http(secured):
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{secured.grpc_port}") as channel,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{secured.http_port}", timeout=10) as http,
    ):
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        for what, pairs in REPEATED.items():
            response = await http.get("/tasks", headers=[("A2A-Version", "1.0"), *pairs])
            assert response.status_code == 401, what
            grpc_pairs = tuple((k.lower(), v) for k, v in pairs)
            err = await expect_error(
                stub.ListTasks(pb.ListTasksRequest(), metadata=grpc_pairs),
                grpc.StatusCode.UNAUTHENTICATED,
                "UNAUTHENTICATED",
            )
            assert "more than once" in err.details(), (what, err.details())
            assert TOKENS["alice"] not in err.details() and KEY not in err.details()
            stream = stub.SendStreamingMessage(
                pb.SendMessageRequest(
                    message=pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="x")])
                ),
                metadata=grpc_pairs,
            )
            await expect_error(stream.read(), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
        # One of each kind is not a repeat: the bearer token names the caller, on both.
        one_each = (("authorization", ALICE), ("x-api-key", KEY))
        assert (await stub.ListTasks(pb.ListTasksRequest(), metadata=one_each)).total_size == 0
        assert (
            await http.get("/tasks", headers={"A2A-Version": "1.0", **dict(one_each)})
        ).status_code == 200
        # Other metadata may repeat.
        other = (("authorization", ALICE), ("x-trace", "a"), ("x-trace", "b"))
        assert (await stub.ListTasks(pb.ListTasksRequest(), metadata=other)).total_size == 0


def _auth() -> Authenticator:
    return Authenticator(
        bearer_tokens=SecretTable.of([("alice", TOKENS["alice"])]),
        api_keys=SecretTable.of([("ci", KEY)]),
        api_key_header="X-Custom-Key",
    )


async def test_the_authenticator_refuses_a_repeated_credential_key():
    auth = _auth()
    metadata = call_metadata(
        [("Authorization", ALICE), ("a2a-version", "1.0"), ("trace-bin", b"\x00")]
    )
    assert metadata == {"authorization": ALICE, "a2a-version": "1.0"} and not metadata.repeated
    assert await auth(metadata) == "bearer:alice" and "authorization" not in metadata
    for pairs in (
        [("authorization", ALICE), ("Authorization", ALICE)],
        [("x-custom-key", KEY), ("X-Custom-Key", "other")],
    ):
        metadata = call_metadata(pairs)
        assert metadata.repeated == {pairs[0][0].lower()}
        with pytest.raises(UnauthenticatedError, match="more than once"):
            await auth.principal(metadata)
    # x-api-key is not this authenticator's API key header: repeating it is no credential.
    assert (
        await auth.principal(
            call_metadata([("x-api-key", "a"), ("x-api-key", "b"), ("x-custom-key", KEY)])
        )
        == "apikey:ci"
    )
    # A plain mapping (no record of repeats) still authenticates as before.
    assert await auth.principal({"authorization": ALICE}) == "bearer:alice"


async def test_two_credentials_in_one_header_are_refused(start_service):
    service = await start_service(
        http_port=0, store="memory:", push_notifications=False, **all_static_settings()
    )
    headers = [
        ("A2A-Version", "1.0"),
        ("Authorization", f"Bearer {TOKENS['alice']}"),
        ("Authorization", f"Bearer {TOKENS['bob']}"),
    ]
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"http://127.0.0.1:{service.http_port}/tasks", headers=headers)
    assert response.status_code == 401 and response.content == b'{"error":"Unauthorized"}'
