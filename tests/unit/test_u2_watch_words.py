"""U2: ``tidings watch`` shows a held call with the commands that decide it, and how it was
decided (pure rendering of the journal's events)."""

from __future__ import annotations

from tidings.cli.client import _describe


def test_u2_watch_shows_a_held_call_with_the_commands_that_decide_it() -> None:
    held = _describe("approval_requested", {"approval_id": "appr_1", "run_public_id": "run_1",
                                            "call_id": "c1", "tool_name": "shell"}, "conv_1")
    assert held == ("run run_1 holds shell for a person's approval appr_1 -- tidings approve "
                    "conv_1 appr_1 (or tidings deny conv_1 appr_1)")
    decided = _describe("approval_decided", {"approval_id": "appr_1", "status": "denied",
                                             "decided_by": "alice"}, "conv_1")
    assert decided == "approval appr_1 denied by alice"
    assert _describe("approval_decided", {"approval_id": "appr_2", "status": "expired"}
                     ) == "approval appr_2 expired"


def test_b11_watch_says_how_to_see_a_long_tool_result_whole() -> None:
    result = "\n".join(f"row {i}" for i in range(100))
    line = _describe("message_committed", {"message": {"seq": 4, "role": "tool",
                                                       "content": result}})
    assert line.startswith("tool message 4: row 0 row 1 row 2")
    assert line.endswith("… (tidings transcript --full shows it whole)")
