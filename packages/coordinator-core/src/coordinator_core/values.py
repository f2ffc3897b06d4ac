"""JSON values: strict parsing, the bounds of contract 03 §4 and RFC 8785 canonical bytes (02 §7)."""

# RFC 8785 is implemented here rather than taken from PyPI `rfc8785` (trailofbits, 0.1.4):
# that library refuses every integer outside ±(2**53 − 1) (`IntegerDomainError`), while this
# contract accepts any integer exactly representable as binary64 (10**20, 2**60, −2**63) and
# prints it as ECMAScript prints that double. It also recurses without bound, serialises tuples,
# and lets a lone surrogate in a member name escape as a bare UnicodeEncodeError
# (tests/unit/test_values_rfc8785.py compares the two).
# (`canonicaljson` on PyPI implements Matrix's canonical JSON, not RFC 8785.) The number
# layout below follows ECMA-262 Number::toString over the shortest round-trip digits of
# `repr(float)`, which is the same digit choice (shortest, then nearest) ECMAScript requires.

from __future__ import annotations

import hashlib  # lazy: keeps `import coordinator_core.values` cheap for the check command
import json
import math
import re
from collections.abc import Iterator
from itertools import chain, repeat
from json.encoder import encode_basestring
from typing import Final, Literal

from coordinator_core.limits import (
    JSON_MAX_CANONICAL_BYTES,
    JSON_MAX_DEPTH,
    JSON_MAX_MEMBERS,
    JSON_MAX_NODES,
    JSON_MAX_STRING_BYTES,
)

__all__ = [
    "CanonicalJsonError",
    "JsonBoundsError",
    "JsonBoundsKind",
    "StrictJsonError",
    "canonical_json",
    "check_json_value",
    "is_binary64_integer",
    "parse_canonical_json",
    "parse_strict_json",
    "pointer_token",
    "sha256_label",
]

JsonBoundsKind = Literal[
    "depth", "nodes", "members", "string", "canonical-size", "integer", "not-json"
]

_BOUNDS_MESSAGES: Final[dict[str, str]] = {
    "depth": f"The JSON value is nested deeper than {JSON_MAX_DEPTH} levels.",
    "nodes": f"The JSON value has more than {JSON_MAX_NODES} nodes.",
    "members": f"A JSON array or object has more than {JSON_MAX_MEMBERS} members.",
    "string": f"A JSON string or member name is longer than {JSON_MAX_STRING_BYTES} bytes of UTF-8.",
    "canonical-size": f"The canonical JSON form is larger than {JSON_MAX_CANONICAL_BYTES} bytes.",
    "integer": "A JSON integer is not exactly representable as a binary64 number.",
    "not-json": "The value is not a JSON value.",
}

# Integers in this closed range are always exact in binary64 (53-bit significand).
_SAFE_INT: Final = 2**53


class JsonBoundsError(ValueError):
    """A value breaks one of the JSON value bounds (contract 03 §4), or is not JSON at all.

    `kind` names the bound; `pointer` is the JSON pointer of the offending node where one is
    meaningful, "" otherwise. The message is a fixed sentence and never quotes the value.
    """

    kind: JsonBoundsKind
    pointer: str

    def __init__(self, kind: JsonBoundsKind, pointer: str = "") -> None:
        super().__init__(_BOUNDS_MESSAGES[kind])
        self.kind = kind
        self.pointer = pointer


class CanonicalJsonError(ValueError):
    """A value has no RFC 8785 form: NaN/infinity, an inexact integer, a lone surrogate, a
    non-string member name, a cycle or a non-JSON type."""


class StrictJsonError(ValueError):
    """Text is not strict JSON: invalid syntax or encoding, duplicate member names,
    NaN/Infinity tokens, numbers outside binary64 range, or lone surrogates."""


def is_binary64_integer(n: int) -> bool:
    """True iff the integer `n` equals some binary64 value exactly (so 2**53 + 1 does not)."""
    if -_SAFE_INT <= n <= _SAFE_INT:
        return True
    try:
        return int(float(n)) == n
    except OverflowError:
        return False


def sha256_label(data: bytes) -> str:
    """The `sha256:` label of `data`: the prefix followed by 64 lowercase hex digits."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def pointer_token(token: str | int) -> str:
    """One RFC 6901 reference token ("~" → "~0", "/" → "~1"), without the leading "/"."""
    if isinstance(token, int):
        return str(token)
    return token.replace("~", "~0").replace("/", "~1")


# --------------------------------------------------------------------------------------------
# Canonical JSON
# --------------------------------------------------------------------------------------------

# The C encoder escapes exactly what RFC 8785 §3.2.2.2 escapes: `"`, `\`, and U+0000–U+001F
# (with the short forms \b \t \n \f \r and lowercase \u00xx otherwise); nothing else.
_encode_string: Final = encode_basestring


def _format_float(f: float) -> str:
    """ECMAScript Number::toString of a finite binary64 value (RFC 8785 §3.2.2.3)."""
    if f == 0.0:
        return "0"  # covers -0.0 too
    sign = "-" if f < 0 else ""
    text = repr(abs(f))
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    # value = 0.<digits> × 10^point before normalisation
    point = len(whole) + exponent
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    n = point
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        body = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e >= 0 else "e-")
        body += str(abs(e))
    return sign + body


def _format_int(n: int) -> str:
    if -_SAFE_INT <= n <= _SAFE_INT:
        return str(n)
    if not is_binary64_integer(n):
        raise CanonicalJsonError("An integer is not exactly representable as binary64.")
    # The integer is the double it equals; print that double as ECMAScript does.
    return _format_float(float(n))


def _scalar_text(item: object) -> str | None:
    """The canonical text of a JSON scalar; None for an array or object; raises otherwise."""
    if isinstance(item, str):
        return _encode_string(item)
    if item is None:
        return "null"
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return _format_int(item)
    if isinstance(item, float):
        if not math.isfinite(item):
            raise CanonicalJsonError("NaN and infinities have no JSON form.")
        return _format_float(item)
    if isinstance(item, dict | list):
        return None
    raise CanonicalJsonError("The value is not a JSON value.")


def _utf16_key(name: str) -> bytes:
    return name.encode("utf-16-be")


# One open container: its closing bracket, its id (cycle detection) and an iterator of
# (text to emit before the child, child).
_Frame = tuple[str, int, Iterator[tuple[str, object]]]


def _open(container: object, out: list[str], active: set[int]) -> _Frame:
    ident = id(container)
    if ident in active:
        raise CanonicalJsonError("The value contains a cycle.")
    active.add(ident)
    if isinstance(container, list):
        out.append("[")
        return ("]", ident, zip(chain(("",), repeat(",")), container, strict=False))
    assert isinstance(container, dict)
    for name in container:
        if not isinstance(name, str):
            raise CanonicalJsonError("Object member names must be strings.")
    try:
        names: list[str] = sorted(container, key=_utf16_key)
    except UnicodeEncodeError as exc:
        raise CanonicalJsonError("A member name contains a lone surrogate.") from exc
    out.append("{")
    members = [
        (("," if index else "") + _encode_string(name) + ":", container[name])
        for index, name in enumerate(names)
    ]
    return ("}", ident, iter(members))


def canonical_json(value: object) -> bytes:
    """The RFC 8785 bytes of `value` under contract 02 §7.

    Members sort by UTF-16 code units; numbers print as ECMAScript prints their binary64
    value (`2.0` and `2` → `2`, `1e21` → `1e+21`, `-0.0` → `0`); integers must be exact in
    binary64 (10**20 prints `100000000000000000000`); bool is never a number. NaN, infinity,
    lone surrogates, non-string member names, cycles and non-JSON types raise
    CanonicalJsonError. Iterative: nesting depth is not limited by the Python stack.
    """
    out: list[str] = []
    text = _scalar_text(value)
    if text is not None:
        out.append(text)
    else:
        active: set[int] = set()
        frames: list[_Frame] = [_open(value, out, active)]
        while frames:
            close, ident, children = frames[-1]
            for prefix, child in children:
                out.append(prefix)
                text = _scalar_text(child)
                if text is None:
                    frames.append(_open(child, out, active))
                    break
                out.append(text)
            else:
                out.append(close)
                active.discard(ident)
                frames.pop()
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJsonError("A string contains a lone surrogate.") from exc


# --------------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------------

# A path is a linked list (parent, token) so pointers are only built when a bound breaks.
_Path = tuple["_Path", str | int] | None


def _pointer_of(path: _Path) -> str:
    tokens: list[str] = []
    while path is not None:
        parent, token = path
        tokens.append(pointer_token(token))
        path = parent
    return "".join("/" + token for token in reversed(tokens))


def _utf8_length(text: str) -> int:
    """UTF-8 byte length; -1 when the string holds a lone surrogate (not JSON)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return -1


# Characters RFC 8785 escapes; a string without them serialises to its UTF-8 bytes plus quotes.
_NEEDS_ESCAPE: Final = re.compile(r'["\\\x00-\x1f]')
# The longest canonical number text: "-1.7976931348623157e+308" and "-9223372036854775808" fit.
_MAX_NUMBER_TEXT: Final = 24


def check_json_value(value: object) -> None:
    """Raise JsonBoundsError unless `value` is JSON within every bound of contract 03 §4.

    JSON is None, bool, int, finite float, str (no lone surrogates), list and dict with str
    names. Bounds: depth ≤ 32 (root 0), nodes ≤ 4096 (every value one, names none), members
    per array/object ≤ 256, strings and names ≤ 16,384 UTF-8 bytes, integers exact in
    binary64, canonical size ≤ 131,072 bytes. Nodes are visited in document order and the
    first break found is reported. Iterative, and it stops at the first break, so hostile input
    costs at most 4097 visits; the canonical form is only built when cheap lower and upper
    bounds on its size straddle the limit.
    """
    nodes = 0
    # Bounds on the canonical size, kept as the walk goes so the serialiser rarely runs.
    floor = 0
    ceiling = 0
    stack: list[tuple[object, int, _Path]] = [(value, 0, None)]
    while stack:
        item, depth, path = stack.pop()
        nodes += 1
        if nodes > JSON_MAX_NODES:
            raise JsonBoundsError("nodes", "")
        if depth > JSON_MAX_DEPTH:
            raise JsonBoundsError("depth", _pointer_of(path))
        if isinstance(item, str):
            length = _utf8_length(item)
            if length < 0:
                raise JsonBoundsError("not-json", _pointer_of(path))
            if length > JSON_MAX_STRING_BYTES:
                raise JsonBoundsError("string", _pointer_of(path))
            floor += length + 2
            ceiling += length + 2 + (5 * length if _NEEDS_ESCAPE.search(item) else 0)
        elif item is None or isinstance(item, bool):
            floor += 4
            ceiling += 5
        elif isinstance(item, int):
            if not is_binary64_integer(item):
                raise JsonBoundsError("integer", _pointer_of(path))
            floor += 1
            ceiling += _MAX_NUMBER_TEXT
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise JsonBoundsError("not-json", _pointer_of(path))
            floor += 1
            ceiling += _MAX_NUMBER_TEXT
        elif isinstance(item, dict):
            if len(item) > JSON_MAX_MEMBERS:
                raise JsonBoundsError("members", _pointer_of(path))
            floor += 1 + max(len(item), 1)
            ceiling += 1 + max(len(item), 1)
            children: list[tuple[object, int, _Path]] = []
            for name, member in item.items():
                if not isinstance(name, str):
                    raise JsonBoundsError("not-json", _pointer_of(path))
                name_length = _utf8_length(name)
                member_path: _Path = (path, name)
                if name_length < 0:
                    raise JsonBoundsError("not-json", _pointer_of(member_path))
                if name_length > JSON_MAX_STRING_BYTES:
                    raise JsonBoundsError("string", _pointer_of(member_path))
                floor += name_length + 3
                ceiling += name_length + 3 + (5 * name_length if _NEEDS_ESCAPE.search(name) else 0)
                children.append((member, depth + 1, member_path))
            children.reverse()
            stack.extend(children)
        elif isinstance(item, list):
            if len(item) > JSON_MAX_MEMBERS:
                raise JsonBoundsError("members", _pointer_of(path))
            floor += 1 + max(len(item), 1)
            ceiling += 1 + max(len(item), 1)
            stack.extend(
                (item[index], depth + 1, (path, index)) for index in range(len(item) - 1, -1, -1)
            )
        else:
            raise JsonBoundsError("not-json", _pointer_of(path))
        if floor > JSON_MAX_CANONICAL_BYTES:
            raise JsonBoundsError("canonical-size", "")
    if ceiling <= JSON_MAX_CANONICAL_BYTES:
        return
    try:
        size = len(canonical_json(value))
    except CanonicalJsonError as exc:  # the walk refused every such value already
        raise JsonBoundsError("not-json", "") from exc
    if size > JSON_MAX_CANONICAL_BYTES:
        raise JsonBoundsError("canonical-size", "")


# --------------------------------------------------------------------------------------------
# Strict parsing
# --------------------------------------------------------------------------------------------

# Any escape that can decode to a surrogate, or a raw surrogate in str input. A hit only means
# "walk the result and look": `\\ud800` (an escaped backslash) also matches and walks for nothing.
_MAYBE_SURROGATE: Final = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")


def _refuse_constant(token: str) -> object:
    raise StrictJsonError("NaN and Infinity are not JSON.")


def _parse_float(token: str) -> float:
    number = float(token)
    if not math.isfinite(number):
        raise StrictJsonError("A number is outside the binary64 range.")
    return number


def _parse_int(token: str) -> int:
    """An integer token; one that is the ECMAScript rendering of a double (how RFC 8785 prints
    integers of 2**53 and beyond, e.g. 2**62 as 4611686018427388000) denotes that double's
    exact integer, so canonical bytes read back to the value they were made from. Any other
    inexact token stays as written, for check_json_value to refuse."""
    number = int(token)
    if -_SAFE_INT <= number <= _SAFE_INT or is_binary64_integer(number):
        return number
    try:
        nearest = float(number)
    except OverflowError:
        return number
    if _format_float(nearest) == token.lstrip("+"):
        return int(nearest)
    return number


def _unique_members(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise StrictJsonError("An object has duplicate member names.")
    return result


def _has_surrogate(value: object) -> bool:
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            for name, member in item.items():
                if _SURROGATE.search(name):
                    return True
                stack.append(member)
        elif isinstance(item, list):
            stack.extend(item)
    return False


# One decoder each, built once: `json.loads` with any of these arguments builds a new one per
# call. A decoder keeps no state between calls but its key cache, which it clears after each.
_STRICT_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_unique_members,
    parse_constant=_refuse_constant,
    parse_float=_parse_float,
    parse_int=_parse_int,
)
_CANONICAL_DECODER: Final = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_float=_parse_float, parse_int=_parse_int
)


def parse_strict_json(data: bytes | str) -> object:
    """Parse one JSON text strictly (RFC 8259 + I-JSON refusals) into plain Python values.

    Bytes must be UTF-8 (no BOM). Refused with StrictJsonError: invalid syntax, duplicate
    member names, NaN/Infinity tokens, numbers that overflow binary64, lone surrogates (raw or
    escaped). Integer tokens stay int (even beyond binary64: bounds are check_json_value's
    job), except that the canonical rendering of a large double reads back as that double's
    integer; tokens with a fraction or exponent become float.
    """
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJsonError("The JSON text is not valid UTF-8.") from exc
    else:
        text = data
    try:
        value: object = _STRICT_DECODER.decode(text)
    except StrictJsonError:
        raise
    except RecursionError as exc:
        raise StrictJsonError("The JSON text is nested too deeply to parse.") from exc
    except ValueError as exc:  # JSONDecodeError, and int() refusing over-long digit strings
        raise StrictJsonError("The text is not valid JSON.") from exc
    if _MAYBE_SURROGATE.search(text) and _has_surrogate(value):
        raise StrictJsonError("A JSON string contains a lone surrogate.")
    return value


def parse_canonical_json(data: bytes) -> object:
    """Parse bytes that `canonical_json` made and that came back unaltered (a sealed value's
    authenticated plaintext) to the value `parse_strict_json` reads from them.

    Numbers read as `parse_strict_json` reads them. Its checks for what canonical bytes cannot
    hold (duplicate member names, lone surrogates) are left out; anything else that is not
    UTF-8 JSON is refused with StrictJsonError all the same."""
    try:
        value: object = _CANONICAL_DECODER.decode(data.decode("utf-8"))
    except StrictJsonError:
        raise
    except (RecursionError, ValueError) as exc:  # UnicodeDecodeError, JSONDecodeError, int()
        raise StrictJsonError("The text is not canonical JSON.") from exc
    return value
