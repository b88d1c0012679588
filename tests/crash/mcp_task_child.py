"""The child process of the MCP task crash tests:
``mcp_task_child.py URL SERVER TOOL ARGUMENTS [--asked]``.

It opens a runtime on the database at URL with one MCP server (SERVER: the keyword arguments
of its :class:`~tidings.MCPServer`, as JSON), has a turn call TOOL (``<server>.<tool>``) with
ARGUMENTS (JSON) in the background, announces the checkpoint ``started`` (the conversation,
the instance, the task's key and its MCP task id) once that turn ended, and blocks until it is
SIGKILLed. With ``--asked``, the call is made in the foreground instead, and the checkpoint is
``asked`` (the conversation, the instance, the question) once the server's question to a person
is pending.
"""

from __future__ import annotations

import asyncio
import json
import sys

from tidings import MCPServer, Profile, Rule, Runtime, RuntimeConfig, ScriptedModel

STARTED = "Started."
BLOCK_SECONDS = 120  # a safety net: a child whose parent vanished does not linger forever


async def main(url: str, server: MCPServer, tool: str, arguments: dict[str, object],
               asked: bool) -> None:
    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": tool, "arguments": arguments}]}),
        Rule({"tool_result": tool}, {"text": STARTED}),
    ])
    async with Runtime.open(url, models=[model],
                            config=RuntimeConfig(mcp_servers=(server,))) as rt:
        conv = (await rt.create_conversation("alice", Profile(
            model="scripted", tools=(tool,), background=() if asked else (tool,)))
        ).conversation_id
        await rt.post(conv, "go")
        if asked:
            async for event in rt.watch(conv):  # the feed says when the server asks
                if event.type == "question_asked":
                    announced = {"checkpoint": "asked",
                                 "question_id": event.data["question_id"]}
                    break
        else:
            await rt.settle(conv)
            [task] = await rt.tasks.list(conv)
            announced = {"checkpoint": "started", "task_key": task.task_key,
                         "mcp_task_id": task.mcp_task_id}
        sys.stdout.write(json.dumps({**announced, "conversation_id": conv,
                                     "instance_id": rt.instance_id}) + "\n")
        sys.stdout.flush()
        await asyncio.sleep(BLOCK_SECONDS)
        raise SystemExit("the parent never killed this child")


if __name__ == "__main__":
    url, declared, tool, arguments = sys.argv[1:5]
    asyncio.run(main(url, MCPServer(**json.loads(declared)), tool, json.loads(arguments),
                     asked=sys.argv[5:] == ["--asked"]))
