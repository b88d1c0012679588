"""A remote A2A agent for the P5 tests, written with the ``a2a-sdk``'s own server classes (an
``AgentExecutor`` behind the SDK's ``DefaultRequestHandler``, its JSON-RPC and Agent Card
routes, an in-memory task store), served on loopback: ``remote.py --http PORT --state DIR``.
Its card says it streams (``SubscribeToTask``) unless ``--no-streaming`` is given.

What it does with a brief, by the words in it:

- ``fail``: the task fails, saying why;
- ``ask``: the task asks (input-required) which colour; the next message on the task answers;
- ``slow``: the task works until ``DIR/release`` exists (or it is cancelled);
- ``forget``: the task works, then the agent forgets it (its store no longer has it);
- anything else: the task completes with ``done: <brief>`` as its artifact.

Every message it receives is one line of ``DIR/received.log`` (its message id, then its text);
every cancel one line of ``DIR/cancelled.log``; every task's end one line of ``DIR/ended.log``
(its task id and the wall-clock time in microseconds). With ``REMOTE_TOKEN`` set, a request without
``Authorization: Bearer <REMOTE_TOKEN>`` is refused 401. It takes push-notification configs (with a
message, or created on a task) and POSTs each task's news to them, the SDK's own way.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import httpx
import uvicorn
from a2a.helpers.proto_helpers import get_message_text, new_task, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Role,
    TaskState,
)
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


class Helper(AgentExecutor):
    def __init__(self, state: Path, store: InMemoryTaskStore) -> None:
        self.state = state
        self.store = store

    def _log(self, name: str, line: str) -> None:
        with (self.state / name).open("a", encoding="utf-8") as log:
            log.write(line.replace("\n", " ") + "\n")

    async def _complete(self, updater: TaskUpdater, answer: str) -> None:
        await updater.add_artifact([Part(text=answer)], name="answer")
        self._log("ended.log", f"{updater.task_id} {time.time_ns() // 1000}")
        await updater.complete()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = get_message_text(context.message)
        self._log("received.log", f"{context.message.message_id} {text}")
        task = context.current_task
        if task is None:
            task = new_task(task_id=context.task_id or "", context_id=context.context_id or "",
                            state=TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def said(words: str) -> object:
            return new_text_message(words, context_id=task.context_id, task_id=task.id,
                                    role=Role.ROLE_AGENT)

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:  # the answer
            await self._complete(updater, f"painted {text}")
            return
        await updater.start_work()
        await asyncio.sleep(0.2)  # the spawning turn ends first, as with real work
        if "fail" in text:
            await updater.failed(said("no such thing"))  # type: ignore[arg-type]
        elif "ask" in text:
            await updater.requires_input(said("which colour?"))  # type: ignore[arg-type]
        elif "slow" in text:
            while not (self.state / "release").exists():  # noqa: ASYNC110 (another process)
                await asyncio.sleep(0.05)
            await self._complete(updater, f"done slowly: {text}")
        elif "forget" in text:
            await asyncio.sleep(0.2)
            await self.store.delete(task.id, context.call_context)
            await asyncio.sleep(3600)
        else:
            await self._complete(updater, f"done: {text}")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self._log("cancelled.log", context.task_id or "")
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        token = os.environ.get("REMOTE_TOKEN")
        if token and request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


def app(port: int, state: Path, *, streaming: bool = True) -> Starlette:
    card = AgentCard(
        name="helper", description="A remote helper for the P5 tests.", version="1.0",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC",
                                             url=f"http://127.0.0.1:{port}/",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=streaming, push_notifications=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="help", name="help", description="Helps.", tags=["help"])],
    )
    store = InMemoryTaskStore()
    configs = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        Helper(state, store), store, card, push_config_store=configs,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(timeout=10), configs))
    served = Starlette(routes=[*create_agent_card_routes(card),
                               *create_jsonrpc_routes(handler, "/")])
    served.add_middleware(Bearer)
    return served


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--no-streaming", action="store_true")
    args = parser.parse_args()
    uvicorn.run(app(args.http, args.state, streaming=not args.no_streaming), host="127.0.0.1",
                port=args.http,
                log_level="warning")


if __name__ == "__main__":
    main()
