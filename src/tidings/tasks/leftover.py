"""Processes a gone runtime left behind (T9): who they are, and stopping them.

A runtime records each task process's pid, host and kernel start time (:func:`process_identity`)
when it starts it. When that runtime dies without stopping its processes, another instance on
the same host stops them with :func:`kill_left_behind`, and only them: a pid reused by a later
process has another start time and is left alone.
"""

from __future__ import annotations

import os
import signal
import socket

HOST = socket.gethostname()
"""The host this runtime's processes run on (a process left behind is stopped only there)."""


def process_identity(pid: int) -> str | None:
    """When the kernel started ``pid`` (clock ticks since boot): with the pid, an identity
    that a later process reusing the pid does not share. None when there is no such process
    (or no ``/proc`` to ask)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold anything: fields resume after the last
    # ')'. Field 22 (starttime) is the 20th of those.
    fields = data[data.rindex(b")") + 2:].split()
    return fields[19].decode("ascii") if len(fields) > 19 else None


def kill_left_behind(pid: int, identity: str | None) -> bool:
    """Kill the process group a gone runtime left behind (T9), if it is still that group.

    The group's id is its leader's pid. While the leader lives, it must be the same process
    (same start time); once it is gone, Linux does not reuse its pid while the group still
    has members, so a signal to the group reaches only what the task left. Returns whether a
    signal was sent.
    """
    current = process_identity(pid)
    if current is not None and current != identity:
        return False  # the pid belongs to another process now
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True
