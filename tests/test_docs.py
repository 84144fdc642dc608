"""The README and docs/ hold together: every relative link, anchor and image resolves.

Anchors follow GitHub's heading slugs: the heading's text without inline
markup, lowercased, punctuation other than '-' and '_' dropped, spaces
turned into '-', and a repeated slug numbered '-1', '-2', … Links inside
fenced code blocks and inline code are not links and are skipped.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "bench" / "README.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1")
# [text](target) and ![alt](target); the target may carry a "title".
LINK = re.compile(r"(!?)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, …


def prose_lines(text: str) -> list[tuple[int, str]]:
    """Return (line number, line) for every line outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def github_slug(heading: str) -> str:
    """Slug a heading's text as GitHub does for its anchors."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Return every heading anchor of a page, repeated slugs numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(page.read_text()):
        if match := HEADING.match(line):
            slug = github_slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def links(page: Path) -> list[tuple[int, bool, str]]:
    """Return (line number, is an image, target) for every link in a page's prose."""
    found = []
    for number, line in prose_lines(page.read_text()):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            found.append((number, match.group(1) == "!", match.group(2)))
    return found


def broken_links(page: Path) -> list[str]:
    """Return a message for every relative link, anchor or image of a page that does not resolve."""
    problems = []
    for number, is_image, target in links(page):
        if EXTERNAL.match(target):
            continue
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{where}: {'image' if is_image else 'file'} not found")
        elif anchor and resolved.suffix == ".md" and unquote(anchor) not in anchors(resolved):
            problems.append(f"{where}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_anchor_and_image_resolves(page):
    assert broken_links(page) == []


def test_docs_pages_exist_and_link_back_to_the_readme():
    docs = [page for page in PAGES if page.parent.name == "docs"]
    assert docs, "docs/ holds no pages"
    for page in docs:
        assert "](../README.md)" in page.read_text(), f"{page.name} does not link back to the README"


def test_readme_is_a_quickstart_under_200_lines():
    assert len(README.read_text().splitlines()) < 200


def test_readme_first_code_block_runs_make_run_then_make_test():
    text = README.read_text()
    block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, "the README has no fenced code block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands[:2] == ["make run", "make test"]


def test_slugs_follow_github_rules():
    assert github_slug("Thread streaming (protocol v2)") == "thread-streaming-protocol-v2"
    assert github_slug("One run, counted (`bench.run_costs`)") == "one-run-counted-benchrun_costs"
    assert github_slug("Resume, rollback, regenerate, branch") == "resume-rollback-regenerate-branch"
