"""a2a-call's connection to an agent: its card, the binding, TLS and credentials, as an a2a-sdk
`Client` (the ecosystem's client; this module only chooses and configures it).

"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import ipaddress
import json
import os
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import httpx
from a2a.client import (
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.client.card_resolver import parse_agent_card
from a2a.types import a2a_pb2 as sdk
from a2a.utils.constants import PROTOCOL_VERSION_1_0, VERSION_HEADER
from google.protobuf.json_format import ParseError

from a2a_call.errors import CallError, Exit
from a2a_call.safe import printable
from a2a_cards.finder import KeyFinder
from a2a_cards.jws import verify_card_json
from a2a_cards.keys import ASYMMETRIC_ALGS, SigningError

WELL_KNOWN_CARD = "/.well-known/agent-card.json"
CONNECT_TIMEOUT_SECONDS = 10.0
# Without --timeout: the card (and its --verify-card keys) and each unary call get this
# long; a stream, a --no-stream send (it waits for the agent's turn) and a download get
# DEFAULT_IDLE_SECONDS between two events or chunks (--idle-timeout), and no bound as a whole.
DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_IDLE_SECONDS = 300.0
MAX_CARD_BYTES = 4 * 1024 * 1024
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "http+json": "HTTP+JSON", "grpc": "GRPC"}
SPOKEN = ("JSONRPC", "HTTP+JSON", "GRPC")
ENV_BEARER = "A2A_CALL_BEARER"
ENV_API_KEY = "A2A_CALL_API_KEY"
ENV_BASIC = "A2A_CALL_BASIC"
DEFAULT_API_KEY_HEADER = "X-API-Key"
T = TypeVar("T")


async def bounded(seconds: float | None, call: Awaitable[T]) -> T:
    """`call`, given up after SECONDS (exit 6); None: not bounded."""
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError:
        raise CallError(Exit.UNREACHABLE, f"timed out after {seconds:g} s (--timeout)") from None


@dataclass(frozen=True)
class Credentials:
    """What the caller authenticates with; repr never shows a secret."""

    bearer: str = field(default="", repr=False)
    api_key: str = field(default="", repr=False)
    basic: str = field(default="", repr=False)  # USER:PASSWORD
    api_key_header: str = ""

    @classmethod
    def from_args(
        cls, bearer: str | None, api_key: str | None, basic: str | None, header: str | None
    ) -> Credentials:
        creds = cls(
            bearer=bearer or os.environ.get(ENV_BEARER, ""),
            api_key=api_key or os.environ.get(ENV_API_KEY, ""),
            basic=basic or os.environ.get(ENV_BASIC, ""),
            api_key_header=header or "",
        )
        if creds.bearer and creds.basic:
            raise CallError(Exit.USAGE, "--bearer and --basic both set Authorization: pass one")
        if creds.basic and ":" not in creds.basic:
            raise CallError(Exit.USAGE, "--basic takes USER:PASSWORD")
        return creds

    def headers(self, card: sdk.AgentCard | None) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.bearer:
            out["Authorization"] = f"Bearer {self.bearer}"
        if self.basic:
            out["Authorization"] = "Basic " + base64.b64encode(self.basic.encode()).decode("ascii")
        if self.api_key:
            out[self.api_key_header or _card_api_key_header(card)] = self.api_key
        return out


def _card_api_key_header(card: sdk.AgentCard | None) -> str:
    """The header an apiKey scheme of the card names, else X-API-Key."""
    for scheme in card.security_schemes.values() if card is not None else ():
        if scheme.HasField("api_key_security_scheme"):
            api = scheme.api_key_security_scheme
            if api.location.lower() == "header" and api.name:
                return str(api.name)
    return DEFAULT_API_KEY_HEADER


@dataclass(frozen=True)
class Tls:
    cacert: str = ""
    cert: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        if self.key and not self.cert:
            raise CallError(Exit.USAGE, "--key needs --cert (the client certificate)")

    @property
    def configured(self) -> bool:
        return bool(self.cacert or self.cert)

    def ssl_context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(cafile=self.cacert or None)
            if self.cert:
                ctx.load_cert_chain(self.cert, self.key or None)
        except (OSError, ssl.SSLError) as exc:
            raise CallError(Exit.USAGE, f"TLS files: {exc.strerror or exc}") from None
        return ctx

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: str) -> bytes | None:
            if not path:
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as exc:
                raise CallError(Exit.USAGE, f"{path}: {exc.strerror}") from None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.cacert),
            private_key=read(self.key or self.cert),
            certificate_chain=read(self.cert),
        )


def card_url_of(target: str) -> str:
    """A full card URL as given (it ends in .json), else TARGET + /.well-known/agent-card.json."""
    parts = urllib.parse.urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CallError(
            Exit.USAGE,
            f"{target!r} is not an http(s) URL (for a bare gRPC host:port use --grpc HOST:PORT)",
        )
    if parts.path.endswith(".json"):
        return target
    return urllib.parse.urlunsplit(
        (parts.scheme, parts.netloc, parts.path.rstrip("/") + WELL_KNOWN_CARD, parts.query, "")
    )


def binding_of(name: str | None) -> str | None:
    if name is None:
        return None
    binding = BINDINGS.get(name.lower())
    if binding is None:
        raise CallError(Exit.USAGE, f"--binding {name!r}: one of jsonrpc, rest, grpc")
    return binding


def pick_interface(card: sdk.AgentCard, binding: str | None) -> sdk.AgentInterface:
    """The first interface of the card this client speaks (or of the --binding asked for)."""
    wanted = (binding,) if binding else SPOKEN
    interface: sdk.AgentInterface
    for interface in card.supported_interfaces:
        if interface.protocol_binding in wanted:
            return interface
    raise CallError(Exit.PROTOCOL, no_interface(card, binding))


def no_interface(card: sdk.AgentCard, binding: str | None) -> str:
    """Why no interface was picked: what the card offers, and which of those bindings this
    client does not speak (a custom one, e.g. `urn:a2a-service:binding:websocket`) against
    the ones it does."""
    offered = list(dict.fromkeys(printable(i.protocol_binding) for i in card.supported_interfaces))
    unspoken = [b for b in offered if b not in SPOKEN]
    if binding:
        text = f"the card offers no interface for {binding} (it offers: {', '.join(offered) or 'none'})"
    elif not offered:
        return "the card offers no interface at all (supportedInterfaces is empty)"
    else:
        text = "the card offers no interface a2a-call speaks"
    if unspoken:
        verb = (
            "which a2a-call does not speak"
            if len(unspoken) == 1
            else "none of which a2a-call speaks"
        )
        text += f"; the agent offers {', '.join(unspoken)}, {verb}; it speaks {', '.join(SPOKEN)}"
    return text


def is_loopback(host: str | None) -> bool:
    """Whether HOST names this machine for sure: `localhost` or a loopback IP literal (a name
    is not resolved: what it resolves to now need not be where the connection goes)."""
    if not host:
        return False
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _host_of(url: str) -> str | None:
    try:
        return urllib.parse.urlsplit(url).hostname
    except ValueError:
        return None


@dataclass(frozen=True)
class PlaintextGuard:
    """Credentials never go in plaintext to where a card fetched over TLS points: a hostile
    or careless card could otherwise name `grpc://` or `http://` and have the secret cross
    the network in the clear, though the user asked for TLS by fetching over https. Loopback
    never leaves the machine; `--allow-plaintext-credentials` is the user's own say-so."""

    card_over_tls: bool
    allowed: bool

    def check(self, what: str, url: str, *, secure: bool, host: str | None) -> None:
        if secure or not self.card_over_tls or self.allowed or is_loopback(host):
            return
        raise CallError(
            Exit.REFUSED,
            f"refused: the card came over https, but {what} {url} is plaintext; the "
            "credentials would cross the network unencrypted (pick a TLS interface with "
            "--binding, or pass --allow-plaintext-credentials to send them anyway)",
        )


def _grpc_target(url: str) -> tuple[str, bool | None]:
    """host:port of a card's gRPC url, and whether its scheme says TLS (None: it does not say)."""
    for prefix, tls in (
        ("grpcs://", True),
        ("https://", True),
        ("grpc://", False),
        ("http://", False),
    ):
        if url.lower().startswith(prefix):
            return url[len(prefix) :].rstrip("/"), tls
    return url, None


@dataclass
class Connection:
    """An open client to one agent: close it (`async with`) when done."""

    card: sdk.AgentCard
    card_json: dict[str, Any] | None
    card_url: str
    interface: sdk.AgentInterface
    client: Client
    http: httpx.AsyncClient
    headers: dict[str, str]
    timeout: float | None  # --timeout: any one call, a whole stream included
    guard: PlaintextGuard
    idle_timeout: float | None = DEFAULT_IDLE_SECONDS  # between two events (None: no bound)
    channel: grpc.aio.Channel | None = None
    event_ids: EventIds = field(default_factory=lambda: EventIds())

    @property
    def binding(self) -> str:
        return self.interface.protocol_binding

    @property
    def call_timeout(self) -> float:
        """The bound of a unary call: --timeout, else the default (never none: an agent that
        answers a byte a second must not hold the run forever)."""
        return self.timeout or DEFAULT_TIMEOUT_SECONDS

    def call_context(self, extra: dict[str, str] | None = None) -> ClientCallContext:
        return ClientCallContext(service_parameters={**self.headers, **(extra or {})})

    def same_origin(self, url: str) -> bool:
        """Whether URL is served by the agent we talk to (credentials may go there)."""
        origins = {_origin(self.card_url)} | {
            _origin(i.url) for i in self.card.supported_interfaces if i.protocol_binding != "GRPC"
        }
        return _origin(url) in origins - {None}

    def credentials_for(self, url: str) -> dict[str, str]:
        """The headers to send to URL (a download): none to another origin, and a refusal
        (exit 10) for a plaintext one the TLS card named, as for its interfaces."""
        if not self.headers or not self.same_origin(url):
            return {}
        secure = urllib.parse.urlsplit(url).scheme.lower() == "https"
        self.guard.check("the download", url, secure=secure, host=_host_of(url))
        return dict(self.headers)

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close()
        if not self.http.is_closed:
            await self.http.aclose()
        if self.channel is not None:
            await self.channel.close()


def _origin(url: str) -> tuple[str, str, int] | None:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        return None
    return scheme, parts.hostname.lower(), port


class EventIds:
    """The SSE `id:` of every event of the HTTP streams, in order, and the `event: error` a
    stream ended with. The a2a-sdk transport parses the stream but does not hand out the
    ids, and keeps only the text of an error event, so a response hook wraps the body of
    each event stream and notes the id of each event that carries data (what the transport
    yields as one StreamResponse); `take()` is the id of the next event the caller sees,
    `error` the last error document (JSON), which says whether the server drains."""

    def __init__(self) -> None:
        self._ids: collections.deque[str | None] = collections.deque()
        self.error: Any = None

    def take(self) -> str | None:
        return self._ids.popleft() if self._ids else None

    def reset(self) -> None:
        self._ids.clear()
        self.error = None

    def saw(self, event_id: str | None) -> None:
        self._ids.append(event_id)

    async def hook(self, response: httpx.Response) -> None:
        if "text/event-stream" in response.headers.get("content-type", ""):
            response.stream = _NotingIds(response.stream, self)


class _NotingIds(httpx.AsyncByteStream):
    def __init__(self, inner: Any, notes: EventIds) -> None:
        self._inner = inner
        self._notes = notes
        self._pending = b""
        self._last: str | None = None  # SSE: an event without id: keeps the last one
        self._data: list[bytes] = []
        self._event = b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._note(chunk)
            yield chunk

    def _note(self, chunk: bytes) -> None:
        self._pending += chunk
        *complete, self._pending = self._pending.replace(b"\r\n", b"\n").split(b"\n")
        for raw in complete:
            line = raw.rstrip(b"\r")
            if not line:
                self._dispatch()
            elif line.startswith(b"id:"):
                self._last = line[3:].strip().decode("utf-8", "replace") or None
            elif line.startswith(b"data:"):
                self._data.append(line[5:].strip())
            elif line.startswith(b"event:"):
                self._event = line[6:].strip()

    def _dispatch(self) -> None:
        if self._data:
            if self._event == b"error":
                try:
                    self._notes.error = json.loads(b"\n".join(self._data))
                except ValueError:
                    self._notes.error = None
            else:
                self._notes.saw(self._last)
        self._data, self._event = [], b""

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_client(tls: Tls, https: bool, ids: EventIds | None = None) -> httpx.AsyncClient:
    """The one httpx client of a run: no read timeout (streams idle between events; calls are
    bounded as a whole by run.py, streams between events), a connect timeout, TLS from
    --cacert/--cert/--key, A2A-Version: 1.0."""
    verify: ssl.SSLContext | bool = tls.ssl_context() if (tls.configured or https) else True
    return httpx.AsyncClient(
        verify=verify,
        timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_SECONDS),
        headers={VERSION_HEADER: PROTOCOL_VERSION_1_0},
        follow_redirects=False,
        event_hooks={"response": [ids.hook]} if ids is not None else None,
    )


async def fetch_card(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """The card's JSON object (no credentials are sent: the card is public)."""
    try:
        async with http.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                code = Exit.UNAUTHENTICATED if response.status_code in (401, 403) else Exit.PROTOCOL
                raise CallError(code, f"{url}: HTTP {response.status_code} (no agent card there)")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_CARD_BYTES:
                    raise CallError(Exit.PROTOCOL, f"{url}: the card is larger than 4 MiB")
    except httpx.HTTPError as exc:
        raise CallError(
            Exit.UNREACHABLE, f"unreachable: {url}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise CallError(Exit.PROTOCOL, f"{url}: the card is not JSON") from None
    if not isinstance(doc, dict):
        raise CallError(Exit.PROTOCOL, f"{url}: the card is not a JSON object")
    return doc


async def verify_card(card_json: dict[str, Any], card_url: str, jwks: str) -> str:
    """Check the card's signature against the key set at JWKS (a URL or a file) with the
    server's own verifier (a2a_cards, keys found as `card verify --jwks` does);
    a card that does not verify is refused."""
    finder = KeyFinder(card_url, jwks, None)
    try:
        verified = await asyncio.to_thread(
            verify_card_json, card_json, finder, algorithms=ASYMMETRIC_ALGS
        )
    except SigningError as exc:
        reason = finder.unreadable[0] if finder.unreadable else str(exc)
        raise CallError(Exit.NOT_VERIFIED, f"card NOT VERIFIED, refused: {reason}") from None
    return f"card verified: signature by kid {verified.kid!r} ({verified.alg}) from {jwks}"


def parse_card(card_json: dict[str, Any], where: str) -> sdk.AgentCard:
    try:
        return parse_agent_card(copy.deepcopy(card_json))
    except (ParseError, ValueError, TypeError) as exc:
        raise CallError(Exit.PROTOCOL, f"{where}: not an agent card ({exc})") from None


def grpc_only_card(address: str) -> sdk.AgentCard:
    """A stand-in card for `--grpc HOST:PORT`: one gRPC interface, streaming assumed (a gRPC
    server that cannot stream answers UnsupportedOperation); `card` asks the server for its
    card with GetExtendedAgentCard, the only card RPC gRPC has."""
    card = sdk.AgentCard(name=address, description="", version="")
    card.supported_interfaces.add(
        url=address, protocol_binding="GRPC", protocol_version=PROTOCOL_VERSION_1_0
    )
    card.capabilities.streaming = True
    card.capabilities.extended_agent_card = True  # `card --grpc` asks GetExtendedAgentCard
    return card


async def connect(
    target: str | None,
    *,
    grpc_address: str | None,
    binding: str | None,
    credentials: Credentials,
    tls: Tls,
    verify_jwks: str | None,
    streaming: bool,
    call_timeout: float | None,
    idle_timeout: float | None = DEFAULT_IDLE_SECONDS,
    allow_plaintext_credentials: bool = False,
) -> Connection:
    """Fetch (and with --verify-card verify) the card, pick the interface, build the client;
    refuse (exit 10) to send credentials in plaintext to an interface a TLS card names."""
    https = bool(target and target.lower().startswith("https://"))
    event_ids = EventIds()
    http = http_client(tls, https, event_ids)
    try:
        card_json: dict[str, Any] | None = None
        if grpc_address:
            if verify_jwks:
                raise CallError(Exit.USAGE, "--verify-card needs the card's URL, not --grpc")
            card_url = ""
            card = grpc_only_card(grpc_address)
            binding = "GRPC"
        else:
            assert target is not None
            card_url = card_url_of(target)
            card_json = await fetch_card(http, card_url)
            if verify_jwks:
                await verify_card(card_json, card_url, verify_jwks)
            card = parse_card(card_json, card_url)
        interface = pick_interface(card, binding)
        headers = credentials.headers(card)
        guard = PlaintextGuard(card_over_tls=https, allowed=allow_plaintext_credentials)
        channel = None
        what = f"its {interface.protocol_binding} interface"
        if interface.protocol_binding == "GRPC":
            address, scheme_tls = _grpc_target(interface.url)
            secure = scheme_tls if scheme_tls is not None else (tls.configured or https)
            if headers:
                guard.check(what, interface.url, secure=secure, host=_host_of("//" + address))
            channel = (
                grpc.aio.secure_channel(address, tls.grpc_credentials())
                if secure
                else grpc.aio.insecure_channel(address)
            )
        elif headers:
            secure = urllib.parse.urlsplit(interface.url).scheme.lower() == "https"
            guard.check(what, interface.url, secure=secure, host=_host_of(interface.url))
        bound_channel = channel
        config = ClientConfig(
            streaming=streaming,
            httpx_client=http,
            grpc_channel_factory=(lambda _url: bound_channel) if bound_channel else None,
            supported_protocol_bindings=[interface.protocol_binding],
        )
        only = sdk.AgentCard()
        only.CopyFrom(card)
        del only.supported_interfaces[:]
        only.supported_interfaces.append(interface)
        client = ClientFactory(config).create(only)
        return Connection(
            card=card,
            card_json=card_json,
            card_url=card_url,
            interface=interface,
            client=client,
            http=http,
            headers=headers,
            timeout=call_timeout,
            guard=guard,
            idle_timeout=idle_timeout,
            channel=channel,
            event_ids=event_ids,
        )
    except BaseException:
        await http.aclose()
        raise
