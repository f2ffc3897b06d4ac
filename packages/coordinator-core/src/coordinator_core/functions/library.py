"""Built-in operators and exactly the functions of the six packages of the profile.

Arithmetic, logic, basic string, basic array, basic map and basic iterator (rhai-subset §6,
§9). Every function takes (ctx, args) and dispatches on argument types; an unsupported type
combination is "function not found", as in Rhai. Functions in MUTATING change `args[0]` by
replacing it with a new value, which the caller writes back to the receiver.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from coordinator_core.functions.errors import LimitError, ScriptError
from coordinator_core.functions.rvalues import (
    MAX_I64,
    MIN_I64,
    MSG_DIV_ZERO,
    MSG_INDEX,
    MSG_NOT_FOUND,
    MSG_OVERFLOW,
    MSG_PROPERTY,
    MSG_TYPE,
    Char,
    CharsIter,
    Ctx,
    Range,
    StepIter,
    charge_work,
    check_size,
    check_string_size,
    compare,
    format_float,
    rhai_eq,
    to_debug,
    to_display,
    to_json_text,
    type_name,
)
from coordinator_core.limits import FUNCTION_MAX_ARRAY_ITEMS

LibFn = Callable[[Ctx, list[Any]], Any]
OpFn = Callable[[Ctx, Any, Any], Any]

_U64: Final = 2**64
SIZED: Final = frozenset((str, list, dict))


def not_found() -> ScriptError:
    return ScriptError(MSG_NOT_FOUND)


def overflow() -> ScriptError:
    return ScriptError(MSG_OVERFLOW)


def _wrap_i64(v: int) -> int:
    v %= _U64
    return v - _U64 if v > MAX_I64 else v


# ---------------------------------------------------------------------------- float helpers


def fdiv(x: float, y: float) -> float:
    if y == 0.0:
        if math.isnan(x) or x == 0.0:
            return math.nan
        negative = (x < 0) != (math.copysign(1.0, y) < 0)
        return -math.inf if negative else math.inf
    return x / y


def fmod(x: float, y: float) -> float:
    if y == 0.0 or math.isinf(x) or math.isnan(x) or math.isnan(y):
        return math.nan
    if math.isinf(y):
        return x
    return math.fmod(x, y)


def _odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0.0


def fpow(x: float, y: float) -> float:
    """Rust's powf (IEEE pow): infinities instead of Python's OverflowError/ValueError."""
    try:
        return math.pow(x, y)
    except OverflowError:
        negative = x < 0 and _odd_integer(y)
        return -math.inf if negative else math.inf
    except ValueError:
        if x == 0.0 and y < 0:
            negative = math.copysign(1.0, x) < 0 and _odd_integer(y)
            return -math.inf if negative else math.inf
        return math.nan


# -------------------------------------------------------------------------------- operators


def op_add(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        r = a + b
        if MIN_I64 <= r <= MAX_I64:
            return r
        raise overflow()
    if ta is float:
        if tb is float:
            return a + b
        if tb is int:
            return a + float(b)
    elif ta is int:
        if tb is float:
            return float(a) + b
    elif ta is str:
        if tb is str:
            r = a + b
            check_string_size(r)
            return r
        if tb is Char:
            r = a + b.c
            check_string_size(r)
            return r
        if b is None:
            return a
    elif ta is Char:
        if tb is str:
            r = a.c + b
            check_string_size(r)
            return r
        if tb is Char:
            return a.c + b.c
    elif a is None:
        if tb is str:
            return b
    elif ta is list:
        if tb is list:
            r = a + b
            check_size(r, c)
            return r
    elif ta is dict and tb is dict:
        r = {**a, **b}
        check_size(r, c)
        return r
    raise not_found()


def op_sub(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        r = a - b
        if MIN_I64 <= r <= MAX_I64:
            return r
        raise overflow()
    if ta is float:
        if tb is float:
            return a - b
        if tb is int:
            return a - float(b)
    elif ta is int:
        if tb is float:
            return float(a) - b
    elif ta is str:
        if tb is str:
            return a.replace(b, "")
        if tb is Char:
            return a.replace(b.c, "")
    raise not_found()


def op_mul(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        r = a * b
        if MIN_I64 <= r <= MAX_I64:
            return r
        raise overflow()
    if ta is float:
        if tb is float:
            return a * b
        if tb is int:
            return a * float(b)
    elif ta is int and tb is float:
        return float(a) * b
    raise not_found()


def op_div(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        if b == 0:
            raise ScriptError(MSG_DIV_ZERO)
        q = abs(a) // abs(b)
        if (a < 0) != (b < 0):
            q = -q
        if q > MAX_I64:
            raise overflow()
        return q
    if ta is float:
        if tb is float:
            return fdiv(a, b)
        if tb is int:
            return fdiv(a, float(b))
    elif ta is int and tb is float:
        return fdiv(float(a), b)
    raise not_found()


def op_mod(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        if b == 0:
            raise ScriptError(MSG_DIV_ZERO)
        if a == MIN_I64 and b == -1:
            raise overflow()
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    if ta is float:
        if tb is float:
            return fmod(a, b)
        if tb is int:
            return fmod(a, float(b))
    elif ta is int and tb is float:
        return fmod(float(a), b)
    raise not_found()


def op_pow(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        if b < 0:
            raise ScriptError("An integer cannot be raised to a negative power.")
        if b > 0xFFFFFFFF:
            raise overflow()
        if a in (0, 1):
            return a if b else 1
        if a == -1:
            return -1 if b & 1 else 1
        if b >= 64:  # |a| >= 2, so the result cannot fit; never compute it
            raise overflow()
        r = a**b
        if MIN_I64 <= r <= MAX_I64:
            return r
        raise overflow()
    if (ta is int or ta is float) and (tb is int or tb is float):
        return fpow(float(a), float(b))
    raise not_found()


def _shift_left(a: int, b: int) -> int:
    if b < 0:
        return _shift_right(a, -b)
    if b >= 64:
        return 0
    return _wrap_i64(a << b)


def _shift_right(a: int, b: int) -> int:
    if b < 0:
        return _shift_left(a, -b)
    if b >= 64:
        return -1 if a < 0 else 0
    return a >> b


def op_shl(c: Ctx, a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return _shift_left(a, b)
    raise not_found()


def op_shr(c: Ctx, a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return _shift_right(a, b)
    raise not_found()


def op_band(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b) and (ta is int or ta is bool):
        return a & b
    raise not_found()


def op_bor(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b) and (ta is int or ta is bool):
        return a | b
    raise not_found()


def op_bxor(c: Ctx, a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b) and (ta is int or ta is bool):
        return a ^ b
    raise not_found()


def op_eq(c: Ctx, a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a == b
    return rhai_eq(a, b, c)


def op_ne(c: Ctx, a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a != b
    return not rhai_eq(a, b, c)


def op_lt(c: Ctx, a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a < b
    return compare("<", a, b)


def op_le(c: Ctx, a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a <= b
    return compare("<=", a, b)


def op_gt(c: Ctx, a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a > b
    return compare(">", a, b)


def op_ge(c: Ctx, a: Any, b: Any) -> bool:
    if type(a) is int and type(b) is int:
        return a >= b
    return compare(">=", a, b)


def op_range(c: Ctx, a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return Range(a, b, False)
    raise not_found()


def op_range_incl(c: Ctx, a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return Range(a, b, True)
    raise not_found()


BINARY: Final[dict[str, OpFn]] = {
    "+": op_add,
    "-": op_sub,
    "*": op_mul,
    "/": op_div,
    "%": op_mod,
    "**": op_pow,
    "<<": op_shl,
    ">>": op_shr,
    "&": op_band,
    "|": op_bor,
    "^": op_bxor,
    "==": op_eq,
    "!=": op_ne,
    "<": op_lt,
    "<=": op_le,
    ">": op_gt,
    ">=": op_ge,
    "..": op_range,
    "..=": op_range_incl,
}


def assign_op(op: str) -> OpFn:
    """The compound assignment `x op= y`: a built-in op-assign where Rhai has one
    (array += value pushes), else `x = x op y`; the new value is size-checked."""
    binary = BINARY[op]
    if op == "+":

        def add_assign(c: Ctx, a: Any, b: Any) -> Any:
            ta = type(a)
            if ta is int and type(b) is int:
                r = a + b
                if MIN_I64 <= r <= MAX_I64:
                    return r
                raise overflow()
            if ta is list:
                r = a + b if type(b) is list else [*a, b]
                check_size(r, c)
                return r
            r = op_add(c, a, b)
            if type(r) in SIZED:
                check_size(r, c)
            return r

        return add_assign

    def other_assign(c: Ctx, a: Any, b: Any) -> Any:
        r = binary(c, a, b)
        if type(r) in SIZED:
            check_size(r, c)
        return r

    return other_assign


def op_neg(c: Ctx, a: Any) -> Any:
    t = type(a)
    if t is int:
        if a == MIN_I64:
            raise overflow()
        return -a
    if t is float:
        return -a
    raise not_found()


def op_plus(c: Ctx, a: Any) -> Any:
    if type(a) is int or type(a) is float:
        return a
    raise not_found()


def op_not(c: Ctx, a: Any) -> Any:
    if a is True:
        return False
    if a is False:
        return True
    raise ScriptError(MSG_TYPE, cause="non-boolean-condition")


# -------------------------------------------------------------------- index / property get


def _array_index(length: int, i: int) -> int:
    if i < 0:
        i += length
        if i < 0:
            raise ScriptError(MSG_INDEX)
    elif i >= length:
        raise ScriptError(MSG_INDEX)
    return i


def get_index(c: Ctx, v: Any, k: Any) -> Any:
    t = type(v)
    if t is list:
        if type(k) is not int:
            raise ScriptError(MSG_TYPE)
        return v[_array_index(len(v), k)]
    if t is dict:
        if type(k) is not str:
            raise ScriptError(MSG_TYPE)
        return v.get(k)
    if t is str:
        tk = type(k)
        if tk is int:
            if k >= 0:
                if k < len(v):
                    return Char(v[k])
            elif -k <= len(v):
                return Char(v[k])
            raise ScriptError(MSG_INDEX)
        if tk is Range:
            return _string_slice(v, k)
        raise ScriptError(MSG_TYPE)
    if v is None:
        raise ScriptError("This value cannot be indexed.", cause="property-of-unit")
    raise ScriptError("This value cannot be indexed.")


def _string_slice(s: str, r: Range) -> str:
    count = len(s)
    if not s:
        return ""

    def resolve(i: int) -> int:
        if i >= 0:
            return i
        if -i > count:
            raise ScriptError(MSG_INDEX)
        return count + i

    start = resolve(r.start)
    try:
        end = resolve(r.end)
    except ScriptError:
        end = 0
    if r.inclusive:
        take = end - start + 1 if end > start else 0
        if start == 0 and end >= count - 1:
            return s
    else:
        take = max(end - start, 0)
        if start == 0 and end >= count:
            return s
    return s[start : start + take]


def _prop_len(v: Any) -> Any:
    return len(v) if type(v) is list else _NO_PROP


def _prop_is_empty(v: Any) -> Any:
    if type(v) is list:
        return not v
    if type(v) is Range:
        return v.is_empty()
    return _NO_PROP


def _prop_is_zero(v: Any) -> Any:
    t = type(v)
    return v == 0 if t is int or t is float else _NO_PROP


def _prop_is_odd(v: Any) -> Any:
    return (v & 1) == 1 if type(v) is int else _NO_PROP


def _prop_is_even(v: Any) -> Any:
    return (v & 1) == 0 if type(v) is int else _NO_PROP


def _range_prop(field: str) -> Callable[[Any], Any]:
    def getter(v: Any) -> Any:
        if type(v) is not Range:
            return _NO_PROP
        if field == "start":
            return v.start
        if field == "end":
            return v.end
        if field == "is_inclusive":
            return v.inclusive
        return not v.inclusive

    return getter


def _prop_chars(v: Any) -> Any:
    return CharsIter(v) if type(v) is str else _NO_PROP


_NO_PROP: Final = object()
PROPERTIES: Final[dict[str, Callable[[Any], Any]]] = {
    "len": _prop_len,
    "is_empty": _prop_is_empty,
    "is_zero": _prop_is_zero,
    "is_odd": _prop_is_odd,
    "is_even": _prop_is_even,
    "start": _range_prop("start"),
    "end": _range_prop("end"),
    "is_inclusive": _range_prop("is_inclusive"),
    "is_exclusive": _range_prop("is_exclusive"),
    "chars": _prop_chars,
}


def get_prop(v: Any, name: str) -> Any:
    if type(v) is dict:
        return v.get(name)
    getter = PROPERTIES.get(name)
    if getter is not None:
        r = getter(v)
        if r is not _NO_PROP:
            return r
    raise ScriptError(MSG_PROPERTY, cause="property-of-unit" if v is None else None)


def set_child(c: Ctx, container: Any, is_prop: bool, key: Any, value: Any) -> Any:
    """A copy of `container` with `key` set to `value` (never mutates the original)."""
    t = type(container)
    if t is dict:
        if not is_prop and type(key) is not str:
            raise ScriptError(MSG_TYPE)
        new = dict(container)
        new[key] = value
        return new
    if is_prop:
        raise ScriptError(MSG_PROPERTY)
    if t is list:
        if type(key) is not int:
            raise ScriptError(MSG_TYPE)
        i = _array_index(len(container), key)
        new_list = list(container)
        new_list[i] = value
        return new_list
    if t is str:
        if type(key) is not int:
            raise ScriptError(MSG_TYPE)
        if type(value) is not Char:
            raise ScriptError(MSG_TYPE)
        i = _array_index(len(container), key)
        return container[:i] + value.c + container[i + 1 :]
    raise ScriptError("This value cannot be indexed.")


# ---------------------------------------------------------------------- package functions


def _offset_len(length: int, start: int, count: int) -> tuple[int, int]:
    """Rhai's calc_offset_len: negative start counts from the end (clamped to 0)."""
    if start < 0:
        start = length - min(-start, length)
    elif start >= length:
        return length, 0
    if count <= 0:
        count = 0
    elif count > length - start:
        count = length - start
    return start, count


def _int(v: Any) -> int:
    if type(v) is not int:
        raise not_found()
    return v


def _list(v: Any) -> list[Any]:
    if type(v) is not list:
        raise not_found()
    return v


def _map(v: Any) -> dict[str, Any]:
    if type(v) is not dict:
        raise not_found()
    return v


def _str_key(v: Any) -> str:
    if type(v) is not str:
        raise not_found()
    return v


# ArithmeticPackage ---------------------------------------------------------------------


def f_abs(c: Ctx, a: list[Any]) -> Any:
    x = a[0]
    if type(x) is int:
        if x == MIN_I64:
            raise overflow()
        return abs(x)
    if type(x) is float:
        return math.fabs(x)
    raise not_found()


def f_sign(c: Ctx, a: list[Any]) -> Any:
    x = a[0]
    t = type(x)
    if t is int or t is float:
        if t is float and math.isnan(x):
            raise ScriptError("The sign of NaN is undefined.")
        return 0 if x == 0 else (1 if x > 0 else -1)
    raise not_found()


def f_is_zero(c: Ctx, a: list[Any]) -> Any:
    r = _prop_is_zero(a[0])
    if r is _NO_PROP:
        raise not_found()
    return r


def f_is_odd(c: Ctx, a: list[Any]) -> Any:
    return (_int(a[0]) & 1) == 1


def f_is_even(c: Ctx, a: list[Any]) -> Any:
    return (_int(a[0]) & 1) == 0


# LogicPackage --------------------------------------------------------------------------


def _min_max(a: list[Any], want_max: bool) -> Any:
    x, y = a
    tx, ty = type(x), type(y)
    if tx is int and ty is int:
        if want_max:
            return x if x >= y else y
        return x if x <= y else y
    if (tx is int or tx is float) and (ty is int or ty is float):
        fx, fy = float(x), float(y)
        if want_max:
            return fx if fx >= fy else fy
        return fx if fx <= fy else fy
    raise not_found()


def f_min(c: Ctx, a: list[Any]) -> Any:
    return _min_max(a, False)


def f_max(c: Ctx, a: list[Any]) -> Any:
    return _min_max(a, True)


# BasicStringPackage --------------------------------------------------------------------


def f_to_string(c: Ctx, a: list[Any]) -> Any:
    return to_display(a[0], c)


def f_to_debug(c: Ctx, a: list[Any]) -> Any:
    return to_debug(a[0], c)


def f_to_hex(c: Ctx, a: list[Any]) -> Any:
    return format(_int(a[0]) % _U64, "x")


def f_to_octal(c: Ctx, a: list[Any]) -> Any:
    return format(_int(a[0]) % _U64, "o")


def f_to_binary(c: Ctx, a: list[Any]) -> Any:
    return format(_int(a[0]) % _U64, "b")


def f_to_int(c: Ctx, a: list[Any]) -> Any:
    x = a[0]
    if type(x) is Char:
        return ord(x.c)
    raise not_found()


# BasicArrayPackage / BasicMapPackage ---------------------------------------------------


def f_len(c: Ctx, a: list[Any]) -> Any:
    x = a[0]
    t = type(x)
    if t is list or t is dict:
        return len(x)
    raise not_found()


def f_is_empty(c: Ctx, a: list[Any]) -> Any:
    x = a[0]
    t = type(x)
    if t is list or t is dict:
        return not x
    if t is Range:
        return x.is_empty()
    raise not_found()


def f_get(c: Ctx, a: list[Any]) -> Any:
    x, k = a
    if type(x) is list:
        i, _ = _offset_len(len(x), _int(k), 0)
        return x[i] if i < len(x) else None
    return _map(x).get(_str_key(k))


def f_set(c: Ctx, a: list[Any]) -> Any:
    x, k, v = a
    if type(x) is list:
        i, _ = _offset_len(len(x), _int(k), 0)
        if i < len(x):
            new = list(x)
            new[i] = v
            a[0] = new
        return None
    key = _str_key(k)
    new_map = dict(_map(x))
    new_map[key] = v
    a[0] = new_map
    return None


def f_push(c: Ctx, a: list[Any]) -> Any:
    a[0] = [*_list(a[0]), a[1]]
    return None


def f_append(c: Ctx, a: list[Any]) -> Any:
    a[0] = _list(a[0]) + _list(a[1])
    return None


def f_insert(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    index = _int(a[1])
    if not x:
        a[0] = [a[2]]
        return None
    i, _ = _offset_len(len(x), index, 0)
    new = list(x)
    new.insert(i, a[2])
    a[0] = new
    return None


def f_pop(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    if not x:
        return None
    a[0] = x[:-1]
    return x[-1]


def f_shift(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    if not x:
        return None
    a[0] = x[1:]
    return x[0]


def f_remove(c: Ctx, a: list[Any]) -> Any:
    x, k = a
    if type(x) is list:
        index = _int(k)
        length = len(x)
        if index < 0:
            if -index > length:
                return None
            index += length
        elif index >= length:
            return None
        a[0] = x[:index] + x[index + 1 :]
        return x[index]
    key = _str_key(k)
    m = _map(x)
    if key not in m:
        return None
    new = dict(m)
    value = new.pop(key)
    a[0] = new
    return value


def f_clear(c: Ctx, a: list[Any]) -> Any:
    t = type(a[0])
    if t is list:
        a[0] = []
    elif t is dict:
        a[0] = {}
    else:
        raise not_found()
    return None


def f_reverse(c: Ctx, a: list[Any]) -> Any:
    a[0] = _list(a[0])[::-1]
    return None


def f_truncate(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    n = _int(a[1])
    if x:
        a[0] = x[:n] if n > 0 else []
    return None


def f_chop(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    n = _int(a[1])
    if x:
        if n <= 0:
            a[0] = []
        elif n < len(x):
            a[0] = x[len(x) - n :]
    return None


def f_pad(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    n = _int(a[1])
    if n > FUNCTION_MAX_ARRAY_ITEMS:
        raise LimitError("array")
    if n > len(x):
        a[0] = x + [a[2]] * (n - len(x))
    return None


def _extract(x: list[Any], start: int, count: int) -> list[Any]:
    if not x or count <= 0:
        return []
    start, count = _offset_len(len(x), start, count)
    return x[start : start + count]


def _range_bounds(r: Range) -> tuple[int, int]:
    start = max(r.start, 0)
    end = max(r.end, start)
    return start, end - start + (1 if r.inclusive else 0)


def f_extract2(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    if type(a[1]) is Range:
        return _extract(x, *_range_bounds(a[1]))
    return _extract(x, _int(a[1]), MAX_I64)


def f_extract3(c: Ctx, a: list[Any]) -> Any:
    return _extract(_list(a[0]), _int(a[1]), _int(a[2]))


def f_split(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    index = _int(a[1])
    if not x:
        return []
    start, _ = _offset_len(len(x), index, MAX_I64)
    a[0] = x[:start]
    return x[start:]


def _splice(a: list[Any], start: int, count: int, replace: Any) -> None:
    x = _list(a[0])
    new = _list(replace)
    if not x:
        a[0] = list(new)
        return
    start, count = _offset_len(len(x), start, count)
    if start >= len(x):
        a[0] = x + new
    else:
        a[0] = x[:start] + new + x[start + count :]


def f_splice3(c: Ctx, a: list[Any]) -> Any:
    if type(a[1]) is not Range:
        raise not_found()
    start, count = _range_bounds(a[1])
    _splice(a, start, count, a[2])
    return None


def f_splice4(c: Ctx, a: list[Any]) -> Any:
    _splice(a, _int(a[1]), _int(a[2]), a[3])
    return None


def _drain(a: list[Any], start: int, count: int) -> list[Any]:
    x = _list(a[0])
    if not x or count <= 0:
        return []
    start, count = _offset_len(len(x), start, count)
    if count == 0:
        return []
    a[0] = x[:start] + x[start + count :]
    return x[start : start + count]


def _retain(a: list[Any], start: int, count: int) -> list[Any]:
    x = _list(a[0])
    if not x or count <= 0:
        return []
    start, count = _offset_len(len(x), start, count)
    if count == 0:
        return []
    a[0] = x[start : start + count]
    return x[:start] + x[start + count :]


def f_drain2(c: Ctx, a: list[Any]) -> Any:
    if type(a[1]) is not Range:
        raise not_found()
    return _drain(a, *_range_bounds(a[1]))


def f_drain3(c: Ctx, a: list[Any]) -> Any:
    return _drain(a, _int(a[1]), _int(a[2]))


def f_retain2(c: Ctx, a: list[Any]) -> Any:
    if type(a[1]) is not Range:
        raise not_found()
    return _retain(a, *_range_bounds(a[1]))


def f_retain3(c: Ctx, a: list[Any]) -> Any:
    return _retain(a, _int(a[1]), _int(a[2]))


def f_contains(c: Ctx, a: list[Any]) -> Any:
    x, v = a
    t = type(x)
    if t is list:
        charge_work(c, len(x))
        # A plain loop (not any()) keeps deep comparisons in Python frames only.
        for item in x:  # noqa: SIM110
            if rhai_eq(item, v, c):
                return True
        return False
    if t is dict:
        return _str_key(v) in x
    if t is Range:
        return x.contains(_int(v))
    raise not_found()


def _index_of(c: Ctx, x: list[Any], v: Any, start: int) -> int:
    if type(v) is str and v in c.fn_names:
        raise ScriptError("Function pointers are not permitted.")
    if not x:
        return -1
    start, _ = _offset_len(len(x), start, 0)
    charge_work(c, len(x) - start)
    for i in range(start, len(x)):
        if rhai_eq(x[i], v, c):
            return i
    return -1


def f_index_of2(c: Ctx, a: list[Any]) -> Any:
    return _index_of(c, _list(a[0]), a[1], 0)


def f_index_of3(c: Ctx, a: list[Any]) -> Any:
    return _index_of(c, _list(a[0]), a[1], _int(a[2]))


def f_dedup(c: Ctx, a: list[Any]) -> Any:
    x = _list(a[0])
    charge_work(c, len(x))
    out: list[Any] = []
    for item in x:
        if not out or not rhai_eq(out[-1], item, c):
            out.append(item)
    a[0] = out
    return None


def _sorted(c: Ctx, x: list[Any], reverse: bool) -> list[Any]:
    if len(x) <= 1:
        return list(x)
    t = type(x[0])
    for item in x:
        if type(item) is not t:
            raise ScriptError("An array of mixed types cannot be sorted.")
    charge_work(c, len(x) * max(1, len(x).bit_length()))
    if t is int or t is float or t is str or t is bool:
        return sorted(x, reverse=reverse)
    if t is Char:
        return sorted(x, key=lambda ch: ch.c, reverse=reverse)
    if x[0] is None:
        return list(x)
    raise ScriptError("An array of these values cannot be sorted.")


def f_sort(c: Ctx, a: list[Any]) -> Any:
    a[0] = _sorted(c, _list(a[0]), False)
    return None


def f_sort_desc(c: Ctx, a: list[Any]) -> Any:
    a[0] = _sorted(c, _list(a[0]), True)
    return None


def f_order(c: Ctx, a: list[Any]) -> Any:
    return _sorted(c, _list(a[0]), False)


def f_order_desc(c: Ctx, a: list[Any]) -> Any:
    return _sorted(c, _list(a[0]), True)


def f_keys(c: Ctx, a: list[Any]) -> Any:
    return sorted(_map(a[0]))


def f_values(c: Ctx, a: list[Any]) -> Any:
    m = _map(a[0])
    return [m[k] for k in sorted(m)]


def f_mixin(c: Ctx, a: list[Any]) -> Any:
    a[0] = {**_map(a[0]), **_map(a[1])}
    return None


def f_fill_with(c: Ctx, a: list[Any]) -> Any:
    a[0] = {**_map(a[1]), **_map(a[0])}
    return None


def f_to_json(c: Ctx, a: list[Any]) -> Any:
    return to_json_text(_map(a[0]), c)


# BasicIteratorPackage ------------------------------------------------------------------


def f_range2(c: Ctx, a: list[Any]) -> Any:
    x, y = a
    if type(x) is Range and type(y) is int and not x.inclusive:
        if y == 0:
            raise ScriptError("The step of a range cannot be zero.")
        return StepIter(x.start, x.end, y)
    return Range(_int(x), _int(y), False)


def f_range3(c: Ctx, a: list[Any]) -> Any:
    x, y, step = a
    if type(x) is int and type(y) is int and type(step) is int:
        pass
    elif type(x) is float and type(y) is float and type(step) is float:
        if math.isnan(step) or step == 0.0:
            raise ScriptError("The step of a range cannot be zero.")
        return StepIter(x, y, step)
    else:
        raise not_found()
    if step == 0:
        raise ScriptError("The step of a range cannot be zero.")
    return StepIter(x, y, step)


def _chars(s: str, start: int, count: int) -> CharsIter:
    length = len(s)
    if start < 0:
        start = max(length + start, 0)
    if count <= 0 or start >= length:
        return CharsIter("")
    return CharsIter(s[start : start + count])


def f_chars1(c: Ctx, a: list[Any]) -> Any:
    x = a[0]
    if type(x) is not str:
        raise not_found()
    return CharsIter(x)


def f_chars2(c: Ctx, a: list[Any]) -> Any:
    x, start = a
    if type(x) is not str:
        raise not_found()
    if type(start) is Range:
        begin, count = _range_bounds(start)
        return _chars(x, begin, count)
    return _chars(x, _int(start), MAX_I64)


def f_chars3(c: Ctx, a: list[Any]) -> Any:
    x = a[0]
    if type(x) is not str:
        raise not_found()
    return _chars(x, _int(a[1]), _int(a[2]))


def _range_field(field: str) -> LibFn:
    getter = _range_prop(field)

    def f(c: Ctx, a: list[Any]) -> Any:
        r = getter(a[0])
        if r is _NO_PROP:
            raise not_found()
        return r

    return f


LIBRARY: Final[dict[tuple[str, int], LibFn]] = {
    ("abs", 1): f_abs,
    ("sign", 1): f_sign,
    ("is_zero", 1): f_is_zero,
    ("is_odd", 1): f_is_odd,
    ("is_even", 1): f_is_even,
    ("min", 2): f_min,
    ("max", 2): f_max,
    ("to_string", 1): f_to_string,
    ("to_debug", 1): f_to_debug,
    ("to_hex", 1): f_to_hex,
    ("to_octal", 1): f_to_octal,
    ("to_binary", 1): f_to_binary,
    ("to_int", 1): f_to_int,
    ("len", 1): f_len,
    ("is_empty", 1): f_is_empty,
    ("get", 2): f_get,
    ("set", 3): f_set,
    ("push", 2): f_push,
    ("append", 2): f_append,
    ("insert", 3): f_insert,
    ("pop", 1): f_pop,
    ("shift", 1): f_shift,
    ("remove", 2): f_remove,
    ("clear", 1): f_clear,
    ("reverse", 1): f_reverse,
    ("truncate", 2): f_truncate,
    ("chop", 2): f_chop,
    ("pad", 3): f_pad,
    ("extract", 2): f_extract2,
    ("extract", 3): f_extract3,
    ("split", 2): f_split,
    ("splice", 3): f_splice3,
    ("splice", 4): f_splice4,
    ("drain", 2): f_drain2,
    ("drain", 3): f_drain3,
    ("retain", 2): f_retain2,
    ("retain", 3): f_retain3,
    ("contains", 2): f_contains,
    ("index_of", 2): f_index_of2,
    ("index_of", 3): f_index_of3,
    ("dedup", 1): f_dedup,
    ("sort", 1): f_sort,
    ("sort_desc", 1): f_sort_desc,
    ("order", 1): f_order,
    ("order_desc", 1): f_order_desc,
    ("keys", 1): f_keys,
    ("values", 1): f_values,
    ("mixin", 2): f_mixin,
    ("fill_with", 2): f_fill_with,
    ("to_json", 1): f_to_json,
    ("range", 2): f_range2,
    ("range", 3): f_range3,
    ("chars", 1): f_chars1,
    ("chars", 2): f_chars2,
    ("chars", 3): f_chars3,
    ("start", 1): _range_field("start"),
    ("end", 1): _range_field("end"),
    ("is_inclusive", 1): _range_field("is_inclusive"),
    ("is_exclusive", 1): _range_field("is_exclusive"),
}

# Functions that change their first argument (Rhai's non-pure functions).
MUTATING: Final = frozenset(
    {
        ("set", 3),
        ("push", 2),
        ("append", 2),
        ("insert", 3),
        ("pop", 1),
        ("shift", 1),
        ("remove", 2),
        ("clear", 1),
        ("reverse", 1),
        ("truncate", 2),
        ("chop", 2),
        ("pad", 3),
        ("split", 2),
        ("splice", 3),
        ("splice", 4),
        ("drain", 2),
        ("drain", 3),
        ("retain", 2),
        ("retain", 3),
        ("dedup", 1),
        ("sort", 1),
        ("sort_desc", 1),
        ("mixin", 2),
        ("fill_with", 2),
    }
)


def iterate(v: Any) -> Any:
    """The Python iterable behind `for x in v`."""
    t = type(v)
    if t is list:
        return v
    if t is str:
        return map(Char, v)
    if t is Range or t is StepIter or t is CharsIter:
        return v.values()
    raise ScriptError("This value cannot be iterated by 'for'.")


__all__ = [
    "BINARY",
    "LIBRARY",
    "MUTATING",
    "PROPERTIES",
    "SIZED",
    "assign_op",
    "format_float",
    "get_index",
    "get_prop",
    "iterate",
    "op_neg",
    "op_not",
    "op_plus",
    "set_child",
    "type_name",
]
