"""The built book: a page per notebook and lab, nothing loaded from elsewhere, no dead links.

Build first with ``scripts/build_book.sh`` (``make test`` does). Without a build these tests are
skipped — unless ``PPDIT_REQUIRE_BOOK=1`` (set by ``make test``), where a missing build fails.
"""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.conftest import ROOT

HTML = ROOT / "book" / "_build" / "html"

if not (HTML / "index.html").exists():
    if os.environ.get("PPDIT_REQUIRE_BOOK") == "1":
        raise RuntimeError("PPDIT_REQUIRE_BOOK=1 but the book is not built (scripts/build_book.sh)")
    pytest.skip("the book is not built: run scripts/build_book.sh", allow_module_level=True)


class _Refs(HTMLParser):
    """Collects (tag, attribute, value) for src/href attributes."""

    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append((tag, name, value))


def _pages() -> list[Path]:
    return [p for p in HTML.rglob("*.html") if "_static" not in p.parts]


def _refs(page: Path) -> list[tuple[str, str, str]]:
    parser = _Refs()
    parser.feed(page.read_text(errors="replace"))
    return parser.refs


def _external(url: str) -> bool:
    return bool(re.match(r"^(https?:)?//", url))


def test_every_notebook_and_lab_has_a_page():
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert (HTML / "notebooks" / f"{nb.stem}.html").exists(), f"no page for {nb.name}"
    for handout in (ROOT / "labs").glob("lab*/README.md"):
        assert (HTML / "labs" / handout.parent.name / "README.html").exists(), handout


def test_no_page_loads_a_script_or_stylesheet_from_elsewhere():
    for page in _pages():
        for tag, attr, url in _refs(page):
            if tag in ("script", "link") and _external(url):
                raise AssertionError(f"{page.relative_to(HTML)} loads {url} ({tag} {attr})")


def test_widgets_and_maths_are_served_by_the_book():
    page = (HTML / "notebooks" / "10_rooflines.html").read_text()
    for script in ("require.js", "widgets/embed-amd.js", "mathjax/tex-mml-chtml.js"):
        assert script in page, f"{script} is not referenced"
        assert (HTML / "_static" / script).exists(), f"{script} is not in _static"


def test_internal_links_resolve():
    broken = []
    for page in _pages():
        for _, _, url in _refs(page):
            parsed = urlparse(url)
            skip = parsed.scheme in ("mailto", "data", "javascript") or not parsed.path
            if _external(url) or skip:
                continue
            target = (page.parent / unquote(parsed.path)).resolve()
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)} -> {url}")
    assert not broken, "broken links:\n" + "\n".join(broken[:20])


def test_claims_ledger_lists_every_claim():
    from ppdit.teaching.claims import CLAIMS

    ledger = (HTML / "claims.html").read_text()
    for claim in CLAIMS:
        assert claim.notebook in ledger
