"""Remote A2A agents as durable children (P5): their declaration, their client (the
``a2a-sdk``'s), and the component that sends each brief once and follows its remote task."""

from tidings.agents.children import RemoteChildren
from tidings.agents.declaration import RemoteAgent

__all__ = ("RemoteAgent", "RemoteChildren")
