"""What a remote child's follower knows of a remote task, without the A2A client: the states,
the answer as a plain record, and the failures it acts on. Kept apart from
:mod:`tidings.agents.client` so that a runtime with no remote agent never imports the
``a2a-sdk`` client (about half a second of every start of the command line)."""

from __future__ import annotations

from dataclasses import dataclass

ENDED = frozenset({"completed", "failed", "canceled", "rejected"})
"""The terminal states of an A2A task."""
INTERRUPTED = frozenset({"input-required", "auth-required"})
"""The states in which a task waits for its caller."""


class RemoteUnreachableError(Exception):
    """The remote agent cannot be asked now (not up, its card unreadable, the request broke)."""


class RemoteTaskUnknownError(Exception):
    """The remote agent does not know the task (any more)."""


class RemoteRefusedError(Exception):
    """The remote agent answered a protocol error."""


class RemoteCannotFindError(Exception):
    """The remote agent cannot list its tasks (``ListTasks`` is not supported)."""


class RemoteTaskLostError(Exception):
    """The remote task's outcome cannot be learnt."""


@dataclass(frozen=True, slots=True)
class RemoteTask:
    """What the remote agent says of a task (or of a brief it answered with a message)."""

    task_id: str | None
    """None: the agent answered with a message, no task."""
    state: str
    text: str
    """The artifacts' text once completed; the status message's otherwise."""
    context_id: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def waiting(self) -> bool:
        return self.state in INTERRUPTED


__all__ = ("ENDED", "INTERRUPTED", "RemoteCannotFindError", "RemoteRefusedError", "RemoteTask",
           "RemoteTaskLostError", "RemoteTaskUnknownError", "RemoteUnreachableError")
