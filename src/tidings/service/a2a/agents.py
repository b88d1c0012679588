"""The A2A agents a runtime serves, and their Agent Cards.

Each named profile of the runtime (a config file's ``[profiles.NAME]``) is one agent, at
``/a2a/NAME``; a runtime with no named profile serves one agent, ``default``, whose profile is
its first model with no tools. The card at ``/.well-known/agent-card.json`` is the first
agent's; every agent's own card is at ``/a2a/NAME/.well-known/agent-card.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from tidings import __version__
from tidings.runtime.root import Runtime
from tidings.service.jwt_bearer import JWTBearer
from tidings.types import Profile

DEFAULT_AGENT = "default"
PREFIX = "/a2a"
"""Where the agents' endpoints are: ``/a2a/NAME`` (JSON-RPC), ``/a2a/NAME/rest`` (HTTP+JSON)."""
BEARER = "bearer"
JWT = "jwt"


@dataclass(frozen=True, slots=True)
class Agent:
    """One served agent: its name and the profile its conversations are opened with (a
    runtime's named profile, by name, or a whole profile)."""

    name: str
    profile: Profile | str

    def resolve(self, runtime: Runtime) -> Profile:
        return self.profile if isinstance(self.profile, Profile) else (
            runtime.profiles[self.profile])


def agents_of(runtime: Runtime) -> dict[str, Agent]:
    """The agents ``runtime`` serves, by name, in the order of its profiles."""
    if runtime.profiles:
        return {name: Agent(name, name) for name in runtime.profiles}
    return {DEFAULT_AGENT: Agent(DEFAULT_AGENT, Profile(model=next(iter(runtime.models))))}


def card(runtime: Runtime, agent: Agent, base_url: str,
         jwt: JWTBearer | None = None) -> AgentCard:
    """The agent's card; ``base_url``: where the service is reached (no trailing slash).
    ``jwt``: an identity provider's JWT bearer tokens are accepted too (a second scheme; a
    caller meets either)."""
    profile = agent.resolve(runtime)
    at = f"{base_url}{PREFIX}/{agent.name}"
    skills = []
    for name in profile.tools:
        tool = runtime.tools.get(name)
        skills.append(AgentSkill(
            id=name, name=name, tags=["tool"],
            description=tool.description if tool is not None and tool.description else name))
    if not skills:
        skills.append(AgentSkill(id="conversation", name="conversation", tags=["chat"],
                                 description="Answers in a durable conversation."))
    return AgentCard(
        name=agent.name,
        description=(f"A tidings agent (profile {agent.name!r}, model {profile.model!r}): a "
                     "context is a durable conversation, a task is the run a message started."),
        version=__version__,
        provider=AgentProvider(organization="tidings", url=base_url),
        supported_interfaces=[
            AgentInterface(url=at, protocol_binding=TransportProtocol.JSONRPC.value,
                           protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=f"{at}/rest", protocol_binding=TransportProtocol.HTTP_JSON.value,
                           protocol_version=PROTOCOL_VERSION_1_0),
        ],
        # Push notifications are delivered, durably (tidings.push).
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes=_schemes(jwt),
        security_requirements=[SecurityRequirement(schemes={name: StringList()})
                               for name in _schemes(jwt)],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=skills,
    )


def _schemes(jwt: JWTBearer | None) -> dict[str, SecurityScheme]:
    schemes = {BEARER: SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="Bearer",
        description="A principal's bearer token, as for the rest of the HTTP API."))}
    if jwt is not None:
        schemes[JWT] = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", bearer_format="JWT",
            description=(f"A JWT issued by {jwt.issuer}"
                         + (f" for {jwt.audience}" if jwt.audience else "")
                         + f"; its {jwt.principal_claim!r} claim names the principal.")))
    return schemes


__all__ = ("BEARER", "DEFAULT_AGENT", "JWT", "PREFIX", "Agent", "agents_of", "card")
