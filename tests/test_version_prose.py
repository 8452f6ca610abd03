"""What the pages' prose says about torch releases, against stacks/matrix.json.

The version table and ERRORS.md are written from stacks/matrix.json. The prose around them (each
folder's openings and Notes, both languages, and the causes ERRORS.md quotes from each test.py's
CAUSES) is written by hand, so each sentence that names a torch release is one of:

- a claim in CLAIMS: a pattern that finds the sentence in both pages of a folder, and the matrix fact
  that backs it. The releases are read from the page (each `<R>` of the pattern), not copied here, and
  compared with the releases on which the matrix records the fact;
- an entry of NOT_FROM_THE_MATRIX: a fact the matrix cannot hold (an upstream change with its source,
  a timing, a log line the examples hold back), with the reason.

test_every_release_named_in_prose_is_checked_or_marked fails on a release named anywhere else, so a new
version sentence is added to one of the two tables (CONTRIBUTING.md, "Versions and CI").

Patterns: literal text, where a run of spaces matches any white space (a line break, or none: Chinese
puts none beside Latin text), `…` any text within the paragraph, `<R>` a release expression checked (in
CLAIMS) or marked (in NOT_FROM_THE_MATRIX), `<_>` one matched but left to another entry. A release
expression is `2.8`, `2.8.0`, `2.6 and 2.7`, `2.6, 2.7 and 2.8`, `2.6 to 2.8`, `2.6-2.8`, `2.6–2.8`,
`2.6、2.7`, `2.6 和 2.7`, `2.6 到 2.8`. How the releases are read is the claim's `reading`: "on" (the
releases named), "from" (that one and every newer), "before" (every older), "upto" (that one and every
older); how they are compared, its `mode`: "exactly" (the fact holds on those of the recorded releases
it applies to, and on no other), "each" (on each of them; the sentence says nothing of the others),
"none" (on none of them). The recorded releases are the stacks that stacks/matrix.json has; a fact
about a step applies where the step ran (not where it needs a newer torch), so a claim stays true when
older stacks are recorded, unless they contradict it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import pytest
from conftest import ROOT

import run_stacks

MATRIX = run_stacks.load_matrix()
RECORDED = [s for s in run_stacks.STACKS if s in MATRIX]  # oldest first

# A torch release as the pages write it: 2.8, 2.8.0, 2.14.1, 1.13.
VERSION = r"(?:1\.1[0-3]|2\.\d{1,2})(?:\.\d+)?"
JOIN = r"(?:\s*(?:-|–|,|、)\s*|\s+(?:to|and|,\s*and)\s+|\s*(?:和|到|至|与)\s*)"
RELEASES = rf"{VERSION}(?:{JOIN}{VERSION})*"
RANGE_WORDS = r"\s*(?:-|–|\bto\b|到|至)\s*"


# ---------------------------------------------------------------------------------------------
# The facts the matrix holds: each says, per recorded stack, True, False or None (not applicable)
# ---------------------------------------------------------------------------------------------


def steps_of(stack: str, name: str) -> dict | None:
    """What each step of NAME did on STACK; None where the matrix has no cell for it."""
    cell = MATRIX[stack].get(name)
    return None if cell is None else cell["steps"]


def ran(stack: str, name: str, steps: tuple[str, ...]) -> bool:
    got = steps_of(stack, name) or {}
    return all(n in got and got[n]["status"] in ("runs", "differs") for n in steps)


@dataclass(frozen=True)
class Status:
    """Steps STEPS of NAME have a status that starts with STATUS ("runs", "differs", "needs torch >= 2.6",
    "needs"); with WHY, a reason that holds it. A "needs" status applies on every stack, the others where
    the steps ran."""

    name: str
    steps: tuple[str, ...]
    status: str
    why: str = ""

    def __call__(self, stack: str) -> bool | None:
        got = steps_of(stack, self.name)
        if got is None or not self.status.startswith("needs") and not ran(stack, self.name, self.steps):
            return None
        if self.why and any(  # a step keeps one reason (its last differs()): another's hides this one
            got[n]["status"] == "differs" and self.why not in got[n].get("why", "") for n in self.steps
        ) and not self.status.startswith("needs"):
            return None
        return all(
            n in got and got[n]["status"].startswith(self.status) and self.why in got[n].get("why", "")
            for n in self.steps
        )

    def __str__(self) -> str:
        why = f" ({self.why}...)" if self.why else ""
        return f"{self.name}/ step {', '.join(self.steps)}: {self.status!r}{why}"


@dataclass(frozen=True)
class Reproduced:
    """Step STEP of NAME reproduced an error whose text (or the line further down) holds TEXT; applies
    where the step ran."""

    name: str
    step: str
    text: str

    def __call__(self, stack: str) -> bool | None:
        if not ran(stack, self.name, (self.step,)):
            return None
        entries = steps_of(stack, self.name)[self.step].get("reproduced", [])
        return any(self.text in e["error"] or self.text in e["further_down"] for e in entries)

    def __str__(self) -> str:
        return f"{self.name}/ step {self.step} reproduced {self.text!r}"


@dataclass(frozen=True)
class Pinned:
    """The stack requirements.txt pins."""

    def __call__(self, stack: str) -> bool:
        return stack == run_stacks.PINNED

    def __str__(self) -> str:
        return "the pinned stack (requirements.txt)"


@dataclass(frozen=True)
class Recorded:
    """A stack stacks/matrix.json records, every example's cell on it: the releases the examples run on."""

    def __call__(self, stack: str) -> bool:
        return all(name in MATRIX[stack] for name in run_stacks.examples())

    def __str__(self) -> str:
        return "a stack stacks/matrix.json records for every example"


@dataclass(frozen=True)
class SameAs:
    """NAME did, step by step, what it did on STACK (statuses, reasons, errors); applies where both
    cells are recorded."""

    name: str
    stack: str

    def __call__(self, stack: str) -> bool | None:
        this, that = steps_of(stack, self.name), steps_of(self.stack, self.name)
        return None if this is None or that is None else this == that

    def __str__(self) -> str:
        return f"{self.name}/ did what it did on {self.stack}"


@dataclass(frozen=True)
class InCI:
    """A stack `python run_stacks.py --ci` always runs (run_stacks.CI_STACKS)."""

    def __call__(self, stack: str) -> bool:
        return stack in run_stacks.CI_STACKS

    def __str__(self) -> str:
        return f"one of run_stacks.CI_STACKS {run_stacks.CI_STACKS}"


@dataclass(frozen=True)
class Not:
    """FACT does not hold (where it applies)."""

    fact: object

    def __call__(self, stack: str) -> bool | None:
        value = self.fact(stack)
        return None if value is None else not value

    def __str__(self) -> str:
        return f"not: {self.fact}"


@dataclass(frozen=True)
class AnyOf:
    """One of FACTS holds (None where none applies)."""

    facts: tuple

    def __call__(self, stack: str) -> bool | None:
        values = [fact(stack) for fact in self.facts]
        return None if all(v is None for v in values) else any(values)

    def __str__(self) -> str:
        return " or ".join(map(str, self.facts))


@dataclass(frozen=True)
class Claim:
    where: str | tuple[str, ...]  # a folder, "." (the top README), or a tuple of them
    en: str
    zh: str
    fact: object
    reading: str = "on"  # "on", "from", "before", "upto"
    mode: str = "exactly"  # "exactly", "each", "none"
    together: bool = False  # the <R>s of a match name one set of releases, not one each


@dataclass(frozen=True)
class Mark:
    """A release named for a fact the matrix does not hold, and why."""

    where: str | tuple[str, ...]
    en: str
    zh: str
    why: str


# ---------------------------------------------------------------------------------------------
# The pages' prose, and the releases it names
# ---------------------------------------------------------------------------------------------


ERRORS = "ERRORS.md"  # its causes: each test.py's CAUSES, in English only


def folders() -> list[str]:
    return [".", *run_stacks.examples(), ERRORS]


def pages(where) -> list[tuple[str, str]]:
    """(folder, language) of every page WHERE names."""
    names = [where] if isinstance(where, str) else list(where)
    return [(name, lang) for name in names for lang in ("en", "zh") if name != ERRORS or lang == "en"]


def path(folder: str, lang: str):
    if folder == ERRORS:
        return ROOT / ERRORS
    return ROOT / folder / ("README.md" if lang == "en" else "README.zh-CN.md")


def causes() -> str:
    """ERRORS.md, line for line, with only the hand-written part of each entry: its cause (the error is
    an example's output, the releases before it are written from the matrix)."""
    lines = path(ERRORS, "en").read_text(encoding="utf-8").split("\n")
    return "\n".join(m.group(1) if (m := re.match(r"  <br>torch .*? · (.*) · fixed in ", s)) else "" for s in lines)


@functools.cache
def prose(folder: str, lang: str) -> str:
    """The page without what is not hand-written prose, line for line (so positions give line numbers):
    fenced blocks, the generated version table and cog lines blanked, link targets and URLs cut."""
    if folder == ERRORS:
        return causes()
    lines = path(folder, lang).read_text(encoding="utf-8").split("\n")
    out, fenced, table, cogged = [], False, False, False
    for line in lines:
        if line.startswith(run_stacks.TABLE_BEGIN[:20]):
            table = True
        if "{{{cog" in line or "{{{end}}}" in line:  # what cog writes comes from code and runs
            cogged = "{{{cog" in line and "{{{end}}}" not in line
            out.append("")
            continue
        if cogged:
            out.append("")
            continue
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        if fenced or table or "{{{" in line:
            out.append("")
        else:
            line = re.sub(r"\]\([^)\s]*\)", "]()", line)  # [text](target)
            line = re.sub(r"^\[[^\]]+\]:\s*\S+", "", line)  # [label]: target
            out.append(re.sub(r"<?https?://[^\s)>]+>?", "", line))
        if line.startswith(run_stacks.TABLE_END):
            table = False
    return "\n".join(out)


# A torch release in prose: not a part of another number (2.4e-7, 0.2.8, v2.3.2), nor another
# package's version, nor a size.
MENTION = re.compile(
    rf"(?<![\w.\-/+])(?<!rknn-toolkit2==)(?<!RKNN-Toolkit2 )({VERSION})(?![\w.]*\d)(?!e-|\s*[GM]B\b)"
)


def mentions(text: str) -> list[re.Match]:
    return list(MENTION.finditer(text))


def line_of(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


@functools.cache
def compile_pattern(pattern: str) -> re.Pattern:
    out, index = [], 0
    for token in re.findall(r"<R>|<_>|…|\s+|[^\s…<]+|<", pattern):
        if token == "<R>":
            out.append(f"(?P<r{index}>{RELEASES})")
            index += 1
        elif token == "<_>":
            out.append(f"(?:{RELEASES})")
        elif token == "…":
            out.append(r"(?:(?!\n\s*\n).)*?")
        elif token.isspace():
            out.append(r"\s*")
        else:
            out.append(re.escape(token))
    return re.compile("".join(out), re.S)


def found(entry, folder: str, lang: str) -> list[re.Match]:
    return list(compile_pattern(entry.en if lang == "en" else entry.zh).finditer(prose(folder, lang)))


# ---------------------------------------------------------------------------------------------
# Reading a release expression
# ---------------------------------------------------------------------------------------------


def stack_of(version: str) -> str:
    return "torch-" + ".".join(version.split(".")[:2])


def key(version: str) -> tuple[int, int]:
    return run_stacks.minor(stack_of(version))


def named(expression: str) -> list[tuple[str, str]]:
    """The (first, last) versions of each part of EXPRESSION: '2.6 to 2.8, 2.10' -> [(2.6, 2.8), (2.10, 2.10)]."""
    parts = []
    for part in re.split(r"\s*(?:,\s*and|,|、|\band\b|和|与)\s*", expression):
        ends = re.split(RANGE_WORDS, part.strip())
        parts.append((ends[0], ends[-1]))
    return parts


def releases(expression: str, reading: str) -> set[str]:
    """The recorded stacks EXPRESSION names, read as READING."""
    parts = named(expression)
    if reading == "on":
        return {s for s in RECORDED for first, last in parts if key(first) <= run_stacks.minor(s) <= key(last)}
    assert len(parts) == 1 and parts[0][0] == parts[0][1], f"{expression!r} read {reading!r}: one release"
    at = key(parts[0][0])
    compare = {"from": lambda m: m >= at, "before": lambda m: m < at, "upto": lambda m: m <= at}[reading]
    return {s for s in RECORDED if compare(run_stacks.minor(s))}


def patch_levels(expression: str) -> list[str]:
    """Each full version (2.8.0) in EXPRESSION that is not the release its stack pins."""
    wrong = []
    for version in re.findall(VERSION, expression):
        stack = stack_of(version)
        if version.count(".") == 2 and stack in run_stacks.STACKS and run_stacks.torch_version(stack) != version:
            wrong.append(f"{version} (the stack pins {run_stacks.torch_version(stack)})")
    return wrong


# ---------------------------------------------------------------------------------------------
# The claims
# ---------------------------------------------------------------------------------------------

CLAIMS: list[Claim] = []
NOT_FROM_THE_MATRIX: list[Mark] = []


def claim(where, en: str, zh: str, fact, reading: str = "on", mode: str = "exactly", together: bool = False) -> None:
    CLAIMS.append(Claim(where, en, zh, fact, reading, mode, together))


def mark(where, en: str, zh: str, why: str) -> None:
    NOT_FROM_THE_MATRIX.append(Mark(where, en, zh, why))


# Why a release is named for a fact the matrix does not hold
UPSTREAM = "upstream: what that release's source, docs, pull request or release notes say (linked on the page)"
SEEN = "seen on that release, not recorded in the matrix (output test.py holds back, a log line, a warning)"
TIME = "a timing measured on that release"
SOURCE = "the release the source material was written for or tested on"
EXAMPLE = "a release named as an example (a command, an older reader's code), no fact about it"

# Facts the pages lean on in many places
DEFAULT_DYNAMO = Status("register_onnx_symbolic", ("6",), "runs")  # a call without dynamo= ignores symbolics
DYNAMO_EXPORT = Status("library_custom_op", ("1",), "differs", why="dynamo_export")  # the old dynamo=True
TRANSLATION_TABLE = Not(Status("register_onnx_symbolic", ("2",), "needs"))  # custom_translation_table
CUSTOM_OP = Not(Status("library_custom_op", ("3",), "needs"))  # torch.library.custom_op
OPSET_18 = Reproduced("register_onnx_symbolic", "1", "DeformConv with domain_version of 18")  # dynamo=True's default
OP_NAME = Reproduced("register_onnx_symbolic", "10", "unrecognized namespace {op_name}")  # the f-string's lost f
NO_DUMP = Status("register_pytorch_op", ("6",), "differs", why="no graph dump")  # a failing dynamo=False export
BOTH_DUMPS = Status("register_pytorch_op", ("5", "6"), "differs", why="ONNX graph being constructed")
DRAFT_EXPORT = Status("autograd_function", ("3",), "differs", why="draft export")  # dynamo=True falls back to it

EXAMPLES = tuple(run_stacks.examples())

# ---- every folder: the opening, and the Versions paragraph (quantize_int8's opening names no exporter: it
# quantizes a file, which it writes with dynamo=False, on every release)
claim(tuple(e for e in EXAMPLES if e != "quantize_int8"),
    "**`dynamo=True`** (the default since torch <R>)",
    "**`dynamo=True`**（… <R> 起默认）",
    DEFAULT_DYNAMO, "from",
)
VERSIONS = ("argument_types", "autograd_function", "deploy_openvino", "library_custom_op", "onnxscript_function",
            "register_onnx_symbolic", "register_pytorch_op")  # the same Versions sentence, which names no range
claim(VERSIONS,
    "`test.py` passes on every torch line in [Your torch version](), which says what each does differently (<R> "
    "pinned)",
    "`test.py` 在[你的 torch 版本]()列出的每个 torch 系列（固定版本为 <R>；各版本的不同之处也见那里）上",
    Pinned(),
)

# ---- the top README (its version table and version list are generated: not prose)
F = "."
claim(F,
    "`torch.onnx.export`'s\ndefault since torch <R>;",
    "torch <R> 起，`torch.onnx.export` 默认 `dynamo=True`",
    DEFAULT_DYNAMO, "from",
)
claim(F, "traceback (checked on torch <R>;", "（在 torch <R> 上核实过；", Pinned())
mark(F,
    "calls the list approximate … and the function\n deprecated since <R>.",
    "并说这个函数自 <R> 起已弃用",
    UPSTREAM,
)
claim(F,
    "the default since torch <R> (\"Changed in version <R>:",
    "torch <R> 起为默认（文档原文：“Changed in version <R>:",
    DEFAULT_DYNAMO, "from",
)
mark(F, "(public from torch <R>)", "（torch <R> 起公开）", UPSTREAM)
mark(F, "The trap: code written for torch <R> that calls", "坑就在这里：为 torch <R> 写的代码调用", EXAMPLE)
claim(F, "On torch <R> and later the output tells", "在 torch <R> 及之后的版本上，看输出就知道", Not(NO_DUMP), "from")
mark(F,
    "the output tells (on <R>, `dynamo=True` runs the older",
    "（在 torch <R> 上，`dynamo=True` 跑的是更早的",
    UPSTREAM,
)
claim(F,
    "(torch <R> first prints `ONNX graph being constructed during exception:`",
    "（torch <R> 还会先打印 `ONNX graph being constructed during exception:`",
    BOTH_DUMPS,
)
mark(F, "for PyTorch <R>\n to <R>: Rockchip's", "面向 PyTorch <R> 到 <R>：瑞芯微", SOURCE)
claim(F, "(`torch==<R>` as `<R>+cpu`)", "（`torch==<R>` 装成 `<R>+cpu`）", Pinned())
claim(F,
    "on the newest release of every torch line from <R>, and\non <R>, the older releases",
    "从 <R>，每个 torch 系列的最新版上，以及素材提到的更早版本（“PyTorch <_> or 2.x”）<R> 上",
    Recorded(), together=True,
)
mark(F, "the source material names (\"PyTorch <R> or 2.x\")", "素材提到的更早版本（“PyTorch <R> or 2.x”）", SOURCE)
STACK_PINS = "what a stack's file pins (stacks/torch-X.Y.txt), which says why"
claim(F, "stacks. <R> is pinned (the newest", "固定版本是 <R>（有配套 torchvision 的最新版）", Pinned())
mark(F,
    "Before <R>, `torch.onnx.export`\nhas no `dynamo=` argument",
    "<R> 之前，`torch.onnx.export` 还没有 `dynamo=` 参数",
    UPSTREAM,
)
mark(F,
    "It also holds back the warning of <R>\n`Exporting to ONNX opset version 18 is not supported`",
    "它还压下 <R> 的警告 `Exporting to ONNX opset version 18 is not supported`",
    SEEN,
)
mark(F,
    "and <R>'s\n`FutureWarning` that `g.op()` \"is to be removed\"",
    "以及 <R> 说 `g.op()`“将被移除”的 `FutureWarning`",
    SEEN,
)
mark(F, "does on <R>, from their source</summary>", "在 <R> 上的行为（依据各版本源码）</summary>", UPSTREAM)
mark(F, "- **<R>**: as <R> below (the same defaults", "- **<R>**：与下面的 <R> 相同（默认值", UPSTREAM)
mark(F,
    "- **<R>**: without `dynamo=`, the `torch.export`-based exporter runs",
    "- **<R>**：不传 `dynamo=` 时，运行基于 `torch.export` 的导出器",
    UPSTREAM,
)
mark(F,
    "- **<R>**: without `dynamo=`, the TorchScript-based exporter runs",
    "- **<R>**：不传 `dynamo=` 时，运行基于 TorchScript 的导出器（[`__init__.py`]()）",
    UPSTREAM,
)
mark(F,
    "- **<R>**: without `dynamo=`, the TorchScript-based exporter\n (",
    "- **<R>**：不传 `dynamo=` 时，运行基于 TorchScript 的导出器（[`utils.py`]()）",
    UPSTREAM,
)
claim(F,
    "no `custom_translation_table` (it came with <R>)",
    "没有 `custom_translation_table`（<R> 才加入）",
    TRANSLATION_TABLE, "from",
)
mark(F,
    "so torch <R> share one (and <R> another). There torch <R> leaves a `lock`\nfile that torch <R> and older wait for",
    "所以 torch <R> 共用一个（<R> 共用另一个）。在这样的目录里，torch <R> 会留下一个 `lock` 文件，torch <R> "
    "及更早的版本",
    SEEN,
)
mark(F, "(seen\nhere: torch <R> loading the build of <R>,", "（本机实测：torch <R> 加载了 <R> 构建的扩展", SEEN)
mark(F, "Release noise: torch <R> prints", "版本噪声：torch <R> 在每次 `dynamo=True` 导出时", SEEN)
claim(F,
    "CI runs the oldest stack, RKNN's (<R>), the newest",
    "CI 运行最旧的环境、RKNN 的 <R>、最新的环境",
    InCI(), mode="each",
)

# ---- register_onnx_symbolic
F = "register_onnx_symbolic"
claim(F,
    "Called without `dynamo=` on torch <R> or later, the export ignores",
    "<R> 起不传 `dynamo=` 则被忽略",
    DEFAULT_DYNAMO, "from",
)
claim(F, "which since torch <R> means `dynamo=True`", "torch <R> 起这就是 `dynamo=True`", DEFAULT_DYNAMO, "from")
mark(F, "Notes written for torch <R> comment out `elu`", "为 torch <R> 写的笔记让人把", SOURCE)
claim(F,
    "a call without `dynamo=` on torch <R> or later ignores symbolics",
    "torch <R> 起不传 `dynamo=` 的调用忽略符号函数",
    DEFAULT_DYNAMO, "from",
)
claim(F,
    "package as pinned; <R> prints what",
    "其他包都用固定版本；<R> 打印的内容",
    SameAs(F, run_stacks.PINNED), mode="each",
)
claim(F, "prints what <R> prints.", "打印的内容与 <R> 相同", Pinned())
claim(F,
    "pasted): <R> print `Torch IR graph at exception",
    "会打印）：<R> 打印 `Torch IR graph at exception",
    Not(NO_DUMP), mode="each",
)
claim(F, "<R> and older print none by default (", "<R> 及更早的版本默认不打印（", NO_DUMP, "upto")
claim(F, "(<R> only with `verbose=True`", "（<R> 只在 `verbose=True` 时打印", NO_DUMP, mode="each")
claim(F,
    "<R> also prints `ONNX graph being constructed during exception:` and that graph.",
    "<R> 还会打印 `ONNX graph being constructed during exception:` 和这张图。",
    BOTH_DUMPS,
)
claim(F,
    "**Step 10, <R>:** the message reads `unrecognized namespace {op_name}`",
    "**第 10 步，<R>：** 报错写的是 `unrecognized namespace {op_name}`",
    OP_NAME,
)
claim(F,
    "**Step 6 before <R>:** `torch.onnx.export` defaults to `dynamo=False`",
    "**第 6 步，<R> 之前：** `torch.onnx.export` 默认 `dynamo=False`",
    Not(DEFAULT_DYNAMO), "before",
)
claim(F, "([\"Changed in version <R>\"]())", "（[\"Changed in version <R>\"]()）", DEFAULT_DYNAMO, "from")
claim(F,
    "**Step 1, <R>:** `dynamo=True` exports at opset 18 by default",
    "**第 1 步，<R>：**`dynamo=True` 默认以 opset 18 导出",
    OPSET_18,
)
claim(F,
    "**Step 3, <R>:** `run_decompositions()` drops",
    "**第 3 步，<R>：** `run_decompositions()` 会丢掉",
    Status(F, ("3",), "differs", why="run_decompositions() drops"),
)
claim(F,
    "**Steps 1 to 4 need torch <R>** for",
    "**第 1 到第 4 步需要 torch <R>**",
    Status(F, ("1", "2", "3", "4"), "needs"), "before",
)
mark(F,
    "on <R> `dynamo=True` calls the old `torch.onnx.dynamo_export`, and <_>'s",
    "<R> 上 `dynamo=True` 调用的是旧的 `torch.onnx.dynamo_export`，<_> 的",
    UPSTREAM,
)
mark(F,
    "and <R>'s `torch.onnx.export`\n takes the keyword and ignores it",
    "<R> 的 `torch.onnx.export` 则照收这个参数",
    UPSTREAM,
)
mark(F,
    "torch <R>'s version has no `strategy=` (it came with <_>)",
    "torch <R> 的版本没有 `strategy=`（<_> 才有）",
    UPSTREAM,
)
mark(F, "has no `strategy=` (it came with <R>)", "没有 `strategy=`（<R> 才有）", UPSTREAM)
mark(F, "turns off: on <R>, delete `strategy=None`", "在 <R> 上把 `strategy=None` 删掉即可", UPSTREAM)
mark(F,
    "Step 10 on torch <R>: `operator_export_type=` warns",
    "torch <R> 上的第 10 步：`operator_export_type=` 会发出",
    SEEN,
)
mark(F, "(a `DeprecationWarning`, not shown, from <R>)", "（<R> 起改为不显示的 `DeprecationWarning`）", SEEN)


mark(F,
    "**torch <R>:** `torch.onnx.export` has no `dynamo=` argument (it came with <R>)",
    "**torch <R>：** `torch.onnx.export` 没有 `dynamo=` 参数（<R> 才有）",
    UPSTREAM,
)
claim(F,
    "step 6,\n whose call has none, runs as before <R>.",
    "第 6 步的调用本就不带 `dynamo=`，照 <R> 之前的方式运行",
    Not(DEFAULT_DYNAMO), "before",
)
claim(F, "**The exporter's options** (torch <R>)", "**导出器的选项**（torch <R>）", Pinned())
mark(F,
    "was removed in torch <R> (\"Changed in version\n <R>\" in",
    "已在 torch <R> 中移除（见 … 中的 \"Changed in version <R>\"）",
    UPSTREAM,
)
mark(F,
    "**Time.** About 20 s on <R>, 16 s on <R>, 5 s on <R> (",
    "**耗时。** torch <R> 上约 20 s，<R> 上 16 s，<R> 上 5 s（",
    TIME,
)
mark(F, "(in Chinese, tested on torch <R>)", "（中文，在 torch <R> 上测试）", SOURCE)
mark(F,
    "Notes in Chinese for torch <R> (steps 8 and 10, no public address), after PyTorch <R>'s",
    "为 torch <R> 写的中文笔记（第 8、10 步，没有公开地址），依据的是 PyTorch <R> 的",
    SOURCE,
)

# ---- register_pytorch_op
F = "register_pytorch_op"
R_DRAFT = Status(F, ("2",), "differs", why="draft export")
mark(F,
    "the `foo_forward` of PyTorch <R>'s `torch.onnx` documentation",
    "PyTorch <R> `torch.onnx` 文档里的 `foo_forward`",
    SOURCE,
)
claim(F,
    "(torch <R>'s `torch.onnx.export` hides it\n behind draft export",
    "（torch <R> 的 `torch.onnx.export` 会退回 draft export",
    R_DRAFT,
)
claim(F, "What `python test.py` prints on torch <R>,", "下面是 `python test.py` 在 torch <R> 上的输出", Pinned())
claim(F, "torch <R>\n and older print neither:", "torch <R> 及更早的版本两者都不打印：", NO_DUMP, "upto")
mark(F,
    "<R>'s `setup_onnx_logging` calls `torch.onnx.is_onnx_log_enabled()`",
    "<R> 的 `setup_onnx_logging` 调用 `torch.onnx.is_onnx_log_enabled()`",
    UPSTREAM,
)
claim(F,
    "torch <R> print the TorchScript graph even without",
    "torch <R> 即使不传 `verbose=True` 也打印",
    Not(NO_DUMP), mode="each",
)
mark(F,
    "torch <R> removed `torch.onnx.is_onnx_log_enabled`",
    "torch <R> 删除了 `torch.onnx.is_onnx_log_enabled`",
    UPSTREAM,
)
claim(F, "torch <R> prints\n both graphs,", "torch <R> 两个计算图都打印", BOTH_DUMPS)
mark(F, "differs from <R>'s in comments only", "与 <R> 只有注释不同", UPSTREAM)
claim(F,
    "- Step 5, torch <R>: the message reads `unrecognized namespace {op_name}.`",
    "- 第 5 步，torch <R>：消息里本该是算子名的地方写着 `unrecognized namespace {op_name}.`",
    OP_NAME,
)
claim(F,
    "- Steps 2 to 4 and 7 need torch <R>, the first release",
    "- 第 2 到 4 步和第 7 步需要 torch <R>，这是",
    Status(F, ("2", "3", "4", "7"), "needs"), "before",
)
mark(F,
    "`custom_translation_table`; on <R> `dynamo=True` calls the old",
    "的第一个版本；在 <R> 上，`dynamo=True` 调用的是旧的",
    UPSTREAM,
)
claim(F,
    "Before <R> step 7 lists `dual_residual.onnx` only",
    "在 <R> 之前，第 7 步只列出 `dual_residual.onnx`",
    Status(F, ("7",), "needs"), "before",
)
mark(F,
    "`torch.onnx.testing.assert_onnx_program` is public from <R>\n ([pytorch/pytorch#162495]()); on <R> the",
    "`torch.onnx.testing.assert_onnx_program` 从 <R> 起公开（[pytorch/pytorch#162495]()）；在 <R> 上",
    UPSTREAM,
)
claim(F, "- torch <R> have no draft export:", "- torch <R> 没有 draft export：", Not(R_DRAFT), mode="each")
claim(F, "step 2 fails there as on <R> on.", "第 2 步在那里的失败与 <R> 及以后相同", Not(R_DRAFT), "from", "each")
claim(F,
    "Step 4 on <R>:\n `dynamo=True` does not optimize",
    "<R> 上的第 4 步：`dynamo=True` 默认不做优化",
    Status(F, ("4",), "needs torch >= 2.7"),
)
claim(F, "and the step says it needs torch <R>.", "这一步说明需要 torch <R>。", Status(F, ("4",), "needs"), "before")
mark(F,
    "- torch <R>: `torch.onnx.export` has no `dynamo=` argument (it came with <R>)",
    "- torch <R>：`torch.onnx.export` 没有 `dynamo=` 参数（<R> 才有）",
    UPSTREAM,
)
claim(F,
    "- Steps 2 to 4, torch <R>: `dynamo=True` writes opset 18",
    "- 第 2 到 4 步，torch <R>：`dynamo=True` 写出 opset 18",
    OPSET_18,
)
claim(F,
    "20 from <R>, [pytorch/pytorch#158802]())",
    "<R> 起为 20，见 [pytorch/pytorch#158802]()",
    Not(OPSET_18), "from",
)
claim(F,
    "`torch.export` fails, <R> falls back to *draft export*",
    "`torch.export` 失败时，<R> 会退回 *draft export*",
    R_DRAFT,
)
mark(F,
    "<R> tries draft\n export only with `TORCH_ONNX_ENABLE_DRAFT_EXPORT=1`",
    "<R> 只有在设置了 `TORCH_ONNX_ENABLE_DRAFT_EXPORT=1` 时才会尝试 draft export",
    UPSTREAM,
)
mark(F,
    "<R> also logs `Missing annotation for parameter 'x'`",
    "<R> 还会为转换函数记录 `Missing annotation for parameter 'x'`",
    SEEN,
)
mark(F,
    "- torch <R> prints `No CUDA runtime is found` instead of logging it",
    "- torch <R> 直接打印 `No CUDA runtime is found`",
    UPSTREAM,
)
mark(F, "(`py311_cu130` on <R>, `py311_cu132` on <R>)", "（<R> 上是 `py311_cu130`，<R> 上是 `py311_cu132`）", SEEN)
mark(F,
    "- PyTorch <R> documentation, [torch.onnx: Custom operators]()",
    "- PyTorch <R> 文档 [torch.onnx: Custom operators]()",
    SOURCE,
)
claim(F, "(`dynamo=True` the default since <R>)", "（<R> 起默认 `dynamo=True`）", DEFAULT_DYNAMO, "from")

# ---- autograd_function
F = "autograd_function"
mark(F, "deprecated (torch <R> and <R>)", "说它已弃用（torch <R> 和 <R>）", SEEN)
claim(F, "Step 1 needs torch <R> or later,", "第 1 步需要 torch <R> 及以上，", Status(F, ("1",), "needs"), "before")
claim(F, "steps 2-4 torch <R>.", "第 2 到 4 步需要 torch <R>。", Status(F, ("2", "3", "4"), "needs"), "before")
mark(F,
    "under either exporter from torch <R>\n ([pytorch/pytorch#149678]())",
    "从 torch <R> 起两种导出器都如此（[pytorch/pytorch#149678]()",
    UPSTREAM,
)
claim(F,
    "On torch <R>, draft export writes it with the factor frozen at 3",
    "在 torch <R> 上，draft export 会把它写出来，倍数却定死为 3",
    DRAFT_EXPORT,
)
mark(F, "(deprecated since torch <R>)", "（torch <R> 起已弃用）", UPSTREAM)
claim(F, "(torch <R> warned:", "（torch <R> 会警告", Status(F, ("6",), "differs"))
claim(F, "What `python test.py` prints on torch <R>,", "下面是 `python test.py` 在 torch <R> 上的输出", Pinned())
claim(F,
    "; torch <R>: `UserWarning: The\n exported ONNX model failed ONNX shape inference.`",
    "；torch <R> 还有 `UserWarning: The exported ONNX model failed ONNX shape inference.`",
    Status(F, ("6",), "differs"),
)
claim(F,
    "steps 2-4 and 9\nneed <R>, step 3",
    "第 2 到 4 步和第 9 步需要 <R>，第 3 步",
    Status(F, ("2", "3", "4", "9"), "needs"), "before",
)
claim(F,
    "Step 1 needs <R>, steps 2-4",
    "第 1 步需要 <R>，第 2 到 4 步",
    Status(F, ("1",), "needs"), "before",
)
claim(F, "step 3 differs on <R> (draft export)", "第 3 步在 <R> 上因 draft export 而不同", DRAFT_EXPORT)
claim(F, "and stops on <R>, step 6", "在 <R> 上中途停下", Status(F, ("3",), "needs torch >= 2.12"))
claim(F,
    "step 6 differs on <R> (the export warns)",
    "第 6 步在 <R> 上有所不同（导出时会警告）",
    Status(F, ("6",), "differs"),
)
claim(F,
    "- Steps 2-4 and 9 need torch <R>: `torch.onnx.ops` came with it",
    "- 第 2 到 4 步和第 9 步需要 torch <R>：`torch.onnx.ops` 是随这个版本加入的",
    Status(F, ("2", "3", "4", "9"), "needs"), "before",
)
claim(F,
    "- Step 1 needs torch <R> (on <_>, `dynamo=True` is the older",
    "- 第 1 步需要 torch <R>（在 <_> 上，`dynamo=True` 还是旧的",
    Status(F, ("1",), "needs"), "before",
)
claim(F,
    "(on <R>, `dynamo=True` is the older `torch.onnx.dynamo_export`).",
    "（在 <R> 上，`dynamo=True` 还是旧的 `torch.onnx.dynamo_export`）。",
    DYNAMO_EXPORT, mode="each",
)
mark(F, "([<R> release notes](), \"Support for", "（[<R> 发布说明]()，“Support for", UPSTREAM)
mark(F,
    "On <R>, `dynamo=True` is still the old `torch.onnx.dynamo_export`",
    "在 <R> 上，`dynamo=True` 仍是旧的 `torch.onnx.dynamo_export`",
    UPSTREAM,
)
claim(F, "Below <R> step 2 does not run", "在 <R> 以下，第 2 步不运行", Status(F, ("2",), "needs"), "before")
claim(F,
    "- Step 3, torch <R>: where `torch.export` fails, `dynamo=True` falls back to draft export",
    "- 第 3 步，torch <R>：`torch.export` 失败时，`dynamo=True` 会退回到 draft export",
    DRAFT_EXPORT,
)
mark(F, "new in <R>: [pytorch/pytorch#147529]()", "<R> 新增：[pytorch/pytorch#147529]()", UPSTREAM)
claim(F, "(`test.py` shows both on <R>)", "（`test.py` 在 <R> 上把两者都打印出来）", DRAFT_EXPORT)
mark(F,
    "`torch.export` fails on the `torch.onnx.ops` model too on <R>: it stops at the\n first convolution",
    "在 <R> 上，`torch.export` 对使用 `torch.onnx.ops` 的模型也会失败",
    SEEN,
)
mark(F, "(<R> prints the graph traced so far,", "（<R> 会打印到此为止追踪到的图", UPSTREAM)
claim(F,
    "Since <R> draft export runs only",
    "从 <R> 起，只有环境中设置了 `TORCH_ONNX_ENABLE_DRAFT_EXPORT=1` 才会运行 draft export",
    DRAFT_EXPORT, "from", "none",
)
mark(F, "([<R> release notes](), \"Drop", "（[<R> 发布说明]()，“Drop", UPSTREAM)
claim(F,
    "- Step 3, torch <R>: the `torch.onnx.ops` model does not export",
    "- 第 3 步，torch <R>：使用 `torch.onnx.ops` 的模型导不出来",
    Status(F, ("3",), "needs torch >= 2.12"),
)
claim(F, "(`needs torch >= <R>`)", "（`needs torch >= <R>`）", Not(Status(F, ("3",), "needs")), "from", "each")
mark(F,
    "`3*u0*u1 > 2147483647` (<R>) or `16*u6*u7 > 20480`\n (<R>, with more than one thread",
    "`3*u0*u1 > 2147483647`（<R>）或 `16*u6*u7 > 20480`（<R>，多于一个线程时",
    SEEN,
)
mark(F, "<R>\n picks none unless every size is known", "<R> 只在所有尺寸都已知时才挑选后端", UPSTREAM)
claim(F,
    "- Step 6, torch <R>: the TorchScript-based exporter runs the ONNX checker",
    "- 第 6 步，torch <R>：基于 TorchScript 的导出器",
    Status(F, ("6",), "differs"),
)
mark(F, "removed that for <R>.", "在 <R> 中去掉了这项检查", UPSTREAM)
claim(F,
    "- Torch <R> write opset 18 by default under `dynamo=True`",
    "- torch <R> 在 `dynamo=True` 下默认写 opset 18",
    OPSET_18,
)
claim(F, "(20 from <R>, same release notes)", "（<R> 起为 20，见同一份发布说明）", Not(OPSET_18), "from")
mark(F, "and <R> under `dynamo=False` too", "<R> 在 `dynamo=False` 下也是", UPSTREAM)
claim(F,
    "so on <R> step 2's `torch.onnx.ops` file",
    "所以在 <R> 上，第 2 步用 `torch.onnx.ops` 写出的文件",
    OPSET_18, mode="each",
)
mark(F,
    "is public from torch <R>\n ([pytorch/pytorch#162495]()); on <R> the",
    "从 torch <R> 起公开（[pytorch/pytorch#162495]()）；在 <R> 上",
    UPSTREAM,
)
mark(F,
    "is deprecated since torch <R>: \"Changed in version <R>\"",
    "从 torch <R> 起已弃用：见 … 下的“Changed in version <R>”",
    UPSTREAM,
)
claim(F,
    "- Torch <R> prints and records what",
    "- torch <R> 打印和记录的内容",
    SameAs(F, run_stacks.PINNED), mode="each",
)
claim(F, "prints and records what <R> does.", "打印和记录的内容与 <R> 相同", Pinned())
mark(F, "come from <R> too", "在 <R> 上也有", SEEN)
mark(F, "(`py311_cu130` for <R>)", "（<R> 都是 `py311_cu130`）", SEEN)
mark(F,
    "time) on torch <R>, 12-16 s on <R> (steps 1-4 and 9 skipped)",
    "`test.py` 在 torch <R> 上用时 35-65 s（CPU 时间 13-17 s），在 <R> 上用时",
    TIME,
)

# ---- pythonop_symbolic
F = "pythonop_symbolic"
CONTEXT = Status(F, ("5",), "differs", why="SymbolicContext still exists")
mark(F,
    "The torch <R> snippet\n `symbolic_pythonop(g, n, *args, **kwargs)`",
    "torch <R> 的 `symbolic_pythonop(g, n, *args, **kwargs)`",
    SOURCE,
)
mark(F, "inlines each Function's `forward` (since torch <R>,", "内联每个 Function 的 `forward`（torch <R> 起", UPSTREAM)
mark(F, "Before torch <R> the exporter kept each Function", "torch <R> 之前，导出器把每个 Function 保留为", UPSTREAM)
mark(F,
    "That option came with torch <R> ([#104067]())\nand is deprecated since <R> (\"Changed in version <R>\"",
    "这个选项是 torch <R> 加入的（[#104067]()），和整个 `dynamo=False` 路径一样，自 <R> 起已弃用（见 … 下的 “Changed "
    "in version <R>”",
    UPSTREAM,
)
mark(F, "### If you copied the torch <R> snippet", "### 如果你抄的是 torch <R> 的代码片段", SOURCE)
mark(F, "The source material follows PyTorch <R>'s documentation", "原始资料沿用了 PyTorch <R> 的文档", SOURCE)
mark(F, "the form of the\n [<R> docs]()", "[<R> 文档]()和原始资料用的就是这种", SOURCE)
mark(F, "[the class in the <R> docs]()", "[<R> 文档中的这个类]()", UPSTREAM)
mark(F, "deprecated in <R> by [#84776]()", "<R> 中由 [#84776]() 弃用", UPSTREAM)
claim(F, "removed by\n [#132184]() (torch <R>)", "torch <R> 中由 [#132184]() 删除", Not(CONTEXT), "from")
mark(F, "since [#84728]() (torch <R>)", "从 [#84728]()（torch <R>）起", UPSTREAM)
claim(F,
    "`torch.onnx.SymbolicContext exists: False` on torch <R> and later",
    "`test.py` 在 torch <R> 及以后打印",
    Not(CONTEXT), "from",
)
claim(F, "`True` on\n <R> and older.", "在 <R> 及更早的版本上打印 `True`", CONTEXT, "upto")
claim(F,
    "which says what each does differently (<R> pinned, the expected output above)",
    "（固定版本为 <R>，即上面的预期输出；",
    Pinned(),
)
claim(F,
    "steps 1 and 7 skip before <R>,",
    "第 1 步和第 7 步在 <R> 之前跳过",
    Status(F, ("1", "7"), "needs"), "before",
)
claim(F,
    "2 and 3 before <R>,",
    "第 2、3 步在 <R> 之前跳过",
    Status(F, ("2", "3"), "needs"), "before",
)
claim(F, "and\n<R> prints what", "<R> 打印的内容与", SameAs(F, run_stacks.PINNED), mode="each")
claim(F, "prints what <R> does:", "打印的内容与 <R> 相同：", Pinned())
claim(F,
    "`dynamo=True` is the default since <R> (\"Changed in version <R>\"",
    "自 <R> 起默认为 `dynamo=True`（… 下的 “Changed in version <R>”",
    Status(F, ("4",), "runs"), "from",
)
mark(F,
    "`dynamo=False` warns `DeprecationWarning` since <R>\n ([#152478]()); <R>'s text says",
    "`dynamo=False` 从 <R> 起发出 `DeprecationWarning`（[#152478]()）；<R> 的警告文字说",
    UPSTREAM,
)
mark(F, "<R> does not warn.", "<R> 不发警告。", SEEN)
claim(F,
    "On <R> an export that does not pass `dynamo` runs the TorchScript-based",
    "在 <R> 上，不传 `dynamo` 的导出运行的是基于 TorchScript 的导出器",
    Status(F, ("4",), "differs"), mode="each",
)
claim(F,
    "- Step 5, torch <R> and older: `torch.onnx.SymbolicContext` still exists",
    "- 第 5 步，torch <R> 及更早的版本：`torch.onnx.SymbolicContext` 仍然存在",
    CONTEXT, "upto",
)
claim(F, "(removed in <R> by\n [#132184]())", "（<R> 中由 [#132184]() 删除）", Not(CONTEXT), "from")
claim(F, "The failures and the current form behave as on <R>.", "两个失败和当前写法的表现与 <R> 相同", Pinned())
claim(F,
    "- Steps 1 and 7 need torch <R>;",
    "- 第 1 步和第 7 步需要 torch <R>；",
    Status(F, ("1", "7"), "needs"), "before",
)
claim(F,
    "steps 2 and 3 need torch <R>, for `custom_translation_table`",
    "第 2、3 步需要 torch <R>，因为要用",
    Status(F, ("2", "3"), "needs"), "before",
)
mark(F,
    "`torch.onnx.testing.assert_onnx_program` from <R>\n ([#162495]()); on <R> the page's imports",
    "从 <R> 起以 `torch.onnx.testing.assert_onnx_program` 公开（[#162495]()）；在 <R> 上",
    UPSTREAM,
)
mark(F,
    "`dynamo=True` runs `torch.export` from\n <R> ([#135372]())",
    "`dynamo=True` 从 <R> 起运行 `torch.export`（[#135372]()）",
    UPSTREAM,
)
claim(F,
    "- Steps 1 to 3, torch <R>: `torch.onnx.export` defaults to `optimize=False`",
    "- 第 1 到 3 步，torch <R>：`torch.onnx.export` 默认 `optimize=False`",
    Status(F, ("1", "2", "3"), "differs", why="optimize"),
)
claim(F,
    "; `True` from <R>),",
    "；<R> 起为 `True`）",
    Not(Status(F, ("1", "2", "3"), "differs", why="optimize")), "from",
)
claim(F, "match PyTorch exactly as on <R>.", "结果与 <R> 上一样和 PyTorch 完全一致", Pinned())
claim(F,
    "- Steps 1 to 3, torch <R>: the models are at opset 18",
    "- 第 1 到 3 步，torch <R>：模型是 opset 18",
    Status(F, ("1", "2", "3"), "differs", why="opset 18"),
)
claim(F, "`dynamo=True`'s default before <R>", "即 <R> 之前 `dynamo=True` 的默认值", OPSET_18, "before")
claim(F, "fails, <R> falls back to draft export", "失败时，<R> 会一声不响地退回 draft export", DRAFT_EXPORT)
mark(F,
    "<R> also logs `Missing annotation for parameter 'x' from (x, min: float).",
    "<R> 还会为这些转换函数记录 `Missing annotation for parameter 'x'",
    SEEN,
)
claim(F,
    "- Torch <R>: every step prints what it prints on",
    "- torch <R>：每一步打印的内容都与",
    SameAs(F, run_stacks.PINNED), mode="each",
)
claim(F, "every step prints what it prints on <R>.", "每一步打印的内容都与 <R> 相同", Pinned())
claim(F, "dump that <R> and later print", "排在 <R> 及以后都会打印的", Not(NO_DUMP), "from")
claim(F, "(<R> and older keep that log off)", "（<R> 及更早的版本关着这条日志）", NO_DUMP, "upto")
mark(F, "**Time.** About 10 s on torch <R> (2 cores)", "**耗时。** 在 torch <R> 上约 10 s（2 核）", TIME)
mark(F,
    "`prim::PythonOp` follows PyTorch <R>'s documentation",
    "沿用了 PyTorch <R> 的文档 [torch.onnx: torch.autograd.Functions]()",
    SOURCE,
)
mark(F,
    "(Functions inlined, from\n torch <R>, as [#90263]() notes)",
    "（torch <R> 起内联 Function，见 [#90263]() 的说明）",
    UPSTREAM,
)
mark(F, "(`autograd_inlining`; merged in <R>, as", "（`autograd_inlining`；合入 <R>，见", UPSTREAM)

# ---- onnxscript_function
F = "onnxscript_function"
BY_NAME = Status(F, ("1",), "differs", why="matches translations by name")
NO_OPTIMIZE = Status(F, ("1",), "differs", why="does not optimize")
CHECKER = Reproduced(F, "5", "CheckerError: Opset import")  # the export runs the checker itself
claim(F, "(`x`); torch <R> require that", "；torch <R> 需要这一点", BY_NAME)
claim(F, "(on torch <R>, a silent draft export)", "（在 torch <R> 上就是悄悄退回的 draft export）", DRAFT_EXPORT)
claim(F, "breaks the export (torch <R>, onnxscript", "导不出来（torch <R>、onnxscript", Pinned())
claim(F,
    "- torch <R>, `dynamo=True`: no error, but where torchlib",
    "- torch <R>，`dynamo=True`：不报错，但如果 torchlib",
    BY_NAME,
)
claim(F,
    "- Steps 1, 2, 7 need torch <R> for `custom_translation_table`",
    "- 第 1、2、7 步的 `custom_translation_table` 需要 torch <R>",
    Status(F, ("1", "2", "7"), "needs"), "before",
)
claim(F,
    "on <R> `dynamo=True` calls the old `torch.onnx.dynamo_export`",
    "在 torch <R> 上，`dynamo=True` 调用的是旧的",
    DYNAMO_EXPORT,
)
claim(F,
    "- Step 1, torch <R>: `torch.onnx.export` defaults to `optimize=False`",
    "- 第 1 步，torch <R>：`torch.onnx.export` 默认 `optimize=False`",
    NO_OPTIMIZE,
)
claim(F, "; `True` from <R>),", "；<R> 起为 `True`）", Not(NO_OPTIMIZE), "from")
claim(F, "the models\n match PyTorch as on <R>.", "结果与 <R> 上一样和 PyTorch 一致", Pinned())
claim(F, "- Step 1, torch <R>: the export writes opset 18", "- 第 1 步，torch <R>：导出写出的是 opset 18", OPSET_18)
claim(F,
    "20 from <R>, [pytorch/pytorch#158802]())",
    "<R> 起为 20，见 [pytorch/pytorch#158802]()",
    Not(OPSET_18), "from",
)
claim(F, "torchlib has a translation too, <R> try yours", "torchlib 也有该算子的转换函数时，<R> 会[先试你的]", BY_NAME)
mark(F,
    "torch <R> also logs `Missing annotation for parameter 'x' ... Treating as an Input.`",
    "torch <R> 还会记录一条 `Missing annotation for parameter 'x' ... Treating as an Input.`",
    SEEN,
)
claim(F,
    "- Step 5, torch <R> and older: `torch.onnx.export` runs the checker itself",
    "- 第 5 步，torch <R> 及更早的版本：`torch.onnx.export` 写出文件后",
    CHECKER, "upto",
)
claim(F, "torch <R> dropped that check", "torch <R> 去掉了这项检查", Not(CHECKER), "from")
mark(F,
    "is public from torch <R>\n ([pytorch/pytorch#162495]()); on <R> the",
    "从 torch <R> 起公开（[pytorch/pytorch#162495]()）；在 <R> 上",
    UPSTREAM,
)
mark(F, "**Time.** About 15 s (torch <R>, 2 cores", "**耗时。** 约 15 s（torch <R>，2 核", TIME)
claim(F, "the default, \"Changed in version <R>\")", "成为默认值，见 “Changed in version <R>”", DEFAULT_DYNAMO, "from")

# ---- library_custom_op
F = "library_custom_op"
L_DRAFT = Status(F, ("1",), "differs", why="draft_export")
V1 = AnyOf((Reproduced(F, "6", "%auto_functionalized :"), Status(F, ("6",), "differs", why="auto_functionalized (v1)")))
claim(F, "comes from (torch <R>)</summary>", "从哪里来（torch <R>）</summary>", Pinned())
claim(F,
    "<summary>What differs on torch <R></summary>",
    "<summary>torch <R> 上的不同之处</summary>",
    Not(SameAs(F, run_stacks.PINNED)), mode="each",
)
claim(F,
    "- torch <R>: `custom_op`, `register_fake` and `opcheck` are there",
    "- torch <R>：已有 `custom_op`、`register_fake` 和 `opcheck`",
    CUSTOM_OP, mode="each",
)
claim(F,
    "refuses the\n built-in `list[float]` until <R>",
    "`custom_op` 要到 <R> 才接受内置的 `list[float]`",
    Reproduced("argument_types", "2", "infer_schema(func): Parameter dims has unsupported type list[int]"), "before",
)
claim(F,
    "`torch.onnx.dynamo_export` before <R>,",
    "<R> 之前 `dynamo=True` 是旧的 `torch.onnx.dynamo_export`",
    DYNAMO_EXPORT, "before",
)
claim(F,
    "`custom_translation_table` arrived in <R> (PyTorch's",
    "`custom_translation_table` 是 <R> 才有的",
    TRANSLATION_TABLE, "from",
)
claim(F, "asks for <R>): steps 2 and 7 are skipped", "要求 <R>）：跳过第 2 步和第 7 步", TRANSLATION_TABLE, "from")
mark(F,
    "torch <R> raises `\"reflection_pad1d\" not implemented",
    "torch <R> 报 `\"reflection_pad1d\" not implemented",
    "seen on 2.4 (.venv-rknn's torch) with step 7's gate lifted: the gate holds the step, so the matrix "
    "records its reason, not the error",
)
claim(F, "- torch <R> adds `torch.export.draft_export`", "- torch <R> 把 `torch.export.draft_export` 作为", L_DRAFT)
claim(F, "(<R> have\n none:", "（<R> 没有：", Not(L_DRAFT), mode="each")
claim(F, "step 1 fails there as on <R> on)", "第 1 步在那里的失败与 <R> 及以后相同", Not(L_DRAFT), "from", "each")
claim(F, "dropped in <R>,\n [#161454]()", "<R> 去掉，[#161454]()", L_DRAFT, "from", "none")
claim(F,
    "On <R> the `dynamo=False` message prints the op as `{op_name}`",
    "在 <R> 上，`dynamo=False` 的消息把算子名原样印成 `{op_name}`",
    Reproduced(F, "1", "unrecognized namespace {op_name}"),
)
claim(F,
    "- Step 6 on torch <R>: `torch.export` writes `auto_functionalized`",
    "- torch <R> 上的第 6 步：`torch.export` 写出的是 `auto_functionalized`",
    V1,
)
claim(F, "(`out=empty_like` on <R>)", "（<R> 上是 `out=empty_like`；", Reproduced(F, "6", "out: %empty_like}"))
mark(F, "is public from torch <R>; on <R> the page's", "从 torch <R> 起公开；在 <R> 上", UPSTREAM)
claim(F,
    "**torch <R> and older.** None has `torch.library.custom_op`",
    "**torch <R> 及更早的版本。** 都没有 `torch.library.custom_op`",
    Not(CUSTOM_OP), "upto",
)
claim(F, "(it came with <R>): `test.py` defines", "（<R> 才有）：`test.py` 只在有它时", CUSTOM_OP, "from")
claim(F, "(step 2 needs <R> in any case)", "（第 2 步本来就需要 <R>）", Status(F, ("2",), "needs"), "before")
mark(F, "pasted about as long; torch <R>, which", "粘贴运行也差不多；torch <R> 跳过", TIME)

# ---- argument_types
F = "argument_types"
REFUSES_LIST = Reproduced(F, "2", "infer_schema(func): Parameter dims has unsupported type list[int]")
mark(F,
    "and on torch <R> a `No CUDA runtime is found` line",
    "在 torch <R> 上还有一行 `No CUDA runtime is found`",
    UPSTREAM,
)
claim(F,
    "(`Torch IR graph at exception: graph(...)`, none on torch\n<R> and older)",
    "（`Torch IR graph at exception: graph(...)`，torch <R> 及更早的版本上没有）",
    NO_DUMP, "upto",
)
mark(F, "the same from torch <R>):", "torch <R> 都一样）", UPSTREAM)
mark(F, "with a segmentation fault (torch <R>; the tests", "因段错误崩溃（torch <R>；测试在子进程中", SEEN)
claim(F, "writes, on torch <R> (a\nrow says", "每类参数一张表，列出在 torch <R> 上", Pinned())
claim(F,
    "row says where torch <R> differs;",
    "（torch <R> 上有不同的，在对应行中注明；",
    Not(SameAs(F, run_stacks.PINNED)), mode="each",
)
claim(F, "steps 4 and 5 need torch <R>).", "第 4、5 步需要 torch <R>）。", Status(F, ("4", "5"), "needs"), "before")
claim(F,
    "torch <R> refuses `list[int]`: `typing.List[int]`",
    "torch <R> 不接受 `list[int]`，改用 `typing.List[int]`",
    REFUSES_LIST, mode="each",
)
claim(F,
    "schema `float[]`; torch <R>: `typing.List[float]`",
    "算子签名中为 `float[]`；torch <R> 上用 `typing.List[float]`",
    REFUSES_LIST, mode="each",
)
claim(F, "What `python test.py` prints on torch <R>,", "下面是 `python test.py` 在 torch <R> 上的输出", Pinned())
mark(F,
    "- Step 1, torch <R>: importing `torch.utils.cpp_extension` writes `No CUDA runtime is found`",
    "- 第 1 步，torch <R>：导入 `torch.utils.cpp_extension` 时会用普通的 `print` 写出",
    UPSTREAM,
)
claim(F,
    "- Step 2, torch <R>: `custom_op` refuses `list[int]` and `list[float]`",
    "- 第 2 步，torch <R>：`custom_op` 不接受 `list[int]` 和 `list[float]`",
    Status(F, ("2",), "differs", why="refuses list[int]"),
)
claim(F,
    "<R> still refuses them ([pytorch/pytorch#146594]())",
    "<R> 仍然不接受（[pytorch/pytorch#146594]()）",
    REFUSES_LIST, mode="each",
)
mark(F, "[<R>'s source]()\n derives", "[<R> 的源码]()也会推导出", UPSTREAM)
claim(F, "and <R> on take them.", "<R> 起接受它们。", Not(REFUSES_LIST), "from")
claim(F,
    "- Steps 4 and 5 need torch <R> (`custom_translation_table`",
    "- 第 4、5 步需要 torch <R>，因为要用",
    Status(F, ("4", "5"), "needs"), "before",
)
claim(F,
    "on <R> `dynamo=True` calls the old `torch.onnx.dynamo_export`",
    "在 <R> 上，`dynamo=True` 调用的是旧的",
    DYNAMO_EXPORT,
)
claim(F,
    "- Step 5, torch <R>: `torch.onnx.export` defaults to `optimize=False`",
    "- 第 5 步，torch <R>：`torch.onnx.export` 默认 `optimize=False`",
    Status(F, ("5",), "differs", why="does not optimize"),
)
claim(F,
    "; `True` from <R>),",
    "；<R> 起为 `True`）",
    Not(Status(F, ("5",), "differs", why="does not optimize")), "from",
)
claim(F, "they match PyTorch as on <R>.", "结果与 <R> 上一样和 PyTorch 一致", Pinned())
mark(F,
    "- Torch <R> logs `Missing annotation for parameter 'x' from (...).",
    "- torch <R> 会为转换函数中每个没有注解的参数…（对 ATen 算子，就是你的和 torchlib 的），<R> 按参数名匹配它们",
    SEEN,
)
mark(F,
    "`assert_onnx_program` is public from <R>\n ([pytorch/pytorch#162495]()); on <R> the",
    "`assert_onnx_program` 从 <R> 起公开（[pytorch/pytorch#162495]()）；在 <R> 上",
    UPSTREAM,
)
claim(F, "- Torch <R> prints what", "- torch <R> 打印的内容与", SameAs(F, run_stacks.PINNED), mode="each")
claim(F, "prints what <R> prints. A failing", "打印的内容与 <R> 相同。", Pinned())

# ---- deploy_openvino
F = "deploy_openvino"
NOT_TORCH = "not a torch release: another program's version"
mark(F,
    "needs glibc <R> or newer on the board (`ldd --version`;\n the x86_64 wheel needs <R>)",
    "要求开发板上的 glibc 不低于 <R>（用 `ldd --version` 查看；x86_64 的 wheel 要求 <R>）",
    NOT_TORCH,
)
claim(F,
    "Before torch <R> (steps 2 to 4\nand 6 to 8 skip)",
    "torch <R> 以前（第 2 到 4 步和第 6 到 8 步跳过）",
    Status(F, ("2", "3", "4", "6", "7", "8"), "needs"), "before",
)
claim(F,
    "- Step 1's export needs torch <R> for `custom_translation_table`",
    "- 第 1 步的导出所用的 `custom_translation_table` 需要 torch <R>",
    Status(F, ("1",), "differs", why="no dynamo=True export"), "before",
)
claim(F,
    "on\n <R> it is left out, steps 2 to 4 and 6 to 8 are skipped",
    "在 <R> 上不导出，第 2 到 4 步和第 6 到 8 步跳过",
    Status(F, ("1",), "differs", why="no dynamo=True export"),
)
claim(F,
    "- On torch <R> and older, which have no `torch.library.custom_op`",
    "- torch <R> 及更早的版本没有 `torch.library.custom_op`",
    Status(F, ("1", "9"), "needs"), "upto",
)
claim(F, "(new in <R>), steps 1 and 9", "（<R> 才加入），第 1 步和第 9 步也跳过", CUSTOM_OP, "from")
claim(F,
    "- Step 1 on torch <R> writes opset 18",
    "- torch <R> 上第 1 步写出 opset 18",
    Status(F, ("1",), "differs", why="opset 18"),
)
claim(F,
    "(20 from <R>,\n [pytorch/pytorch#158802]())",
    "（<R> 起为 20，[pytorch/pytorch#158802]()）",
    Not(OPSET_18), "from",
)
claim(F, "<R> match a\n translation by its parameter names", "<R> 按参数名匹配转换函数", BY_NAME)
claim(F,
    "`custom_op` before torch <R> refuses\n `list[float]`",
    "torch <R> 之前的 `custom_op` 不接受 `list[float]`",
    REFUSES_LIST, "before",
)

# ---- deploy_rknn
F = "deploy_rknn"
RKNN = "RKNN-Toolkit2's environment, pinned in deploy_rknn/requirements.txt (not a stack of the matrix)"
mark(F, "converts each with RKNN-Toolkit2 <R>, runs", "本目录用其 <R> 版转换它们", NOT_TORCH)
mark(F, "on torch >= <R> it writes opset\n 20 by default too", "torch >= <R> 也默认写出 opset 20", UPSTREAM)
mark(F, "`rknn-toolkit2==2.5.0` requires `torch<=<R>`,", "`rknn-toolkit2==2.5.0` 要求 `torch<=<R>`", RKNN)
mark(F, "`torch==<R>` from the package index is the CUDA 12.1 build", "包索引上的 `torch==<R>` 是 CUDA 12.1 版", RKNN)
mark(F, "`E rknn-toolkit2 version: <R>`", "`E rknn-toolkit2 version: <R>`", NOT_TORCH)
claim(F,
    "`custom_translation_table` (torch >= <R>).",
    "`custom_translation_table` 为每个算子接收一个 onnxscript 转换函数（translation），需要 torch >= <R>",
    TRANSLATION_TABLE, "from",
)
claim(F,
    "Without `opset_version`, torch >= <R> writes opset 20",
    "不指定 `opset_version` 时，torch >= <R> 写出 opset 20",
    Not(OPSET_18), "from",
)
claim(F,
    "(deprecated, not the default\nsince torch <R>)",
    "（已弃用，从 torch <R> 起不再是默认导出器）",
    DEFAULT_DYNAMO, "from",
)
mark(F, "and without it torch >= <R> writes 20 here too", "而不传的话 torch >= <R> 在这里同样写出 20", UPSTREAM)
claim(F,
    "(this exporter runs on a torch older than <R> too)",
    "（这个导出器在低于 <R> 的 torch 上也能运行）",
    Status(F, ("3",), "runs"), "before", "each",
)
claim(F, "What `python test.py` prints (seed 0, torch <R>)", "`python test.py` 的输出（种子 0，torch <R>）", Pinned())
claim(F,
    "which says what each does differently (<R> pinned; the",
    "（固定版本为 <R>；各版本的不同之处也见那里",
    Pinned(),
)
claim(F, "Step 2 needs torch <R> and\ndiffers on", "第 2 步需要 torch <R>，在", Status(F, ("2",), "needs"), "before")
claim(F, "differs on <R>; <_> prints what", "在 <R> 上有所不同；", Status(F, ("2",), "differs"))
claim(F, "<R> prints what <_> prints.", "<R> 的输出与 <_> 相同。", SameAs(F, run_stacks.PINNED), mode="each")
claim(F, "prints what <R> prints.", "的输出与 <R> 相同。", Pinned())
mark(F, "`.venv-rknn`'s torch <R> exports nothing here.", "`.venv-rknn` 里的 torch <R> 在本目录中不导出任何东西", RKNN)
claim(F,
    "- Steps 1 and 3 run alike from <R> on.",
    "- 第 1、3 步从 <R> 起表现相同。",
    Status(F, ("1", "3"), "runs"), "from",
)
mark(F, "are\n in <R> already (", "在 <R> 中就已经有了（", UPSTREAM)
claim(F,
    "- torch <R> and older have no `torch.library.custom_op`",
    "- torch <R> 及更早的版本没有 `torch.library.custom_op`",
    Status(F, ("1", "3", "4", "6", "7", "8"), "needs"), "upto",
)
claim(F, "(new in <R>): steps 1 and 3 print", "（<R> 才加入）：第 1、3 步打印", CUSTOM_OP, "from")
claim(F,
    "`SKIP step N: needs torch >= <R> (...)`, and so do",
    "`SKIP step N: needs torch >= <R> (...)`，转换第 3 步模型",
    Not(Status(F, ("1", "3"), "needs")), "from",
)
claim(F,
    "- Step 2 needs torch >= <R> for `custom_translation_table`",
    "- 第 2 步的 `custom_translation_table` 需要 torch >= <R>",
    Status(F, ("2",), "needs"), "before",
)
claim(F,
    "on\n <R>, `dynamo=True` calls the old `torch.onnx.dynamo_export`",
    "在 torch <R> 上，`dynamo=True` 调用的是旧的",
    DYNAMO_EXPORT,
)
claim(F,
    "There step 2 prints `SKIP step 2: needs torch >= <R> (...)`",
    "这时第 2 步打印 `SKIP step 2: needs torch >= <R> (...)`",
    Status(F, ("2",), "needs"), "before",
)
claim(F,
    "- Step 2 differs on <R>: without `opset_version`",
    "- 第 2 步在 <R> 上有所不同：不指定 `opset_version` 时",
    Status(F, ("2",), "differs"),
)
claim(F, "20 since <R>, [pytorch#158802]()", "<R> 起为 20，见 [pytorch#158802]()", Not(OPSET_18), "from")
claim(F, "<R> falls back to draft export without a word", "<R> 会不声不响地退回 draft export", DRAFT_EXPORT)
claim(F, "<R> also pick a custom\n translation over torchlib's", "<R> 还要看参数名", BY_NAME)
mark(F,
    "`assert_onnx_program` is public from <R>\n ([#162495]()); on <R> the first script's",
    "`assert_onnx_program` 从 <R> 起公开（[#162495]()）；在 <R> 上，第一个脚本的",
    UPSTREAM,
)
claim(F, "- torch <R> prints the same as", "- torch <R> 的输出与", SameAs(F, run_stacks.PINNED), mode="each")
claim(F, "prints the same as <R>: its new", "的输出与 <R> 相同：它新增的", Pinned())
mark(F,
    "has no <R> tag (the package index has <R>),\nso the Rockchip links are",
    "没有 <R> 的 tag（包索引上有 <R>）",
    NOT_TORCH,
)
mark(F, "`test.py` shows on <R> what a PC can", "`test.py` 在 <R> 上演示了 PC 上能验证的部分", NOT_TORCH)
mark(F, "[rknn-toolkit2 <R> on the package index]()", "[包索引上的 rknn-toolkit2 <R>]()", NOT_TORCH)



# ---- half precision (issue 40): the steps that export a custom node in float16 and bfloat16
claim("onnxscript_function", "(torch <R> export opset 18)", "（torch <R> 导出的是 opset 18）", OPSET_18)
mark("register_onnx_symbolic",
    "On torch <R> PyTorch's CPU threshold\n has no float16",
    "torch <R> 的 CPU threshold 没有 float16",
    "seen on 1.13 (step 14 without its gate: \"threshold_cpu\" not implemented for 'Half'); the gate's "
    "reason is what the matrix holds",
)
claim("register_onnx_symbolic", "so this step needs <R>:", "所以这一步需要 <R>：",
      Status("register_onnx_symbolic", ("14",), "needs"), "before")
claim("pythonop_symbolic", "- Step 8 needs torch <R>: PyTorch's CPU `clamp`", "- 第 8 步需要 torch <R>：在此之前",
      Status("pythonop_symbolic", ("8",), "needs"), "before")
claim("pythonop_symbolic", "On <R> it shows only `dynamo=False`", "<R> 只演示 `dynamo=False`",
      Status("pythonop_symbolic", ("8",), "differs", why="dynamo=True's half is not shown"))
claim("pythonop_symbolic", "(the table needs <R>)", "（转换表要 <R>）", TRANSLATION_TABLE, "from")
claim("pythonop_symbolic",
    "on\n <R> the `CastLike`s and the `Clip`'s bound stay as exported",
    "<R> 上 `CastLike` 和 `Clip` 的边界值保持导出时的样子",
    Status("pythonop_symbolic", ("8",), "differs", why="export does not optimize"),
)
claim("dynamic_shapes", "- Step 7 needs torch <R> (`torch.library.custom_op`)",
      "第 7 步需要 torch <R>（`torch.library.custom_op`）", Status("dynamic_shapes", ("7",), "needs"), "before")
claim("dynamic_shapes", "on <R> it writes only its", "在 <R> 上没有 `custom_translation_table`",
      Status("dynamic_shapes", ("7",), "differs", why="only this step's dynamo=False files"))

# ---- quantize_int8
F = "quantize_int8"
mark(F, "(RKNN-Toolkit2 2.5.0 pins torch <R>", "（RKNN-Toolkit2 2.5.0 固定了 torch <R>", RKNN)
claim(F, "What `python test.py` prints (torch <R>)", "`python test.py` 的输出（torch <R>）", Pinned())

# ---- dynamic_shapes (its pages are another helper's; these claims read them as fixed in the report of
# issue 39's item 4)
F = "dynamic_shapes"
mark(F,
    "under either exporter from torch <R> ([pytorch/pytorch#149678]())",
    "从 torch <R> 起，`torch.onnx.export` 运行期间它在两种导出器下都为真",
    UPSTREAM,
)
mark(F, "as the installed toolkit's docstrings (<R>) give them", "见已安装工具包（<R>）的 docstring", NOT_TORCH)
claim(F, "What `python test.py` prints (torch <R>)", "以下是 torch <R> 上 `python test.py` 的输出", Pinned())
STRINGS_DS = ("what a string in dynamic_shapes does on each release: test.py shows it "
              "(strings_leave_the_dims_static on 2.6, sharpen_in_one_call_exports on 2.6 to 2.8; 2.5 only under "
              "run_stacks --probe, where step 2 does not run), but the matrix keeps one reason per step, step 2's last")
claim(F, "which says what each does differently (<R> pinned)", "（固定版本为 <R>；各版本的不同之处也见那里）", Pinned())
mark(F,
    "On torch <R> a string does neither, and nothing says so",
    "在 torch <R> 上，字符串这两件事都做不到",
    STRINGS_DS,
)
claim(F,
    "(<R> does not rename them)",
    "（<R> 不会按 `Dim` 改名）",
    Status(F, ("4",), "differs", why="does not rename them"),
)
mark(F, "Strings work from <R>.", "从 <R> 起字符串可用。", STRINGS_DS)
mark(F, "(strings would do from torch <R>, step 2)", "（从 torch <R> 起用字符串也行，见第 2 步）", STRINGS_DS)
claim(F,
    "- Steps 2 and 4 need torch <R> for `custom_translation_table`",
    "- 第 2、4 步需要 torch <R>，因为要用 `custom_translation_table`",
    Status(F, ("2", "4"), "needs"), "before",
)
mark(F,
    "<R>'s `torch.onnx.export` takes it and ignores it.",
    "<R> 的 `torch.onnx.export` 接受这个参数，却不理会它。",
    "seen on 2.5 under run_stacks --probe (test.py's TABLE): the matrix holds it only as text of steps 2 "
    "and 4's 'needs' reason on every stack, which cannot tell 2.5 from another release",
)
claim(F,
    "On <R> step 2 writes no `min_max_dynamo.onnx`:",
    "在 <R> 上，第 2 步不写 `min_max_dynamo.onnx`：",
    Status(F, ("5",), "differs", why="step 2 writes it from 2.8"),
)
mark(F, "[`torch.onnx.ops`]() came with <R>,", "[`torch.onnx.ops`]() <R> 才有，", UPSTREAM)
claim(F,
    "and the `dynamo=False` files only before <R>.",
    "；<R> 之前只运行 `dynamo=False` 的文件。",
    Status(F, ("5",), "differs", why="only the dynamo=False files"), "before",
)
claim(F,
    "- Step 1 shows its `dynamo=True` half from <R> on.",
    "- 第 1 步从 <R> 起演示 `dynamo=True` 的那一半。",
    Status(F, ("1",), "runs"), "from",
)
claim(F,
    "On <R> `dynamo=True` is the older `torch.onnx.dynamo_export`",
    "在 <R> 上，`dynamo=True` 还是旧的 `torch.onnx.dynamo_export`",
    Status(F, ("1",), "differs", why="dynamo_export"),
)
mark(F, "before <R> there is no `dynamo=`.", "<R> 之前没有 `dynamo=`。", UPSTREAM)
claim(F,
    "- On <R> a string leaves a dim static … `dynamic_shapes` does not rename them after the `Dim`s.",
    "- 在 <R> 上，字符串让维度保持静态…`dynamic_shapes` 不会按 `Dim` 给它们改名。",
    Status(F, ("4",), "differs", why="does not rename them"),
)
claim(F,
    "- On <R> `torch.export`'s errors read differently:",
    "- 在 <R> 上，`torch.export` 的报错措辞不同：",
    Reproduced(F, "2", "L['args'][0][0].size()"),
)
claim(F,
    "- torch <R> export at opset 18, later versions at 20.",
    "- torch <R> 导出 opset 18，之后的版本导出 opset 20。",
    OPSET_18,
)
mark(F,
    "`dynamic_axes` under `dynamo=True` leaves the dims `s0`, `s1` on <R>, and `s77`, `s53` on <R>.",
    "`dynamo=True` 下的 `dynamic_axes` 在 <R> 上让维度保持为 `s0`、`s1`，在 <R> 上为 `s77`、`s53`。",
    SEEN,
)
claim(F,
    "On <R> step 2's one call fails in torch.export's words",
    "在 <R> 上，第 2 步那一次调用的报错是 torch.export 自己的措辞",
    Reproduced(F, "2", "You marked L['x'].size()[0] as dynamic"),
)
claim(F,
    "On <R> step 2's one call fails … so step 5 runs them at batch 2 and 5",
    "所以第 5 步在 <R> 上只用 batch 2 和 5 运行它们",
    Status(F, ("5",), "differs", why="batch 2 and 5"),
)
claim(F,
    "On <R> the one call that exports `SharpenModel` does not fail",
    "在 <R> 上，只调用一次 `torch.onnx.export` 导出 `SharpenModel` 也不报错",
    Not(Reproduced(F, "2", "Failed to export the model with torch.export")),
)
claim(F,
    "(`test.py` shows it): <R> falls back to draft export,",
    "（`test.py` 演示了这一点）：<R> 回退到 draft export，",
    Status(F, ("2",), "differs", why="draft export"),
)
mark(F,
    "<R> makes the strings `Dim.AUTO`, … and <R> traces with TorchScript.",
    "<R> 把字符串当作 `Dim.AUTO`，…<R> 则用 TorchScript 追踪。",
    STRINGS_DS,
)
mark(F,
    "- torch <R>'s `assert_onnx_program` has no `strategy=`, … (both came with <R>): there",
    "- torch <R> 的 `assert_onnx_program` 没有 `strategy=`，…两者都是 <R> 才有）：在 <R> 上",
    "what torch 2.6's assert_onnx_program (torch/onnx/_internal/exporter/_testing.py) lacks, from its source "
    "(test.py's STRATEGY); the matrix keeps step 5's other reason on 2.6",
)
claim(F, "is printed from torch <R> on;", "从 torch <R> 起才打印", Not(NO_DUMP), "from", mode="each")
claim(F,
    "**torch <R>.** None has `torch.library.custom_op`",
    "**torch <R>。** 这些版本都没有 `torch.library.custom_op`",
    Status(F, ("3",), "differs", why="torch.library.custom_op came with 2.4"),
)
claim(F, "(it came with <R>) nor the `dynamo=`", "（<R> 才有），`torch.onnx.export` 也没有", CUSTOM_OP, "from")
mark(F,
    "`torch.export` came with <R> and its `Dim` with <R>: before, the imports set `Dim = None`.",
    "`torch.export` <R> 才有，其中的 `Dim` <R> 才有：在此之前，导入部分设 `Dim = None`。",
    "what each release has (torch.export from 2.1, torch.export.Dim from 2.2), the import test.py falls back "
    "on: no step's status records it",
)
claim(F,
    "torch <R> types a custom node's outputs with dims it makes up",
    "torch <R> 不管 `setType` 写了什么，都给自定义节点的输出编造维度",
    Status(F, ("1",), "differs", why="makes up the custom node's dims"),
)
mark(F, "**Time.** About 20 s of CPU time (torch <R>)", "**耗时。** 在 torch <R> 上约 20 秒 CPU 时间", TIME)


# ---- ERRORS.md: the causes each test.py gives in CAUSES (ERRORS.md prints them as recorded in the matrix)
F = ERRORS
claim(F, "the same on torch <R> (opset 18): the bfloat16 node", "",
      Reproduced("autograd_function", "11", "Less(13)"))
claim(F, "the same on torch <R> (opset 18): the bfloat16 node ONNX Runtime names is a `Max`", "",
      Reproduced("pythonop_symbolic", "8", "Max(13)"))
mark(F, "(by the deprecated `autograd_inlining=False`, or on torch < <R>)", "", UPSTREAM)
claim(F, "`torch.library.custom_op` before torch <R> knows `typing.List[int]`", "", REFUSES_LIST, "before")
claim(F, "without `opset_version`: torch <R>+ writes opset 20", "", Not(OPSET_18), "from")
claim(F, "(on torch <R> draft_export gets here without a fake kernel)", "", L_DRAFT)
claim(F, "`dynamo=True` before torch <R> exports at opset 18 by default", "", OPSET_18, "before")
claim(F, "torch <R>: `torch.export` failed and `dynamo=True` fell back to draft export", "", DRAFT_EXPORT)
claim(F, "torch <R>'s text for an op of a library namespace", "", OP_NAME)
claim(F,
    "became the example's constant: derive the output's sizes from the inputs (torch <R>'s wording)",
    "",
    Reproduced("dynamic_shapes", "2", "You marked L['x'].size()[0] as dynamic"),
)
claim(F,
    "to the example's values: derive the output's sizes from the inputs (torch <R>'s wording)",
    "",
    Reproduced("dynamic_shapes", "2", "because batch was inferred to be a constant (2)"),
)
claim(F,
    "`Dim(\"length\", min=4)` (torch <R>'s wording)",
    "",
    Reproduced("dynamic_shapes", "2", "the generated guard 3 <= L['args'][0][0].size()[2]"),
)
claim(F,
    "`compute_mode=\"donot_use_mm_for_euclid_dist\"` (torch <R>'s wording)",
    "",
    Reproduced("dynamic_shapes", "2", "L['args'][0][0].size()[0] <= 25"),
)


# ---------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------


def label(stacks) -> str:
    return run_stacks.spans(list(stacks)) or "none"


def check(claim: Claim, expression: str) -> str | None:
    """What is wrong with the releases EXPRESSION names for CLAIM, or None."""
    said = releases(expression, claim.reading)
    truth = {s: claim.fact(s) for s in RECORDED}
    applies = {s for s, v in truth.items() if v is not None}
    holds = {s for s, v in truth.items() if v}
    wrong = patch_levels(expression)
    if wrong:
        return f"names {', '.join(wrong)}"
    unrecorded = [v for part in named(expression) for v in dict.fromkeys(part) if stack_of(v) not in RECORDED]
    if claim.reading == "on" and unrecorded:
        return f"names {', '.join(unrecorded)}, which stacks/matrix.json does not record"
    if not said & applies:
        return (f"names {label(said)}, where the fact does not apply (it applies on {label(applies)}): "
                "a claim that cannot fail")
    if claim.mode == "exactly" and said & applies != holds:
        return f"says {label(said & applies)}; the matrix has it on {label(holds)}"
    if claim.mode == "each" and not said & applies <= holds:
        return f"says {label(said & applies)}; the matrix has it on {label(holds)} only"
    if claim.mode == "none" and said & holds:
        return f"says not on {label(said & applies)}; the matrix has it on {label(said & holds)}"
    return None


def claim_id(claim: Claim) -> str:
    where = claim.where if isinstance(claim.where, str) else f"{len(claim.where)} folders"
    return f"{where}: {' '.join(claim.en.split())[:60]}"


@pytest.mark.parametrize("claim", CLAIMS, ids=claim_id)
def test_each_claim_is_what_the_matrix_says(claim):
    assert RECORDED, "stacks/matrix.json records no stack"
    problems = []
    for folder, lang in pages(claim.where):
        matches = found(claim, folder, lang)
        page = path(folder, lang).relative_to(ROOT)
        if not matches:
            problems.append(f"{page}: no sentence matches this claim's {lang!r} pattern (the sentence changed? "
                            "change the claim with it)")
        for match in matches:
            groups = [g for g in match.groupdict().values() if g]
            assert groups, f"the claim's {lang!r} pattern names no <R>"
            if claim.together:
                groups = [", ".join(groups)]
            for expression in groups:
                wrong = check(claim, expression)
                if wrong:
                    text = " ".join(match.group(0).split())
                    problems.append(f"{page}:{line_of(prose(folder, lang), match.start())}: {text!r} {wrong} "
                                    f"({claim.fact})")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("mark", NOT_FROM_THE_MATRIX, ids=claim_id)
def test_each_mark_is_found_and_says_why(mark):
    assert mark.why.strip(), "a release named for a fact the matrix does not hold says why"
    missing = [str(path(f, lang).relative_to(ROOT)) for f, lang in pages(mark.where) if not found(mark, f, lang)]
    assert not missing, f"no sentence matches this mark in {missing} (the sentence changed? change the mark)"
    for folder, lang in pages(mark.where):
        for match in found(mark, folder, lang):
            assert any(match.groupdict().values()), f"the mark's {lang!r} pattern names no <R>"


def covered(folder: str, lang: str) -> set[int]:
    spans = set()
    for entry in CLAIMS + NOT_FROM_THE_MATRIX:
        if (folder, lang) in pages(entry.where):
            for match in found(entry, folder, lang):
                for name, value in match.groupdict().items():
                    if value:
                        spans.update(range(match.start(name), match.end(name)))
    return spans


EVERY_PAGE = pages(tuple(folders()))


@pytest.mark.parametrize(("folder", "lang"), EVERY_PAGE, ids=[f"{folder}-{lang}" for folder, lang in EVERY_PAGE])
def test_every_release_named_in_prose_is_checked_or_marked(folder, lang):
    """A torch release named in a page's prose is in a claim (checked against the matrix) or a mark (a
    fact the matrix does not hold, said why): add a new version sentence to CLAIMS or NOT_FROM_THE_MATRIX."""
    text = prose(folder, lang)
    spans = covered(folder, lang)
    loose = [m for m in mentions(text) if m.start() not in spans]
    page = path(folder, lang).relative_to(ROOT)
    lines = [f"{page}:{line_of(text, m.start())}: {m.group(0)} in "
             f"{text[max(0, m.start() - 60):m.end() + 40]!r}" for m in loose]
    assert not loose, (f"{len(loose)} release(s) named in prose that no claim checks and no mark explains "
                       "(tests/test_version_prose.py):\n" + "\n".join(lines))


def test_the_reading_of_release_expressions():
    """The parts of this test that could pass by mistake: reading releases, and a claim that fails."""
    assert [n for n in named("2.6 to 2.8, 2.10")] == [("2.6", "2.8"), ("2.10", "2.10")]
    assert named("2.6、2.7 和 2.8") == [("2.6", "2.6"), ("2.7", "2.7"), ("2.8", "2.8")]
    assert named("2.6–2.8") == named("2.6-2.8") == named("2.6 到 2.8") == [("2.6", "2.8")]
    some = [s for s in RECORDED if (2, 6) <= run_stacks.minor(s) <= (2, 8)]
    assert releases("2.6 to 2.8", "on") == set(some) == releases("2.6, 2.7 and 2.8", "on")
    assert releases("2.9", "before") == {s for s in RECORDED if run_stacks.minor(s) < (2, 9)}
    assert releases("2.9", "from") == {s for s in RECORDED if run_stacks.minor(s) >= (2, 9)}
    assert compile_pattern("on torch <R> and later").search("on torch 2.8\nand later").group("r0") == "2.8"
    on_two = Claim(".", "", "", lambda stack: stack in ("torch-2.8", "torch-2.9"))  # holds on 2.8 and 2.9 only
    assert check(on_two, "2.8") and check(on_two, "2.7 to 2.9") and not check(on_two, "2.8 and 2.9")
    assert not check(Claim(".", "", "", on_two.fact, "from", "none"), "2.10")
    assert check(Claim(".", "", "", on_two.fact, "before", "each"), "2.9"), "2.2 to 2.8 are not all true"
    assert "pins" in check(on_two, "2.8.1 and 2.9"), "a patch release other than the stack's is not caught"
    assert "cannot fail" in check(Claim(".", "", "", lambda stack: None), "2.8")
    assert "does not record" in check(on_two, "1.10 and 2.8")


NUMBERS = {
    "en": dict(enumerate("twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split(), 12)),
    "zh": dict(enumerate("十二 十三 十四 十五 十六 十七 十八 十九 二十".split(), 12)),
}
COUNTS = {"en": [r"(\w+) stacks\. ", r"on all (\w+)\b"], "zh": [r"共(\S\S?)套环境", r"跑全部(\S\S?)套"]}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_top_readme_counts_the_stacks_the_matrix_records(lang):
    """"fourteen stacks": as many as stacks/matrix.json records."""
    text = prose(".", lang)
    said = [m.group(1) for pattern in COUNTS[lang] for m in re.finditer(pattern, text)]
    assert len(said) == len(COUNTS[lang]), f"README ({lang}): the sentences that count the stacks changed: {said}"
    wrong = [word for word in said if word != NUMBERS[lang].get(len(RECORDED))]
    assert not wrong, f"README ({lang}) counts {wrong} stacks; stacks/matrix.json records {len(RECORDED)}"
