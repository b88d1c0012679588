"""The store: the only place that speaks SQL. ``open_store`` picks the dialect from the URL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidings.errors import InvalidInputError
from tidings.store.base import Row, Store, Tx
from tidings.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from tidings.store.postgres import PostgresStore

__all__ = ("PostgresStore", "Row", "SqliteStore", "Store", "Tx", "open_store")


async def open_store(url: str, **options: Any) -> Store:
    """Open and migrate the database at ``url``.

    ``postgresql://…`` (or ``postgres://…``) opens PostgreSQL; ``sqlite:///relative.db``,
    ``sqlite:////absolute/path.db`` or a plain file path opens SQLite.
    """
    if url.startswith(("postgresql://", "postgres://")):
        from tidings.store.postgres import PostgresStore

        return await PostgresStore.open(url, **options)
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite:///")
        if not path or path == url:
            raise InvalidInputError(f"unsupported SQLite URL {url!r}: use sqlite:///path")
        return await SqliteStore.open(path, **options)
    if "://" in url:
        raise InvalidInputError(
            f"unsupported database URL {url!r}: use sqlite:///path or postgresql://"
        )
    return await SqliteStore.open(url, **options)


def __getattr__(name: str) -> Any:
    # psycopg is imported when PostgreSQL is used: a third of a second of every start
    # (the command line's too) that a SQLite runtime never needs.
    if name == "PostgresStore":
        from tidings.store.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
