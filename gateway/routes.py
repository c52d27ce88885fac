"""REST routes computed from the service descriptor's `google.api.http` rules.

Each RPC's HttpRule (and its `additional_bindings`, e.g. the `/{tenant}/...`
forms) becomes a `Route`: an HTTP method, a parsed path template and the body
rule. Matching follows grpc-gateway's runtime (pattern.go, mux.go): the path is
split into segments on the raw (still percent-encoded) path, a trailing
`:verb` is split off the last segment, and each segment is matched against a
literal, a single-segment wildcard (`*`) or a multi-segment one (`**`).
Nothing here names an RPC: a new method with an HTTP rule is routed as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from google.api import annotations_pb2, http_pb2
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

_VERBS = ("get", "put", "post", "delete", "patch")


class TemplateError(ValueError):
    """An HttpRule path template this router cannot use (a contract bug: fails at startup)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One path segment of a template: a literal, `*` (one segment) or `**` (the rest)."""

    literal: str | None  # None for wildcards
    wildcard: str = ""  # "*" or "**"
    variable: str = ""  # dotted field path this segment is part of ('' = not captured)


@dataclass(frozen=True, slots=True)
class Route:
    http_method: str  # upper case
    template: str  # as written in the rule, e.g. "/{tenant}/tasks/{id=*}:cancel"
    segments: tuple[Segment, ...]
    verb: str  # custom verb after ':' in the last segment, '' if none
    body: str  # "" (no body), "*" (whole request) or a field name
    method: MethodDescriptor
    primary: bool  # the rule itself, not an additional binding

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.variable for s in self.segments if s.variable))

    def match(self, parts: list[str], verb: str) -> dict[str, str] | None:
        """Path variables (field path -> decoded value) if the segments match, else None."""
        if verb != self.verb:
            return None
        values: dict[str, list[str]] = {}
        i = 0
        for seg in self.segments:
            if seg.wildcard == "**":
                rest = parts[i:]
                if not rest:
                    return None
                if seg.variable:
                    values.setdefault(seg.variable, []).extend(rest)
                i = len(parts)
                continue
            if i >= len(parts):
                return None
            part = parts[i]
            i += 1
            if seg.literal is not None:
                if part != seg.literal:
                    return None
                if seg.variable:
                    values.setdefault(seg.variable, []).append(part)
            elif not part:
                return None  # a variable never matches an empty segment
            elif seg.variable:
                values.setdefault(seg.variable, []).append(part)
        if i != len(parts):
            return None
        return {name: "/".join(unquote(p) for p in items) for name, items in values.items()}


def _parse_template(template: str) -> tuple[tuple[Segment, ...], str]:
    """'/{tenant}/tasks/{id=*}:cancel' -> segments, 'cancel' (google/api/http.proto grammar)."""
    if not template.startswith("/"):
        raise TemplateError(f"template {template!r} must start with '/'")
    path, verb = template[1:], ""
    # A ':' outside braces in the last segment starts the verb.
    depth = 0
    for pos, ch in enumerate(path):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == ":" and depth == 0:
            path, verb = path[:pos], path[pos + 1 :]
            break
    segments: list[Segment] = []
    for raw in _split_outside_braces(path):
        if raw.startswith("{") and raw.endswith("}"):
            name, _, sub = raw[1:-1].partition("=")
            sub_parts = sub.split("/") if sub else ["*"]
            for piece in sub_parts:
                # Every segment of a variable records its name: the variable's value is the
                # matched path, literals included (`{name=tasks/*}` -> "tasks/abc").
                if piece in ("*", "**"):
                    segments.append(Segment(None, piece, name))
                elif not piece or "{" in piece or "}" in piece:
                    raise TemplateError(f"template {template!r}: bad segment {piece!r} in {name}")
                else:
                    segments.append(Segment(piece, "", name))
        elif raw in ("*", "**"):
            segments.append(Segment(None, raw))
        elif "{" in raw or "}" in raw or not raw:
            raise TemplateError(f"template {template!r}: bad segment {raw!r}")
        else:
            segments.append(Segment(raw))
    return tuple(segments), verb


def _split_outside_braces(path: str) -> list[str]:
    out, depth, start = [], 0, 0
    for pos, ch in enumerate(path):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "/" and depth == 0:
            out.append(path[start:pos])
            start = pos + 1
    out.append(path[start:])
    return out


def _rule_routes(rule: http_pb2.HttpRule, method: MethodDescriptor, primary: bool) -> list[Route]:
    kind = rule.WhichOneof("pattern")
    if kind is None:
        return []
    if kind == "custom":
        http_method, template = rule.custom.kind.upper(), rule.custom.path
    elif kind in _VERBS:
        http_method, template = kind.upper(), getattr(rule, kind)
    else:  # pragma: no cover - the oneof has no other members
        raise TemplateError(f"{method.full_name}: unknown pattern {kind}")
    segments, verb = _parse_template(template)
    routes = [Route(http_method, template, segments, verb, rule.body, method, primary)]
    for extra in rule.additional_bindings:
        routes.extend(_rule_routes(extra, method, primary=False))
    return routes


def route_table(service: ServiceDescriptor) -> list[Route]:
    """Every route of the service, primary rules first, then additional bindings,
    each group in declaration order (the first match wins)."""
    routes: list[Route] = []
    for method in service.methods:
        options = method.GetOptions()
        if options.HasExtension(annotations_pb2.http):
            routes.extend(
                _rule_routes(options.Extensions[annotations_pb2.http], method, primary=True)
            )
    return sorted(routes, key=lambda r: not r.primary)  # stable: keeps declaration order


@dataclass(frozen=True, slots=True)
class Match:
    route: Route
    path_vars: dict[str, str]


class Router:
    """Finds the route for (HTTP method, raw path)."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes
        self._by_method: dict[str, list[Route]] = {}
        for route in routes:
            self._by_method.setdefault(route.http_method, []).append(route)

    def match(self, http_method: str, raw_path: str) -> Match | None:
        return self._match_in(self._by_method.get(http_method, ()), raw_path)

    def allowed_methods(self, raw_path: str) -> list[str]:
        """The HTTP methods some route would accept for this path (for 405 + Allow)."""
        return [m for m, routes in self._by_method.items() if self._match_in(routes, raw_path)]

    @staticmethod
    def _match_in(routes, raw_path: str) -> Match | None:
        if not routes or not raw_path.startswith("/"):
            return None
        parts = raw_path[1:].split("/")
        last = parts[-1]
        colon = last.rfind(":")
        if colon >= 0:
            # First try with the verb split off; then (as grpc-gateway does) as a plain segment.
            verb_parts = parts[:-1] + [last[:colon]]
            verb = last[colon + 1 :]
            for route in routes:
                found = route.match(verb_parts, verb)
                if found is not None:
                    return Match(route, found)
        for route in routes:
            found = route.match(parts, "")
            if found is not None:
                return Match(route, found)
        return None


def with_post_aliases(routes: list[Route]) -> list[Route]:
    """Add a POST twin for each GET rule of a server-streaming RPC.

    The contract says `GET /tasks/{id}:subscribe`; the released spec text and the
    a2a-sdk 1.3.0 REST client use POST. Both are served, from the same rule.
    """
    extra = [
        Route("POST", r.template, r.segments, r.verb, "", r.method, r.primary)
        for r in routes
        if r.http_method == "GET" and r.method.server_streaming
    ]
    return sorted(routes + extra, key=lambda r: not r.primary)
