"""The code frame of a text diagnostic: the author's own line at the position, with a caret.

A frame shows the structure of a line, never a data value (contract 02 §1 item 2): in YAML only
the indentation, the key and, in workflow.yaml, an identifier value of a member that holds a
name (`next`, `operation`, `function`, …); every other value is written as `…`. In functions.rhai
every string, character and number literal and every comment is written as `…`. Lines come from
the files as read (never a substituted value); a runtime file shows keys only, and no line of it
that holds `${` is shown at all. When the line cannot be shown safely, there is no frame.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from coordinator_core.errors import Diagnostic, is_identifier

__all__ = ["Frame", "frame_of"]

MASK: Final = "…"
MAX_WIDTH: Final = 96  # a longer line is trimmed around the column
_CONTEXT_BEFORE: Final = 40

WORKFLOW_FILE: Final = "workflow.yaml"
FUNCTIONS_FILE: Final = "functions.rhai"

# Members of workflow.yaml whose value is a structural name that a frame may show.
NAME_MEMBERS: Final = frozenset(
    {
        "start",
        "next",
        "onTimeout",
        "onCancel",
        "operation",
        "connection",
        "function",
        "outcome",
        "call",
        "completion",
        "step",
        "source",
        "event",
        "type",
        "functionsFile",
    }
)
# Members whose entries' values are step ids (`cases/<label>: <step>`).
NAME_MAPS: Final = frozenset({"cases", "onDeclaredRefusal"})

_KEY_LINE: Final = re.compile(
    r"""^(?P<lead>[ ]*(?:-[ ]+)*)"""
    r"""(?P<key>[A-Za-z0-9_$][A-Za-z0-9_.$/-]*|"[^"\\]*"|'[^']*')"""
    r"""(?P<colon>[ ]*:)(?P<rest>(?:[ \t].*)?)$"""
)
_ITEM_LINE: Final = re.compile(r"^(?P<lead>[ ]*-)(?P<rest>(?:[ \t].*)?)$")
_NAME_VALUE: Final = re.compile(
    r"^(?P<space>[ \t]+)(?P<value>[^\s#'\"{}\[\],&*!|>%@`]+)[ \t]*(?:#.*)?$"
)
_BLOCK_INDICATOR: Final = re.compile(r":[ \t]+[|>][0-9+-]*[ \t]*(?:#.*)?$")
_WORD: Final = re.compile(r"[A-Za-z0-9_]+")
_YAML_WORD: Final = re.compile(r"[A-Za-z0-9_$][A-Za-z0-9_.$/-]*")


@dataclass(frozen=True, slots=True)
class Frame:
    """One shown line: its number, its (masked, trimmed) text, the caret's 0-based offset and
    the caret run's length."""

    line: int
    text: str
    caret: int
    width: int


def frame_of(diagnostic: Diagnostic, sources: Mapping[str, str]) -> Frame | None:
    """The frame of `diagnostic`, or None when it has no line or the line is not shown."""
    file, line, column = diagnostic.file, diagnostic.line, diagnostic.column
    if file is None or line is None or column is None or file not in sources:
        return None
    lines = sources[file].split("\n")
    if not 1 <= line <= len(lines):
        return None
    raw = lines[line - 1].removesuffix("\r")
    word_pattern = _YAML_WORD
    if file == FUNCTIONS_FILE or file.endswith(".rhai"):  # eval names its functions file
        masked = _rhai_line(sources[file], line)
        word_pattern = _WORD
    elif file.endswith((".yaml", ".yml")):
        if _in_block_scalar(lines, line - 1):
            return None
        masked = _yaml_line(raw, diagnostic.path, names=file == WORKFLOW_FILE)
    else:
        return None
    if masked is None:
        return None
    text, columns = masked
    index = column - 1
    if index < len(columns):
        caret = columns[index]
    elif index == len(raw):  # the end of the line (a missing token)
        caret = len(text)
    else:
        return None
    width = 1
    if caret < len(text) and text[caret] != MASK:
        word = word_pattern.match(text, caret)
        width = max(1, len(word.group())) if word else 1
    return _trim(Frame(line, text, caret, width))


# -- YAML ---------------------------------------------------------------------------------


def _pointer_tokens(pointer: str) -> list[str]:
    if not pointer:
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _in_block_scalar(lines: list[str], index: int) -> bool:
    """Whether line `index` is content of a block scalar (`|` or `>`) that starts above it."""
    indent = len(lines[index]) - len(lines[index].lstrip(" "))
    for above in range(index - 1, -1, -1):
        text = lines[above].rstrip("\r")
        if not text.strip():
            continue
        own = len(text) - len(text.lstrip(" "))
        if own < indent:
            return bool(_BLOCK_INDICATOR.search(text)) or _in_block_scalar(lines, above)
    return False


def _yaml_line(raw: str, pointer: str, *, names: bool) -> tuple[str, list[int]] | None:
    """The shown text of a YAML line and, for each column of `raw`, its offset in that text."""
    if "${" in raw:
        return None
    tokens = _pointer_tokens(pointer)
    match = _KEY_LINE.match(raw)
    if match is None:
        item = _ITEM_LINE.match(raw)
        if item is None or not tokens or not tokens[-1].isdigit():
            return None
        lead = item.group("lead")
        return _assemble(raw, [(0, len(lead), lead)], len(lead), item.group("rest"))
    key = match.group("key")
    bare = key[1:-1] if key[:1] in "\"'" else key
    # The line of an item the pointer names (`- type: step` for `…/arguments/0`) starts with
    # the item's first key.
    item_start = bool(tokens) and tokens[-1].isdigit() and "-" in match.group("lead")
    if bare not in tokens and not item_start:
        return None  # the line is not the member the pointer names
    prefix_end = match.end("colon")
    kept = [(0, prefix_end, raw[:prefix_end])]
    rest = match.group("rest")
    names_this = bool(tokens) and (tokens[-1] == bare or item_start)
    shown_name = (
        names
        and names_this
        and (bare in NAME_MEMBERS or (len(tokens) > 1 and tokens[-2] in NAME_MAPS))
    )
    value = _NAME_VALUE.match(rest) if shown_name else None
    if value is not None and is_identifier(value.group("value")):
        end = prefix_end + value.end("value")
        kept.append((prefix_end, end, raw[prefix_end:end]))
        return _assemble(raw, kept, end, "")
    return _assemble(raw, kept, prefix_end, rest)


def _assemble(
    raw: str, kept: list[tuple[int, int, str]], rest_start: int, rest: str
) -> tuple[str, list[int]]:
    """Join kept runs and one mask for a non-empty rest (comments included: they are text)."""
    text = ""
    columns: list[int] = []
    for start, end, piece in kept:
        columns.extend(range(len(text), len(text) + (end - start)))
        text += piece
    if rest.strip():
        text += " "
        columns.extend([len(text)] * (len(raw) - rest_start))
        text += MASK
    else:
        columns.extend([max(len(text) - 1, 0)] * (len(raw) - rest_start))
    return text, columns


# -- functions.rhai -------------------------------------------------------------------------


def _rhai_line(source: str, line: int) -> tuple[str, list[int]] | None:
    """Line `line` of the source with every literal and comment masked.

    The whole source is scanned from the start so that a string or comment that began on an
    earlier line is still masked here.
    """
    out: list[str] = []
    columns: list[int] = []
    current = 1
    i, n = 0, len(source)
    masking = False  # inside a masked run on this line (one `…` per run and line)

    def put(ch: str) -> None:
        nonlocal masking
        masking = False
        if current == line:
            columns.append(len(out))
            out.append(" " if ch == "\t" or ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F else ch)

    def hide() -> None:
        nonlocal masking
        if current == line:
            if not masking:
                out.append(MASK)
            columns.append(len(out) - 1)
        masking = True

    def newline() -> None:
        nonlocal current, masking
        current += 1
        masking = False

    def skip(until: str, *, escapes: bool, nested: str | None = None) -> None:
        """Mask up to and including `until`; newlines stay newlines."""
        nonlocal i
        depth = 1
        while i < n:
            ch = source[i]
            if ch == "\n":
                newline()
                i += 1
                continue
            if escapes and ch == "\\" and i + 1 < n:
                hide()
                if source[i + 1] == "\n":
                    i += 1
                    continue
                hide()
                i += 2
                continue
            if nested is not None and source.startswith(nested, i):
                depth += 1
                hide()
                hide()
                i += 2
                continue
            if source.startswith(until, i):
                depth -= 1
                if depth == 0:
                    for ch2 in until:
                        put(ch2)
                    i += len(until)
                    return
                for _ in until:
                    hide()
                i += len(until)
                continue
            if ch != "\r":
                hide()
            i += 1

    while i < n and current <= line:
        ch = source[i]
        if ch == "\n":
            newline()
            i += 1
        elif source.startswith("//", i):
            put("/")
            put("/")
            i += 2
            while i < n and source[i] != "\n":
                if source[i] != "\r":
                    hide()
                i += 1
        elif source.startswith("/*", i):
            put("/")
            put("*")
            i += 2
            skip("*/", escapes=False, nested="/*")
        elif ch == "`":
            put(ch)
            i += 1
            # A template string: everything up to its closing backtick is masked, including
            # `${…}` interpolations (and any string nested in them).
            depth = 0
            while i < n:
                c = source[i]
                if c == "\n":
                    newline()
                elif source.startswith("${", i):
                    depth += 1
                    hide()
                    i += 1
                    hide()
                elif c == "}" and depth > 0:
                    depth -= 1
                    hide()
                elif c == "`" and depth == 0:
                    put(c)
                    i += 1
                    break
                elif c != "\r":
                    hide()
                i += 1
        elif ch in "\"'":
            put(ch)
            i += 1
            skip(ch, escapes=True)
        elif ch.isdigit():
            while i < n and (source[i].isalnum() or source[i] in "_."):
                if source[i] == "." and not (i + 1 < n and source[i + 1].isdigit()):
                    break
                hide()
                i += 1
        elif ch.isalpha() or ch == "_":
            while i < n and (source[i].isalnum() or source[i] == "_"):
                put(source[i])
                i += 1
        else:
            if ch != "\r":
                put(ch)
            i += 1
    if current < line:
        return None
    return "".join(out), columns


# -- trimming -------------------------------------------------------------------------------


def _trim(frame: Frame) -> Frame:
    text, caret, width = frame.text.rstrip(), frame.caret, frame.width
    caret = min(caret, len(text))
    if len(text) <= MAX_WIDTH:
        return Frame(frame.line, text, caret, width)
    start = max(0, caret - _CONTEXT_BEFORE)
    end = min(len(text), start + MAX_WIDTH)
    start = max(0, end - MAX_WIDTH)
    shown = text[start:end]
    offset = caret - start
    if start > 0:
        shown = MASK + shown[1:]
    if end < len(text):
        shown = shown[:-1] + MASK
    width = max(1, min(width, len(shown) - offset))
    return Frame(frame.line, shown, offset, width)
