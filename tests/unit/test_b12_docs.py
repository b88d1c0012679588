"""B12: the README and docs/ stand alone, in the user's words -- no requirement IDs, no link
to a file the repository does not have, and every worked example has a test that runs it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REQUIREMENT_ID = re.compile(r"\b(?:S|T|C|M|R|L|A|B|O|H)\d{1,2}\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_b12_docs_name_no_requirement_ids(doc: Path) -> None:
    text = doc.read_text("utf-8")
    # Code blocks may hold anything a program prints; the prose must not speak in IDs.
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    found = sorted(set(REQUIREMENT_ID.findall(prose)))
    assert found == [], f"{doc.name} names requirement IDs: {found}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_b12_docs_link_only_to_what_the_repository_has(doc: Path) -> None:
    text = doc.read_text("utf-8")
    assert "SPEC.md" not in text, f"{doc.name} points at a specification it does not ship"
    assert "../shared" not in text, f"{doc.name} points outside the repository"
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue  # a web address, not a file of the repository
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


@pytest.mark.parametrize("topic", ["tools.md", "mcp.md", "config.md", "embedding.md", "models.md"])
def test_b12_each_worked_example_is_run_by_a_test(topic: str) -> None:
    tests = "\n".join(p.read_text("utf-8") for p in (ROOT / "tests").rglob("test_*.py"))
    assert (ROOT / "docs" / topic).exists()
    assert topic in tests, f"no test reads docs/{topic}'s example"
