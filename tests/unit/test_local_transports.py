"""The local transports' pieces without a server: the bounded line splitter both frame
with, and their settings' checks (the transports themselves:
tests/integration/test_transport_stdio.py and test_transport_unix.py)."""

from __future__ import annotations

import pytest

from gateway.transports.lines import lines
from service.app import cli, config
from service.net.local import peer_principals, socket_mode


async def split(chunks: list[bytes], limit: int) -> list[bytes | None]:
    source = iter([*chunks, b""])

    async def read() -> bytes:
        return next(source)

    return [line async for line in lines(read, limit)]


async def test_lines_across_chunks_crlf_blank_and_a_last_line_without_its_end():
    got = await split([b'{"a":', b"1}\r\n\n", b"  \n{", b'"b":2}\n{"c"', b":3}"], 10)
    assert got == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


async def test_a_long_line_is_refused_once_as_soon_as_it_is_too_long_and_skipped():
    # 12 bytes without a newline is already too long: None comes before the line's end
    got = await split([b"ok\n0123456789ab", b"cdef" * 100, b"tail\nnext\n"], 10)
    assert got == [b"ok", None, b"next"]
    # a too-long line inside one chunk, and one exactly at the limit
    assert await split([b"0123456789X\n0123456789\n"], 10) == [None, b"0123456789"]
    # a too-long last line without its end
    assert await split([b"short\n", b"0123456789abc"], 10) == [b"short", None]


async def test_the_refusal_comes_before_the_line_is_read_whole():
    """50 chunks of one long line: refused after the first, the rest only skipped."""
    reads = 0
    chunks = iter([b"x" * 1000] * 50 + [b"\nok\n", b""])

    async def read() -> bytes:
        nonlocal reads
        reads += 1
        return next(chunks)

    seen = [(line, reads) async for line in lines(read, 100)]
    assert seen == [(None, 1), (b"ok", 51)]


def test_socket_mode_and_peer_entries():
    assert socket_mode("0600") == 0o600 and socket_mode("660") == 0o660
    assert socket_mode("0o640") == 0o640
    for bad in ("", "999", "0x1f", "rw-------", "01777"):
        assert socket_mode(bad) is None, bad
    assert peer_principals(["1000=bearer:alice", "*"]) == ({1000: "bearer:alice"}, True)
    assert peer_principals([]) == ({}, False)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"A2A_UNIX_SOCKET": "/tmp/a.sock", "A2A_UNIX_SOCKET_MODE": "rw"}, "unix_socket_mode: "),
        (
            {"A2A_UNIX_SOCKET": "/tmp/a.sock", "A2A_UNIX_SOCKET_PEER_PRINCIPALS": "alice"},
            "unix_socket_peer_principals: expected UID=PRINCIPAL",
        ),
        (
            {"A2A_UNIX_SOCKET_PEER_PRINCIPALS": "*"},
            "unix_socket_peer_principals: set unix_socket too",
        ),
        (
            {
                "A2A_UNIX_SOCKET": "/tmp/a.sock",
                "A2A_UNIX_SOCKET_PEER_PRINCIPALS": "*",
                "A2A_UPSTREAM": "h:1",
            },
            "unix_socket_peer_principals: in proxy mode",
        ),
        ({"A2A_STDIO": "true", "A2A_WORKERS": "2"}, "stdio: served by one process"),
        ({"A2A_UNIX_SOCKET": "/tmp/a.sock", "A2A_WORKERS": "2"}, "unix_socket: served by one"),
        ({"A2A_STDIO_MAX_IN_FLIGHT": "0"}, "stdio_max_in_flight: must be at least 1"),
        ({"A2A_GRPC_PORT": "-2"}, "grpc_port: -2 is not a port number"),
    ],
)
def test_settings_refused(env, fragment):
    with pytest.raises(config.ConfigError) as info:
        config.load(env=env)
    assert fragment in str(info.value)


def test_the_transport_flag_sets_the_stdio_key():
    args = cli.build_parser().parse_args(["serve", "--transport", "stdio", "--grpc-port", "-1"])
    assert args.stdio == "true" and args.grpc_port == -1
    s = config.load(env={}, flags={"stdio": args.stdio, "grpc_port": args.grpc_port})
    assert s.stdio is True and s.grpc_port == -1
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--transport", "websocket"])
    assert cli.setting_flags()["stdio"] == "--transport"
