"""What the chat knows of its conversation's runs, from the feed: their statuses, and which
run read which input -- so it knows when the turn a line started is over, and what Ctrl-C stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from tidings.cli.render import FeedItem
from tidings.types import RunStatus


class Runs:
    """What the chat knows of the conversation's runs: their statuses, and which run read
    which input -- from the feed, after the runs that were open when it started."""

    def __init__(self, open_runs: Mapping[str, RunStatus] | None = None) -> None:
        self.status: dict[str, RunStatus] = dict(open_runs or {})
        self.run_of: dict[str, str] = {}

    def see(self, item: FeedItem) -> None:
        d = item.data
        run = str(d.get("run_public_id") or item.run_id or "")
        if item.type == "turn_status" and run:
            with contextlib.suppress(ValueError):
                self.status[run] = RunStatus(str(d.get("status")))
            for input_id in d.get("inputs") or ():
                self.run_of[str(input_id)] = run
        elif item.type == "input_materialized" and run and d.get("input_id"):
            self.run_of[str(d["input_id"])] = run

    def open(self) -> list[str]:
        """The runs not over yet (running, or holding on a person's approval)."""
        return [r for r, s in self.status.items() if not s.ended]

    def working(self) -> list[str]:
        """The runs working now (not waiting for anyone)."""
        return [r for r, s in self.status.items() if s is RunStatus.RUNNING]

    def answered(self, input_id: str) -> bool:
        """Whether the run that read ``input_id`` is over, or waits for a person."""
        status = self.status.get(self.run_of.get(input_id, ""))
        return status is not None and (status.ended or status is RunStatus.AWAITING_APPROVAL)


__all__ = ("Runs",)
