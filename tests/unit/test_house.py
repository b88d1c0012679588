"""The house: the root keeps only the public API and the vocabulary, no module grows past 450
lines and no class past 20 methods (each def of its body counts, overloads too)."""

from __future__ import annotations

import ast
from pathlib import Path

import tidings

SRC = Path(tidings.__file__).parent
MAX_LINES = 450
MAX_METHODS = 20
ROOT = {"__init__.py", "__main__.py", "clock.py", "logs.py"}
VOCABULARY = {"errors", "types"}  # packages: the errors by concern, the types by concern


def _modules() -> dict[str, Path]:
    return {str(p.relative_to(SRC)): p for p in sorted(SRC.rglob("*.py"))}


def _lines(path: Path) -> int:
    return len(path.read_text("utf-8").splitlines())


def _classes(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text("utf-8"))
    return {
        node.name: sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
        for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    }


def test_house_the_root_keeps_the_public_api_and_the_vocabulary() -> None:
    root = {p.name for p in SRC.glob("*.py")}
    assert root == ROOT
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert {*VOCABULARY, "scheduler", "records", "conversations", "runtime", "support"} <= (
        packages)


def test_house_no_module_grows_past_its_bound() -> None:
    sizes = {name: _lines(path) for name, path in _modules().items()}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines"


def test_house_no_class_grows_past_its_bound() -> None:
    counts = {f"{name}:{cls}": n for name, path in _modules().items()
              for cls, n in _classes(path).items()}
    over = {key: n for key, n in counts.items() if n > MAX_METHODS}
    assert over == {}, f"classes over {MAX_METHODS} methods"
