"""Conversation routes (A2): parse, call the :class:`~tidings.runtime.root.Runtime`, serialise.

Every route acts for the token's principal and passes it as ``owner=``: another principal's
conversation -- its inputs, transcript, runs, tasks, results and feed -- answers exactly like an
unknown id (the runtime raises the same error for both, and the same error makes the same
problem document). An operator's token reaches every conversation (``owner=None``); only a
principal opens one.

One module per resource, all adding their routes to the one ``router`` of
:mod:`.common` (with the dependencies and problem responses they share): a conversation
(:mod:`.conversations`), the door (:mod:`.inputs`), the acts on its work (:mod:`.control`),
approvals (:mod:`.approvals`), questions (:mod:`.questions`), the transcript and runs
(:mod:`.history`), tasks and results (:mod:`.tasks`), signals (:mod:`.signals`) and the event
feed (:mod:`.feed`).
"""

from __future__ import annotations

from tidings.service.routes.common import FeedsDep, RuntimeDep, router

# Each module adds its routes to ``router`` as it is imported: this order is the route table's,
# and the order of the paths in the OpenAPI document.
# isort: off
from tidings.service.routes import conversations, inputs, control  # noqa: F401
from tidings.service.routes import approvals, questions, history  # noqa: F401
from tidings.service.routes import tasks, signals, feed  # noqa: F401
# isort: on
from tidings.service.routes.inputs import posted

__all__ = ("FeedsDep", "RuntimeDep", "posted", "router")
