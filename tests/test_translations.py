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
    en_heads, zh_heads = (headings(page) for page in pair(english))
    assert len(zh_heads) == len(en_heads), f"{english}: {len(en_heads)} '## ' headings, in Chinese {len(zh_heads)}"
    for en_head, zh_head in zip(en_heads, zh_heads, strict=True):
        step = re.match(r"## \d+\. ", en_head)
        assert (zh_head.startswith(step.group(0)) if step else not re.match(r"## \d+\. ", zh_head)), (
            f"{english}: {en_head!r} is {zh_head!r} in the Chinese page"
        )


def errors_section(text: str) -> str:
    """The page's errors section (## Errors ... / ## 本目录解决的错误), up to the next heading."""
    found = re.search(r"^## (Errors|本目录解决的错误).*?\n(.*?)(?=^## |\Z)", without_fences(text), re.S | re.M)
    return found.group(2) if found else ""


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_error_messages_api_names_and_commands_stay_verbatim(english):
    en, zh = pair(english)
    missing = [span for span in dict.fromkeys(inline_code(en)) if span not in set(inline_code(zh))]
    assert not missing, f"{english}: the Chinese page lacks these inline code spans: {missing[:15]}"
    lost = [span for span in inline_code(errors_section(en)) if span not in inline_code(errors_section(zh))]
    assert not lost, f"{english}: the Chinese page's errors section lacks {lost[:10]}"


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_each_page_links_the_other_language_in_its_first_line(english):
    en, zh = pair(english)
    assert en.splitlines()[0] == FIRST_LINE["en"], f"{english}: the first line must be {FIRST_LINE['en']!r}"
    assert zh.splitlines()[0] == FIRST_LINE["zh"], f"{english.parent / 'README.zh-CN.md'}: first line"


@pytest.mark.parametrize("english", ENGLISH_PAGES, ids=str)
def test_chinese_pages_link_chinese_pages(english):
    """A Chinese page sends its reader to the other folders' Chinese pages, not to the English ones."""
    zh, here = TABLE.sub("", pair(english)[1]), ROOT / english.parent  # the version table is generated
    wrong = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", zh):
        resolved = (here / target).resolve()
        if "://" not in target and (
            (resolved.is_dir() and (resolved / "README.zh-CN.md").is_file())
            or (resolved.name == "README.md" and resolved != (here / "README.md").resolve())
        ):
            wrong.append(target)
    assert not wrong, f"{english.parent / 'README.zh-CN.md'} links English pages or bare folders: {wrong}"


def test_top_chinese_page_links_every_folder_and_has_a_glossary():
    zh = pair(ENGLISH_PAGES[0])[1]
    for folder in sorted({p.parent for p in ENGLISH_PAGES if str(p.parent) != "."}):
        assert f"]({folder}/README.zh-CN.md)" in zh, f"README.zh-CN.md does not link {folder}/README.zh-CN.md"
    glossary = re.search(r"^### [^\n]*术语[^\n]*\n(.*?)(?=^##)", zh, re.S | re.M)
    assert glossary is not None, "README.zh-CN.md has no glossary (a '### ' heading with 术语, before the next one)"
    absent = [term for term in GLOSSARY_TERMS if term not in glossary.group(1)]
    assert not absent, f"the glossary lacks {absent}"
