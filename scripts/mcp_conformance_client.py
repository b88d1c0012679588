"""The client program the MCP conformance suite runs against tidings (see scripts/mcp-conformance).

The suite starts a test server for one client scenario, then runs this program with the
server's URL as its last argument, the scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for
some scenarios, JSON facts in ``MCP_CONFORMANCE_CONTEXT`` (pre-registered OAuth credentials and
the like). It goes through tidings' own client path, not the bare SDK: a runtime on a fresh
SQLite database, an :class:`tidings.MCPServer` pointed at the URL, and a conversation whose model
calls every tool the server offers (arguments made from each tool's input schema), then answers.
A question the server asks a person meanwhile is accepted as its form stands (its defaults).

It exits 0 when the server connected and every tool call returned a result that is not an
error; otherwise 1, with the reason on stderr. What the suite checks is on the server's side
(what it saw tidings send); the exit status is one of its checks.

    python scripts/mcp_conformance_client.py http://localhost:3000/mcp
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import tidings
from tidings import MCPOAuth, MCPServer, Profile
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, ToolCall

SERVER = "conf"
PREFIX = f"{SERVER}."
MODEL = "conformance"


def _value(schema: Mapping[str, Any], name: str, index: int) -> Any:
    """A plausible argument for one property of a tool's input schema."""
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind in ("number", "integer"):
        return index + 2  # add_numbers(a=2, b=3)
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return f"conformance {name}"


def arguments_for(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for every required property of a tool's input schema."""
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or []
    return {name: _value(properties.get(name) or {}, name, index)
            for index, name in enumerate(required)}


class ConformanceModel:
    """A model that calls every tool of the server under test once, then answers.

    Its first reply in a turn calls each ``conf.*`` tool it is offered; once the results are
    in (the newest message is a tool result), it answers with what they said.
    """

    name = MODEL

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest, *,
                       on_delta: DeltaCallback | None = None) -> ModelReply:
        self.calls += 1
        newest = request.messages[-1] if request.messages else None
        if newest is not None and newest.role == "tool":
            results = [m for m in request.messages if m.role == "tool"]
            text = "; ".join(f"{m.tool_name}: {m.content}" for m in results)
            return ModelReply(text=f"The tools answered: {text}", model=MODEL)
        calls = tuple(
            ToolCall(call_id=f"call_{index}", name=tool.name,
                     arguments=arguments_for(tool.parameters))
            for index, tool in enumerate(request.tools) if tool.name.startswith(PREFIX))
        if not calls:
            return ModelReply(text="The server offers no tools.", model=MODEL)
        return ModelReply(text="", tool_calls=calls, model=MODEL)


CIMD_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document the suite's authorization server expects tidings to name."""


def oauth_for(scenario: str, context: Mapping[str, Any]) -> MCPOAuth | None:
    """How tidings authorizes in an ``auth/`` scenario, from the suite's context: a service
    account's client credentials (a secret, or a private key signing a JWT), or the
    authorization code grant with a pre-registered client or none (dynamic registration, or
    the client ID metadata document where the server takes one). The suite's authorization
    server approves at once, so the code is read from its redirect without a browser."""
    if not scenario.startswith("auth/"):
        return None
    client_id = context.get("client_id")
    if scenario.startswith("auth/client-credentials-"):
        return MCPOAuth(grant="client_credentials", client_id=client_id,
                        client_secret=context.get("client_secret"),
                        private_key=context.get("private_key_pem"),
                        signing_algorithm=context.get("signing_algorithm", "RS256"))
    return MCPOAuth(client_id=client_id, client_secret=context.get("client_secret"),
                    client_metadata_url=None if client_id else CIMD_URL, headless=True)


def server_for(url: str, scenario: str, context: Mapping[str, Any]) -> MCPServer:
    """The declared server; credentials from the suite's context where tidings takes them."""
    return MCPServer(SERVER, url=url, timeout=timedelta(seconds=20),
                     connect_timeout=timedelta(seconds=10),
                     oauth=oauth_for(scenario, context))


def say(line: str) -> None:
    """A line of what happened, on stdout (the suite keeps it with the scenario's results)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _connected(rt: Any) -> bool | None:
    """Whether the server's connection is up (None: this runtime does not say)."""
    try:
        return bool(rt.mcp[SERVER].up)
    except (AttributeError, KeyError, TypeError):
        return None


async def run(url: str, scenario: str, context: Mapping[str, Any]) -> list[str]:
    """Drive one conversation against the server at ``url``; the problems found (none: pass)."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tidings-conformance-") as tmp:
        database = f"sqlite:///{Path(tmp) / 'conformance.db'}"
        async with tidings.open(database, models=[ConformanceModel()],
                                mcp_servers=[server_for(url, scenario, context)]) as rt:
            tools = tuple(sorted(n for n in rt.tools.names() if n.startswith(PREFIX)))
            connected = _connected(rt)
            say(f"scenario {scenario or '?'}: connected={connected}, tools={list(tools)}")
            if connected is False:
                problems.append("the server did not connect (see the log above)")
                return problems
            profile = Profile(model=MODEL, tools=tools)
            conversation = (await rt.create_conversation("conformance", profile)).conversation_id
            person = asyncio.ensure_future(answer_as_a_person(rt, conversation))
            try:
                await rt.post(conversation, "Call every tool the server offers.", wait=True)
            finally:
                person.cancel()
            transcript = await rt.transcript(conversation)
            for message in transcript:
                say(f"{message.role}: {message.content}")
                if message.role == "tool" and (message.meta.get("is_error") or
                                               message.content.startswith('{"error"')):
                    problems.append(f"{message.tool_name} failed: {message.content}")
            called = {m.tool_name for m in transcript if m.role == "tool"}
            problems.extend(f"{tool} was not called" for tool in tools if tool not in called)
    return problems


async def answer_as_a_person(rt: Any, conversation: str) -> None:
    """The person of the conversation: each question the server asks is accepted with the form
    as it stands (its defaults; a plausible value for a required field without one)."""
    async for event in rt.watch(conversation):
        if event.type != "question_asked":
            continue
        schema = event.data.get("requested_schema") or {}
        properties = schema.get("properties") or {}
        content = {name: _value(properties.get(name) or {}, name, index)
                   for index, name in enumerate(schema.get("required") or [])
                   if "default" not in (properties.get(name) or {})}
        answered = await rt.answer(conversation, event.data["question_id"], action="accept",
                                   content=content, decided_by="conformance")
        say(f"question {event.data['message']!r} answered: {answered.answer}")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: mcp_conformance_client.py <server-url>\n")
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    problems = asyncio.run(run(argv[-1], scenario, context))
    for problem in problems:
        sys.stderr.write(f"FAILED: {problem}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
