"""ProtoJSON in and out: request messages from HTTP parts, responses as JSON.

A request is assembled as one JSON object, freed of the members that name no
field (or, in strict mode, refused at the first one: `known_fields_only`, see
gateway/unknown_fields.py) and parsed once with `google.protobuf.json_format`,
which still refuses any value a field cannot hold (the plain shapes of a send are read,
and answers written, by protojson.py's per-type plans, which give json_format's result
or step aside for it):

- the body, when the rule has `body: "*"` (or under the named body field);
- path variables, which must agree with the same field in the body;
- query parameters, for fields neither bound by the path nor in the body,
  as grpc-gateway's runtime does (query.go): dotted field paths, each part the
  JSON (camelCase) or the proto name; repeated fields from repeated keys;
  enums by name (or number); booleans `true`/`false`; timestamps in RFC 3339;
  well-known wrapper types by value.

Responses are ProtoJSON (camelCase, enum names, RFC 3339 timestamps, base64
bytes). Singular scalar fields of the top-level response message are always
present, so paging fields such as `nextPageToken: ""` and `totalSize: 0` show.
"""

from __future__ import annotations

import json
import math
import re
import sys
from functools import cache
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from gateway.protojson import from_dict, to_dict
from service.protocol.errors import A2AError, InvalidParamsError, JSONParseError, invalid_field
from service.protocol.params import VERSION_KEY

# Query parameters that are service parameters, never request fields.
RESERVED_QUERY = frozenset({VERSION_KEY})

# Well-known message types whose JSON form is a single string/number/bool, so
# they can be set from one query value.
_SCALAR_WKT = frozenset(
    {
        "google.protobuf.Timestamp",
        "google.protobuf.Duration",
        "google.protobuf.FieldMask",
        "google.protobuf.StringValue",
        "google.protobuf.BytesValue",
        "google.protobuf.BoolValue",
        "google.protobuf.Int32Value",
        "google.protobuf.Int64Value",
        "google.protobuf.UInt32Value",
        "google.protobuf.UInt64Value",
        "google.protobuf.FloatValue",
        "google.protobuf.DoubleValue",
    }
)
_TRUE = frozenset({"true", "1", "t"})
_FALSE = frozenset({"false", "0", "f"})
_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def _repeated(field: FieldDescriptor) -> bool:
    repeated: bool = (
        field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
    )
    return repeated


@cache
def _fields(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    """Field lookup by JSON name and by proto name."""
    out = {f.name: f for f in descriptor.fields}
    out.update({f.json_name: f for f in descriptor.fields})
    return out


def resolve_path(descriptor: Descriptor, dotted: str) -> list[FieldDescriptor]:
    """'configuration.history_length' -> [configuration, historyLength] field descriptors."""
    chain: list[FieldDescriptor] = []
    current: Descriptor | None = descriptor
    for part in dotted.split("."):
        field = _fields(current).get(part) if current is not None else None
        if field is None:
            raise KeyError(dotted)
        chain.append(field)
        current = field.message_type if field.type == FieldDescriptor.TYPE_MESSAGE else None
    return chain


def json_path(chain: list[FieldDescriptor]) -> str:
    return ".".join(f.json_name for f in chain)


# ---------------------------------------------------------------- request building


# A \\u escape of a UTF-16 surrogate (U+D800-U+DFFF). Paired ones are fine (they decode to
# one character); an unpaired one decodes to a lone surrogate that no UTF-8 text can hold.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_DOUBLE_MAX = sys.float_info.max
_DOUBLE_MAX_DIGITS = len(str(int(_DOUBLE_MAX)))  # 309


def _out_of_range(literal: str) -> JSONParseError:
    shown = literal if len(literal) <= 24 else f"{literal[:16]}... ({len(literal)} characters)"
    return JSONParseError(
        f"The request body has a number out of range ({shown}): JSON numbers must be "
        "within the range of a 64-bit float."
    )


def _json_int(literal: str) -> int:
    # Checked before int(): past 4300 digits int() itself raises (CVE-2020-10735 limit).
    digits = len(literal) - literal.startswith("-")
    if digits >= _DOUBLE_MAX_DIGITS and (
        digits > _DOUBLE_MAX_DIGITS or abs(int(literal)) > _DOUBLE_MAX
    ):
        raise _out_of_range(literal)
    return int(literal)


def _json_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e400 overflows to inf
        raise _out_of_range(literal)
    return value


def _json_constant(literal: str) -> Any:
    raise JSONParseError(f"The request body is not valid JSON: {literal} is not a JSON value.")


def parse_json_body(raw: bytes) -> Any:
    """JSON text -> value, or JSONParseError (-32700 / HTTP 400) naming the problem.

    Besides what `json.loads` refuses, values no request field can hold are parse errors,
    so they never reach a handler (nor fail while the answer is written, after the
    request ran): text that is not UTF-8 (UTF-16/32 too; a UTF-8 BOM is skipped), an
    unpaired surrogate escape (`"\\ud800"`, in a value or a key), `NaN` and `Infinity`
    (not JSON), and numbers beyond a 64-bit float (`1e400`, an integer of 310 digits).
    A number a double holds but the field does not (`"pageSize": 1e12`) is InvalidParams
    naming the field, when the request message is built.
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise JSONParseError("The request body is not valid UTF-8 JSON.") from None
    try:
        doc = json.loads(
            text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant
        )
        if _SURROGATE_ESCAPE.search(text) is not None:
            # Maybe a false alarm (an escaped backslash before "ud800"): the parsed value tells.
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise JSONParseError(
            "The request body is not valid JSON text: a \\u escape is an unpaired UTF-16 surrogate "
            "(\\ud800-\\udfff must come as a high-low pair)."
        ) from None
    except RecursionError:
        raise JSONParseError("The request body is nested too deeply.") from None
    except json.JSONDecodeError as exc:
        raise JSONParseError(
            f"The request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}."
        ) from None
    return doc


def _set_nested(
    target: dict[str, Any], chain: list[FieldDescriptor], value: Any, source: str
) -> None:
    for field in chain[:-1]:
        child = target.get(field.json_name)
        if child is None:
            child = target[field.json_name] = {}
        elif not isinstance(child, dict):
            raise invalid_field(
                json_path(chain), f"conflicts with a non-object value for {field.json_name}"
            )
        target = child
    leaf = chain[-1]
    # The body may use the proto name or the JSON name; either counts as "already set".
    for key in {leaf.json_name, leaf.name}:
        if key in target and target[key] != value:
            raise invalid_field(
                json_path(chain), f"is {value!r} in the {source} but {target[key]!r} in the body"
            )
        target.pop(key, None)
    target[leaf.json_name] = value


def _query_value(chain: list[FieldDescriptor], values: list[str]) -> Any:
    field = chain[-1]
    path = json_path(chain)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.GetOptions().map_entry:
            raise invalid_field(path, "map fields cannot be set from query parameters")
        if field.message_type.full_name not in _SCALAR_WKT:
            raise invalid_field(
                path,
                "is a message; set its fields with dotted names (e.g. "
                f"{path}.<field>=...) or send the request as a JSON body",
            )
    converted = [_convert_scalar(field, v, path) for v in values]
    if _repeated(field):
        return converted
    if len(converted) > 1:
        raise invalid_field(path, "is not repeated but was given more than once")
    return converted[0]


def _convert_scalar(field: FieldDescriptor, value: str, path: str) -> Any:
    if field.type == FieldDescriptor.TYPE_BOOL:
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise invalid_field(path, f"expected true or false, got {value!r}")
    if field.type == FieldDescriptor.TYPE_ENUM and value.lstrip("-").isdigit():
        return int(value)
    if (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.full_name == "google.protobuf.BoolValue"
    ):
        return _convert_scalar(field.message_type.fields_by_name["value"], value, path)
    return value  # json_format parses numbers, enums by name, timestamps, bytes from strings


def build_request(
    cls: type[Message],
    *,
    body: Any = None,
    body_field: str = "",
    path_vars: dict[str, str] | None = None,
    query: list[tuple[str, str]] | None = None,
    reject_unknown: bool = False,
) -> Message:
    """One request message from body, path variables and query parameters. Body members
    that name no field are dropped, or with `reject_unknown` refused (InvalidParams);
    query parameters that name no field are always refused (a URL is typed by hand)."""
    descriptor = cls.DESCRIPTOR
    if body_field == "*":
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise InvalidParamsError("The request body must be a JSON object.")
        document: dict[str, Any] = body
    else:
        document = {}
        if body_field:
            try:
                chain = resolve_path(descriptor, body_field)
            except KeyError:  # pragma: no cover - checked when the routes are built
                raise InvalidParamsError(f"Unknown body field {body_field}.") from None
            _set_nested(document, chain, {} if body is None else body, "body")
    bound: set[str] = set()
    for name, value in (path_vars or {}).items():
        chain = resolve_path(descriptor, name)
        bound.add(json_path(chain))
        _set_nested(document, chain, value, "path")
    if query and body_field != "*":
        grouped: dict[str, tuple[list[FieldDescriptor], list[str]]] = {}
        for key, value in query:
            if key.lower() in RESERVED_QUERY:
                continue
            try:
                chain = resolve_path(descriptor, key)
            except KeyError:
                raise invalid_field(key, f"unknown query parameter for {descriptor.name}") from None
            # The JSON and the proto name of a field are the same parameter.
            grouped.setdefault(json_path(chain), (chain, []))[1].append(value)
        for path, (chain, values) in grouped.items():
            if path in bound or (body_field and path.startswith(body_field)):
                raise invalid_field(
                    path, "is set by the URL path or body; it cannot be a query parameter"
                )
            _set_nested(document, chain, _query_value(chain, values), "query")
    fast = from_dict(document, cls, reject_unknown=reject_unknown)
    if fast is not None:
        return fast
    document = known_fields_only(document, descriptor, reject=reject_unknown)
    message = cls()
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise _params_error(exc, descriptor.name) from None
    except (TypeError, ValueError, AttributeError) as exc:  # odd shapes json_format does not wrap
        raise InvalidParamsError(f"Invalid params: {exc}") from None
    return message


# ---------------------------------------------------------------- unknown members

# Message types whose JSON form is not an object of their fields: nothing inside is a field.
_OPAQUE = frozenset(
    {
        "google.protobuf.Struct",
        "google.protobuf.Value",
        "google.protobuf.ListValue",
        "google.protobuf.Any",
    }
)
_MAX_DEPTH = 100  # json_format refuses deeper messages anyway; past it the document is left as is
_MAX_NAME_CHARS = 64  # of an unknown member's name, in a refusal


def known_fields_only(document: Any, descriptor: Descriptor, *, reject: bool) -> Any:
    """`document` (the JSON of a `descriptor` message) without the members that name no
    field, at any depth; with `reject`, the first such member is InvalidParams instead.
    The input is not modified. Anything that is not the expected shape is returned as it
    is, for the parser to refuse with its own message."""
    return _walk(document, descriptor, "", reject, 0)


def _walk(value: Any, descriptor: Descriptor, path: str, reject: bool, depth: int) -> Any:
    if not isinstance(value, dict) or descriptor.full_name in _OPAQUE or depth > _MAX_DEPTH:
        return value
    fields = _fields(descriptor)
    out: dict[str, Any] = {}
    for key, member in value.items():
        field = fields.get(key)
        if field is None:
            if reject:
                raise _unknown(descriptor, path, key)
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            member = _walk_field(field, member, f"{path}.{key}" if path else key, reject, depth)
        out[key] = member
    return out


def _walk_field(field: FieldDescriptor, member: Any, path: str, reject: bool, depth: int) -> Any:
    message = field.message_type
    if message.GetOptions().map_entry:
        value_field = message.fields_by_name["value"]
        if value_field.type != FieldDescriptor.TYPE_MESSAGE or not isinstance(member, dict):
            return member
        return {
            k: _walk(v, value_field.message_type, f"{path}[{_shown(k)}]", reject, depth + 1)
            for k, v in member.items()
        }
    if _repeated(field):
        if not isinstance(member, list):
            return member
        return [
            _walk(item, message, f"{path}[{i}]", reject, depth + 1) for i, item in enumerate(member)
        ]
    return _walk(member, message, path, reject, depth + 1)


def _shown(name: str) -> str:
    return name if len(name) <= _MAX_NAME_CHARS else f"{name[:_MAX_NAME_CHARS]}..."


def _unknown(descriptor: Descriptor, path: str, key: str) -> A2AError:
    name = _shown(key)
    where = f"{path}.{name}" if path else name
    known = ", ".join(f.json_name for f in descriptor.fields)
    return invalid_field(
        where,
        f"unknown field: {descriptor.name} has no field {name!r} (its fields: {known}); "
        "this server refuses unknown fields",
    )


_UNKNOWN = re.compile(r'has no field named "([^"]+)" at "([^"]*)"')
_AT = re.compile(r' at "?([A-Za-z0-9_.\[\]]+)"?\.*$')
_CHAIN = re.compile(r"Failed to parse (\w+) field: ")
_MAX_PROBLEM_CHARS = 200


def _params_error(exc: json_format.ParseError, root: str) -> A2AError:
    """A json_format ParseError as InvalidParams with a BadRequest field violation."""
    text = str(exc)
    unknown = _UNKNOWN.search(text)
    if unknown:
        where = unknown.group(2)
        prefix = where[len(root) + 1 :] if where.startswith(root + ".") else ""
        field = f"{prefix}.{unknown.group(1)}" if prefix else unknown.group(1)
        return invalid_field(field, "unknown field")
    problem = _CHAIN.split(text)[-1].split("\n")[0].rstrip(".")
    at = _AT.search(problem)
    if at and at.group(1).startswith(root + "."):
        field = at.group(1)[len(root) + 1 :]
        problem = problem[: at.start()].rstrip(".")
    else:
        field = ".".join(_CHAIN.findall(text)) or root
        problem = _AT.sub("", problem).rstrip(".")
    if len(problem) > _MAX_PROBLEM_CHARS:  # json_format quotes the value, whatever its size
        problem = problem[:_MAX_PROBLEM_CHARS] + "..."
    return invalid_field(field, problem or "invalid value")


# ---------------------------------------------------------------- response rendering


@cache
def _top_level_defaults(descriptor: Descriptor) -> tuple[tuple[str, Any], ...]:
    out = []
    for field in descriptor.fields:
        if _repeated(field) or field.type == FieldDescriptor.TYPE_MESSAGE or field.has_presence:
            continue
        if field.type == FieldDescriptor.TYPE_ENUM:
            default: Any = field.enum_type.values_by_number[0].name
        elif field.type == FieldDescriptor.TYPE_BOOL:
            default = False
        elif field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            default = ""
        elif field.type in _INT64_TYPES:
            default = "0"
        else:
            default = 0
        out.append((field.json_name, default))
    return tuple(out)


def to_json_dict(message: Message) -> dict[str, Any]:
    """ProtoJSON of a response message (top-level scalar fields always present)."""
    fast = to_dict(message)
    out: dict[str, Any] = json_format.MessageToDict(message) if fast is None else fast
    for key, default in _top_level_defaults(message.DESCRIPTOR):
        if key not in out:
            out[key] = default
    return out


# What json.dumps(value, ensure_ascii=False, separators=(",", ":")) builds on every call,
# built once (the same encoder's encode(): the same text; it keeps no state between calls).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps_str(value: Any) -> str:
    return _ENCODER.encode(value)


def dumps(value: Any) -> bytes:
    return dumps_str(value).encode("utf-8")
