"""No caller can grow the metrics: every label value a request can choose is bucketed.

A real service on loopback with `/metrics` on and authentication on is sent thousands of
requests whose caller-chosen parts are all new (HTTP method tokens, with and without
credentials; JSON-RPC method names; REST paths and tenants; gRPC method paths) and the
number of series `/metrics` serves is the same after them as after one of each kind.
HTTP methods: those the parser (llhttp) knows and no route takes are answered 405; tokens it
does not know, and known ones not in upper case (methods are case-sensitive), are refused by
the parser itself with 400 and the connection closed, before any code of ours runs.
"""

from __future__ import annotations

import asyncio
import secrets

import grpc
import httpx

from tests.security_util import TOKENS, bearer_settings

BEARER = {"Authorization": f"Bearer {TOKENS['alice']}", "A2A-Version": "1.0"}
METHOD_TOKENS = 10_000
CONNECTIONS = 20  # each sends its share of the method tokens pipelined
PIPELINE_DEPTH = 32  # requests written before their answers are read
OTHER_REQUESTS = 300  # per remaining kind: JSON-RPC methods, REST paths, gRPC paths


def series(text: str) -> set[str]:
    """The series of a Prometheus text page: its sample lines without their values."""
    return {
        line.rpartition(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


# Methods llhttp parses and no route of ours takes at /tasks (ListTasks is GET).
UNROUTED_METHODS = (
    "PROPFIND PROPPATCH MKCOL COPY MOVE LOCK UNLOCK SEARCH PURGE REPORT"
    " NOTIFY SUBSCRIBE UNSUBSCRIBE LINK UNLINK MKCALENDAR ACL BIND REBIND UNBIND MKACTIVITY"
    " CHECKOUT MERGE"
).split()


def random_method() -> str:
    return secrets.choice(UNROUTED_METHODS)


def unknown_method() -> str:
    """An HTTP method token nobody defined; now and then a known one not in upper case."""
    if secrets.randbelow(10) == 0:
        return secrets.choice(["get", "post", "Delete", "pAtCh"])
    return "M" + secrets.token_hex(6).upper()


async def refused_by_parser(port: int, count: int) -> list[int]:
    """`count` connections, each sending one request with an unknown method token; the
    status each was answered with (the connection closed after it)."""

    async def one(i: int) -> int:
        (status,) = await pipelined(port, [unknown_method()], credentials=i % 2 == 0)
        return status

    statuses: list[int] = []
    for start in range(0, count, CONNECTIONS):
        statuses += await asyncio.gather(
            *(one(i) for i in range(start, min(count, start + CONNECTIONS)))
        )
    return statuses


async def pipelined(port: int, methods: list[str], credentials: bool) -> list[int]:
    """Send one request per method on one connection, PIPELINE_DEPTH at a time before reading
    their answers (the server queues at most 32 behind the one it answers); returns the
    answers' status codes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    auth = f"Authorization: Bearer {TOKENS['alice']}\r\n" if credentials else ""
    statuses = []
    try:
        for start in range(0, len(methods), PIPELINE_DEPTH):
            batch = methods[start : start + PIPELINE_DEPTH]
            requests = (
                f"{method} /tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Length: 0\r\n\r\n"
                for method in batch
            )
            writer.write("".join(requests).encode())
            for _ in batch:
                head = await reader.readuntil(b"\r\n\r\n")
                status_line, *fields = head.decode("latin-1").split("\r\n")
                statuses.append(int(status_line.split(" ")[1]))
                length = 0
                for field in fields:
                    name, _, value = field.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
    finally:
        writer.close()
        await writer.wait_closed()
    return statuses


async def method_flood(port: int, count: int) -> list[int]:
    """`count` requests with fresh method tokens over CONNECTIONS connections, half of the
    connections with credentials."""
    share = max(1, count // CONNECTIONS)
    batches = [
        pipelined(port, [random_method() for _ in range(share)], credentials=i % 2 == 0)
        for i in range(min(CONNECTIONS, count))
    ]
    return [status for statuses in await asyncio.gather(*batches) for status in statuses]


async def jsonrpc_flood(http: httpx.AsyncClient, count: int) -> list[int]:
    async def one() -> int:
        body = {"jsonrpc": "2.0", "id": 1, "method": secrets.token_hex(8), "params": {}}
        response = await http.post("/", json=body, headers=BEARER)
        assert response.json()["error"]["code"] == -32601, response.text
        return response.status_code

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def rest_flood(http: httpx.AsyncClient, count: int) -> list[int]:
    """Unknown paths, and GetTask in random tenants."""

    async def one(i: int) -> int:
        path = (
            f"/{secrets.token_hex(6)}/tasks/{secrets.token_hex(8)}"
            if i % 2
            else f"/{secrets.token_hex(6)}/{secrets.token_hex(6)}"
        )
        return (await http.get(path, headers=BEARER)).status_code

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def grpc_flood(port: int, count: int) -> list[grpc.StatusCode]:
    """Method paths the server does not serve: in the A2A service and in made-up ones."""
    metadata = (("authorization", f"Bearer {TOKENS['alice']}"), ("a2a-version", "1.0"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:

        async def one(i: int) -> grpc.StatusCode:
            service = "lf.a2a.v1.A2AService" if i % 2 else f"x{secrets.token_hex(4)}.Svc"
            call = channel.unary_unary(
                f"/{service}/{secrets.token_hex(6)}",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            try:
                await call(b"", metadata=metadata)
            except grpc.aio.AioRpcError as err:
                return err.code()
            return grpc.StatusCode.OK

        return list(await asyncio.gather(*(one(i) for i in range(count))))


async def test_caller_chosen_values_add_no_series(start_service):
    service = await start_service(
        store="memory:", http_port=0, metrics_endpoint=True, **bearer_settings()
    )
    port = service.http_port
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits) as http:

        async def scrape() -> set[str]:
            response = await http.get("/metrics", headers=BEARER)
            assert response.status_code == 200
            return series(response.text)

        async def every_kind(count: int) -> None:
            assert set(await method_flood(port, count)) == {405}
            assert set(await refused_by_parser(port, min(count, 60))) == {400}
            assert set(await jsonrpc_flood(http, count)) == {200}
            assert set(await rest_flood(http, count)) == {404}
            assert set(await grpc_flood(service.grpc_port, count)) == {
                grpc.StatusCode.UNIMPLEMENTED
            }
            unauthenticated = await http.get("/tasks", headers={"A2A-Version": "1.0"})
            assert unauthenticated.status_code == 401

        # One of each kind (twice, so both halves of every flood have been seen).
        await every_kind(2)
        await every_kind(2)
        before = await scrape()

        statuses = await method_flood(port, METHOD_TOKENS)
        assert len(statuses) == METHOD_TOKENS and set(statuses) == {405}
        assert set(await refused_by_parser(port, 600)) == {400}
        await every_kind(OTHER_REQUESTS)

        after = await scrape()
    new = after - before
    assert len(new) == 0, f"new series, e.g. {sorted(new)[:2]}"
    assert len(after) == len(before)
    assert any('http_request_method="_OTHER"' in line for line in after)
