"""S1: every failure a caller of the runtime can act on is one ``TidingsError`` subclass, all in
one package (``tidings.errors``, a module for each kind of failure), each with its own stable
code -- and still importable from where callers have imported it. The layers above the runtime
(the command line and its demo) keep their own errors, which they raise to their own callers
(the HTTP layer's test of its status map draws the same line)."""

from __future__ import annotations

import importlib
import pkgutil

import tidings
from tidings.errors import TidingsError

ABOVE_THE_RUNTIME = ("tidings.__main__", "tidings.cli", "tidings.client", "tidings.demo",
                     "tidings.service")


def _below_the_service(name: str) -> bool:
    return not any(name == top or name.startswith(f"{top}.") for top in ABOVE_THE_RUNTIME)


def _every_module() -> None:
    for info in pkgutil.walk_packages(tidings.__path__, "tidings."):
        if _below_the_service(info.name):  # __main__ would run the command line
            importlib.import_module(info.name)


def _in_the_errors_package(name: str) -> bool:
    return name == "tidings.errors" or name.startswith("tidings.errors.")


def _subclasses(cls: type[TidingsError]) -> list[type[TidingsError]]:
    found: list[type[TidingsError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_s1_every_error_class_lives_in_the_errors_package() -> None:
    _every_module()
    elsewhere = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _subclasses(TidingsError)
        if _below_the_service(cls.__module__) and not _in_the_errors_package(cls.__module__)
    ]
    assert elsewhere == []


def test_s1_error_codes_are_unique() -> None:
    _every_module()
    codes = [cls.code for cls in _subclasses(TidingsError)
             if _in_the_errors_package(cls.__module__)]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)


def test_s1_moved_errors_stay_importable_from_their_old_modules() -> None:
    from tidings import errors
    from tidings.models import ModelError as FromModels
    from tidings.models.base import ModelError, ModelErrorKind
    from tidings.records.results import MasterKeyError, ResultCorruptError, UnknownResultError
    from tidings.tasks.supervisor import DuplicateTaskKeyError, SupervisorClosedError

    assert ModelError is FromModels is tidings.ModelError is errors.ModelError
    assert ModelErrorKind is tidings.ModelErrorKind is errors.ModelErrorKind
    assert MasterKeyError is tidings.MasterKeyError is errors.MasterKeyError
    assert ResultCorruptError is tidings.ResultCorruptError is errors.ResultCorruptError
    assert UnknownResultError is tidings.UnknownResultError is errors.UnknownResultError
    assert DuplicateTaskKeyError is errors.DuplicateTaskKeyError
    assert SupervisorClosedError is errors.SupervisorClosedError
