"""JSON on the wire: strict parsing and RFC 8785 canonical bytes, written independently of core.

The sandbox keeps its own implementation on purpose: it stands in for products that were not
built from the coordinator's code, so a canonicalisation bug in core must not hide in both.
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

__all__ = [
    "JsonParseError",
    "canonical_json",
    "parse_json_strict",
    "sha256_label",
]

_MAX_DEPTH = 256


class JsonParseError(ValueError):
    """The bytes are not one strict JSON value (duplicate names, NaN, bad UTF-8, bad syntax)."""


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise JsonParseError("duplicate member name")
        result[name] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise JsonParseError(f"non-JSON constant {name}")


def parse_json_strict(data: bytes) -> Any:
    """Parse UTF-8 JSON, refusing duplicate member names and NaN/Infinity."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonParseError("body is not UTF-8") from exc
    try:
        return json.loads(
            text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant
        )
    except JsonParseError:
        raise
    except (ValueError, RecursionError) as exc:
        raise JsonParseError("body is not JSON") from exc


def _number_text(value: float) -> str:
    """ECMAScript Number::toString of a finite binary64 value (RFC 8785 §3.2.2.3)."""
    if not math.isfinite(value):
        raise ValueError("NaN and infinities have no JSON form")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    assert isinstance(exponent, int)
    raw = "".join(str(d) for d in digit_tuple)
    n = len(raw) + exponent  # value = 0.<raw> × 10^n
    digits = raw.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
        power = n - 1
        body = f"{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"
    return sign + body


def _write(value: Any, out: list[str], depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError("JSON nesting too deep")
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value) if abs(value) <= 2**53 else _number_text(float(value)))
    elif isinstance(value, float):
        out.append(_number_text(value))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out, depth + 1)
        out.append("]")
    elif isinstance(value, dict):
        names = list(value)
        if not all(isinstance(name, str) for name in names):
            raise ValueError("member names must be strings")
        out.append("{")
        for index, name in enumerate(
            sorted(names, key=lambda n: n.encode("utf-16-be", "surrogatepass"))
        ):
            if index:
                out.append(",")
            out.append(json.dumps(name, ensure_ascii=False))
            out.append(":")
            _write(value[name], out, depth + 1)
        out.append("}")
    else:
        raise ValueError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 (JCS) bytes of a JSON value."""
    out: list[str] = []
    _write(value, out, 0)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("lone surrogates have no canonical form") from exc


def sha256_label(data: bytes) -> str:
    """`sha256:<64 lowercase hex>` of the bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
