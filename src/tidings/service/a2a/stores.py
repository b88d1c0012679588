"""The SDK's store interfaces over the runtime: tasks are read from the runtime's inputs and runs
(never saved apart from them), push-notification configs are kept in tidings' own database.

Both act for the caller the request was authenticated as (:class:`Caller`, put in the call
context's state by the routes): another principal's task is unknown, exactly as an unknown id.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.server.tasks import PushNotificationConfigStore, TaskStore
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    ListTasksRequest,
    ListTasksResponse,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from a2a.utils.task import validate_page_size

from tidings.errors import (
    InvalidInputError,
    UnknownConversationError,
    UnknownInputError,
    UnknownPushConfigError,
)
from tidings.push import PushConfig
from tidings.runtime.root import Runtime
from tidings.service.a2a.agents import Agent
from tidings.service.a2a.tasks import read_task
from tidings.types import Input, Origin

CALLER = "tidings.a2a.caller"
"""The call context's state key of the :class:`Caller`."""
LISTED_CONVERSATIONS = 1_000
"""ListTasks without a context looks through at most this many of the caller's conversations."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls, on which runtime, through which agent."""

    runtime: Runtime
    principal: str
    agent: Agent


def caller_of(context: ServerCallContext) -> Caller:
    caller = context.state.get(CALLER)
    if not isinstance(caller, Caller):
        raise RuntimeError("the A2A call context has no caller: the routes set it")
    return caller


TASK_ORIGINS = frozenset({Origin.PERSON, Origin.TASK_RESULT, Origin.CHILD})
"""The inputs that are tasks: a person's message, and a later answer -- a background task's
notice or a child's reply, which starts a supplementary run (docs/a2a.md, Later answers)."""


async def find_input(caller: Caller, task_id: str) -> Input:
    """The input that is the task ``task_id``, in the caller's conversations."""
    try:
        item = await caller.runtime.inputs.get(task_id, owner=caller.principal)
    except (UnknownInputError, InvalidInputError):
        raise TaskNotFoundError(f"no task {task_id!r}") from None
    if item.origin not in TASK_ORIGINS:
        raise TaskNotFoundError(f"no task {task_id!r}")
    return item


class RuntimeTaskStore(TaskStore):
    """Tasks as the runtime has them: read, never saved or deleted apart from their runs."""

    async def save(self, task: Task, context: ServerCallContext) -> None:
        raise UnsupportedOperationError("a task's state is its run's: the runtime writes it")

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        raise UnsupportedOperationError("a task is kept with its conversation")

    async def get(self, task_id: str, context: ServerCallContext,
                  history_length: int | None = None) -> Task | None:
        caller = caller_of(context)
        try:
            item = await find_input(caller, task_id)
        except TaskNotFoundError:
            return None
        return await read_task(caller.runtime, item, owner=caller.principal,
                               history_length=history_length)

    async def list(self, params: ListTasksRequest, context: ServerCallContext
                   ) -> ListTasksResponse:
        """The caller's tasks (in one context, or in all of theirs), newest first; the page
        token is the last task id of the page before."""
        caller = caller_of(context)
        runtime, owner = caller.runtime, caller.principal
        page_size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        validate_page_size(page_size)
        if params.HasField("history_length") and params.history_length < 0:
            raise InvalidParamsError("history length must be non-negative")
        if params.context_id:
            contexts = [params.context_id]
        else:
            contexts = [c.conversation_id for c in await runtime.conversations.list(
                owner, limit=LISTED_CONVERSATIONS)]
        candidates: list[Input] = []
        for conversation_id in contexts:
            try:
                inputs = await runtime.inputs.list(conversation_id, owner=owner)
            except (UnknownConversationError, InvalidInputError):
                continue  # a foreign or unknown context lists nothing, alike
            candidates += [i for i in inputs if i.origin in TASK_ORIGINS]
        candidates.sort(key=lambda i: i.input_id, reverse=True)  # ids grow with time
        filtered = bool(params.status) or params.HasField("status_timestamp_after")
        with_history = params.HasField("history_length") and params.history_length > 0
        tasks: list[Task] = []
        total = 0 if filtered else len(candidates)
        following = 0  # tasks after the page token that match
        for item in candidates:
            after_token = not params.page_token or item.input_id < params.page_token
            if not filtered and (not after_token or len(tasks) >= page_size):
                following += after_token
                continue
            task = await read_task(runtime, item, owner=owner, history=with_history,
                                   history_length=params.history_length if with_history
                                   else None)
            if params.status and task.status.state != params.status:
                continue
            if params.HasField("status_timestamp_after") and (
                task.status.timestamp.ToNanoseconds()
                < params.status_timestamp_after.ToNanoseconds()
            ):
                continue
            total += filtered
            if after_token:
                following += 1
                if len(tasks) < page_size:
                    tasks.append(task)
        more = following > len(tasks)
        return ListTasksResponse(tasks=tasks, next_page_token=tasks[-1].id if more else "",
                                 page_size=page_size, total_size=total)


def _to_config(config: PushConfig) -> TaskPushNotificationConfig:
    out = TaskPushNotificationConfig(id=config.config_id, task_id=config.task_id,
                                     url=config.url, token=config.token)
    if config.auth_scheme:
        out.authentication.CopyFrom(AuthenticationInfo(scheme=config.auth_scheme,
                                                       credentials=config.auth_credentials))
    return out


class RuntimePushConfigStore(PushNotificationConfigStore):
    """Push-notification configs in tidings' database (:mod:`tidings.push`), per task and per
    principal."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def set_info(self, task_id: str, notification_config: TaskPushNotificationConfig,
                       context: ServerCallContext) -> TaskPushNotificationConfig:
        caller = caller_of(context)
        item = await find_input(caller, task_id)
        config = normalize_push_notification_config(task_id, notification_config)
        try:
            kept = await self.runtime.push_configs.put(PushConfig(
                task_id=task_id, owner=caller.principal, config_id=config.id,
                conversation_id=item.conversation_id, url=config.url, token=config.token,
                auth_scheme=config.authentication.scheme,
                auth_credentials=config.authentication.credentials))
        except InvalidInputError as exc:
            raise InvalidParamsError(exc.message) from None
        return _to_config(kept)

    async def get_info(self, task_id: str, context: ServerCallContext
                       ) -> list[TaskPushNotificationConfig]:
        caller = caller_of(context)
        await find_input(caller, task_id)
        configs = await self.runtime.push_configs.of_task(task_id, caller.principal)
        return [_to_config(c) for c in configs]

    async def get_one(self, task_id: str, config_id: str, context: ServerCallContext
                      ) -> TaskPushNotificationConfig:
        caller = caller_of(context)
        await find_input(caller, task_id)
        try:
            return _to_config(await self.runtime.push_configs.get(
                task_id, caller.principal, config_id))
        except UnknownPushConfigError as exc:
            raise TaskNotFoundError(exc.message) from None

    async def get_page(self, task_id: str, context: ServerCallContext, *, after: str,
                       limit: int) -> list[TaskPushNotificationConfig]:
        caller = caller_of(context)
        await find_input(caller, task_id)
        try:
            configs = await self.runtime.push_configs.of_task(task_id, caller.principal,
                                                           after=after, limit=limit)
        except InvalidInputError as exc:
            raise InvalidParamsError(exc.message) from None
        return [_to_config(c) for c in configs]

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        return [_to_config(c) for c in await self.runtime.push_configs.to_deliver(task_id)]

    async def delete_info(self, task_id: str, context: ServerCallContext,
                          config_id: str | None = None) -> None:
        caller = caller_of(context)
        item = await find_input(caller, task_id)
        try:
            await self.runtime.push_configs.delete(task_id, caller.principal,
                                                   config_id or task_id, item.conversation_id)
        except UnknownPushConfigError as exc:
            raise TaskNotFoundError(exc.message) from None


__all__ = ("CALLER", "Caller", "RuntimePushConfigStore", "RuntimeTaskStore", "caller_of",
           "find_input")
