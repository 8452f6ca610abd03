"""The Chinese pages: a README.zh-CN.md beside every README.md, with the same code, steps and error messages.

The python blocks and expected output of both pages are generated from one source (pages.py; test_examples
checks both pages include the same regions); the other fenced blocks (commands, pictures, the version
table) are the same byte for byte. Headings keep their step numbers, every inline code span of the English
page (error messages, API and op names, commands) stays verbatim, and each page links the other language
in its first line.
"""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

ENGLISH_PAGES = [p.relative_to(ROOT) for p in (ROOT / "README.md", *sorted(ROOT.glob("[!.]*/README.md")))]
FIRST_LINE = {
    "en": "English | [简体中文](README.zh-CN.md)",
    "zh": "[English](README.md) | 简体中文",
}
FENCE = re.compile(r"^```.*?^```\n", re.S | re.M)
TABLE = re.compile(r"<!-- version table:.*?<!-- end of version table -->", re.S)
GLOSSARY_TERMS = ["算子", "符号函数", "导出器", "自定义算子", "域", "计算图", "节点", "转换函数", "分解", "容差"]


def pair(english):
    en = (ROOT / english).read_text(encoding="utf-8")
    zh_path = ROOT / english.parent / "README.zh-CN.md"
    assert zh_path.is_file(), f"{english} has no Chinese twin {zh_path.relative_to(ROOT)}"
    return en, zh_path.read_text(encoding="utf-8")


def without_fences(text: str) -> str:
    return FENCE.sub("", text)


def headings(text: str) -> list[str]:
    return [line for line in without_fences(text).splitlines() if line.startswith("## ")]


def inline_code(text: str) -> list[str]:
    """The inline code spans of the prose, whitespace folded (a span may wrap onto the next line)."""
    spans = re.findall(r"(?<!`)`((?:[^`\n]|\n(?!\n))+)`(?!`)", without_fences(text))
    return [" ".join(span.split()) for span in spans]


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_every_page_has_a_chinese_twin_with_the_same_code(english):
    en, zh = pair(english)
    assert FENCE.findall(zh) == FENCE.findall(en), f"{english}: the fenced blocks differ between the languages"
    assert TABLE.findall(zh) == TABLE.findall(en), f"{english}: the version tables differ between the languages"


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_the_same_headings_and_steps(english):
    en, zh = pair(english)
    en_heads, zh_heads = headings(en), headings(zh)
    assert len(zh_heads) == len(en_heads), (
        f"{english}: {len(en_heads)} '## ' headings, in Chinese {len(zh_heads)}"
    )
    steps = [re.match(r"## (\d+)\. ", h) for h in en_heads]
    for en_head, zh_head, step in zip(en_heads, zh_heads, steps, strict=True):
        if step:
            assert zh_head.startswith(step.group(0)), (
                f"{english}: {en_head!r} is {zh_head!r} in the Chinese page"
            )
        else:
            assert not re.match(r"## \d+\. ", zh_head), (
                f"{english}: {zh_head!r} stands where {en_head!r} does"
            )


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_error_messages_api_names_and_commands_stay_verbatim(english):
    en, zh = pair(english)
    kept = set(inline_code(zh))
    missing = [span for span in dict.fromkeys(inline_code(en)) if span not in kept]
    assert not missing, f"{english}: the Chinese page lacks these inline code spans: {missing[:15]}"
    # The errors section, heading for heading, holds every message the English one does.
    en_sections, zh_sections = sections(en), sections(zh)
    for index, (title, body) in enumerate(en_sections):
        if title.startswith("## Errors"):
            zh_body = zh_sections[index][1]
            lost = [span for span in inline_code(body) if span not in inline_code(zh_body)]
            assert not lost, (
                f"{english}: the Chinese page's {zh_sections[index][0]!r} lacks {lost[:10]}"
            )


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_each_page_links_the_other_language_in_its_first_line(english):
    en, zh = pair(english)
    assert en.splitlines()[0] == FIRST_LINE["en"], (
        f"{english}: the first line must be {FIRST_LINE['en']!r}"
    )
    assert zh.splitlines()[0] == FIRST_LINE["zh"], (
        f"{english.parent / 'README.zh-CN.md'}: first line"
    )


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_chinese_pages_link_chinese_pages(english):
    """A Chinese page sends its reader to the other folders' Chinese pages, not to the English ones."""
    _, zh = pair(english)
    zh = TABLE.sub("", zh)  # the version table is generated, the same in both languages
    here = ROOT / english.parent
    wrong = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", zh):
        if "://" in target:
            continue
        resolved = (here / target).resolve()
        if resolved.is_dir() and (resolved / "README.zh-CN.md").is_file():
            wrong.append(target)
        elif resolved.name == "README.md" and resolved != (here / "README.md").resolve():
            wrong.append(target)
    assert not wrong, (
        f"{english.parent / 'README.zh-CN.md'} links English pages or bare folders: {wrong}"
    )


def test_top_chinese_page_links_every_folder_and_has_a_glossary():
    _, zh = pair(ENGLISH_PAGES[0])
    for folder in sorted({p.parent for p in ENGLISH_PAGES if str(p.parent) != "."}):
        assert f"]({folder}/README.zh-CN.md)" in zh, (
            f"README.zh-CN.md does not link {folder}/README.zh-CN.md"
        )
    glossary = re.search(r"^### [^\n]*术语[^\n]*\n(.*?)(?=^##)", zh, re.S | re.M)
    assert glossary is not None, (
        "README.zh-CN.md has no glossary (a '### ' heading with 术语, before the next heading)"
    )
    glossary = glossary.group(1)
    absent = [term for term in GLOSSARY_TERMS if term not in glossary]
    assert not absent, f"the glossary lacks {absent}"


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for each '## ' section of the page, fenced blocks kept in the body."""
    parts, title, body = [], None, []
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        if not inside and line.startswith("## "):
            if title is not None:
                parts.append((title, "\n".join(body)))
            title, body = line, []
        elif title is not None:
            body.append(line)
    if title is not None:
        parts.append((title, "\n".join(body)))
    return parts
