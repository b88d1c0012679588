"""The A2A request handler: each A2A method as a call of the runtime.

The SDK's own :class:`~a2a.server.request_handlers.DefaultRequestHandler` drives an agent
executor in this process and follows its tasks in memory; a tidings run outlives the request
and the process that started it, so this handler reads every task from the runtime instead
(through :class:`~tidings.service.a2a.stores.RuntimeTaskStore`) and streams from the
conversation's feed. The SDK's routes parse, validate and serialise around it.

- A message without a ``contextId`` opens a conversation with the agent's profile; one with a
  ``contextId`` is posted to that conversation. The task is the input the message made.
- ``SendMessage`` waits until the run that reads it ends or waits for a person (approval, an
  MCP server's question), unless ``returnImmediately``; then it answers the task as it stands.
- A message naming a ``taskId`` that waits for input decides it
  (:mod:`~tidings.service.a2a.messages`: what a message says and decides).
- Streams carry the task first, then the task's events from the conversation's feed, until a
  final state or ``input-required`` (:mod:`~tidings.service.a2a.stream`); ``SubscribeToTask``
  with a ``Last-Event-ID`` header resumes after that position, in any process and after a
  restart. A stream starts from the conversation's journal head (one row), never by reading
  the journal.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from tidings.errors import (
    BacklogFullError,
    ConversationClosedError,
    InputQueueFullError,
    InvalidInputError,
    RuntimeLockedError,
    UnknownConversationError,
)
from tidings.runtime.answers import DEFAULT_TIMEOUT
from tidings.service.a2a.messages import content_of, decide
from tidings.service.a2a.stores import (
    Caller,
    RuntimePushConfigStore,
    RuntimeTaskStore,
    caller_of,
    find_input,
)
from tidings.service.a2a.stream import last_event_id, task_events
from tidings.service.a2a.tasks import (
    FINAL_STATES,
    MESSAGE_ID_META,
    agent_text,
    read_task,
    timestamp,
)
from tidings.support.policy import check_id
from tidings.types import Answer, Input, new_id

log = logging.getLogger("tidings.service.a2a")

TITLE_CHARS = 80
_REFUSED_AT_THE_DOOR = (InputQueueFullError, ConversationClosedError, BacklogFullError,
                        RuntimeLockedError)
_STATUS_STATES = {
    "running": TaskState.TASK_STATE_WORKING,
    "awaiting_approval": TaskState.TASK_STATE_INPUT_REQUIRED,
}


class TidingsRequestHandler(RequestHandler):
    """Every A2A method over the caller's runtime (see the module docstring)."""

    def __init__(self) -> None:
        self.tasks = RuntimeTaskStore()

    # -- reading ---------------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext
                          ) -> Task | None:
        if params.HasField("history_length") and params.history_length < 0:
            raise InvalidParamsError("history length must be non-negative")
        task = await self.tasks.get(params.id, context, history_length=(
            params.history_length if params.HasField("history_length") else None))
        if task is None:
            raise TaskNotFoundError(f"no task {params.id!r}")
        return task

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext
                            ) -> ListTasksResponse:
        return await self.tasks.list(params, context)

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError()

    # -- sending ---------------------------------------------------------------------------

    async def _admit(self, caller: Caller, params: SendMessageRequest, *, wait: bool = False
                     ) -> tuple[Input | Answer | Task, int]:
        """Post the message: the input it made (or, for a message to an input-required task,
        that task's input once decided), or a task answered at once (rejected at the door);
        and the conversation's position before it. ``wait``: a new message's answer is returned
        once its run ended or waits for a person (or the wait's bound)."""
        message = params.message
        if message.task_id:
            item = await find_input(caller, message.task_id)
            before = await caller.runtime.catalog.head(item.conversation_id,
                                                       owner=caller.principal)
            return await decide(caller, message), before
        text = content_of(message)
        before = 0
        if message.context_id:
            try:
                if wait:  # a waiting post's caller needs no position: the id is checked alone
                    check_id(message.context_id, "context id")
                else:
                    before = await caller.runtime.catalog.head(message.context_id,
                                                               owner=caller.principal)
            except (UnknownConversationError, InvalidInputError):
                raise TaskNotFoundError(f"no context {message.context_id!r}") from None
        return await self._post(caller, message, text, wait=wait), before

    @staticmethod
    async def _check_push(caller: Caller, params: SendMessageRequest) -> None:
        """A push-notification config sent with a message is checked before the message is
        posted: one that would be refused refuses the message, and nothing is posted."""
        if not params.configuration.HasField("task_push_notification_config"):
            return
        config = params.configuration.task_push_notification_config
        try:
            await caller.runtime.push_configs.check(
                config.url, config.token, config.authentication.scheme,
                config.authentication.credentials)
        except InvalidInputError as exc:
            raise InvalidParamsError(exc.message) from None

    async def _register_push(self, params: SendMessageRequest, item: Input,
                             context: ServerCallContext) -> None:
        """A push-notification config sent with the message is the new task's, as if created
        by ``CreateTaskPushNotificationConfig`` at once: it hears of the task's states from
        the next one committed."""
        if params.configuration.HasField("task_push_notification_config"):
            await self._push(context).set_info(
                item.input_id, params.configuration.task_push_notification_config, context)

    async def _post(self, caller: Caller, message: Message, text: str, *, wait: bool = False
                    ) -> Input | Answer | Task:
        runtime, owner = caller.runtime, caller.principal
        conversation_id = message.context_id
        if not conversation_id:
            try:
                opened = await runtime.create_conversation(
                    owner, caller.agent.profile, title=" ".join(text.split())[:TITLE_CHARS])
            except InvalidInputError as exc:
                raise InvalidParamsError(exc.message) from None
            conversation_id = opened.conversation_id
        meta = {MESSAGE_ID_META: message.message_id} if message.message_id else None
        idempotency_key = (f"a2a-{message.message_id}"
                           if message.context_id and message.message_id else None)
        try:
            if wait:
                answer = await runtime.post(
                    conversation_id, text, owner=owner, meta=meta,
                    idempotency_key=idempotency_key, wait=True, timeout=DEFAULT_TIMEOUT,
                    until=_asking(caller))
                return answer
            return await runtime.post(conversation_id, text, owner=owner, meta=meta,
                                      idempotency_key=idempotency_key)
        except UnknownConversationError:
            raise TaskNotFoundError(f"no context {conversation_id!r}") from None
        except _REFUSED_AT_THE_DOOR as exc:
            return Task(id=new_id("rejected"), context_id=conversation_id, status=TaskStatus(
                state=TaskState.TASK_STATE_REJECTED, timestamp=timestamp(runtime.clock.now_us()),
                message=agent_text(exc.message, task_id="", context_id=conversation_id,
                                   message_id=new_id("msg"), meta={"code": exc.code})))
        except InvalidInputError as exc:
            raise InvalidParamsError(exc.message) from None

    async def _wait(self, caller: Caller, item: Input) -> None:
        """Until the run that reads ``item`` ends or waits for a person (or the wait's bound)."""
        await caller.runtime.answers.wait(item, DEFAULT_TIMEOUT, until=_asking(caller))

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext
                              ) -> Task | Message:
        caller = caller_of(context)
        await self._check_push(caller, params)
        blocking = not params.configuration.return_immediately
        # A new message that blocks is the library's own waiting post (its wait reads nothing
        # until the conversation changes); a push config sent with it is registered first.
        waited = blocking and not params.message.task_id and not params.configuration.HasField(
            "task_push_notification_config")
        admitted, _ = await self._admit(caller, params, wait=waited)
        if isinstance(admitted, Task):
            return admitted
        answer = admitted if isinstance(admitted, Answer) else None
        item = admitted.input if isinstance(admitted, Answer) else admitted
        await self._register_push(params, item, context)
        if blocking and not waited:
            await self._wait(caller, item)
        history_length = (params.configuration.history_length
                          if params.configuration.HasField("history_length") else None)
        return await read_task(caller.runtime, item, owner=caller.principal,
                               history_length=history_length, answer=answer)

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event]:
        caller = caller_of(context)
        await self._check_push(caller, params)
        admitted, before = await self._admit(caller, params)
        if isinstance(admitted, Task):
            yield admitted
            return
        item = admitted.input if isinstance(admitted, Answer) else admitted
        await self._register_push(params, item, context)
        async with aclosing(task_events(caller, item, after_seq=before,
                                        resumed=False)) as events:
            async for event in events:
                yield event

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event]:
        caller = caller_of(context)
        item = await find_input(caller, params.id)
        last = last_event_id(context)
        if last is None:  # from now on: the task read just after this position says the rest
            task = await read_task(caller.runtime, item, owner=caller.principal, history=False)
            if task.status.state in FINAL_STATES:
                raise UnsupportedOperationError(
                    f"task {params.id!r} is {TaskState.Name(task.status.state)}: nothing more "
                    "will happen to it")
            last = await caller.runtime.catalog.head(item.conversation_id,
                                                     owner=caller.principal)
        async with aclosing(task_events(caller, item, after_seq=last,
                                        resumed=last_event_id(context) is not None)) as events:
            async for event in events:
                yield event

    # -- cancelling ------------------------------------------------------------------------

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext
                             ) -> Task | None:
        caller = caller_of(context)
        runtime, owner = caller.runtime, caller.principal
        item = await find_input(caller, params.id)
        answer = await runtime.inputs.answer_of(item)
        task = await read_task(runtime, item, owner=owner, history=False)
        if task.status.state in FINAL_STATES:
            raise TaskNotCancelableError(
                f"task {params.id!r} is {TaskState.Name(task.status.state)} already")
        if answer.run is None:
            raise TaskNotCancelableError(
                f"task {params.id!r} waits behind another run: cancel it once it started")
        await runtime.runs.stop(item.conversation_id, answer.run.run_id, owner=owner)
        await runtime.answers.wait(item, DEFAULT_TIMEOUT)
        return await read_task(runtime, item, owner=owner)

    # -- push-notification configs -----------------------------------------------------------

    def _push(self, context: ServerCallContext) -> RuntimePushConfigStore:
        return RuntimePushConfigStore(caller_of(context).runtime)

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await self._push(context).set_info(params.task_id, params, context)

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await self._push(context).get_one(params.task_id, params.id or params.task_id,
                                                 context)

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        limit = params.page_size or 100
        configs = await self._push(context).get_page(params.task_id, context,
                                                     after=params.page_token, limit=limit)
        return ListTaskPushNotificationConfigsResponse(
            configs=configs, next_page_token=configs[-1].id if len(configs) == limit else "")

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        await self._push(context).delete_info(params.task_id, context, params.id or None)


def _asking(caller: Caller) -> Callable[[Answer], Awaitable[bool]]:
    """A wait's ``until``: whether the run that read the input waits for a person's answer to
    a question (an approval already ends the wait)."""
    async def asking(answer: Answer) -> bool:
        if answer.run is None or answer.run.status.ended:
            return False
        pending = await caller.runtime.questions.list(
            answer.input.conversation_id, owner=caller.principal, status="pending")
        return any(q.run_id == answer.run.run_id for q in pending)

    return asking


__all__ = ("TidingsRequestHandler",)
