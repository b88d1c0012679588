"""A remote A2A agent a profile may delegate to: its name, where it is, how to authenticate."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from tidings.errors import InvalidInputError

HOOK_PATH = "/a2a-hooks/children"
"""Under a served tidings, where remote agents push the news of their tasks."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True, slots=True)
class RemoteAgent:
    """A remote agent, spoken to over A2A (its Agent Card at ``url``/.well-known/agent-card.json).

    ``token_env`` names the environment variable holding its bearer token: the token itself is
    never written in a config file nor stored. ``poll`` is how often a remote task is asked
    about while it works (``GetTask``); ``timeout`` bounds each request (and each read of a
    task's stream). Where the agent's card says it streams, each remote task is also watched
    by ``SubscribeToTask``, so that its end is seen at once -- unless ``subscribe`` is False.

    ``push_url`` is where the agent reaches this tidings' HTTP service (for instance
    ``https://tidings.example.com``): when set, every brief asks the agent to push its task's
    news to ``<push_url>/a2a-hooks/children/<request id>`` with a token of its own, and each
    push has the task asked about at once. A push is only a hint: what is relayed is always
    what ``GetTask`` answers, and the polling stays the rule.
    """

    name: str
    url: str
    token_env: str | None = None
    poll: timedelta = timedelta(seconds=1)
    timeout: timedelta = timedelta(seconds=30)
    subscribe: bool = True
    push_url: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidInputError(f"a remote agent's name must match {_NAME.pattern}: "
                                    f"{self.name!r}")
        if not self.url.startswith(("http://", "https://")):
            raise InvalidInputError(f"the remote agent {self.name}'s url must be http(s): "
                                    f"{self.url!r}")
        if self.push_url is not None and not self.push_url.startswith(("http://", "https://")):
            raise InvalidInputError(f"the remote agent {self.name}'s push_url must be http(s): "
                                    f"{self.push_url!r}")
        if self.poll <= timedelta(0) or self.timeout <= timedelta(0):
            raise InvalidInputError("poll and timeout must be positive")

    def headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers of every request: its bearer token, read from the environment now."""
        if self.token_env is None:
            return {}
        token = (os.environ if environ is None else environ).get(self.token_env)
        if not token:
            raise InvalidInputError(f"the environment variable {self.token_env} (the token of the "
                              f"remote agent {self.name}) is not set")
        return {"Authorization": f"Bearer {token}"}

    def hook(self, request_id: str) -> str | None:
        """Where the agent pushes the news of a request's task (None: no push asked for)."""
        if self.push_url is None:
            return None
        return f"{self.push_url.rstrip('/')}{HOOK_PATH}/{request_id}"


__all__ = ("HOOK_PATH", "RemoteAgent")
