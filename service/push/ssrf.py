"""Callback URL safety: which push callback URLs this server may call (SSRF rules).

`CallbackPolicy.check(url)` parses the URL, resolves its host and checks EVERY
address; it returns a `Target` carrying the checked addresses, and the HTTP
client connects only to those (see `transport.py`), so a DNS answer that
changes between the check and the connection cannot redirect it. Refused:

- anything but http(s); credentials in the URL; hosts that are not valid DNS
  names or IP literals; single-label names (resolved through search domains
  to internal hosts); `localhost` and the special-use local suffixes;
- addresses that are loopback, private, link-local, CGNAT (100.64/10),
  multicast, reserved, documentation, unspecified or otherwise not globally
  routable, in IPv4 and IPv6 form, including IPv4-mapped / -compatible, NAT64
  and 6to4 addresses carrying such an IPv4 address, and IPv4 literals written
  as one integer, in hex or octal, or with fewer than four parts.

Operators may allow hosts (exact names) or networks (CIDR) explicitly; the
default allows nothing beyond the public internet.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]

MAX_URL_LENGTH = 2048
RESOLVE_TIMEOUT_SECONDS = 5.0


class CallbackRefused(ValueError):
    """The URL may not be called; the message says why (shown to the client)."""


class CallbackUnresolvable(CallbackRefused):
    """The host did not resolve (may be transient: deliveries retry, creation refuses)."""


def _nets(*pairs: tuple[str, str]) -> list[tuple[Network, str]]:
    return [(ipaddress.ip_network(net), why) for net, why in pairs]


BLOCKED_V4 = _nets(
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (CGNAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address (cloud metadata services live here)"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol assignment address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
)
BLOCKED_V6 = _nets(
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001::/23", "an IETF protocol assignment address (incl. Teredo)"),
    ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),
    ("fc00::/7", "a unique-local (private) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
# IPv6 forms that carry an IPv4 address: the IPv4 address decides.
_COMPAT = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
LOCAL_SUFFIXES = (".localhost", ".local", ".localdomain", ".internal", ".home.arpa", ".lan")
_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, NAT64, 6to4)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (ip in _COMPAT and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def why_blocked(ip: IPAddress) -> str | None:
    """Why this address may not be called, or None when it is public."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "a scoped (zone) IPv6 address"
        inner = embedded_ipv4(ip)
        if inner is not None:
            reason = why_blocked(inner)
            return f"an IPv6 form of {inner}, {reason}" if reason else None
        table = BLOCKED_V6
    else:
        table = BLOCKED_V4
    for net, reason in table:
        if ip in net:
            return reason
    if ip.is_multicast:
        return "a multicast address"
    if not ip.is_global:
        return "not a globally routable address"
    return None


def parse_ipv4_loose(host: str) -> ipaddress.IPv4Address | None:
    """IPv4 the way inet_aton reads it: 1-4 parts, each decimal, 0x-hex or 0-octal
    (`2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1`). None when not numeric;
    ValueError when numeric but out of range."""
    labels = host.split(".")
    if not 1 <= len(labels) <= 4 or not all(_NUMERIC_LABEL.fullmatch(x) for x in labels):
        return None
    values = []
    for label in labels:
        if label.startswith("0x"):
            values.append(int(label[2:] or "0", 16))
        elif len(label) > 1 and label.startswith("0"):
            values.append(int(label, 8))  # ValueError on 8/9: not an address
        else:
            values.append(int(label))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        raise ValueError("out of range")
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


@dataclass(frozen=True, slots=True)
class Target:
    """A checked callback: the URL as given and the addresses it may be connected to."""

    url: str
    scheme: str
    host: str  # as the URL spells it (lower case, without brackets): what the HTTP client sees
    port: int
    addresses: tuple[str, ...]


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(
        loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_SECONDS
    )
    return [str(info[4][0]) for info in infos]


@dataclass
class CallbackPolicy:
    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[Network, ...] = ()
    resolver: Resolver = field(default=system_resolver)

    @classmethod
    def from_lists(cls, hosts: Iterable[str], networks: Iterable[str]) -> CallbackPolicy:
        return cls(
            allow_hosts=frozenset(h.strip().lower().rstrip(".") for h in hosts if h.strip()),
            allow_networks=tuple(
                ipaddress.ip_network(n.strip(), strict=False) for n in networks if n.strip()
            ),
        )

    def _allowed_address(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allow_networks)

    def _check_address(self, ip: IPAddress, host: str) -> None:
        if self._allowed_address(ip):
            return
        reason = why_blocked(ip)
        if reason is not None:
            where = f"{ip}" if str(ip) == host else f"{host} resolves to {ip},"
            raise CallbackRefused(
                f"callback host {where} {reason}; only public addresses may be called"
            )

    async def check(self, url: str) -> Target:
        """Refuse unsafe callback URLs; return the addresses the connection may use."""
        scheme, host, port = parse_url(url)
        ip = literal_ip(host)
        if ip is not None:
            if host not in self.allow_hosts:
                self._check_address(ip, host)
            return Target(url, scheme, host, port, (str(ip),))
        allowed_host = host in self.allow_hosts
        if not allowed_host:
            check_name(host)
        try:
            resolved = await self.resolver(host, port)
        except (TimeoutError, OSError, UnicodeError) as exc:
            raise CallbackUnresolvable(f"callback host {host} cannot be resolved ({exc})") from None
        if not resolved:
            raise CallbackUnresolvable(f"callback host {host} has no addresses")
        addresses: list[str] = []
        for raw in resolved:
            try:
                addr = ipaddress.ip_address(raw)
            except ValueError:
                raise CallbackRefused(
                    f"callback host {host} resolves to {raw!r}, not an IP address"
                ) from None
            if not allowed_host:
                self._check_address(addr, host)
            if str(addr) not in addresses:
                addresses.append(str(addr))
        return Target(url, scheme, host, port, tuple(addresses))


def parse_url(url: str) -> tuple[str, str, int]:
    """(scheme, normalized host, port) of an acceptable http(s) URL, or CallbackRefused."""
    if len(url) > MAX_URL_LENGTH:
        raise CallbackRefused(f"callback URL is longer than {MAX_URL_LENGTH} characters")
    if any(ord(c) <= 0x20 or c in "\\\x7f" for c in url):
        raise CallbackRefused("callback URL contains spaces, control characters or backslashes")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise CallbackRefused("callback URL must use http:// or https://")
    if "@" in parts.netloc:
        raise CallbackRefused(
            "callback URL must not contain credentials (use authentication instead)"
        )
    raw_host = parts.hostname or ""
    if not raw_host:
        raise CallbackRefused("callback URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise CallbackRefused("callback URL has an invalid port") from None
    if port is None:
        port = 443 if scheme == "https" else 80
    elif port == 0:
        raise CallbackRefused("callback URL has an invalid port")
    return scheme, normalize_host(raw_host, bracketed=parts.netloc.startswith("[")), port


def normalize_host(raw: str, *, bracketed: bool) -> str:
    if bracketed:
        return raw.lower()  # an IPv6 literal, checked by literal_ip
    if "%" in raw:
        raise CallbackRefused("callback host must not be percent-encoded")
    try:
        # IDNA maps full-width digits and dots ('１２７。０。０。１') to ASCII, so every
        # spelling is checked in the form a resolver would see.
        host = raw.encode("idna").decode("ascii").lower() if not raw.isascii() else raw.lower()
    except UnicodeError:
        raise CallbackRefused(
            "callback host is not a valid internationalized domain name"
        ) from None
    return host[:-1] if host.endswith(".") else host


def literal_ip(host: str) -> IPAddress | None:
    """The address a host spells directly (any IPv4 spelling, or an IPv6 literal)."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise CallbackRefused(f"callback host [{host}] is not a valid IPv6 address") from None
    try:
        return parse_ipv4_loose(host)
    except ValueError:
        raise CallbackRefused(f"callback host {host} is a malformed IP address") from None


def check_name(host: str) -> None:
    if host in LOCAL_NAMES or host.endswith(LOCAL_SUFFIXES):
        raise CallbackRefused(
            f"callback host {host} is a local name; only public hosts may be called"
        )
    labels = host.split(".")
    if len(host) > 253 or not all(_NAME.fullmatch(label) for label in labels):
        raise CallbackRefused(f"callback host {host!r} is not a valid DNS name")
    if len(labels) < 2:
        raise CallbackRefused(
            f"callback host {host} is not a fully qualified domain name (single-label names "
            "resolve to internal hosts)"
        )
    if labels[-1].isdigit():
        raise CallbackRefused(f"callback host {host} is neither a DNS name nor a valid IP address")
