"""The strict YAML reader: authored YAML bytes to a JSON tree with positions (contract 01 §2, Y1–Y19)."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any, Final

import yaml
from yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.tokens import KeyToken, ScalarToken, StreamEndToken, Token

from coordinator_core.errors import Diagnostic, Related
from coordinator_core.limits import YAML_MAX_BYTES, YAML_MAX_DEPTH

__all__ = [
    "INVALID",
    "NO_POSITIONS",
    "Mark",
    "SourceMap",
    "YamlDocument",
    "escape_pointer_token",
    "read_yaml",
]

# The C parser keeps a 1,500-line workflow within a few milliseconds; the pure-Python parser
# is the fallback for builds without libyaml and is also used to classify syntax errors.
_Loader: Final[Callable[[bytes], Any]] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Invalid:
    """The type of `INVALID`; one instance, preserved by copy, deepcopy and pickle."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "INVALID"

    def __reduce__(self) -> str:
        return "INVALID"

    def __copy__(self) -> _Invalid:
        return self

    def __deepcopy__(self, memo: object) -> _Invalid:
        return self


INVALID: Final[object] = _Invalid()
"""A node that failed a reader rule; later stages treat its member as present but failed."""


@dataclass(frozen=True, slots=True)
class Mark:
    """A 1-based line and column (columns count Unicode scalar values)."""

    line: int
    column: int


@dataclass(frozen=True)
class SourceMap:
    """Where each node of a document was written: JSON pointer → the mark of its value, and of
    its key for an object member. A document that was never text (a snapshot's workflow, read
    back from JSON) has no positions: `NO_POSITIONS`."""

    positions: Mapping[str, Mark]
    key_positions: Mapping[str, Mark]

    def mark_of(self, pointer: str) -> Mark | None:
        """The value mark of `pointer`, or of its nearest ancestor that has one."""
        positions = self.positions
        while True:
            mark = positions.get(pointer)
            if mark is not None or not pointer:
                return mark
            pointer = pointer[: pointer.rfind("/")]

    def position(self, pointer: str) -> tuple[int | None, int | None]:
        """Line and column of the value at `pointer` (or its nearest ancestor), if known."""
        mark = self.mark_of(pointer)
        return (None, None) if mark is None else (mark.line, mark.column)

    def key_position(self, pointer: str) -> tuple[int | None, int | None]:
        """Line and column of the key of the member at `pointer`, else of its value."""
        mark = self.key_positions.get(pointer)
        if mark is not None:
            return mark.line, mark.column
        return self.position(pointer)


NO_POSITIONS: Final = SourceMap(positions={}, key_positions={})


@dataclass(frozen=True)
class YamlDocument:
    """The decoded tree of one YAML file and where each of its nodes was written."""

    value: object
    positions: Mapping[str, Mark]
    key_positions: Mapping[str, Mark]

    @property
    def source_map(self) -> SourceMap:
        return SourceMap(self.positions, self.key_positions)

    def mark_of(self, pointer: str) -> Mark | None:
        """The value mark of `pointer`, or of its nearest ancestor that has one."""
        return self.source_map.mark_of(pointer)


def escape_pointer_token(token: str) -> str:
    """One JSON pointer reference token (RFC 6901: `~` → `~0`, `/` → `~1`)."""
    if "~" in token:
        token = token.replace("~", "~0")
    if "/" in token:
        token = token.replace("/", "~1")
    return token


# ---------------------------------------------------------------------------------------------
# Scalar resolution (contract 01 §2): done here, never by PyYAML's YAML 1.1 resolver.

_AMBIGUOUS_NUMBER: Final = "yaml.ambiguous-number"
_AMBIGUOUS_SCALAR: Final = "yaml.ambiguous-scalar"

_INTEGER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_LIKE: Final = re.compile(
    r"[-+]?0[xXoObB][0-9a-fA-F_]+"
    r"|\+[0-9.].*"
    r"|-?0[0-9_]+(?:\.[0-9_]*)?"
    # `[0-9][0-9_]*_[0-9_]*` as a lookahead for the `_`, which keeps long scalars linear
    r"|[-+]?[0-9](?=[0-9_]*_)[0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.[0-9]+(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?[0-9]+\.(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN)"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?",
    re.DOTALL,
)
# Every pattern above starts with one of these, so other scalars skip the regexes.
_NUMBER_START: Final = frozenset("-+.0123456789")
# No decimal string longer than this is an exactly representable binary64 integer.
_MAX_INTEGER_DIGITS: Final = 400


def _case_variants(word: str) -> list[str]:
    return ["".join(chars) for chars in product(*((c.lower(), c.upper()) for c in word))]


_SPECIAL: Final[dict[str, tuple[object, str | None]]] = {
    **{word: (INVALID, _AMBIGUOUS_SCALAR) for word in ("True", "TRUE", "False", "FALSE")},
    **{word: (INVALID, _AMBIGUOUS_SCALAR) for word in ("Null", "NULL")},
    **{
        variant: (INVALID, _AMBIGUOUS_SCALAR)
        for word in ("yes", "no", "on", "off", "y", "n")
        for variant in _case_variants(word)
    },
    "": (None, None),
    "~": (None, None),
    "null": (None, None),
    "true": (True, None),
    "false": (False, None),
}


def _resolve_plain(text: str) -> tuple[object, str | None]:
    """The JSON value of a plain scalar, or (`INVALID`, the code that refuses it)."""
    special = _SPECIAL.get(text)
    if special is not None:
        return special
    if text[0] not in _NUMBER_START:
        return text, None
    if _INTEGER.fullmatch(text):
        if len(text) > _MAX_INTEGER_DIGITS:
            return INVALID, _AMBIGUOUS_NUMBER
        number = int(text)
        try:
            exact = float(number) == number
        except OverflowError:
            exact = False
        return (number, None) if exact else (INVALID, _AMBIGUOUS_NUMBER)
    if _NUMBER.fullmatch(text):
        value = float(text)
        # An overflow to infinity has no JSON form.
        return (INVALID, _AMBIGUOUS_NUMBER) if math.isinf(value) else (value, None)
    if _NUMBER_LIKE.fullmatch(text):
        return INVALID, _AMBIGUOUS_NUMBER
    return text, None


# ---------------------------------------------------------------------------------------------
# Bytes and characters (Y1, Y2).

_BOM: Final = b"\xef\xbb\xbf"
# C0 controls other than TAB, LF, CR (Y2), plus the characters YAML itself forbids in a stream
# (DEL, C1 controls other than NEL, U+FFFE, U+FFFF): both are refused before parsing, so the
# parser never reports a character problem as a syntax error.
_BAD_CHARACTER: Final = re.compile(
    "[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
# The line breaks libyaml counts, so computed positions agree with the parser's marks.
_LINE_BREAK: Final = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
_BREAK_CHARACTERS: Final = "\r\n\x85\u2028\u2029"


def _mark_at(text: str, index: int) -> Mark:
    line = 1
    line_start = 0
    for match in _LINE_BREAK.finditer(text, 0, index):
        line += 1
        line_start = match.end()
    return Mark(line, index - line_start + 1)


def _decode(data: bytes) -> tuple[str, Mark | None]:
    """The text of `data`, or the position of its first refused byte or character (Y2)."""
    if data.startswith(_BOM):
        return "", Mark(1, 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        valid = data[: error.start].decode("utf-8")
        return "", _mark_at(valid, len(valid))
    bad = _BAD_CHARACTER.search(text)
    if bad is not None:
        return "", _mark_at(text, bad.start())
    return text, None


# ---------------------------------------------------------------------------------------------
# Syntax errors (Y11–Y17).

_TAB_IN_INDENT: Final = re.compile(r"^ *\t[ \t]*[^ \t\r\n#]", re.MULTILINE)
# An explicit key (`? `) needs `?` followed by a space or a line end, at a line start or after a
# space or flow indicator; files without one skip the token scan that finds explicit keys.
_QUESTION_MARK: Final = re.compile("\\?(?:[ \t\r\n\x85\u2028\u2029]|\\Z)")
_BEFORE_EXPLICIT_KEY: Final = " \t\r\n\x85\u2028\u2029[{,"
_DOCUMENT_START_LINE: Final = re.compile(r"^---(?=[ \t\r\n\x85\u2028\u2029]|\Z)", re.MULTILINE)


def _only_blanks_and_comments(text: str, index: int) -> bool:
    for line in _LINE_BREAK.split(text[index:]):
        content = line.lstrip(" \t")
        if content and not content.startswith("#"):
            return False
    return True


def _mark(mark: Any) -> Mark:
    if mark is None:
        return Mark(1, 1)
    return Mark(mark.line + 1, mark.column + 1)


def _scan_tokens(text: str, until: int) -> list[Token]:
    """Tokens of `text` up to index `until`, including those pending when scanning failed.

    The pure-Python scanner exposes its pending tokens after an error, which libyaml does not.
    Tabs become spaces (same length, so indices hold) because libyaml accepts tabs in places
    where the Python scanner stops; the tokens only locate quotes and plain scalars.
    """
    scanner = yaml.SafeLoader(text.replace("\t", " "))
    tokens: list[Token] = []
    try:
        while True:
            token: Any = scanner.get_token()  # type: ignore[no-untyped-call]
            if token is None:
                break
            tokens.append(token)
            if isinstance(token, StreamEndToken) or token.start_mark.index > until:
                break
    except yaml.YAMLError:
        tokens.extend(scanner.tokens)
    finally:
        scanner.dispose()
    return tokens


def _text_after_quote(text: str, tokens: list[Token], index: int, line: int) -> int | None:
    """Index of text that directly follows a closing quote on the error's line, if any (Y14)."""
    closing: Any = None
    for token in tokens:
        if (
            isinstance(token, ScalarToken)
            and token.style in ('"', "'")
            and token.end_mark.index <= index
            and (closing is None or token.end_mark.index > closing.end_mark.index)
        ):
            closing = token
    if closing is None or closing.end_mark.line != line:
        return None
    end = closing.end_mark.index
    after = end
    while after < len(text) and text[after] in " \t":
        after += 1
    if after > index or after >= len(text):
        return None
    character = text[after]
    if character in _BREAK_CHARACTERS or character in ":,]}":
        return None
    if character == "#" and after > end:
        return None
    return int(after)


def _colon_after_plain(text: str, tokens: list[Token], index: int) -> bool:
    """Whether the `:` at `index` continues a plain scalar (Y15)."""
    if text[index : index + 1] != ":":
        return False
    following = text[index + 1 : index + 2]
    if following and following not in " \t,]}" and following not in _BREAK_CHARACTERS:
        return False
    last: Any = None
    for token in tokens:
        end = token.end_mark.index
        # Zero-width tokens (KEY, BLOCK-END, …) carry no text.
        if token.start_mark.index < end <= index and (last is None or end > last.end_mark.index):
            last = token
    if not isinstance(last, ScalarToken) or not last.plain:
        return False
    return not text[last.end_mark.index : index].strip(" \t")


def _classify(text: str, error: yaml.MarkedYAMLError) -> tuple[str, Mark]:
    """The Y11–Y17 code of a parser error and the position to report."""
    problem = error.problem or ""
    context = error.context or ""
    raw = error.problem_mark or error.context_mark
    mark = _mark(raw)
    index = raw.index if raw is not None else 0
    character = text[index : index + 1]
    if "quoted scalar" in context:
        if "end of stream" in problem or "document" in problem:
            # The opening quote is the useful position; the stream end carries no information.
            return "yaml.unclosed-quote", _mark(error.context_mark or raw)
        if "escape" in problem or "hexdecimal" in problem or "hexadecimal" in problem:
            return "yaml.invalid-escape", mark
    if "tab character" in problem or character == "\t":
        return "yaml.tab-indentation", mark
    tokens = _scan_tokens(text, index)
    after = _text_after_quote(text, tokens, index, raw.line if raw is not None else 0)
    if after is not None:
        return "yaml.text-after-quote", _mark_at(text, after)
    if _colon_after_plain(text, tokens, index):
        return "yaml.colon-in-plain-value", mark
    if (
        "end of stream" in problem
        or _only_blanks_and_comments(text, index)
        or (
            (index == 0 or text[index - 1] in _BREAK_CHARACTERS)
            and text.startswith(("---", "..."), index)
            and text[index + 3 : index + 4] in ("", " ", "\t", *_BREAK_CHARACTERS)
        )
    ):
        return "yaml.unexpected-end", mark
    return "yaml.syntax", mark


# ---------------------------------------------------------------------------------------------
# Building the tree from the event stream.


class _Marks(Mapping[str, Mark]):
    """Positions kept as parser marks and converted on access: most are never read."""

    __slots__ = ("_raw",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self._raw = raw

    def __getitem__(self, pointer: str) -> Mark:
        raw = self._raw[pointer]
        return Mark(raw.line + 1, raw.column + 1)

    def __contains__(self, pointer: object) -> bool:
        return pointer in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return f"_Marks({dict(self)!r})"


# What a mapping frame does with the value of its current member.
_EXPECT_KEY: Final = 0
_STORE: Final = 1
_STORE_INVALID: Final = 2  # the key failed a rule: the member is kept as INVALID
_DISCARD: Final = 3  # a later duplicate: checked but not kept
_SKIP: Final = 4  # the key is not a scalar: the member has no name, so its value is not read

# A plain key starting with none of these, and not a special word, is a string as written.
_SLOW_KEY_START: Final = _NUMBER_START | {"<"}
_ORIGIN: Final = yaml.error.Mark("", 0, 0, 0, None, 0)


class _Frame:
    __slots__ = (
        "failed",
        "failed_keys",
        "items",
        "key",
        "key_marks",
        "live",
        "member",
        "members",
        "mode",
        "pointer",
    )

    def __init__(
        self,
        pointer: str,
        members: dict[str, object] | None,
        items: list[object] | None,
        live: bool,
        failed: bool,
    ) -> None:
        self.pointer = pointer
        self.members = members
        self.items = items
        self.live = live  # positions are recorded (false inside a discarded duplicate)
        self.failed = failed  # anchored or tagged: becomes INVALID when complete
        self.mode = _EXPECT_KEY
        self.key = ""
        self.member = ""
        self.key_marks: dict[str, Any] = {}  # member name → parser mark of its first key
        self.failed_keys: set[str] | None = None  # names whose first key failed a rule


class _Reader:
    def __init__(self, data: bytes, text: str, file: str, artifact: str | None) -> None:
        self.data = data
        self.text = text
        self.file = file
        self.artifact = artifact
        self.diagnostics: list[Diagnostic] = []
        self.positions: dict[str, Any] = {}
        self.key_positions: dict[str, Any] = {}
        self.explicit_keys: frozenset[tuple[int, int]] = frozenset()
        self.root: object = None
        self.root_done = False
        self.root_end = 0
        self.get_event: Callable[[], Event | None] = lambda: None

    def report(self, code: str, path: str, raw: Any, related: tuple[Related, ...] = ()) -> None:
        self.diagnostics.append(
            Diagnostic(
                code=code,
                path=path,
                file=self.file,
                line=raw.line + 1,
                column=raw.column + 1,
                artifact=self.artifact,
                related=related,
            )
        )

    def whole_file(self, code: str, mark: Mark) -> tuple[None, list[Diagnostic]]:
        diagnostic = Diagnostic(
            code=code,
            path="",
            file=self.file,
            line=mark.line,
            column=mark.column,
            artifact=self.artifact,
        )
        return None, [diagnostic]

    def read(self) -> tuple[YamlDocument | None, list[Diagnostic]]:
        if self.may_have_explicit_key():
            self.explicit_keys = self.find_explicit_keys()
        loader = _Loader(self.data)
        try:
            self.get_event = loader.get_event
            value = self.document()
        except yaml.MarkedYAMLError as error:
            return self.after_error(error)
        finally:
            loader.dispose()
        tab = self.tab_in_indentation()
        if tab is not None:
            return self.whole_file("yaml.tab-indentation", tab)
        return self.result(value)

    def result(self, value: object) -> tuple[YamlDocument | None, list[Diagnostic]]:
        document = YamlDocument(
            value=value,
            positions=_Marks(self.positions),
            key_positions=_Marks(self.key_positions),
        )
        return document, self.diagnostics

    def after_error(
        self, error: yaml.MarkedYAMLError
    ) -> tuple[YamlDocument | None, list[Diagnostic]]:
        if "nesting depth" in (error.problem or ""):
            # libyaml stops at 1,000 levels, after Y4 has usually been reported at its member;
            # when its read-ahead stops first, the pointer is unknown and Y4 covers the file.
            if not any(d.code == "yaml.too-deep" for d in self.diagnostics):
                return self.whole_file("yaml.too-deep", _mark(error.problem_mark))
            return None, self.diagnostics
        if self.root_done:
            # The parser reads ahead: an error inside a second document can surface before
            # its start event, and the second document is refused whatever it holds (Y3).
            index = error.problem_mark.index if error.problem_mark is not None else len(self.text)
            start = _DOCUMENT_START_LINE.search(self.text, self.root_end, index)
            if start is not None:
                mark = _mark_at(self.text, start.start())
                self.report("yaml.multiple-documents", "", _raw(mark))
                return self.result(self.root)
        return self.whole_file(*_classify(self.text, error))

    def may_have_explicit_key(self) -> bool:
        # `?` then a space or line end, at a line start or after a space or flow indicator.
        text = self.text
        for match in _QUESTION_MARK.finditer(text):
            start = match.start()
            if start == 0 or text[start - 1] in _BEFORE_EXPLICIT_KEY:
                return True
        return False

    def find_explicit_keys(self) -> frozenset[tuple[int, int]]:
        """0-based (line, column) of every key node written after an explicit `? ` (Y10)."""
        found: set[tuple[int, int]] = set()
        scanner = _Loader(self.data)
        # A scanner error is reported by the parse; the keys before it still count.
        with contextlib.suppress(yaml.YAMLError):
            self.scan_explicit_keys(scanner, found)
        scanner.dispose()
        return frozenset(found)

    @staticmethod
    def scan_explicit_keys(scanner: Any, found: set[tuple[int, int]]) -> None:
        key: Any = None
        while True:
            token = scanner.get_token()
            if token is None:
                return
            if key is not None:
                start = token.start_mark
                if (start.line, start.column) != (key.line, key.column):
                    found.add((start.line, start.column))
                key = None
            if isinstance(token, KeyToken):
                # A simple key's KEY token sits where the key starts; an explicit one at `?`.
                key = token.start_mark
            elif isinstance(token, StreamEndToken):
                return

    def tab_in_indentation(self) -> Mark | None:
        """The first tab in a line's indentation outside multi-line scalars (Y11).

        libyaml accepts some of these (in flow collections, for instance); the rule does not.
        """
        if "\t" not in self.text:
            return None
        # Only the document that was read counts; a second one is refused as a whole (Y3).
        candidates = list(_TAB_IN_INDENT.finditer(self.text, 0, self.root_end))
        if not candidates:
            return None
        inside: list[tuple[int, int]] = []
        scanner = _Loader(self.data)
        with contextlib.suppress(yaml.YAMLError):  # only possible after the first document
            while True:
                token = scanner.get_token()
                if token is None or isinstance(token, StreamEndToken):
                    break
                if isinstance(token, ScalarToken) and token.end_mark.line > token.start_mark.line:
                    inside.append((token.start_mark.index, token.end_mark.index))
        scanner.dispose()
        for candidate in candidates:
            content = candidate.end() - 1
            if not any(start < content < end for start, end in inside):
                return _mark_at(self.text, self.text.index("\t", candidate.start()))
        return None

    def document(self) -> object:
        get = self.get_event
        get()  # stream start
        event = get()
        if isinstance(event, StreamEndEvent) or event is None:
            self.positions[""] = _ORIGIN
            return None
        value = self.root = self.tree()
        self.root_done = True
        get()  # document end
        event = get()
        if isinstance(event, DocumentStartEvent):
            self.report("yaml.multiple-documents", "", event.start_mark)
        return value

    def skip(self, event: Event | None) -> None:
        """Consume the rest of the subtree that `event` opens."""
        if not isinstance(event, (MappingStartEvent, SequenceStartEvent)):
            return
        get = self.get_event
        depth = 1
        while depth:
            cls = type(get())
            if cls is MappingStartEvent or cls is SequenceStartEvent:
                depth += 1
            elif cls is MappingEndEvent or cls is SequenceEndEvent:
                depth -= 1

    def tree(self) -> object:
        # The hot loop of the reader: common cases (plain string keys, quoted and plain scalars
        # needing no check) are handled inline; everything else goes through `key` or
        # `_resolve_plain`.
        get = self.get_event
        positions = self.positions
        key_positions = self.key_positions
        check_explicit = bool(self.explicit_keys)
        special = _SPECIAL
        number_start = _NUMBER_START
        slow_key_start = _SLOW_KEY_START
        stack: list[_Frame] = []
        parent: _Frame | None = None
        value: object
        while True:
            event: Any = get()
            cls = type(event)
            if cls is MappingEndEvent or cls is SequenceEndEvent:
                frame = stack.pop()
                if frame.failed:
                    value = INVALID
                elif frame.members is not None:
                    value = frame.members
                else:
                    value = frame.items
                if not stack:
                    self.root_end = event.end_mark.index
                    return value
                parent = stack[-1]
                _place(parent, value)
                continue
            if parent is None:
                pointer = ""
                live = True
            elif parent.items is not None:
                pointer = f"{parent.pointer}/{len(parent.items)}"
                live = parent.live
            else:
                mode = parent.mode
                if mode == _EXPECT_KEY:
                    if (
                        cls is ScalarEvent
                        and event.anchor is None
                        and event.tag is None
                        and not check_explicit
                    ):
                        name: str = event.value
                        key_marks = parent.key_marks
                        if (
                            (event.style or (name and name[0] not in slow_key_start))
                            and name not in special
                            and name not in key_marks
                        ):
                            start = key_marks[name] = event.start_mark
                            if "~" in name or "/" in name:
                                name = escape_pointer_token(name)
                            member = parent.member = f"{parent.pointer}/{name}"
                            parent.key = event.value
                            parent.mode = _STORE
                            if parent.live:
                                key_positions[member] = start
                            continue
                    self.key(parent, event)
                    continue
                if mode == _SKIP:
                    self.skip(event)
                    parent.mode = _EXPECT_KEY
                    continue
                pointer = parent.member
                live = parent.live and mode != _DISCARD
            if live:
                positions[pointer] = event.start_mark
            if cls is ScalarEvent:
                if event.anchor is not None or event.tag is not None:
                    self.properties(event, pointer)
                    value = INVALID
                elif event.style:
                    value = event.value
                else:
                    text: str = event.value
                    if text and text[0] not in number_start and text not in special:
                        value = text
                    else:
                        value, code = _resolve_plain(text)
                        if code is not None:
                            self.report(code, pointer, event.start_mark)
            elif cls is AliasEvent:
                self.report("yaml.alias", pointer, event.start_mark)
                value = INVALID
            else:
                failed = event.anchor is not None or event.tag is not None
                if failed:
                    self.properties(event, pointer)
                if len(stack) >= YAML_MAX_DEPTH:
                    self.report("yaml.too-deep", pointer, event.start_mark)
                    self.skip(event)
                    value = INVALID
                else:
                    if cls is MappingStartEvent:
                        parent = _Frame(pointer, {}, None, live, failed)
                    else:
                        parent = _Frame(pointer, None, [], live, failed)
                    stack.append(parent)
                    continue
            if parent is None:
                self.root_end = event.end_mark.index
                return value
            items = parent.items
            if items is not None:
                items.append(value)
            else:
                mode = parent.mode
                if mode == _STORE:
                    parent.members[parent.key] = value  # type: ignore[index]
                elif mode == _STORE_INVALID:
                    parent.members[parent.key] = INVALID  # type: ignore[index]
                parent.mode = _EXPECT_KEY

    def properties(self, event: Any, pointer: str) -> None:
        if event.anchor is not None:
            self.report("yaml.anchor", pointer, event.start_mark)
        if event.tag is not None:
            self.report("yaml.tag", pointer, event.start_mark)

    def key(self, frame: _Frame, event: Any) -> None:
        start: Any = event.start_mark
        if type(event) is not ScalarEvent:
            # A collection or alias as key has no member name: report at the mapping.
            refusal = "yaml.alias" if type(event) is AliasEvent else "yaml.non-string-key"
            self.report(refusal, frame.pointer, start)
            self.skip(event)
            frame.mode = _SKIP
            return
        name: str = event.value
        pointer = f"{frame.pointer}/{escape_pointer_token(name)}"
        ok = True
        if event.anchor is not None or event.tag is not None:
            self.properties(event, pointer)
            ok = False
        elif (start.line, start.column) in self.explicit_keys:
            self.report("yaml.non-string-key", pointer, start)
            ok = False
        elif not event.style:
            if name == "<<":
                self.report("yaml.merge-key", pointer, start)
                ok = False
            else:
                value, code = _resolve_plain(name)
                if code is not None:
                    self.report(code, pointer, start)
                    ok = False
                elif type(value) is not str:
                    self.report("yaml.non-string-key", pointer, start)
                    ok = False
        frame.key = name
        frame.member = pointer
        first = frame.key_marks.get(name)
        if first is not None:
            failed_keys = frame.failed_keys
            if ok and (failed_keys is None or name not in failed_keys):
                related = Related(
                    file=self.file,
                    path=pointer,
                    message="The first occurrence of this member.",
                    line=first.line + 1,
                    column=first.column + 1,
                )
                self.report("yaml.duplicate-key", pointer, start, (related,))
            frame.mode = _DISCARD
            return
        frame.key_marks[name] = start
        if not ok:
            if frame.failed_keys is None:
                frame.failed_keys = set()
            frame.failed_keys.add(name)
        if frame.live:
            self.key_positions[pointer] = start
        frame.mode = _STORE if ok else _STORE_INVALID


def _place(parent: _Frame, value: object) -> None:
    items = parent.items
    if items is not None:
        items.append(value)
        return
    mode = parent.mode
    if mode == _STORE:
        parent.members[parent.key] = value  # type: ignore[index]
    elif mode == _STORE_INVALID:
        parent.members[parent.key] = INVALID  # type: ignore[index]
    parent.mode = _EXPECT_KEY


def _raw(mark: Mark) -> Any:
    """A parser-style (0-based) mark for a position computed from the text."""
    return yaml.error.Mark("", 0, mark.line - 1, mark.column - 1, None, 0)


def read_yaml(
    data: bytes, *, file: str, artifact: str | None = None
) -> tuple[YamlDocument | None, list[Diagnostic]]:
    """Read one authored YAML file under rules Y1–Y19.

    The document is None when no tree could be built (Y1, Y2, a syntax error Y11–Y17); an
    empty stream is a document whose value is None. Non-fatal findings come with a tree in
    which each failed node is `INVALID`.
    """
    if len(data) > YAML_MAX_BYTES:
        return None, [Diagnostic(code="yaml.too-large", path="", file=file, artifact=artifact)]
    text, bad = _decode(data)
    if bad is not None:
        return None, [
            Diagnostic(
                code="yaml.not-utf8",
                path="",
                file=file,
                line=bad.line,
                column=bad.column,
                artifact=artifact,
            )
        ]
    return _Reader(data, text, file, artifact).read()
