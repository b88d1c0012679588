"""The console is in the box: every file it serves is package data of the wheel (the
package-data globs of pyproject.toml name it), it is served from the installed package, and
it loads nothing from elsewhere -- no other origin, no inline script, nothing to build."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

from tidings.service import console

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "src" / "tidings" / "service" / "console" / "static"


def test_o1_every_console_file_is_package_data_of_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["tidings"]
    files = sorted(p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*") if p.is_file())
    assert files
    for name in files:
        inside = f"service/console/static/{name}"
        assert any(fnmatch.fnmatchcase(inside, g) and inside.count("/") == g.count("/")
                   for g in globs), f"{inside} is not in the wheel's package data"
    assert sorted(console.assets()) == files  # what is served is what ships


def test_o1_the_page_loads_nothing_from_elsewhere_and_runs_no_inline_script() -> None:
    for name, body in console.assets().items():
        text = body.decode("utf-8")
        addresses = set(re.findall(r"[a-z][a-z0-9+.-]*://[^\s\"')]+", text))
        # An SVG's namespace is a name, not a place anything is fetched from.
        assert addresses <= {"http://www.w3.org/2000/svg"}, (name, addresses)
        for markup in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                       "eval(", "new Function"):
            assert markup not in text, (name, markup)  # data never becomes markup or code
    page = console.assets()["index.html"].decode("utf-8")
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", page, re.S)
    assert scripts == [""]  # one module, by its URL; no inline script
    assert not re.search(r"\son[a-z]+\s*=", page)  # no inline event handlers
    assert console.PREFIX == "/console"
    assert "script-src 'self'" in console.CONTENT_SECURITY_POLICY
