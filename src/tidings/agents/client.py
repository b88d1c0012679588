"""A remote agent's A2A client: the ``a2a-sdk``'s own client, reduced to what a remote child
needs -- send a brief, ask about its task, watch it (``SubscribeToTask``, where the agent's card
says it streams), find the task a brief made, cancel it.

Its answers are plain records (:class:`RemoteTask`) and its failures three exceptions the
follower acts on: :class:`RemoteUnreachableError` (wait and ask again),
:class:`RemoteTaskUnknownError` (the task is lost) and :class:`RemoteRefusedError` (a protocol
error about the request).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TypeVar

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    Client,
    ClientConfig,
    ClientFactory,
)
from a2a.helpers.proto_helpers import get_message_text
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    MethodNotFoundError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from tidings.agents.declaration import RemoteAgent
from tidings.agents.remote import (
    ENDED,
    RemoteCannotFindError,
    RemoteRefusedError,
    RemoteTask,
    RemoteTaskUnknownError,
    RemoteUnreachableError,
)

T = TypeVar("T")

_STATES = {
    TaskState.TASK_STATE_SUBMITTED: "submitted",
    TaskState.TASK_STATE_WORKING: "working",
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "canceled",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input-required",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth-required",
}
def _task(task: Task) -> RemoteTask:
    state = _STATES.get(task.status.state, "unknown")
    said = get_message_text(task.status.message) if task.status.HasField("message") else ""
    if state == "completed":
        text = "\n".join(p.text for a in task.artifacts for p in a.parts if p.text) or said
    else:
        text = said
    return RemoteTask(task.id, state, text, task.context_id)


def _state_of(event: StreamResponse) -> str | None:
    """The task state an event of a task's stream tells, if it tells one."""
    if event.HasField("task"):
        return _STATES.get(event.task.status.state, "unknown")
    if event.HasField("status_update"):
        return _STATES.get(event.status_update.status.state, "unknown")
    return None


class AgentClient:
    """One remote agent's client, made on first use and made again after a broken request.

    Two of the SDK's clients over one connection pool and one read of the Agent Card: one that
    never streams (a brief is sent returning at once, its task asked about by ``GetTask``) and,
    where the card says the agent streams and the declaration allows it, one that subscribes.
    """

    _BINDINGS = ("JSONRPC", "HTTP+JSON")

    def __init__(self, agent: RemoteAgent) -> None:
        self.agent = agent
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._streamer: Client | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> tuple[Client, Client | None]:
        async with self._lock:
            if self._client is None:
                timeout = self.agent.timeout.total_seconds()
                http = httpx.AsyncClient(headers=self.agent.headers(), timeout=timeout,
                                         follow_redirects=False)
                try:
                    card = await A2ACardResolver(http, self.agent.url).get_agent_card()
                    self._client = ClientFactory(ClientConfig(
                        httpx_client=http, streaming=False, polling=True,
                        supported_protocol_bindings=list(self._BINDINGS))).create(card)
                    if self.agent.subscribe and card.capabilities.streaming:
                        self._streamer = ClientFactory(ClientConfig(
                            httpx_client=http, streaming=True,
                            supported_protocol_bindings=list(self._BINDINGS))).create(card)
                except BaseException:
                    self._client = self._streamer = None
                    await http.aclose()
                    raise
                self._http = http
            return self._client, self._streamer

    async def _connected(self) -> Client:
        return (await self._connect())[0]

    async def streams(self) -> bool:
        """Whether the agent's tasks are watched by subscription (its card says it streams, and
        the declaration does not turn it off)."""
        async with self._mapped():
            return (await self._connect())[1] is not None

    async def watch(self, task_id: str) -> AsyncGenerator[str]:
        """The states of the task as the agent streams them (``SubscribeToTask``), until the
        stream ends. Each read of the stream is bounded by the declaration's ``timeout``: a
        stream silent that long ends too (the follower then asks and subscribes again). Fails
        as the other calls do."""
        async with self._mapped():
            streamer = (await self._connect())[1]
            if streamer is None:
                raise RemoteCannotFindError("the agent does not stream")
            with contextlib.suppress(A2AClientTimeoutError):
                async for event in streamer.subscribe(SubscribeToTaskRequest(id=task_id)):
                    state = _state_of(event)
                    if state is not None:
                        yield state

    @contextlib.asynccontextmanager
    async def _mapped(self) -> AsyncIterator[None]:
        """The SDK's failures as the four the follower acts on."""
        try:
            yield
        except TaskNotFoundError as exc:
            raise RemoteTaskUnknownError(str(exc)) from None
        except A2AClientError as exc:  # the transport: the card, the connection, HTTP
            await self.close()  # made again on the next request
            raise RemoteUnreachableError(str(exc)) from None
        except (UnsupportedOperationError, MethodNotFoundError) as exc:
            raise RemoteCannotFindError(str(exc)) from None
        except A2AError as exc:
            raise RemoteRefusedError(f"{type(exc).__name__}: {exc}") from None
        except (httpx.HTTPError, OSError) as exc:
            await self.close()
            raise RemoteUnreachableError(str(exc) or type(exc).__name__) from None

    async def _call(self, call: Callable[[Client], Awaitable[T]]) -> T:
        async with self._mapped():
            return await call(await self._connected())

    async def send(self, text: str, *, message_id: str, context_id: str,
                   task_id: str | None = None, push: tuple[str, str] | None = None
                   ) -> RemoteTask:
        """Send ``text`` as a message of the caller (ids chosen here, so that a brief whose
        answer was lost can be found again by its context; no context: the agent opens one);
        returns at once with its task. ``push``: the URL and token of a push-notification config
        for the task (an agent without push notifications ignores it)."""
        configuration = SendMessageConfiguration(return_immediately=True)
        if push is not None:
            configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(id="tidings", url=push[0], token=push[1]))
        request = SendMessageRequest(
            message=Message(message_id=message_id, context_id=context_id, task_id=task_id or "",
                            role=Role.ROLE_USER, parts=[Part(text=text)]),
            configuration=configuration)

        async def call(client: Client) -> RemoteTask:
            async for event in client.send_message(request):
                if event.HasField("task"):
                    return _task(event.task)
                if event.HasField("message"):
                    return RemoteTask(None, "completed", get_message_text(event.message),
                                      event.message.context_id)
            raise A2AError("the agent answered the message with nothing")
        return await self._call(call)

    async def get(self, task_id: str) -> RemoteTask:
        async def call(client: Client) -> RemoteTask:
            return _task(await client.get_task(GetTaskRequest(id=task_id, history_length=0)))
        return await self._call(call)

    async def find(self, context_id: str, message_id: str) -> RemoteTask | None:
        """The task the message ``message_id`` made in ``context_id``, if the agent has it:
        the one whose history holds the message, or the context's only task when the agent
        keeps no history."""
        async def call(client: Client) -> RemoteTask | None:
            page = await client.list_tasks(ListTasksRequest(
                context_id=context_id, page_size=100, history_length=100,
                include_artifacts=True))
            for task in page.tasks:
                if any(m.message_id == message_id for m in task.history):
                    return _task(task)
            if len(page.tasks) == 1 and not page.tasks[0].history:
                return _task(page.tasks[0])
            return None
        return await self._call(call)

    async def cancel(self, task_id: str) -> None:
        """Ask the agent to cancel the task; one that ended already is left as it is."""
        async def call(client: Client) -> None:
            with contextlib.suppress(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task_id))
        await self._call(call)

    async def close(self) -> None:
        client, streamer, http = self._client, self._streamer, self._http
        self._client = self._streamer = self._http = None
        for made in (client, streamer):
            if made is not None:
                with contextlib.suppress(Exception):
                    await made.close()
        if http is not None:
            await http.aclose()


__all__ = ("ENDED", "AgentClient", "RemoteCannotFindError", "RemoteRefusedError", "RemoteTask",
           "RemoteTaskUnknownError", "RemoteUnreachableError")
