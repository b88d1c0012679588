"""P2: a background task's notice that arrives after its A2A task completed starts a
supplementary run -- a new task in the same context, listed by ListTasks, announced on the push
configs of the task whose work it answers (its id, context, ``submitted``), then followed there
to its end. Against ``tidings serve`` and a webhook receiver on loopback, both backends."""

from __future__ import annotations

from pathlib import Path

from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    ListTasksRequest,
    TaskPushNotificationConfig,
    TaskState,
)

from tests.conftest import Backend
from tests.service.test_cli import Served
from tests.service.test_p1_a2a import a2a, answer, one_task, said
from tests.service.test_p3_push import Receiver, receiver  # noqa: F401 -- the fixture
from tests.waiting import eventually

CONFIG = """
[models.builder]
provider = "scripted"

[[models.builder.rules]]
when = { text_contains = "build" }
reply.tool_calls = [
  { name = "shell", arguments = { command = "sleep 1; echo built", background = true } },
]

[[models.builder.rules]]
when = { tool_result = "shell" }
reply = { text = "Started." }

[[models.builder.rules]]
when = { meta_kind = "task_notification" }
reply = { text = "The build finished." }

[profiles.builder]
model = "builder"
tools = ["shell"]

[push]
allow_private = true
"""


async def test_p2_a_later_notice_is_a_new_task_announced_on_the_first_ones_configs(
    backend: Backend, tmp_path: Path, receiver: Receiver,  # noqa: F811
) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text(CONFIG, "utf-8")
    server = Served(backend.url, "--config", str(config), "--token", "alice=tok-a").wait_ready()
    try:
        async with a2a(f"{server.url}/a2a/builder", "tok-a") as alice:
            first = await one_task(alice, said("build it"))
            assert first.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer(first) == "Started."
            await alice.create_task_push_notification_config(TaskPushNotificationConfig(
                task_id=first.id, id="hook", url=f"{receiver.url}/hook", token="t"))

            async def heard() -> list[tuple[str, str, int]]:
                return [(b["statusUpdate"]["taskId"], b["statusUpdate"]["contextId"],
                         TaskState.Value(b["statusUpdate"]["status"]["state"]))
                        for _, b, s in receiver.to("/hook") if s == 200]

            completed = TaskState.TASK_STATE_COMPLETED
            got = await eventually(heard, lambda r: r and r[-1][2] == completed,
                                   what="the later answer announced and followed to its end")
            later = got[0][0]
            assert later != first.id
            assert {context for _, context, _ in got} == {first.context_id}
            assert {task for task, _, _ in got} == {later}
            states = [state for _, _, state in got]
            assert states[0] == TaskState.TASK_STATE_SUBMITTED
            assert states[-2:] == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]

            listed = await alice.list_tasks(ListTasksRequest(context_id=first.context_id))
            assert [t.id for t in listed.tasks] == [later, first.id]
            done = await alice.get_task(GetTaskRequest(id=later))
            assert answer(done) == "The build finished."
    finally:
        server.kill()
