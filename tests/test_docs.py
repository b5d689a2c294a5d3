"""The README is a guide of at most 250 lines whose links all lead somewhere: each relative link names a file that
exists (a page of the documentation site under docs/, or another file of the project), each #anchor a heading of
its target, and every page of the site is linked from it. The site itself is checked by `mkdocs build --strict`
(`make docs`, which `make test` runs before these tests)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def links(markdown: str) -> list[str]:
    """The targets of a Markdown text's inline links, code blocks left out."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return [target for _text, target in LINK.findall(prose)]


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings as GitHub and mkdocs' toc make them (lowercase, punctuation dropped,
    spaces as hyphens), code blocks left out."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    anchors = set()
    for title in re.findall(r"^#{1,6}\s+(.+?)\s*$", prose, flags=re.M):
        text = re.sub(r"[^\w\s-]", "", title.replace("`", "").lower())
        anchors.add(re.sub(r"\s+", "-", text.strip()))
    return anchors


def test_heading_anchors_are_made_as_github_makes_them():
    assert heading_anchors("# Your own run in three commands\n## The studies in `params/`\n```\n# not one\n```") == {
        "your-own-run-in-three-commands", "the-studies-in-params"}


def test_links_leave_out_code_blocks():
    assert links("[a](x.md) `c` [b](y.md#z)\n```\n[no](n.md)\n```") == ["x.md", "y.md#z"]


def test_the_readme_is_at_most_250_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines: move a section into docs/ (the site)"


def test_every_readme_link_resolves():
    readme = README.read_text()
    targets = [t for t in links(readme) if not re.match(r"[a-z]+:", t)]  # http(s), mailto: not checked here
    assert targets, "the README links to no page of the site"
    broken = []
    for target in targets:
        path, _, anchor = target.partition("#")
        file = (ROOT / path) if path else README
        if not file.is_file():
            broken.append(f"{target}: no file {file.relative_to(ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_every_page_of_the_site_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README.read_text()) if t.partition("#")[0]}
    pages = sorted(DOCS.rglob("*.md"))
    assert pages, "docs/ holds no page"
    unlinked = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked
                and p.name != "benchmark-history.md"]  # the site's view of benchmarks/RESULTS.md, linked as that
    assert not unlinked, f"pages of the site the README does not link: {unlinked}"
