"""The dialect's ten format checkers (contract 01 §12 item 7, `jsonschema/dialect.py`) against
`jsonschema`'s FormatChecker for Draft 2020-12 (with `rfc3339-validator`, `fqdn` and
`rfc3986-validator`, the checkers it uses for date-time/time, hostname and uri/uri-reference).

On every generated string the two agree, or they part in one of the documented ways, each
asserted by an example below:

- a trailing newline (date-time, time, hostname, uri-reference): theirs match with `$`, which
  also matches before a final "\\n"; ours match the whole string;
- a leap second (date-time, time): the contract allows seconds `00`–`60`; `rfc3339-validator`
  refuses `60`;
- the year 0000 (date, date-time): RFC 3339 allows it; Python's `date` (and
  `rfc3339-validator`) cannot hold it;
- a trailing dot (hostname): `fqdn` takes an absolute name (`example.com.`); RFC 1123 labels do
  not include the root's empty one;
- non-ASCII (hostname): `fqdn` matches `\\d` and a case-insensitive `[A-Z]` over Unicode, so it
  takes other scripts' digits ("٣") and letters that fold to ASCII (the Kelvin sign); ours are
  the contract's `[A-Za-z0-9-]`;
- email: theirs ask only for an "@"; ours are the contract's dot-atom@hostname, so every address
  we accept they accept;
- uuid: theirs parse with `uuid.UUID` (`int(…, 16)` tolerates blanks and underscores, and only
  the dashes at 8, 13, 18 and 23 are checked); ours are exactly 8-4-4-4-12 hexadecimal digits,
  so every uuid we accept they accept.

ipv4, ipv6, uri and date otherwise agree exactly.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Callable

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_core.jsonschema.dialect import FORMATS, format_matches

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def theirs(name: str, text: str) -> bool:
    return bool(CHECKER.conforms(text, name))


def ours(name: str, text: str) -> bool:
    return format_matches(name, text)


# -- the documented differences, each a predicate on a string the two disagree on ---------------


def trailing_newline(name: str, text: str) -> bool:
    """Theirs accept `text` as they accept it without its final newline; ours refuse it."""
    return (
        text.endswith("\n")
        and theirs(name, text)
        and theirs(name, text[:-1])
        and not ours(name, text)
    )


SECONDS = re.compile(r"(?<=:)60(?=[.Zz+-])")


def leap_second_or_year_zero(name: str, text: str) -> bool:
    """Ours accept second 60 or the year 0000; theirs refuse them but accept the same text with
    second 59 and the year 2000 (a leap year too)."""
    rewritten = SECONDS.sub("59", "2000" + text[4:] if text.startswith("0000") else text, count=1)
    return (
        rewritten != text
        and ours(name, text)
        and not theirs(name, text)
        and theirs(name, rewritten)
    )


def absolute_hostname(name: str, text: str) -> bool:
    """Theirs accept a name ending in the root's dot; ours refuse it and accept it without."""
    return (
        text.endswith(".") and theirs(name, text) and not ours(name, text) and ours(name, text[:-1])
    )


def non_ascii_hostname(name: str, text: str) -> bool:
    """Theirs accept a name with non-ASCII digits or letters that fold to ASCII ones; ours
    refuse every non-ASCII name."""
    return not text.isascii() and theirs(name, text) and not ours(name, text)


def looser_theirs(name: str, text: str) -> bool:
    """Theirs are a superset: they accept what ours refuse, never the other way."""
    return theirs(name, text) and not ours(name, text)


DIFFERENCES: dict[str, tuple[Callable[[str, str], bool], ...]] = {
    "date-time": (trailing_newline, leap_second_or_year_zero),
    "time": (trailing_newline, leap_second_or_year_zero),
    "date": (leap_second_or_year_zero,),
    "hostname": (trailing_newline, absolute_hostname, non_ascii_hostname),
    "uri-reference": (trailing_newline,),
    "email": (looser_theirs,),
    "uuid": (looser_theirs,),
    "ipv4": (),
    "ipv6": (),
    "uri": (),
}

# One example of each documented difference: if a checker changes, the note above must too.
EXAMPLES = [
    ("date-time", "2024-02-29T12:00:00Z\n", trailing_newline),
    ("date-time", "2016-12-31T23:59:60Z", leap_second_or_year_zero),
    ("date-time", "0000-02-29T00:00:00+01:00", leap_second_or_year_zero),
    ("date-time", "0000-02-29T00:00:60+01:00", leap_second_or_year_zero),
    ("time", "12:00:00Z\n", trailing_newline),
    ("time", "23:59:60.5-08:00", leap_second_or_year_zero),
    ("date", "0000-01-01", leap_second_or_year_zero),
    ("hostname", "example.com\n", trailing_newline),
    ("hostname", "example.com.", absolute_hostname),
    ("hostname", "host\u0663.example", non_ascii_hostname),
    ("hostname", "\u212aelvin.example", non_ascii_hostname),
    ("uri-reference", "path/to\n", trailing_newline),
    ("email", '"quoted local"@example.com', looser_theirs),
    ("email", "a@b@c", looser_theirs),
    ("email", "someone@.", looser_theirs),
    ("uuid", " 23e4567-e89b-12d3-a456-426614174000", looser_theirs),
    ("uuid", "123e_567-e89b-12d3-a456-426614174000", looser_theirs),
    ("uuid", "123e4567-e89b-12d3-a456-4266141740-00", looser_theirs),
]


def test_jsonschema_checks_every_format_of_the_dialect() -> None:
    missing = FORMATS - set(CHECKER.checkers)
    assert missing == set(), (
        f"jsonschema has no checker for {sorted(missing)}: install fqdn (hostname) and "
        "rfc3986-validator (uri, uri-reference), as the nox test sessions do"
    )


@pytest.mark.parametrize(("name", "text", "difference"), EXAMPLES)
def test_each_documented_difference_is_real(
    name: str, text: str, difference: Callable[[str, str], bool]
) -> None:
    assert ours(name, text) != theirs(name, text)
    assert difference(name, text)


# -- strategies: the format's own shapes, near misses and arbitrary text -------------------------

DIGIT = "[0-9]"
DATE = rf"{DIGIT}{{4}}-{DIGIT}{{2}}-{DIGIT}{{2}}"
TIME = rf"{DIGIT}{{2}}:{DIGIT}{{2}}:{DIGIT}{{2}}(\.{DIGIT}{{1,4}})?([Zz]|[+-]{DIGIT}{{2}}:{DIGIT}{{2}})"
LABEL = st.text(alphabet="abZ09-", min_size=0, max_size=8) | st.sampled_from(["a" * 63, "b" * 64])
HOSTNAME = st.lists(LABEL, min_size=1, max_size=5).map(".".join) | st.sampled_from(
    [
        ".".join(["a" * 63] * 4),
        ".".join(["a" * 63] * 3 + ["a" * 61]),
        ".".join(["a" * 63] * 4) + "a",
    ]
)
ATOM = st.text(alphabet="aZ0!#$%&'*+/=?^_`{|}~-", min_size=0, max_size=6)
EMAIL_LOCAL = st.lists(ATOM, min_size=1, max_size=3).map(".".join) | st.sampled_from(
    ["a" * 64, "a" * 65]
)
URI_TEXT = st.text(alphabet="aZ09:/?#[]@!$&'()*+,;=%-._~ \\{}\u00e9", max_size=24)
URI_SHAPED = st.builds(
    "{}{}{}{}{}".format,
    st.sampled_from(["", "http:", "a+b.c-d:", "1a:", "urn:"]),
    st.sampled_from(["", "//", "//user:pw@", "//[::1]", "//[v7.x]", "//[fe80::1%25en0]", "//h:80"]),
    st.text(alphabet="ab/%20.:@!", max_size=10),
    st.sampled_from(["", "?", "?q=1&r", "?%zz", "?a/b?c"]),
    st.sampled_from(["", "#", "#f", "#a#b", "#%41"]),
)
NEAR = st.sampled_from(["", "\n", " ", "\u00e9", "\u0663", "x"])

STRATEGIES: dict[str, st.SearchStrategy[str]] = {
    "date": st.from_regex(rf"{DATE}\n?", fullmatch=True)
    | st.text(alphabet="0129-\u0663", max_size=11),
    "time": st.from_regex(rf"{TIME}\n?", fullmatch=True)
    | st.text(alphabet="0269:.Zz+-", max_size=14),
    "date-time": st.from_regex(rf"{DATE}[Tt ]{TIME}\n?", fullmatch=True),
    "email": st.builds("{}@{}{}".format, EMAIL_LOCAL, HOSTNAME, NEAR)
    | st.text(alphabet='ab.@-_!+"( \n\u00e9', max_size=14),
    "hostname": st.builds("{}{}".format, HOSTNAME, NEAR | st.just("."))
    | st.text(alphabet="ab0-._\u00e9\n", max_size=20),
    "ipv4": st.builds(lambda n: str(ipaddress.IPv4Address(n)), st.integers(0, 2**32 - 1))
    | st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,4}){0,4}\n?", fullmatch=True)
    | st.text(alphabet="0123456789. \n\u0663", max_size=16),
    "ipv6": st.builds(
        lambda n, exploded: getattr(
            ipaddress.IPv6Address(n), "exploded" if exploded else "compressed"
        ),
        st.integers(0, 2**128 - 1) | st.integers(0, 2**32 - 1) | st.integers(2**32, 2**48),
        st.booleans(),
    )
    | st.text(alphabet="0123456789abcdefABCDEF:.%\n ", max_size=45),
    "uri": URI_SHAPED | URI_TEXT,
    "uri-reference": URI_SHAPED | URI_TEXT,
    "uuid": st.builds(
        lambda n, upper: str(uuid.UUID(int=n)).upper() if upper else str(uuid.UUID(int=n)),
        st.integers(0, 2**128 - 1),
        st.booleans(),
    )
    | st.from_regex(
        r"[0-9a-fA-FgG_x+ -]{8}-[0-9a-f-]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f_-]{12,13}\n?",
        fullmatch=True,
    )
    | st.text(alphabet="0123456789abcdef-{}", min_size=35, max_size=38),
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_agrees_with_jsonschema_but_where_documented(name: str) -> None:
    differences = DIFFERENCES[name]

    @settings(suppress_health_check=[HealthCheck.too_slow])
    @given(STRATEGIES[name] | st.text(max_size=40))
    def agree(text: str) -> None:
        if ours(name, text) != theirs(name, text):
            assert any(difference(name, text) for difference in differences), (
                f"{name}: ours {ours(name, text)}, jsonschema {theirs(name, text)} on {text!r}"
            )

    agree()
