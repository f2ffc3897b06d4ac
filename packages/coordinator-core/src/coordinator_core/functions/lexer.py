"""The tokenizer: source characters to positioned tokens (rhai-subset §2)."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Final

from coordinator_core.limits import FUNCTION_MAX_STRING_BYTES

INT: Final = "int"
FLOAT: Final = "float"
STR: Final = "str"
CHAR: Final = "char"
IDENT: Final = "ident"
KW: Final = "kw"
KWFN: Final = "kwfn"
OP: Final = "op"
INTERP: Final = "interp"  # text before a `${`; the `{` follows as its own token
ISTR_END: Final = "istr_end"  # text after the last interpolation, up to the closing back-tick
ERROR: Final = "error"
EOF: Final = "eof"

KEYWORDS: Final = frozenset(
    [
        "true",
        "false",
        "let",
        "const",
        "if",
        "else",
        "switch",
        "do",
        "while",
        "until",
        "loop",
        "for",
        "in",
        "continue",
        "break",
        "return",
        "throw",
        "try",
        "catch",
        "as",
        "global",
        "private",
        "fn",
        "this",
    ]
)
# Keyword-functions: callable, never names of variables or functions.
KEYWORD_FUNCTIONS: Final = frozenset(
    ["Fn", "call", "curry", "is_shared", "is_def_fn", "is_def_var", "type_of"]
)
DISABLED: Final = frozenset(["import", "export", "eval", "print", "debug"])
RESERVED_WORDS: Final = frozenset(
    [
        "var",
        "static",
        "shared",
        "goto",
        "exit",
        "match",
        "case",
        "public",
        "protected",
        "new",
        "use",
        "with",
        "is",
        "module",
        "package",
        "super",
        "thread",
        "spawn",
        "go",
        "await",
        "async",
        "sync",
        "yield",
        "default",
        "void",
        "null",
        "nil",
    ]
)

# Rust's char::is_whitespace (the Unicode White_Space property).
_WHITESPACE: Final = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_ID_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_ID_CONT: Final = _ID_START | _DIGITS
_ALPHA: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# After these tokens a `-` directly before a digit is folded into a negative literal
# (Rhai's `Token::is_next_unary`).
_UNARY_AFTER_OPS: Final = frozenset(
    [
        ";",
        ":",
        ",",
        "??",
        "..",
        "..=",
        "{",
        "(",
        "[",
        "+",
        "+=",
        "-",
        "-=",
        "*",
        "*=",
        "/",
        "/=",
        "%",
        "%=",
        "**",
        "**=",
        "<<",
        "<<=",
        ">>",
        ">>=",
        "=",
        "==",
        "!=",
        "<",
        ">",
        "!",
        "<=",
        ">=",
        "|",
        "&",
        "&&",
        "&=",
        "||",
        "|=",
        "^",
        "^=",
        "?[",
        "!in",
    ]
)
_UNARY_AFTER_KWS: Final = frozenset(["if", "while", "until", "in", "return", "throw"])

_MAX_U64: Final = 2**64
_MIN_I64: Final = -(2**63)
_MAX_I64: Final = 2**63 - 1

MSG_RESERVED_SYMBOL: Final = "A reserved symbol is not valid Rhai syntax."
MSG_UNEXPECTED_CHAR: Final = "The source contains a character that cannot start a token."
MSG_MALFORMED_NUMBER: Final = "A number literal is malformed or out of range."
MSG_MALFORMED_IDENT: Final = "An identifier is malformed."
MSG_UNTERMINATED: Final = "A string literal is not terminated."
MSG_BAD_ESCAPE: Final = "A string or character literal contains an invalid escape sequence."
MSG_BAD_CHAR: Final = "A character literal must hold exactly one character."
MSG_STRING_TOO_LONG: Final = f"A string literal is longer than {FUNCTION_MAX_STRING_BYTES} bytes."


def disabled_message(name: str) -> str:
    return f"'{name}' is not permitted in pure functions."


def reserved_message(word: str) -> str:
    """The refusal of a reserved word used as a name; it names the word (a fixed keyword)."""
    return f"`{word}` is a reserved word of the function language; rename the variable."


class Token:
    __slots__ = ("column", "kind", "line", "offset", "value")

    def __init__(self, kind: str, value: Any, offset: int) -> None:
        self.kind = kind
        self.value = value
        self.offset = offset
        self.line = 0
        self.column = 0

    def is_op(self, symbol: str) -> bool:
        return self.kind == OP and self.value == symbol

    def is_kw(self, word: str) -> bool:
        return self.kind == KW and self.value == word

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.value!r}, {self.line}:{self.column})"


class _LexFailure(Exception):
    def __init__(self, message: str, offset: int, resume: int) -> None:
        self.message = message
        self.offset = offset
        self.resume = resume


def _utf8_len(ch: str) -> int:
    code = ord(ch)
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    if code < 0x10000:
        return 3
    return 4


class Lexer:
    """One pass over the source; interpolated strings are tracked with a brace-depth stack."""

    def __init__(self, source: str) -> None:
        self.src = source
        self.n = len(source)
        starts = [0]
        find = source.find
        at = find("\n")
        while at >= 0:
            starts.append(at + 1)
            at = find("\n", at + 1)
        self.line_starts = starts
        self.tokens: list[Token] = []

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    # ---------------------------------------------------------------------------------------

    def tokenize(self) -> list[Token]:
        src = self.src
        n = self.n
        tokens = self.tokens
        i = 0
        depth = 0  # open `{` / `#{` not yet closed
        interp_stack: list[int] = []  # brace depth at which each interpolation returns to text
        pending_interp = False  # the next `{` opens an interpolation

        def emit(kind: str, value: Any, offset: int) -> Token:
            token = Token(kind, value, offset)
            tokens.append(token)
            return token

        def unary_allowed() -> bool:
            if not tokens:
                return True
            last = tokens[-1]
            if last.kind == OP:
                return last.value in _UNARY_AFTER_OPS
            if last.kind == KW:
                return last.value in _UNARY_AFTER_KWS
            return last.kind == ERROR

        while True:
            if i >= n:
                if interp_stack:
                    emit(ERROR, MSG_UNTERMINATED, n)
                emit(EOF, None, n)
                break
            ch = src[i]
            if ch in _WHITESPACE:
                i += 1
                continue
            nxt = src[i + 1] if i + 1 < n else "\0"
            start = i
            try:
                if ch == "/" and nxt == "/":
                    end = src.find("\n", i)
                    i = n if end < 0 else end
                    continue
                if ch == "/" and nxt == "*":
                    i = self._skip_block_comment(i + 2)
                    continue
                if ch in _DIGITS:
                    kind, value, i = self._number(i, False)
                    emit(kind, value, start)
                    continue
                if ch == "-" and nxt in _DIGITS and unary_allowed():
                    kind, value, i = self._number(i + 1, True)
                    emit(kind, value, start)
                    continue
                if ch in _ID_START:
                    j = i + 1
                    while j < n and src[j] in _ID_CONT:
                        j += 1
                    word = src[i:j]
                    i = j
                    self._word(word, start)
                    continue
                if ch == '"':
                    value, i = self._string(i)
                    emit(STR, value, start)
                    continue
                if ch == "'":
                    value, i = self._char(i)
                    emit(CHAR, value, start)
                    continue
                if ch == "`":
                    j = i + 1
                    if j < n and src[j] == "\r":
                        j += 1
                        if j < n and src[j] == "\n":
                            j += 1
                    elif j < n and src[j] == "\n":
                        j += 1
                    text, i, opened = self._backtick(j, start)
                    if opened:
                        emit(INTERP, text, start)
                        pending_interp = True
                    else:
                        emit(STR, text, start)
                    continue
                if ch == "#":
                    j = i + 1
                    while j < n and src[j] == "#":
                        j += 1
                    if j < n and src[j] == '"':
                        value, i = self._raw_string(i, j - i)
                        emit(STR, value, start)
                        continue
                    if nxt == "{":
                        emit(OP, "#{", start)
                        depth += 1
                        i += 2
                        continue
                    raise _LexFailure(MSG_RESERVED_SYMBOL, start, i + 1)
                if ch == "{":
                    emit(OP, "{", start)
                    if pending_interp:
                        interp_stack.append(depth)
                        pending_interp = False
                    depth += 1
                    i += 1
                    continue
                if ch == "}":
                    emit(OP, "}", start)
                    i += 1
                    depth -= 1
                    if interp_stack and interp_stack[-1] == depth:
                        interp_stack.pop()
                        text, i, opened = self._backtick(i, i)
                        if opened:
                            emit(INTERP, text, i)
                            pending_interp = True
                        else:
                            emit(ISTR_END, text, i)
                    continue
                symbol, length = self._symbol(i, ch, nxt)
                emit(OP, symbol, start)
                i += length
            except _LexFailure as failure:
                emit(ERROR, failure.message, failure.offset)
                i = max(failure.resume, start + 1)

        for token in tokens:
            token.line, token.column = self.position(token.offset)
        return tokens

    # ---------------------------------------------------------------------------------------

    def _word(self, word: str, start: int) -> None:
        tokens = self.tokens
        if word == "_":
            tokens.append(Token(OP, "_", start))
        elif word in KEYWORDS:
            tokens.append(Token(KW, word, start))
        elif word in DISABLED:
            tokens.append(Token(ERROR, disabled_message(word), start))
        elif word in KEYWORD_FUNCTIONS:
            tokens.append(Token(KWFN, word, start))
        elif word in RESERVED_WORDS:
            tokens.append(Token(ERROR, reserved_message(word), start))
        elif not _valid_identifier(word):
            tokens.append(Token(ERROR, MSG_MALFORMED_IDENT, start))
        else:
            tokens.append(Token(IDENT, word, start))

    def _skip_block_comment(self, i: int) -> int:
        src = self.src
        n = self.n
        level = 1
        while i < n:
            ch = src[i]
            if ch == "/" and i + 1 < n and src[i + 1] == "*":
                level += 1
                i += 2
            elif ch == "*" and i + 1 < n and src[i + 1] == "/":
                level -= 1
                i += 2
                if level == 0:
                    return i
            else:
                i += 1
        return n  # an unterminated block comment runs to the end of input

    def _number(self, i: int, negated: bool) -> tuple[str, Any, int]:
        src = self.src
        n = self.n
        first = src[i]
        buf = [first]
        i += 1
        radix = 0
        valid = _DIGITS
        while i < n:
            ch = src[i]
            if ch == "_":
                i += 1
                continue
            if ch in valid:
                buf.append(ch)
                i += 1
                continue
            if ch == ".":
                after = src[i + 1] if i + 1 < n else "\0"
                if after in _DIGITS:
                    buf.append(".")
                    i += 1
                    continue
                if after in ("_", "."):
                    break
                if after not in _ALPHA:
                    # `2.` followed by a symbol is the float 2.0
                    buf.append(".0")
                    i += 1
                    continue
                break
            if ch in ("e", "E"):
                after = src[i + 1] if i + 1 < n else "\0"
                if after in _DIGITS:
                    buf.append("e")
                    i += 1
                    continue
                if after in ("+", "-"):
                    buf.append("e")
                    buf.append(after)
                    i += 2
                    continue
                break
            if ch in "xXoObB" and first == "0" and len(buf) <= 1:
                buf.append(ch)
                i += 1
                lower = ch.lower()
                radix = 16 if lower == "x" else 8 if lower == "o" else 2
                valid = _HEX if radix == 16 else _DIGITS
                continue
            break
        text = "".join(buf)
        start = i  # resume point after the literal
        if radix:
            if negated:  # Rhai folds the sign into the text, which no radix parser accepts
                raise _LexFailure(MSG_MALFORMED_NUMBER, i, start)
            try:
                value = int(text[2:], radix)
            except ValueError:
                raise _LexFailure(MSG_MALFORMED_NUMBER, i, start) from None
            if value >= _MAX_U64:
                raise _LexFailure(MSG_MALFORMED_NUMBER, i, start)
            if value > _MAX_I64:
                value -= _MAX_U64
            return INT, value, i
        if negated:
            text = "-" + text
        if "." not in text and "e" not in text:
            try:
                number = int(text)
            except ValueError:
                number = None
            if number is not None and _MIN_I64 <= number <= _MAX_I64:
                return INT, number, i
        try:
            return FLOAT, float(text), i
        except ValueError:
            raise _LexFailure(MSG_MALFORMED_NUMBER, i, start) from None

    def _string(self, i: int) -> tuple[str, int]:
        """A `"…"` literal starting at the quote; returns (value, index after it)."""
        src = self.src
        n = self.n
        quote_offset = i
        quote_column = self.position(i)[1]
        i += 1
        out: list[str] = []
        size = 0
        skip_until = 0  # columns of leading whitespace dropped after a line continuation
        column = quote_column
        escape = False
        while True:
            if size > FUNCTION_MAX_STRING_BYTES:
                raise _LexFailure(MSG_STRING_TOO_LONG, quote_offset, self._line_end(i))
            if i >= n:
                raise _LexFailure(MSG_UNTERMINATED, quote_offset, n)
            ch = src[i]
            i += 1
            column += 1
            if ch == '"' and not escape:
                if i < n and src[i] == '"':
                    i += 1
                    column += 1
                    out.append('"')
                    size += 1
                    skip_until = 0
                    continue
                break
            if ch == "\r" and i < n and src[i] == "\n":
                continue
            if ch == "\\" and not escape:
                escape = True
                continue
            if escape:
                escape = False
                if ch == "\n":
                    column = 0
                    skip_until = quote_column + 1
                    continue
                decoded, i = self._escape(ch, i, '"')
                out.append(decoded)
                size += _utf8_len(decoded)
                skip_until = 0
                continue
            if ch == "\n":
                raise _LexFailure(MSG_UNTERMINATED, quote_offset, i - 1)
            if skip_until and ch in _WHITESPACE and column < skip_until:
                continue
            skip_until = 0
            out.append(ch)
            size += _utf8_len(ch)
        if size > FUNCTION_MAX_STRING_BYTES:
            raise _LexFailure(MSG_STRING_TOO_LONG, quote_offset, i)
        return "".join(out), i

    def _escape(self, ch: str, i: int, quote: str) -> tuple[str, int]:
        src = self.src
        if ch == "\\":
            return "\\", i
        if ch == "t":
            return "\t", i
        if ch == "n":
            return "\n", i
        if ch == "r":
            return "\r", i
        if ch == quote:
            return quote, i
        if ch in ("x", "u", "U"):
            width = 2 if ch == "x" else 4 if ch == "u" else 8
            digits = src[i : i + width]
            if len(digits) != width or any(d not in _HEX for d in digits):
                raise _LexFailure(MSG_BAD_ESCAPE, i, self._line_end(i))
            code = int(digits, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise _LexFailure(MSG_BAD_ESCAPE, i, self._line_end(i))
            return chr(code), i + width
        raise _LexFailure(MSG_BAD_ESCAPE, i - 1, self._line_end(i))

    def _char(self, i: int) -> tuple[str, int]:
        src = self.src
        n = self.n
        start = i
        i += 1
        if i < n and src[i] == "'":
            raise _LexFailure(MSG_BAD_CHAR, start, i + 1)
        out: list[str] = []
        while True:
            if i >= n:
                raise _LexFailure(MSG_UNTERMINATED, start, n)
            ch = src[i]
            i += 1
            if ch == "'":
                if i < n and src[i] == "'":
                    i += 1
                    out.append("'")
                    continue
                break
            if ch == "\r" and i < n and src[i] == "\n":
                continue
            if ch == "\n":
                raise _LexFailure(MSG_UNTERMINATED, start, i - 1)
            if ch == "\\":
                if i >= n:
                    raise _LexFailure(MSG_UNTERMINATED, start, n)
                esc = src[i]
                i += 1
                if esc == "\n":
                    raise _LexFailure(MSG_UNTERMINATED, start, i - 1)
                decoded, i = self._escape(esc, i, "'")
                out.append(decoded)
                continue
            out.append(ch)
        if len(out) != 1:
            raise _LexFailure(MSG_BAD_CHAR, start, i)
        return out[0], i

    def _backtick(self, i: int, start: int) -> tuple[str, int, bool]:
        """Verbatim text up to the closing back-tick or the next `${`.

        Returns (text, index, opened): with `opened` the index points at the `{`.
        """
        src = self.src
        n = self.n
        out: list[str] = []
        size = 0
        while True:
            if size > FUNCTION_MAX_STRING_BYTES:
                raise _LexFailure(MSG_STRING_TOO_LONG, start, n)
            if i >= n:
                raise _LexFailure(MSG_UNTERMINATED, start, n)
            ch = src[i]
            if ch == "`":
                if i + 1 < n and src[i + 1] == "`":
                    out.append("`")
                    size += 1
                    i += 2
                    continue
                return "".join(out), i + 1, False
            if ch == "$" and i + 1 < n and src[i + 1] == "{":
                return "".join(out), i + 1, True
            if ch == "\\" and src.startswith("${", i + 1):
                out.append("${")
                size += 2
                i += 3
                continue
            if ch == "\r" and i + 1 < n and src[i + 1] == "\n":
                i += 1
                continue
            out.append(ch)
            size += _utf8_len(ch)
            i += 1

    def _raw_string(self, i: int, hashes: int) -> tuple[str, int]:
        src = self.src
        body = i + hashes + 1
        closing = '"' + "#" * hashes
        end = src.find(closing, body)
        if end < 0:
            raise _LexFailure(MSG_UNTERMINATED, i, self.n)
        text = src[body:end].replace("\r\n", "\n")
        if len(text.encode("utf-8", "surrogatepass")) > FUNCTION_MAX_STRING_BYTES:
            raise _LexFailure(MSG_STRING_TOO_LONG, i, end + len(closing))
        return text, end + len(closing)

    def _line_end(self, i: int) -> int:
        end = self.src.find("\n", i)
        return self.n if end < 0 else end

    def _symbol(self, i: int, ch: str, nxt: str) -> tuple[str, int]:
        src = self.src
        third = src[i + 2] if i + 2 < self.n else "\0"
        two = ch + nxt
        if two in _RESERVED_PAIRS:
            raise _LexFailure(MSG_RESERVED_SYMBOL, i, i + 2)
        if ch == "(":
            return ("()", 2) if nxt == ")" else ("(", 1)
        if ch == "!":
            if nxt == "i" and third == "n":
                fourth = src[i + 3] if i + 3 < self.n else "\0"
                if fourth not in _ID_CONT:
                    return "!in", 3
            if nxt == "=":
                if third == "=":
                    raise _LexFailure(MSG_RESERVED_SYMBOL, i, i + 3)
                return "!=", 2
            return "!", 1
        if two in _THREE_PREFIX:
            three = two + third
            if three in _RESERVED_TRIPLES:
                raise _LexFailure(MSG_RESERVED_SYMBOL, i, i + 3)
            if three in _TRIPLES:
                return three, 3
        if two in _PAIRS:
            return two, 2
        if ch in _SINGLES:
            return ch, 1
        if ch in _RESERVED_SINGLES:
            raise _LexFailure(MSG_RESERVED_SYMBOL, i, i + 1)
        raise _LexFailure(MSG_UNEXPECTED_CHAR, i, i + 1)


_RESERVED_PAIRS: Final = frozenset(
    ["++", "--", "->", "*)", "<-", "<|", "|>", ":;", ":=", "!.", "(*"]
)
_TRIPLES: Final = frozenset(["**=", "<<=", ">>=", "..="])
_RESERVED_TRIPLES: Final = frozenset(["...", "===", "::<"])
_THREE_PREFIX: Final = frozenset(["**", "<<", ">>", "..", "==", "::"])
_PAIRS: Final = frozenset(
    [
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "**",
        "<<",
        ">>",
        "<=",
        ">=",
        "==",
        "!=",
        "&&",
        "||",
        "&=",
        "|=",
        "^=",
        "..",
        "::",
        "=>",
        "?.",
        "??",
        "?[",
    ]
)
_SINGLES: Final = frozenset("+-*/%=<>|&^;,.:)[]")
_RESERVED_SINGLES: Final = frozenset("?~@$#")


def _valid_identifier(word: str) -> bool:
    """Rhai's rule: a letter must come before any digit (`_1` and `__` are malformed)."""
    for ch in word:
        if ch == "_":
            continue
        return ch in _ALPHA
    return False


def tokenize(source: str) -> list[Token]:
    return Lexer(source).tokenize()
