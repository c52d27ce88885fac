"""Agent cards: the public one (served by the gateway) and the extended one (GetExtendedAgentCard).

Both come from this one builder, so the two can never disagree about the agent.
"""

from __future__ import annotations

from typing import Any, Protocol

from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service import agent_metadata
from service.protocol.errors import ExtendedAgentCardNotConfiguredError, UnsupportedOperationError

PROTOCOL_VERSION = "1.0"
# Every card offers it: the a2a_service metadata its status updates may carry (optional).
METADATA_EXTENSION = pb.AgentExtension(
    uri=agent_metadata.EXTENSION_URI,
    description=agent_metadata.EXTENSION_DESCRIPTION,
    required=False,
)


def skill_from(value: Any) -> pb.AgentSkill:
    if isinstance(value, pb.AgentSkill):
        return value
    skill = pb.AgentSkill()
    json_format.ParseDict(value, skill)  # fills skill in place
    return skill


class Cards(Protocol):
    """What serves the two cards: a CardBuilder, or a SignedCards around one."""

    def public_card(self) -> pb.AgentCard: ...

    def extended_card(self) -> pb.AgentCard: ...


class CardBuilder:
    def __init__(
        self,
        *,
        name: str,
        description: str,
        version: str,
        agent: object,
        interfaces: list[pb.AgentInterface],
        push_notifications: bool,
        provider: dict[str, str] | None = None,
        documentation_url: str = "",
        icon_url: str = "",
        skills: list[Any] | None = None,
        input_modes: list[str] | None = None,
        output_modes: list[str] | None = None,
        extensions: list[dict[str, Any]] | None = None,
        extended_card: bool = False,
        extended_skills: list[Any] | None = None,
        security_schemes: dict[str, pb.SecurityScheme] | None = None,
        security_requirements: list[pb.SecurityRequirement] | None = None,
    ) -> None:
        self.interfaces = interfaces
        card = pb.AgentCard(
            name=name or getattr(agent, "name", "") or "A2A agent",
            description=description or getattr(agent, "description", "") or "An A2A 1.0 agent.",
            version=version,
        )
        if provider:
            card.provider.organization = provider.get("organization", "")
            card.provider.url = provider.get("url", "")
        if documentation_url:
            card.documentation_url = documentation_url
        if icon_url:
            card.icon_url = icon_url
        card.capabilities.streaming = True
        card.capabilities.push_notifications = push_notifications
        card.capabilities.extended_agent_card = extended_card
        for ext in extensions or []:
            card.capabilities.extensions.append(json_format.ParseDict(ext, pb.AgentExtension()))
        card.capabilities.extensions.append(METADATA_EXTENSION)
        card.default_input_modes.extend(
            input_modes or getattr(agent, "input_modes", None) or ["text/plain"]
        )
        card.default_output_modes.extend(
            output_modes or getattr(agent, "output_modes", None) or ["text/plain"]
        )
        for skill in skills if skills is not None else getattr(agent, "skills", []) or []:
            card.skills.append(skill_from(skill))
        for scheme_name, scheme in (
            security_schemes or {}
        ).items():  # service.auth: the enabled schemes
            card.security_schemes[scheme_name].CopyFrom(scheme)
        card.security_requirements.extend(security_requirements or [])
        self._base = card
        self._extended_enabled = extended_card
        self._extended_skills = (
            [skill_from(s) for s in extended_skills] if extended_skills else None
        )

    def public_card(self) -> pb.AgentCard:
        card = pb.AgentCard()
        card.CopyFrom(self._base)
        card.supported_interfaces.extend(self.interfaces)
        return card

    def extended_card(self) -> pb.AgentCard:
        if not self._extended_enabled:
            raise UnsupportedOperationError(
                "This agent offers no extended agent card (capabilities.extendedAgentCard is false)."
            )
        if self._extended_skills is None:
            raise ExtendedAgentCardNotConfiguredError(
                "The extended agent card is enabled but has no content configured."
            )
        card = self.public_card()
        card.skills.extend(self._extended_skills)
        return card


def interface(
    url: str, binding: str, tenant: str = "", version: str = PROTOCOL_VERSION
) -> pb.AgentInterface:
    return pb.AgentInterface(
        url=url, protocol_binding=binding, tenant=tenant, protocol_version=version
    )
