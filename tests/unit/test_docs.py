"""The user docs stay true to the code and to themselves: docs/settings.md is what
``raycompile.docs.settings_page()`` renders from raycompile/settings.py; every relative link of the
README, BENCHMARKS.md and docs/*.md reaches a file (and heading) that exists; the README stays
short and keeps the commands CI runs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from raycompile import docs
from raycompile.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 220

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes for a page's headings: lower case, punctuation dropped, spaces to
    hyphens, ``-1``, ``-2`` ... on repeats."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(text):
        m = HEADING.match(line)
        if m is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", m[2].strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file, or heading in a Markdown file, does not exist."""
    text = page.read_text()
    out = []
    for line in prose_lines(text):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if EXTERNAL.match(target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                out.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                out.append(f"{page.relative_to(ROOT)}: {target} (no such heading in {dest.name})")
    return out


def test_the_settings_page_is_what_settings_py_declares() -> None:
    assert docs.PAGE == ROOT / "docs" / "settings.md"
    assert docs.PAGE.exists(), "docs/settings.md is missing: run `python -m raycompile.docs`"
    assert docs.PAGE.read_text() == docs.settings_page(), (
        "docs/settings.md is stale (raycompile/settings.py changed): run `python -m raycompile.docs`")


def test_the_counters_table_is_what_counters_py_declares() -> None:
    text = docs.METRICS_PAGE.read_text()
    assert text == docs.metrics_page(text), "docs/metrics.md's counters are stale: run `python -m raycompile.docs`"
    from raycompile import counters

    for c in counters.COUNTERS:
        assert f"| `{c.name}` |" in text


def test_every_setting_is_on_the_page_with_its_variable_and_comment() -> None:
    page = docs.settings_page()
    declared = {d.name: d for d in docs.declarations()}
    for f in dataclasses.fields(Settings):
        assert f"| `{f.name}` |" in page, f.name
        assert f"`RAYCOMPILE_{f.name.upper()}`" in page, f.name
        assert declared[f.name].comment.replace("|", "\\|") in page, f.name
    assert declared["job_timeout_s"].comment == "one compile job, from submit to result"  # the comment beside
    assert declared["address"].comment.startswith("None: RAY_ADDRESS, else")  # the comment lines above
    assert declared["address"].annotation == "str | None"


def test_comments_are_read_above_and_beside_a_field_and_not_across_a_blank_line() -> None:
    source = ('class Settings:\n'
              '    """doc"""\n\n'
              '    # not this one: a blank line follows\n\n'
              '    # first line\n'
              '    # second line\n'
              '    a: int = 1  # beside\n'
              '    b: str = "x"\n')
    assert [(d.name, d.annotation, d.comment) for d in docs.declarations(source)] == [
        ("a", "int", "first line second line beside"), ("b", "str", "")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_that_exists(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading, here\n\n## Two: `code`\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#a-heading-here) [ok](there.md#two-code) [ok](#top)\n"
                    "# Top\n[gone](missing.md) ![gone](img/missing.png) [bad anchor](there.md#nope)\n"
                    "`[in code](missing2.md)` [web](https://example.com/x.md)\n"
                    "```\n[in a block](missing3.md)\n```\n")
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        found = broken_links(page)
    finally:
        ROOT = root
    assert found == ["page.md: missing.md (no such file)", "page.md: img/missing.png (no such file)",
                     "page.md: there.md#nope (no such heading in there.md)"]


def test_the_readme_is_short_and_keeps_the_commands_ci_runs() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    test_command = [line.strip() for line in ci if line.strip().startswith(".venv/bin/python -m pytest")]
    assert test_command == ['.venv/bin/python -m pytest -q -n 2 --dist loadfile -m "not extended" tests'], test_command
    assert any(line.rstrip().endswith(" && " + test_command[0]) for line in lines), (
        "README.md lost the test command CI runs")
    assert "raycompile demo" in text
