"""What the JSON bindings do with members that name no field of the request message.

The spec asks receivers to ignore fields they do not recognise, so a client built
against a newer protocol version still works here; gRPC does so by the nature of
protobuf. `json_unknown_fields = "ignore"` (the default) drops such members, at
any depth of the request (the request itself, its message, parts, configuration
...), before the document is parsed; `"reject"` refuses the first one with
InvalidParams naming its path and the fields that type does have.

Only members are concerned: a value the field cannot hold (an enum name this
version does not know, a string where a number belongs) is still InvalidParams.
Free-form values (`google.protobuf.Struct`/`Value`, e.g. `metadata`, a data
part) have no fields, so nothing in them is unknown; map values are walked as
the messages they are. (The walk: `gateway.transcode.known_fields_only`.)
"""

from __future__ import annotations

from dataclasses import dataclass

from service.setting import check_section, one_of, setting

IGNORE = "ignore"
REJECT = "reject"
POLICIES = (IGNORE, REJECT)


@dataclass
class UnknownFieldSettings:
    """Request JSON members that name no field ([Bindings: ProtoJSON](bindings.md#the-http-gateway-json-rpc-rest-agent-card))."""

    json_unknown_fields: str = setting(
        IGNORE,
        "JSON-RPC and REST request members that name no field: `ignore` (drop them, as the spec asks) or `reject` (`InvalidParams` naming the field); gRPC always ignores them",
        check=one_of(POLICIES, '"ignore" or "reject"'),
    )


def validate_unknown_fields(s: UnknownFieldSettings) -> None:
    check_section(s, UnknownFieldSettings)
