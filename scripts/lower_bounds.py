"""Check that every direct dependency is installed at its declared lower bound.

Run with the interpreter of an environment installed with the lowest allowed versions
(``uv pip install --resolution lowest-direct -e '.[EXTRAS]'``, as .ci/run does)::

    .venv-lowest/bin/python scripts/lower_bounds.py test peers

For the project's dependencies and those of the named extras, each ``>=`` bound must be the
version installed: a bound the resolver had to raise (another package needs more, or the
version does not exist) is not proven by the tests that ran on that environment, so it is
reported and the exit status is 1. Bounds given without a patch number match by their
leading numbers (``>=3.0`` is met by 3.0.0).
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version


def _same(bound: Version, installed: Version) -> bool:
    width = max(len(bound.release), len(installed.release))
    pad = (0,) * width
    return (bound.release + pad)[:width] == (installed.release + pad)[:width] and (
        bound.pre == installed.pre)


def problems(pyproject: Path, extras: list[str]) -> list[str]:
    """One line per direct dependency whose installed version is not its lower bound."""
    project = tomllib.loads(pyproject.read_text("utf-8"))["project"]
    declared = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            return [f"no extra named {extra!r} in {pyproject}"]
        declared += optional[extra]
    found: list[str] = []
    for line in dict.fromkeys(declared):
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        if not bounds:
            continue
        try:
            installed = Version(version(requirement.name))
        except PackageNotFoundError:
            found.append(f"{requirement.name}: not installed (declared {line!r})")
            continue
        if not _same(max(bounds), installed):
            found.append(f"{requirement.name}: declared {line!r}, the lowest that installs is "
                         f"{installed}")
    return found


def main(argv: list[str]) -> int:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    found = problems(pyproject, argv[1:])
    for line in found:
        sys.stderr.write(f"lower bound not proven: {line}\n")
    if not found:
        sys.stdout.write("every direct dependency is installed at its lower bound\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
