"""Interpreter values: char/range/iterator types, type names, display, equality, data sizes.

Representation: `()` is None, bool, int (kept within i64), float, str, Char, list (array),
dict (map, enumerated in sorted key order), Range, StepIter, CharsIter. Lists and dicts are
never mutated once a script can reach them: every change builds a new container, which is
what gives Rhai's value semantics without copying on assignment.
"""

from __future__ import annotations

import math
from typing import Any, Final

from coordinator_core.functions.errors import LimitError, ScriptError
from coordinator_core.limits import (
    FUNCTION_MAX_ARRAY_ITEMS,
    FUNCTION_MAX_MAP_ENTRIES,
    FUNCTION_MAX_OPERATIONS,
    FUNCTION_MAX_STRING_BYTES,
)

MAX_OPS: Final = FUNCTION_MAX_OPERATIONS
MAX_I64: Final = 2**63 - 1
MIN_I64: Final = -(2**63)
EPSILON: Final = 2.220446049250313e-16  # f64::EPSILON

# Built-in work (comparisons, formatting, size scans) costs one operation per this many
# elements visited, so that no single operation can hide unbounded Python work.
WORK_PER_OPERATION: Final = 8

MSG_NOT_FOUND: Final = "Function not found for the given argument types."
MSG_TYPE: Final = "A value has the wrong type for this operation."
MSG_OVERFLOW: Final = "Arithmetic overflow."
MSG_DIV_ZERO: Final = "Division by zero."
MSG_INDEX: Final = "Index out of bounds."
MSG_PROPERTY: Final = "Property not found."
MSG_NOT_ORDERED: Final = "These values cannot be ordered."


class Ctx:
    """Per-call state: the operation count and the script call depth."""

    __slots__ = ("depth", "fn_names", "ops", "work")

    def __init__(self, fn_names: frozenset[str] = frozenset()) -> None:
        self.ops = 0
        self.work = 0  # elements visited by built-ins, not yet charged as operations
        self.depth = -1  # the entry call runs at level 0
        self.fn_names = fn_names


def too_many_operations() -> LimitError:
    return LimitError("operations")


def charge_work(c: Ctx, units: int) -> None:
    work = c.work + units
    if work >= WORK_PER_OPERATION:
        c.ops += work // WORK_PER_OPERATION
        work %= WORK_PER_OPERATION
        if c.ops > MAX_OPS:
            raise too_many_operations()
    c.work = work


class _Unbound:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNBOUND"


UNBOUND: Final = _Unbound()


class Char:
    """A Rhai `char`: one Unicode scalar, distinct from a one-character string."""

    __slots__ = ("c",)

    def __init__(self, c: str) -> None:
        self.c = c

    def __eq__(self, other: object) -> bool:
        return type(other) is Char and other.c == self.c

    def __hash__(self) -> int:
        return hash(("char", self.c))

    def __repr__(self) -> str:
        return f"Char({self.c!r})"


class Range:
    __slots__ = ("end", "inclusive", "start")

    def __init__(self, start: int, end: int, inclusive: bool) -> None:
        self.start = start
        self.end = end
        self.inclusive = inclusive

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Range
            and other.start == self.start
            and other.end == self.end
            and other.inclusive == self.inclusive
        )

    def __hash__(self) -> int:
        return hash((self.start, self.end, self.inclusive))

    def contains(self, n: int) -> bool:
        if self.inclusive:
            return self.start <= n <= self.end
        return self.start <= n < self.end

    def is_empty(self) -> bool:
        return self.start > self.end if self.inclusive else self.start >= self.end

    def values(self) -> range:
        return range(self.start, self.end + 1 if self.inclusive else self.end)


class StepIter:
    """`range(from, to, step)`: a description; each `for` starts a fresh iteration."""

    __slots__ = ("end", "start", "step")

    def __init__(self, start: Any, end: Any, step: Any) -> None:
        self.start = start
        self.end = end
        self.step = step

    def values(self) -> Any:
        x, end, step = self.start, self.end, self.step
        if type(x) is int:
            if step > 0:
                return range(x, max(x, end), step)
            return range(x, min(x, end), step)
        return _float_steps(x, end, step)


def _float_steps(x: float, end: float, step: float) -> Any:
    while (step > 0 and x < end) or (step < 0 and x > end):
        yield x
        x += step


class CharsIter:
    __slots__ = ("chars",)

    def __init__(self, chars: str) -> None:
        self.chars = chars

    def values(self) -> Any:
        return map(Char, self.chars)


def type_name(v: Any) -> str:
    t = type(v)
    name = _TYPE_NAMES.get(t)
    if name is not None:
        return name
    if t is Range:
        return "range=" if v.inclusive else "range"
    if t is StepIter:
        inner = "i64" if type(v.start) is int else "f64"
        return f"rhai::packages::iter_basic::StepRange<{inner}>"
    if t is CharsIter:
        return "rhai::packages::iter_basic::CharsStream"
    return "unknown"


_TYPE_NAMES: Final[dict[type, str]] = {
    type(None): "()",
    bool: "bool",
    int: "i64",
    float: "f64",
    str: "string",
    Char: "char",
    list: "array",
    dict: "map",
}

# ------------------------------------------------------------------------------ formatting


def _digits_and_point(x: float) -> tuple[str, int]:
    """Shortest round-trip digits of |x| and the decimal point: |x| = 0.DIGITS × 10^point."""
    text = repr(abs(x))
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + exponent
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    return digits, point


def _positional(digits: str, point: int) -> str:
    if point <= 0:
        return "0." + "0" * (-point) + digits
    if point >= len(digits):
        return digits + "0" * (point - len(digits)) + ".0"
    return digits[:point] + "." + digits[point:]


def _exponential(digits: str, point: int) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e{point - 1}"


def _special(x: float) -> str | None:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return None


def format_float(x: float) -> str:
    """Rhai's float Display (rhai-subset §5.4)."""
    special = _special(x)
    if special is not None:
        return special
    if x == 0.0:
        return "0.0"
    sign = "-" if x < 0 else ""
    ax = abs(x)
    digits, point = _digits_and_point(x)
    if ax > 9999999827968.0 or ax < 9.9999998245167e-14:
        return sign + _exponential(digits, point)
    return sign + _positional(digits, point)


def format_float_debug(x: float) -> str:
    """Rust's `{:?}` for f64: positional in [1e-4, 1e16), exponential outside."""
    special = _special(x)
    if special is not None:
        return special
    if x == 0.0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    sign = "-" if x < 0 else ""
    ax = abs(x)
    digits, point = _digits_and_point(x)
    if ax < 1e-4 or ax >= 1e16:
        return sign + _exponential(digits, point)
    return sign + _positional(digits, point)


_STR_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}
_CHAR_ESCAPES: Final = {
    "\\": "\\\\",
    "'": "\\'",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\0": "\\0",
}


def _escape(text: str, table: dict[str, str]) -> str:
    out = []
    for ch in text:
        mapped = table.get(ch)
        if mapped is not None:
            out.append(mapped)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{{{ord(ch):x}}}")
    return "".join(out)


def debug_string(s: str) -> str:
    if s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    return '"' + _escape(s, _STR_ESCAPES) + '"'


def debug_char(ch: str) -> str:
    return "'" + _escape(ch, _CHAR_ESCAPES) + "'"


def to_display(v: Any, c: Ctx) -> str:
    """`to_string` semantics: strings as-is, `()` empty, containers in debug form."""
    t = type(v)
    if t is str:
        return v  # type: ignore[no-any-return]
    if t is int:
        return str(v)
    if v is None:
        return ""
    if t is bool:
        return "true" if v else "false"
    if t is float:
        return format_float(v)
    if t is Char:
        return v.c  # type: ignore[no-any-return]
    return to_debug(v, c)


def to_debug(v: Any, c: Ctx, top: bool = True) -> str:
    t = type(v)
    if t is str:
        return debug_string(v)
    if t is int:
        return str(v)
    if v is None:
        return "()"
    if t is bool:
        return "true" if v else "false"
    if t is float:
        return format_float_debug(v)
    if t is Char:
        return v.c if top else debug_char(v.c)
    if t is list:
        charge_work(c, len(v))
        return "[" + ", ".join([to_debug(x, c, False) for x in v]) + "]"
    if t is dict:
        charge_work(c, len(v))
        items = [debug_string(k) + ": " + to_debug(v[k], c, False) for k in sorted(v)]
        return "#{" + ", ".join(items) + "}"
    if t is Range:
        return f"{v.start}..={v.end}" if v.inclusive else f"{v.start}..{v.end}"
    return type_name(v)


def to_json_text(v: Any, c: Ctx) -> str:
    """Rhai's `to_json` of a map: nested maps/arrays as JSON, other values in debug form."""
    t = type(v)
    if v is None:
        return "null"
    if t is dict:
        charge_work(c, len(v))
        return (
            "{" + ",".join([debug_string(k) + ":" + to_json_text(v[k], c) for k in sorted(v)]) + "}"
        )
    if t is list:
        charge_work(c, len(v))
        return "[" + ",".join([to_json_text(x, c) for x in v]) + "]"
    return to_debug(v, c, False)


# -------------------------------------------------------------------------------- equality


def float_eq(x: float, y: float) -> bool:
    """Rhai's tolerant float equality: scaled difference within f64::EPSILON."""
    m = 1.0 if x * y == 0 else max(abs(x), abs(y))
    return abs(x - y) / m <= EPSILON


def _float_scaled(x: float, y: float) -> float:
    m = 1.0 if x * y == 0 else max(abs(x), abs(y))
    return (x - y) / m


def rhai_eq(a: Any, b: Any, c: Ctx) -> bool:
    ta = type(a)
    tb = type(b)
    if ta is tb:
        if ta is int or ta is str or ta is bool:
            return a == b  # type: ignore[no-any-return]
        if a is None:
            return True
        if ta is float:
            return float_eq(a, b)
        if ta is Char:
            return a.c == b.c  # type: ignore[no-any-return]
        if ta is list:
            if len(a) != len(b):
                return False
            charge_work(c, len(a))
            # Plain loops (not all()) keep deep comparisons in Python frames only.
            for x, y in zip(a, b, strict=True):  # noqa: SIM110
                if not rhai_eq(x, y, c):
                    return False
            return True
        if ta is dict:
            if len(a) != len(b):
                return False
            charge_work(c, len(a))
            for k, x in a.items():  # noqa: SIM110
                if k not in b or not rhai_eq(x, b[k], c):
                    return False
            return True
        if ta is Range:
            return a == b  # type: ignore[no-any-return]
        raise ScriptError(MSG_NOT_FOUND)
    if (ta is int or ta is float) and (tb is int or tb is float):
        return float_eq(float(a), float(b))
    if (ta is str or ta is Char) and (tb is str or tb is Char):
        return (a if ta is str else a.c) == (b if tb is str else b.c)  # type: ignore[no-any-return]
    return False


def compare(op: str, a: Any, b: Any) -> bool:
    """`<`, `<=`, `>`, `>=`; different non-numeric types are simply false."""
    ta = type(a)
    tb = type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):
        if ta is int and tb is int:
            x, y = a, b
        else:
            d = _float_scaled(float(a), float(b))
            if op == "<":
                return d < -EPSILON
            if op == "<=":
                return d <= EPSILON
            if op == ">":
                return d > EPSILON
            return d >= -EPSILON
    elif (ta is str or ta is Char) and (tb is str or tb is Char):
        x = a if ta is str else a.c
        y = b if tb is str else b.c
    elif ta is bool and tb is bool:
        x, y = a, b
    elif ta is tb:
        if a is None:
            return False
        raise ScriptError(MSG_NOT_ORDERED)
    else:
        return False
    if op == "<":
        return x < y  # type: ignore[no-any-return]
    if op == "<=":
        return x <= y  # type: ignore[no-any-return]
    if op == ">":
        return x > y  # type: ignore[no-any-return]
    return x >= y  # type: ignore[no-any-return]


def strict_key(v: Any, c: Ctx | None = None) -> Any:
    """A hashable key under which values match only if equal with identical types
    (switch-case matching hashes the value, so `1` never matches `1.0`)."""
    t = type(v)
    if t is int or t is str:
        return (t, v)
    if t is float:
        return (float, v.hex())
    if t is bool or v is None or t is Char or t is Range:
        return (t, v)
    if t is list:
        if c is not None:
            charge_work(c, len(v))
        return (list, tuple([strict_key(x, c) for x in v]))
    if t is dict:
        if c is not None:
            charge_work(c, len(v))
        return (dict, tuple(sorted((k, strict_key(x, c)) for k, x in v.items())))
    return (t, id(v))


# ------------------------------------------------------------------------------ data sizes


def utf8_length(s: str) -> int:
    if s.isascii():
        return len(s)
    return len(s.encode("utf-8", "surrogatepass"))


def check_string_size(s: str) -> None:
    if len(s) > FUNCTION_MAX_STRING_BYTES // 4 and utf8_length(s) > FUNCTION_MAX_STRING_BYTES:
        raise LimitError("string")


def check_size(v: Any, c: Ctx) -> None:
    """Rhai's `calc_data_sizes` against the limits: counts aggregate over the whole value
    (array elements and map entries at every level; string bytes, map keys excluded)."""
    t = type(v)
    if t is str:
        check_string_size(v)
        return
    if t is not list and t is not dict:
        return
    arrays = 0
    maps = 0
    strings = 0
    visited = 0
    stack = [v]
    while stack:
        x = stack.pop()
        if type(x) is list:
            arrays += len(x)
            if arrays > FUNCTION_MAX_ARRAY_ITEMS:
                raise LimitError("array")
            members = x
        else:
            maps += len(x)
            if maps > FUNCTION_MAX_MAP_ENTRIES:
                raise LimitError("map")
            members = x.values()
        visited += len(x)
        for y in members:
            ty = type(y)
            if ty is list or ty is dict:
                stack.append(y)
            elif ty is str:
                strings += utf8_length(y)
                if strings > FUNCTION_MAX_STRING_BYTES:
                    raise LimitError("string")
    charge_work(c, visited)
