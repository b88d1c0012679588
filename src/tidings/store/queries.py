"""The named queries: SQL written once, with a dialect overriding only what must differ.

``sql/common/queries.sql`` holds the blocks both dialects run as written; ``sql/<dialect>/
queries.sql`` holds only the blocks whose text must differ there (an upsert's form, a row lock,
``FOR UPDATE SKIP LOCKED``, a data-modifying CTE, a temp table, how a list parameter is opened),
each replacing the common block of the same name. Parameters are ``:name`` in every file; the
PostgreSQL store rewrites them to psycopg's style once, at load.

A block is headed ``-- name --``. A *fragment* is headed ``-- {name} --``: text (no statement of
its own) that any block splices in where it writes ``{name}``, so a select list two queries share
is written once too. ``{wakes(column)}`` is the policy's passive-signal rule as a condition over
``column``, written from :data:`tidings.support.policy.PASSIVE_SIGNAL_PREFIXES` -- that rule has one
source, the policy module.

Invariants the loader enforces (a broken file fails the first store opened, and the tests):
a name is defined once per file; an override says something the common text does not (one
that repeats it, comments and white space aside, is refused, so duplication cannot creep
back); every ``{...}`` resolves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from tidings.support.policy import PASSIVE_SIGNAL_PREFIXES

COMMON = "common"

_HEADER = re.compile(r"^--\s*(\{[a-z_][a-z0-9_]*\}|[a-z_][a-z0-9_]*)\s*--\s*$", re.MULTILINE)
_SPLICE = re.compile(r"\{([a-z_][a-z0-9_]*)(?:\(([A-Za-z_][A-Za-z0-9_.]*)\))?\}")


@dataclass(frozen=True, slots=True)
class Query:
    """One named block of SQL: its statements, run in order."""

    name: str
    statements: tuple[str, ...]


def split_statements(script: str) -> list[str]:
    """Split SQL text on statement-ending semicolons (those that end a line).

    A ``CREATE TRIGGER`` runs to its ``END;`` line, whatever semicolons its body holds.
    """
    statements: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("--")):
            continue
        current.append(line)
        in_trigger = current[0].lstrip().upper().startswith("CREATE TRIGGER")
        if (stripped.upper() == "END;") if in_trigger else stripped.endswith(";"):
            statements.append("\n".join(current).rstrip().rstrip(";"))
            current = []
    tail = "\n".join(current).strip()
    if tail:
        statements.append(tail)
    return statements


def sql_text(folder: str, filename: str) -> str:
    """A file of ``sql/<folder>/`` in the installed package."""
    return resources.files("tidings.store").joinpath("sql", folder, filename).read_text("utf-8")


def load_queries(dialect: str) -> dict[str, Query]:
    """The named queries of a dialect: the common blocks, the dialect's own replacing those of
    the same name, fragments spliced in."""
    common = read_blocks(COMMON)
    own = read_blocks(dialect)
    for name, statements in own.items():
        if name in common and _normalised(statements) == _normalised(common[name]):
            raise ValueError(
                f"{dialect}/queries.sql overrides {name!r} with the text of "
                f"{COMMON}/queries.sql: delete the override"
            )
    blocks = common | own
    fragments: dict[str, str] = {}
    for name, body in blocks.items():
        if name[0] == "{":
            if len(body) != 1:
                raise ValueError(f"fragment {name} must be one piece of a statement")
            fragments[name[1:-1]] = body[0]

    def splice(match: re.Match[str]) -> str:
        name, column = match.group(1), match.group(2)
        if name == "wakes" and column is not None:
            return wakes_sql(column)
        if column is None and name in fragments:
            return fragments[name]
        raise ValueError(f"{dialect}: no SQL fragment {match.group(0)!r}")

    return {
        name: Query(name, tuple(_SPLICE.sub(splice, s) for s in statements))
        for name, statements in blocks.items()
        if name[0] != "{"
    }


def read_blocks(folder: str) -> dict[str, tuple[str, ...]]:
    """One ``queries.sql`` as written: each block's (or fragment's) statements, by name."""
    parts = _HEADER.split(sql_text(folder, "queries.sql"))
    blocks: dict[str, tuple[str, ...]] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise ValueError(f"query {name!r} is defined twice in {folder}/queries.sql")
        blocks[name] = tuple(split_statements(body))
    return blocks


def _normalised(statements: tuple[str, ...]) -> tuple[str, ...]:
    """The statements without comment lines, white space folded: what two texts must differ in."""
    return tuple(
        " ".join(" ".join(ln for ln in s.splitlines() if not ln.lstrip().startswith("--")).split())
        for s in statements
    )


def wakes_sql(column: str) -> str:
    """A condition true where the signal type in ``column`` wakes its conversation: the SQL of
    :func:`tidings.support.policy.wakes`, from the same
    :data:`~tidings.support.policy.PASSIVE_SIGNAL_PREFIXES`."""
    conditions = []
    for prefix in PASSIVE_SIGNAL_PREFIXES:
        # Written into the text as a LIKE pattern: it must hold no quote and no wildcard.
        if not re.fullmatch(r"[A-Za-z0-9.]+", prefix):
            raise ValueError(f"passive signal prefix {prefix!r} cannot be written as SQL")
        conditions.append(f"{column} NOT LIKE '{prefix}%'")
    return "(" + " AND ".join(conditions) + ")" if conditions else "TRUE"
