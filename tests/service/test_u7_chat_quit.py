"""U7: quitting ``tidings chat --database`` while a background task runs in it says what will
become of the task and asks first -- n stays, y quits; the task is then killed and the agent
told at the conversation's next turn -- on a real terminal, on both backends."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import Backend
from tests.service.terminal import Terminal
from tests.service.test_cli import ENV, scripted
from tidings.records.results import MasterKey

RULES = {
    "rules": [
        {"when": {"text_contains": "start a long one"},
         "reply": {"tool_calls": [{"name": "shell", "arguments": {
             "command": "sleep 120", "background": True}}]}},
        {"when": {"meta_kind": "task_notification"}, "reply": {"text": "The long one ended."}},
        {"when": {"tool_result": "shell"}, "reply": {"text": "Started."}},
    ],
    "default": {"echo": True},
}


def test_u7_quitting_a_local_chat_with_a_running_task_asks_first(
    backend: Backend, tmp_path: Path
) -> None:
    env = {**ENV, "TERM": "xterm-256color",
           "TIDINGS_MASTER_KEY": MasterKey.generate().secret.hex()}
    local = ["--database", backend.url, "--model", scripted(tmp_path, RULES)]
    terminal = Terminal([sys.executable, "-m", "tidings", "chat", *local, "--tool", "shell"],
                        env=env)
    try:
        conversation = terminal.wait_for(r"new conversation (conv_\w+)").group(1)
        terminal.wait_for("you> ")
        [task, _] = terminal.type_and_see(
            "start a long one\n", r"← shell: started background task (bg-\w+)",
            r"agent> Started\.\n(\S.*\n)*you> ")
        terminal.type_and_see(  # Ctrl-D at the prompt
            "\x04", rf"\[chat\] 1 background task runs in this chat: {task.group(1)} sleep "
            r"120\n    quitting ends it now: it is killed, and the agent is told so at its "
            r"conversation's next turn .*y quits, n stays\.\nquit\? \[y/n\] ")
        terminal.type_and_see("n\n", r"\[chat\] not quitting\n(\S.*\n)*you> ")
        terminal.type_and_see("still here?\n", r"agent> still here\?\n(\S.*\n)*you> ")
        terminal.type_and_see("\x03", r"quit\? \[y/n\] ")  # Ctrl-C at the prompt
        terminal.type("y\n")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert "Traceback" not in terminal.screen

    again = Terminal([sys.executable, "-m", "tidings", "chat", *local, conversation], env=env)
    try:
        history = again.wait_for(rf"conversation {conversation}").end()
        again.wait_for(rf"\[runtime\] task {task.group(1)} killed", after=history)
        again.wait_for(r"agent> The long one ended\.", after=history)
        again.wait_for("you> ", after=history)
        again.ctrl_d()  # nothing runs here now: it quits without asking
        assert again.wait() == 0
    finally:
        again.close()
    assert "quit? [y/n]" not in again.screen
