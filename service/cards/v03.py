"""One card for both versions: the v0.3 members added to a 1.0 card's JSON.

A v0.3 client reads `protocolVersion`, `url` and `preferredTransport` (its main
interface), `additionalInterfaces` (`{url, transport}`), `supportsAuthenticatedExtendedCard`,
and OpenAPI-style `securitySchemes` (`{"type": "http", "scheme": "bearer"}`) and `security`
(`[{name: [scopes]}]`). A 1.0 client reads `supportedInterfaces` (the v0.3 entries say
`protocolVersion: "0.3"`), `capabilities.extendedAgentCard`, `securityRequirements`, and
schemes wrapped by kind (`{"httpAuthSecurityScheme": {...}}`).

Every member is derived from the 1.0 card, so they cannot disagree. The two shapes of a
security scheme share one object: the 1.0 wrapper and, beside it, `type` plus the same
members (apiKey's `location` as OpenAPI's `in`); a 1.0 parser ignores the extra members,
a v0.3 one the wrapper, and a2a-sdk's card resolver, which folds the OpenAPI form back
into the wrapper, gets the 1.0 scheme it was. A card signature covers the 1.0 members
(what 1.0 verifiers, a2a-sdk's among them, rebuild); the v0.3 members are copies of
signed ones.
"""

from __future__ import annotations

from typing import Any

from gen import a2a_pb2 as pb
from service.protocol.params import is_v03_version

V03_PROTOCOL_VERSION = "0.3.0"  # the card's protocolVersion, as v0.3 cards say it
# The 1.0 wrapper of each kind of scheme -> OpenAPI's `type`.
SCHEME_TYPES = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}


def v03_interfaces(card: pb.AgentCard) -> list[pb.AgentInterface]:
    return [i for i in card.supported_interfaces if is_v03_version(i.protocol_version)]


def openapi_scheme(wrapped: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 SecurityScheme's JSON (`{"<kind>SecurityScheme": {...}}`) in OpenAPI form."""
    for wrapper, kind in SCHEME_TYPES.items():
        if wrapper in wrapped:
            members = dict(wrapped[wrapper])
            if kind == "apiKey" and "location" in members:
                members["in"] = members.pop("location")
            return {"type": kind, **members}
    return {}


def add_v03_members(document: dict[str, Any], card: pb.AgentCard) -> dict[str, Any]:
    """`document` (the card's 1.0 JSON) with the v0.3 members added, in place; unchanged
    when the card lists no v0.3 interface."""
    interfaces = v03_interfaces(card)
    if not interfaces:
        return document
    main = interfaces[0]
    document["protocolVersion"] = V03_PROTOCOL_VERSION
    document["url"] = main.url
    document["preferredTransport"] = main.protocol_binding
    # The v0.3 spec recommends listing the main interface here too.
    document["additionalInterfaces"] = [
        {"url": i.url, "transport": i.protocol_binding} for i in interfaces
    ]
    document["supportsAuthenticatedExtendedCard"] = card.capabilities.extended_agent_card
    # v0.3 requires these even when empty (ProtoJSON leaves empty lists out).
    document.setdefault("capabilities", {})
    for name in ("defaultInputModes", "defaultOutputModes", "skills"):
        document.setdefault(name, [])
    for skill in document["skills"]:
        skill.setdefault("tags", [])
        skill.setdefault("description", "")
    for scheme in document.get("securitySchemes", {}).values():
        scheme.update(openapi_scheme(scheme))
    requirements = document.get("securityRequirements")
    if requirements:
        document["security"] = [
            {name: list(scopes.get("list", [])) for name, scopes in r.get("schemes", {}).items()}
            for r in requirements
        ]
    return document
