"""B11: how the chat shows a conversation's feed -- streamed pieces as they come, the committed
message as the truth, the runtime's words marked as its own -- whichever transport read it.

Pure rendering: feed events in the shapes of the feed contract, a console writing to a string.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from tidings.cli.chat import Runs
from tidings.cli.render import FeedItem, View
from tidings.cli.screen import Screen
from tidings.cli.text import fold, runtime_summary
from tidings.types import RunStatus


def view() -> tuple[View, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None, force_terminal=False)
    return View(Screen(console)), out


def delta(run: str, offset: int, text: str, step: int = 1) -> FeedItem:
    return FeedItem(None, "message_delta", run,
                    {"run_id": run, "step": step, "offset": offset, "text": text})


def committed(seq: int, role: str, content: str, *, run: str = "run_1", by_runtime: bool = False,
              **fields: Any) -> FeedItem:
    message = {"seq": seq, "message_id": f"msg_{seq}", "role": role, "content": content,
               "tool_calls": [], "tool_call_id": None, "tool_name": None, "origin": None,
               "input_id": None, "run_id": run, **fields}
    return FeedItem(100 + seq, "message_committed", run,
                    {"message": message, "by_runtime": by_runtime})


def status(run: str, value: str, **data: Any) -> FeedItem:
    return FeedItem(1, "turn_status", run, {"run_public_id": run, "status": value, **data})


NOTICE = (
    '<task_notification note="A background task the assistant started has ended.">\n'
    '<process_facts>{"duration_ms":517,"exit_code":0,"state":"exited","succeeded":true,'
    '"task_key":"bg-f77e632e"}</process_facts>\n'
    '<untrusted_process_output bytes=6 truncated=false>"built\\n"</untrusted_process_output>\n'
    "</task_notification>"
)


def test_b11_streamed_pieces_appear_as_they_come_once_each_and_the_commit_ends_the_line() -> None:
    v, out = view()
    v.event(delta("run_1", 0, "Hel"))
    assert out.getvalue() == "agent> Hel"  # shown before anything is committed
    v.event(delta("run_1", 3, "lo"))
    assert out.getvalue() == "agent> Hello"
    v.event(delta("run_1", 0, "Hel"))  # a duplicate: never shown twice
    # A reconnect's catch-up: the whole text so far from offset 0; only the new part shows.
    v.event(delta("run_1", 0, "Hello wo"))
    assert out.getvalue() == "agent> Hello wo"
    v.event(committed(2, "assistant", "Hello world"))
    assert out.getvalue() == "agent> Hello world\n"
    v.event(committed(2, "assistant", "Hello world"))  # a message is shown once
    assert out.getvalue() == "agent> Hello world\n"


def test_b11_the_committed_message_is_the_truth_when_it_differs_from_the_draft() -> None:
    v, out = view()
    v.event(delta("run_1", 0, "I think"))
    v.event(committed(2, "assistant", "Something else entirely"))
    assert out.getvalue().splitlines() == [
        "agent> I think", "[chat] the answer as committed:", "agent> Something else entirely"]


def test_b11_a_discarded_draft_is_said_to_be_and_so_is_a_run_ending_without_commit() -> None:
    v, out = view()
    v.event(delta("run_1", 0, "Half an ans"))
    v.event(FeedItem(None, "message_discarded", "run_1",
                     {"run_id": "run_1", "step": 1, "reason": "stopped"}))
    v.event(status("run_1", "stopped"))
    v.event(delta("run_2", 0, "Another"))
    v.event(status("run_2", "completed"))  # ended with no message_committed for it
    assert out.getvalue().splitlines() == [
        "agent> Half an ans",
        "[runtime] the answer above was discarded (stopped)",
        "[runtime] run run_1 stopped",
        "agent> Another",
        "[runtime] the answer above was discarded (the run completed)",
    ]


def test_b11_the_runtimes_words_are_marked_and_never_shown_as_the_persons() -> None:
    v, out = view()
    v.mine.add("in_mine")
    v.event(committed(1, "user", "typed at this prompt", origin="person", input_id="in_mine"))
    v.event(committed(2, "user", "from another client", origin="person", input_id="in_other"))
    v.event(committed(3, "user", NOTICE, origin="task_result", by_runtime=True))
    child = ('<task_result task="spawn-1" status="completed" conversation="conv_c">'
             "the child&#x27;s answer &lt;ok&gt;</task_result>")
    v.event(committed(4, "user", child, origin="child", by_runtime=True))
    v.event(status("run_1", "failed", failure_code="model_unavailable"))
    assert out.getvalue().splitlines() == [
        "you> from another client",
        "[runtime] task bg-f77e632e exited (exit 0, 0.5 s): built",
        "[runtime] child conv_c (spawn-1) completed: the child's answer <ok>",
        "[runtime] run run_1 failed (model_unavailable)",
    ]


def test_b11_tool_calls_and_results_are_folded_to_a_line() -> None:
    v, out = view()
    call = {"call_id": "c1", "name": "shell", "arguments": {"command": "ls " + "x" * 300}}
    v.event(committed(1, "assistant", "", tool_calls=[call]))
    v.event(committed(2, "tool", "line one\nline two\nline three", tool_name="shell",
                      tool_call_id="c1"))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith('  → shell {"command": "ls xxx')
    assert lines[0].endswith("…")
    assert len(lines[0]) < 120
    assert lines[1:] == ["  ← shell: line one", "    line two", "    line three"]
    assert fold("a" * 500).endswith("…")


def test_b11_a_long_tool_result_shows_its_first_lines_and_how_to_see_it_whole() -> None:
    v, out = view()
    v.event(committed(1, "tool", "\n".join(f"row {i}" for i in range(1, 13)),
                      tool_name="shell"))
    v.event(committed(2, "tool", "x" * 300, tool_name="shell"))
    assert out.getvalue().splitlines() == [
        "  ← shell: row 1", *(f"    row {i}" for i in range(2, 9)),
        "    … (4 more lines; tidings transcript --full shows it whole)",
        f"  ← shell: {'x' * 199}…",
        "    … (tidings transcript --full shows it whole)",
    ]
    whole, out = view()
    whole.full = True
    whole.event(committed(1, "tool", "\n".join(f"row {i}" for i in range(1, 13)),
                          tool_name="shell"))
    assert len(out.getvalue().splitlines()) == 12
    assert "--full" not in out.getvalue()


def test_b11_a_transcript_reads_the_runtimes_words_by_their_kernel_origin() -> None:
    v, out = view()
    v.person = "person"
    messages = [
        {"seq": 1, "role": "user", "content": "Start the build", "origin": "person"},
        {"seq": 2, "role": "assistant", "content": "", "tool_calls": [
            {"call_id": "c", "name": "shell", "arguments": {"command": "make"}}]},
        {"seq": 3, "role": "tool", "content": "started background task bg-1", "tool_name": "shell"},
        {"seq": 4, "role": "assistant", "content": "Started."},
        {"seq": 5, "role": "user", "content": NOTICE, "origin": "task_result"},
    ]
    v.transcript(messages, last=4)
    assert out.getvalue().splitlines() == [
        "… 1 earlier messages",
        '  → shell {"command": "make"}',
        "  ← shell: started background task bg-1",
        "agent> Started.",
        "[runtime] task bg-f77e632e exited (exit 0, 0.5 s): built",
    ]
    assert v.shown_seq == 5


def test_b11_output_arriving_at_the_prompt_takes_the_prompts_line() -> None:
    v, out = view()
    v.screen.prompt()
    v.event(committed(1, "user", NOTICE, origin="task_result", by_runtime=True))
    v.screen.prompt()
    assert out.getvalue() == (
        "you> \n[runtime] task bg-f77e632e exited (exit 0, 0.5 s): built\nyou> ")


def test_b11_runtime_summary_of_words_it_does_not_know_is_their_first_line() -> None:
    assert runtime_summary("first line\nsecond") == "first line … (+1 lines)"
    broken = "<process_facts>{not json</process_facts>"
    assert runtime_summary(broken) == broken


def test_b11_the_chat_knows_when_the_run_that_read_its_input_is_over() -> None:
    runs = Runs({"run_old": RunStatus.RUNNING, "run_held": RunStatus.AWAITING_APPROVAL})
    assert runs.open() == ["run_old", "run_held"]
    assert runs.working() == ["run_old"]  # the held run waits for a person: not working
    runs.see(status("run_old", "completed"))
    runs.see(status("run_held", "stopped"))
    runs.see(status("run_1", "running", inputs=["in_1"]))
    assert runs.working() == ["run_1"]
    assert not runs.answered("in_1")
    runs.see(status("run_1", "awaiting_approval"))
    assert runs.answered("in_1")  # it waits for a person: the prompt comes back
    assert not runs.working()
    runs.see(FeedItem(5, "input_materialized", "run_2",
                      {"input_id": "in_2", "run_public_id": "run_2"}))
    runs.see(status("run_2", "running"))
    runs.see(status("run_2", "stopped"))
    assert runs.answered("in_2")
    assert runs.open() == ["run_1"]


def test_b11_an_answer_cut_by_another_line_is_shown_whole_when_it_commits() -> None:
    v, out = view()
    v.event(delta("run_1", 0, "Part of"))
    v.event(committed(1, "user", NOTICE, origin="task_result", by_runtime=True, run="run_0"))
    v.event(delta("run_1", 7, " it"))
    v.event(committed(2, "assistant", "Part of it, whole."))
    assert out.getvalue().splitlines() == [
        "agent> Part of",
        "[runtime] task bg-f77e632e exited (exit 0, 0.5 s): built",
        "agent> Part of it, whole.",
    ]


def test_b11_the_persons_line_is_not_shown_again_when_the_feed_outruns_the_post() -> None:
    v, out = view()
    v.posting.append("hello")
    v.event(committed(1, "user", "hello", origin="person", input_id="in_1"))  # before the id
    v.posted("hello", "in_1")
    v.event(committed(2, "user", "hello", origin="person", input_id="in_2"))  # someone else's
    v.posting.append("again")
    v.posted("again", "in_3")  # answered first: known by its id from now on
    v.event(committed(3, "user", "again", origin="person", input_id="in_3"))
    assert out.getvalue().splitlines() == ["you> hello"]
    assert v.posting == []


def test_b11_what_a_model_or_a_process_wrote_cannot_drive_the_terminal() -> None:
    v, out = view()
    v.event(delta("run_1", 0, "clear\x1b[2J the screen\x07"))
    v.event(committed(1, "tool", "out\x9b31m\r\nput", tool_name="shell"))
    v.event(committed(2, "user", "[red]not markup[/]", origin="person"))
    assert out.getvalue().splitlines() == [
        "agent> clear\\x1b[2J the screen\\x07",
        "  ← shell: out\\x9b31m",
        "    put",
        "you> [red]not markup[/]",
    ]
    assert "\x1b" not in out.getvalue()


def test_b11_a_committed_answer_replaces_the_draft_of_its_own_step() -> None:
    v, out = view()
    v.event(delta("run_1", 0, "First step", step=1))
    v.event(committed(2, "assistant", "First step", step=1))
    v.event(delta("run_1", 0, "Second", step=2))
    v.event(committed(4, "assistant", "Second step", step=2))
    v.event(status("run_1", "completed"))
    assert out.getvalue().splitlines() == ["agent> First step", "agent> Second step"]
    assert v.drafts == {}


def test_b4_the_chat_says_when_an_mcp_server_dies_and_when_it_is_back() -> None:
    v, out = view()
    v.event(FeedItem(5, "mcp_server_status", None, {
        "server": "weather", "status": "disconnected",
        "reason": "the server closed the connection"}))
    v.event(FeedItem(6, "mcp_server_status", None, {
        "server": "weather", "status": "connected", "connections": 2}))
    assert out.getvalue().splitlines() == [
        "[runtime] MCP server weather died: the server closed the connection; connecting again",
        "[runtime] MCP server weather is back",
    ]
