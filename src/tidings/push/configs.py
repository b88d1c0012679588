"""Push-notification configs: where a principal asked to be told of an A2A task's changes.

A config belongs to one task (the input an A2A message made) and to the principal that
registered it; another principal neither sees nor replaces it. Configs are rows of the
database, so any process -- and the delivery worker that POSTs the notifications
(:mod:`tidings.push.worker`) -- reads them from there alone. Creating a config with an id
already used for the task by the same principal replaces it (A2A's create is an upsert by id).

A config's URL is checked as it is created (:func:`tidings.push.targets.resolve`: http(s), and
no private, loopback or link-local address unless the operator allows them). Deleting a config
deletes, in the same unit, the notifications still owed to it: it is sent nothing more.

Its token and credentials are sealed under the master key when one is known
(:mod:`tidings.push.sealing`); read back, they are opened (a secret no key opens reads empty).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tidings.clock import Clock
from tidings.errors import InvalidInputError, UnknownPushConfigError
from tidings.push.sealing import seal, unseal
from tidings.push.targets import resolve
from tidings.records.results import MasterKey
from tidings.store import Row, Store, Tx
from tidings.support.policy import check_id, check_text

SECRET_LIMIT_BYTES = 4_096
"""A config's token, and its authentication's credentials, at most."""
PAGE_LIMIT = 100


@dataclass(frozen=True, slots=True)
class PushConfig:
    """One webhook a principal registered for a task."""

    task_id: str
    owner: str
    config_id: str
    conversation_id: str
    url: str
    token: str = ""
    auth_scheme: str = ""
    auth_credentials: str = ""
    created_at_us: int = 0


def _config(row: Row) -> PushConfig:
    return PushConfig(
        task_id=str(row["task_id"]), owner=str(row["owner"]), config_id=str(row["config_id"]),
        conversation_id=str(row["conversation_id"]), url=str(row["url"]),
        token=str(row["token"]), auth_scheme=str(row["auth_scheme"]),
        auth_credentials=str(row["auth_credentials"]), created_at_us=int(row["created_at_us"]),
    )


class PushConfigs:
    """Create, read, list and delete push-notification configs (see the module docstring)."""

    def __init__(self, store: Store, clock: Clock, *, allow_private: bool = False,
                 master_key: Callable[[], MasterKey | None] = lambda: None,
                 put: Callable[[str], None] = lambda _conversation_id: None) -> None:
        self.store = store
        self.clock = clock
        self.master_key = master_key
        self._put = put
        """Told of each conversation a config was put in, once committed (the worker)."""
        self.allow_private = allow_private
        """Whether URLs may name private, loopback and link-local addresses."""

    def _opened(self, row: Row) -> PushConfig:
        config = _config(row)
        key = self.master_key()
        token, credentials = (unseal(key, secret, owner=config.owner, config_id=config.config_id)
                              for secret in (config.token, config.auth_credentials))
        return replace(config, token=token or "", auth_credentials=credentials or "")

    async def put(self, config: PushConfig) -> PushConfig:
        """Keep ``config`` (its ``created_at_us`` is now); the same id again replaces it."""
        for value, what in ((config.task_id, "task id"), (config.owner, "owner"),
                            (config.config_id, "config id")):
            check_id(value, what)
        await self.check(config.url, config.token, config.auth_scheme, config.auth_credentials)
        now_us = self.clock.now_us()
        key = self.master_key()
        token, credentials = (seal(key, secret, owner=config.owner, config_id=config.config_id)
                              for secret in (config.token, config.auth_credentials))

        def unit(tx: Tx) -> PushConfig:
            tx.execute("put_push_config", task_id=config.task_id, owner=config.owner,
                       config_id=config.config_id, conversation_id=config.conversation_id,
                       url=config.url, token=token, auth_scheme=config.auth_scheme,
                       auth_credentials=credentials, now_us=now_us)
            row = tx.one("push_config", task_id=config.task_id, owner=config.owner,
                         config_id=config.config_id)
            assert row is not None
            return self._opened(row)

        put = await self.store.transact(unit, route=config.conversation_id)
        self._put(config.conversation_id)
        return put

    async def check(self, url: str, token: str = "", auth_scheme: str = "",
                    auth_credentials: str = "") -> None:
        """Refuse what :meth:`put` would refuse of a config's target and secrets (before the
        task it is for exists: a message sent with one is refused whole)."""
        await resolve(url, allow_private=self.allow_private)
        for secret, what in ((token, "token"), (auth_scheme, "scheme"),
                             (auth_credentials, "credentials")):
            check_text(secret, what, limit_bytes=SECRET_LIMIT_BYTES)

    async def get(self, task_id: str, owner: str, config_id: str) -> PushConfig:
        row = await self.store.read(lambda tx: tx.one(
            "push_config", task_id=task_id, owner=owner, config_id=config_id))
        if row is None:
            raise UnknownPushConfigError(task_id, config_id)
        return self._opened(row)

    async def of_task(self, task_id: str, owner: str, *, after: str = "",
                   limit: int = PAGE_LIMIT) -> list[PushConfig]:
        """The owner's configs of the task, by id after ``after``, at most ``limit``."""
        if not 1 <= limit <= PAGE_LIMIT:
            raise InvalidInputError(f"limit must be between 1 and {PAGE_LIMIT}")
        rows = await self.store.read(lambda tx: tx.all(
            "push_configs_of_task", task_id=task_id, owner=owner, after=after, limit=limit))
        return [self._opened(row) for row in rows]

    async def delete(self, task_id: str, owner: str, config_id: str,
                     conversation_id: str) -> None:
        """Forget one config; an unknown one is :class:`UnknownPushConfigError`."""
        def unit(tx: Tx) -> bool:
            tx.execute("void_push_deliveries", task_id=task_id, owner=owner,
                       config_id=config_id)
            return bool(tx.all("delete_push_config", task_id=task_id, owner=owner,
                               config_id=config_id))

        if not await self.store.transact(unit, route=conversation_id):
            raise UnknownPushConfigError(task_id, config_id)

    async def to_deliver(self, task_id: str) -> list[PushConfig]:
        """Every config of the task, whoever registered it: what a delivery sends to."""
        rows = await self.store.read(lambda tx: tx.all("push_configs_to_deliver",
                                                       task_id=task_id))
        return [self._opened(row) for row in rows]


__all__ = ("SECRET_LIMIT_BYTES", "PushConfig", "PushConfigs")
