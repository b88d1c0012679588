"""A2A push notifications: the webhooks a principal registered for a task, and the durable
delivery of each state change of that task to them (SPEC P3).

How the guarantee is kept, layer by layer:

1. **Publication, in the state's own transaction.** The kernel journals every change of a run's
   status (``turn_status``), a question asked of a person and an input cancelled in the unit
   that commits it -- the feed's journal, which knows nothing of A2A. Migration 0019 adds a
   trigger on that journal: for each such event, one row of ``a2a_push_deliveries`` per config
   of each task the event concerns (a run's inputs are its tasks), written by the engine in the
   same transaction. A rollback publishes nothing; a commit cannot lose its notification,
   whichever process, crash or restart follows. No writer of run statuses had to change.
2. **Delivery, at least once** (:mod:`tidings.push.deliveries`): leases with fresh tokens and
   deadlines, in journal order per config, backoff with jitter, dead letters never replayed.
3. **The worker** (:mod:`tidings.push.worker`): POSTs each one (A2A's ``StreamResponse`` with
   the task's status update, :mod:`tidings.push.notifications`), no redirect followed, the
   target re-resolved and checked at each attempt (:mod:`tidings.push.targets`).

A config is tied to the principal that registered it (:mod:`tidings.push.configs`); deleting
it deletes what it was still owed.

Later answers (P2): a background task's notice or a child's reply accepted after the run that
started the work ended is a new task; migration 0020's trigger copies the configs of that
run's tasks to it, in the unit that accepts it, and publishes its announcement (``submitted``)
to them -- its runs are then announced like any task's.
"""

from tidings.push.configs import SECRET_LIMIT_BYTES, PushConfig, PushConfigs
from tidings.push.deliveries import (
    PushDeadLetter,
    PushDeliveries,
    PushDelivery,
    PushDeliveryConfig,
    PushStats,
)
from tidings.push.notifications import NOTIFICATION_ID_HEADER, TOKEN_HEADER
from tidings.push.targets import check_url
from tidings.push.worker import Webhooks

__all__ = (
    "NOTIFICATION_ID_HEADER",
    "SECRET_LIMIT_BYTES",
    "TOKEN_HEADER",
    "PushConfig",
    "PushConfigs",
    "PushDeadLetter",
    "PushDeliveries",
    "PushDelivery",
    "PushDeliveryConfig",
    "PushStats",
    "Webhooks",
    "check_url",
)
