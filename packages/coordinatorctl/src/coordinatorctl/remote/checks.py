"""The local inputs of the remote commands (09 §4), read and checked before anything is sent:
`--url` (09 §1), the token file, `--run`, `--reason`, free-text flags, `--input`, `--key-file` and
`--before`; and the diagnostic of a value its request's model (remote/models.py) refuses.

Files are read bounded and never block on a FIFO or a device; no diagnostic quotes a file's
content or a submitted value.
"""

from __future__ import annotations

import os
import re
import stat
from datetime import datetime
from typing import Final, Literal

from coordinator_core.errors import Diagnostic

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_KEY_BYTES",
    "MAX_REASON_BYTES",
    "MAX_TEXT_ARGUMENT_BYTES",
    "MAX_TOKEN_BYTES",
    "check_date_time",
    "check_reason",
    "check_text_argument",
    "generated_key",
    "parse_origin",
    "parse_run_id",
    "read_input",
    "read_key",
    "read_token",
    "refused_member",
    "start_input",
    "start_key",
]

MAX_TOKEN_BYTES: Final = 16_384
MAX_INPUT_BYTES: Final = 65_536
MAX_KEY_BYTES: Final = 256
MAX_REASON_BYTES: Final = 256
MAX_TEXT_ARGUMENT_BYTES: Final = 1_024


def _is_loopback_host(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback and not (
        isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None
    )


_HOST_NAME: Final = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?"
)
_ORIGIN: Final = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\[\]/:?#@]+)"
    r"(?::(?P<port>[0-9]{1,5}))?"
    r"/?"
)


def parse_origin(text: str) -> str | None:
    """The normalised origin of `--url` (09 §1), or None when it is not an acceptable origin.

    `https://host[:port]`, or `http://` only with a loopback host (127.0.0.0/8, [::1] or
    `localhost`); no user info, no path other than `/`, no query and no fragment.
    """
    import ipaddress

    match = _ORIGIN.fullmatch(text)
    if match is None:
        return None
    scheme = match["scheme"].lower()
    if scheme not in ("http", "https"):
        return None
    host = match["host"]
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
        bare = host[1:-1]
    else:
        if _HOST_NAME.fullmatch(host) is None:
            return None
        bare = host
    port = match["port"]
    if port is not None and not 1 <= int(port) <= 65_535:
        return None
    if scheme == "http" and not _is_loopback_host(bare):
        return None
    origin = f"{scheme}://{host.lower()}"
    if port is not None:
        origin += f":{int(port)}"
    return origin


class _FileProblem(Exception):
    """Reading a local input file failed: `unreadable` or `too-large`."""

    def __init__(self, kind: Literal["unreadable", "too-large"]) -> None:
        super().__init__(kind)
        self.kind = kind


def _read_bounded(path: str, limit: int) -> bytes:
    """At most `limit` bytes of a regular file; never blocks on a FIFO or a device."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL in the path
        raise _FileProblem("unreadable") from exc
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _FileProblem("unreadable")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(descriptor, 65_536)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise _FileProblem("too-large")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _FileProblem("unreadable") from exc
    finally:
        os.close(descriptor)


def _strip_one_line_feed(data: bytes) -> bytes:
    return data[:-1] if data.endswith(b"\n") else data


_COMPACT_JWS: Final = re.compile(rb"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def _token_diagnostic(message: str, path: str) -> Diagnostic:
    return Diagnostic("coordinator.command.token-invalid", path="", file=path, message=message)


def read_token(path: str) -> str | Diagnostic:
    """The compact access token of the token file, or its `token-invalid` diagnostic.

    At most 16,384 bytes of token, optionally followed by exactly one line feed; the token is
    one compact JWS (three base64url segments). No diagnostic ever quotes the content.
    """
    try:
        data = _strip_one_line_feed(_read_bounded(path, MAX_TOKEN_BYTES + 1))
    except _FileProblem as problem:
        if problem.kind == "too-large":
            return _token_diagnostic("The token file holds more than 16,384 bytes.", path)
        return _token_diagnostic("The token file cannot be read as a regular file.", path)
    if len(data) > MAX_TOKEN_BYTES:
        return _token_diagnostic("The token file holds more than 16,384 bytes.", path)
    if _COMPACT_JWS.fullmatch(data) is None:
        return _token_diagnostic("The token file does not hold exactly one compact token.", path)
    return data.decode("ascii")


def _input_invalid(message: str, file: str | None = None) -> Diagnostic:
    return Diagnostic("coordinator.command.input-invalid", path="", file=file, message=message)


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F


_REASON_MESSAGE: Final = "--reason must be 1–256 bytes without control characters."


def check_reason(reason: str) -> Diagnostic | None:
    """09 §4: 1–256 bytes of UTF-8 without control characters."""
    try:
        size = len(reason.encode("utf-8"))
    except UnicodeEncodeError:
        return _input_invalid("--reason is not valid UTF-8.")
    if not 1 <= size <= MAX_REASON_BYTES or any(_is_control(ch) for ch in reason):
        return _input_invalid(_REASON_MESSAGE)
    return None


def check_text_argument(flag: str, value: str | None) -> Diagnostic | None:
    """A free-text flag sent as-is (workflow, revision, cursor): UTF-8, no control characters."""
    if value is None:
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return _input_invalid(f"{flag} is not valid UTF-8.")
    if not 1 <= size <= MAX_TEXT_ARGUMENT_BYTES or any(_is_control(ch) for ch in value):
        return _input_invalid(f"{flag} must be 1–1,024 bytes without control characters.")
    return None


_STEP_ID: Final = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def check_step_id(text: str) -> Diagnostic | None:
    """A step id (01 §3), checked before it becomes a segment of the request's path."""
    if _STEP_ID.fullmatch(text):
        return None
    return _input_invalid(
        "--step is not a step id: a lowercase letter, then up to 63 lowercase letters,"
        " digits, `-` or `_`."
    )


def parse_run_id(text: str) -> str | Diagnostic:
    """A run id in any textual UUID form, sent lowercase and hyphenated (06 §1 item 5)."""
    import uuid

    try:
        return str(uuid.UUID(text))
    except (ValueError, TypeError):
        return _input_invalid("--run is not a UUID.")


_RFC3339: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)


_BEFORE_MESSAGE: Final = (
    "--before is not an RFC 3339 date-time with an offset, e.g. 2025-01-31T00:00:00Z."
)


def check_date_time(text: str) -> Diagnostic | None:
    """`--before`: an RFC 3339 date-time with an offset (the service checks "not in future")."""
    message = _BEFORE_MESSAGE
    if _RFC3339.fullmatch(text) is None:
        return _input_invalid(message)
    normalised = text.upper().replace("Z", "+00:00")
    head, _, rest = normalised.partition(".")
    if rest:  # fromisoformat takes at most 6 fraction digits
        digits = re.match(r"[0-9]+", rest)
        assert digits is not None
        normalised = f"{head}.{digits.group()[:6].ljust(6, '0')}{rest[digits.end() :]}"
    try:
        datetime.fromisoformat(normalised)
    except ValueError:
        return _input_invalid(message)
    return None


# What a request member must be, by its wire name, when its model refuses it. `reason` and
# `before` have their local checks, which the models' constraints do not go beyond: their
# refusal is the local check's diagnostic. The ids of `start` are held to their form only by
# the model (spec/schemas/api.schema.json).
_REFUSED_MEMBERS: Final = {
    "workflow": (
        "--workflow is not a workflow id: a lowercase letter, then up to 63 lowercase letters,"
        " digits, `_` or `-`."
    ),
    "revision": (
        "--revision is not a revision: `sha256:` followed by 64 lowercase hex digits, or `active`."
    ),
    "reason": _REASON_MESSAGE,
    "before": _BEFORE_MESSAGE,
}
_REFUSED_HINTS: Final = {
    "workflow": (
        "Pass the workflow id `coordinatorctl workflow` prints, or leave --workflow out to"
        " start the service's workflow."
    ),
    "revision": (
        "Pass the revision `coordinatorctl workflow` prints (the whole `sha256:…`), or leave"
        " --revision out (or write `--revision active`) to start the active revision."
    ),
}


def refused_member(member: str) -> Diagnostic:
    """The `input-invalid` diagnostic of a request member (by its wire name) that the request's
    model refuses; it names the flag that gave the value, never the value."""
    return Diagnostic(
        "coordinator.command.input-invalid",
        path="",
        message=_REFUSED_MEMBERS.get(
            member, "A value of the command is not one the service API accepts."
        ),
        hint=_REFUSED_HINTS.get(member),
    )


def _parsed_input(data: bytes, source: str, file: str | None = None) -> object | Diagnostic:
    from coordinator_core.values import (
        JsonBoundsError,
        StrictJsonError,
        check_json_value,
        parse_strict_json,
    )

    try:
        value = parse_strict_json(data)
        check_json_value(value)
    except (StrictJsonError, JsonBoundsError, ValueError):
        return _input_invalid(f"{source} is not strict JSON within the JSON value bounds.", file)
    return value


def _looks_like_path(text: str) -> bool:
    """Whether an unreadable `--input` may be named in a diagnostic: a path, not data typed in
    the wrong place (inline JSON, which belongs in `--input-json`)."""
    return (
        0 < len(text.encode("utf-8", "replace")) <= 4096
        and not any(ch in text for ch in '{}[]"')
        and not any(_is_control(ch) for ch in text)
    )


def read_input(path: str) -> object | Diagnostic:
    """The run input of a JSON file (at most 65,536 bytes)."""
    try:
        data = _read_bounded(path, MAX_INPUT_BYTES)
    except _FileProblem as problem:
        shown = path if _looks_like_path(path) else None
        if problem.kind == "too-large":
            return _input_invalid("The --input file holds more than 65,536 bytes.", shown)
        if shown is None:
            return Diagnostic(
                "coordinator.command.input-unavailable",
                path="",
                message="--input does not name a readable file (the value is not shown: it is"
                " not shaped like a path).",
                hint="Give the input as a file (--input FILE or --input @FILE), as standard"
                " input (--input -), or inline with --input-json.",
            )
        return Diagnostic("coordinator.command.input-unavailable", path="", file=path)
    return _parsed_input(data, "The --input file", path)


def start_input(source: str | None, inline: str | None) -> object | Diagnostic:
    """`start`'s run input: `--input FILE`, `--input @FILE`, `--input -` (standard input) or
    `--input-json JSON`, exactly one of them; never echoed."""
    if (source is None) == (inline is None):
        return Diagnostic(
            "coordinator.command.usage",
            path="",
            message="`start` takes the run input once: --input or --input-json."
            if source is not None
            else "`start` needs the run input: --input or --input-json.",
            hint="Give --input FILE (or @FILE, or - for standard input), or --input-json JSON;"
            " input.example.json of a new project is one.",
        )
    if inline is not None:
        data = inline.encode("utf-8", "surrogatepass")
        if len(data) > MAX_INPUT_BYTES:
            return _input_invalid("--input-json holds more than 65,536 bytes.")
        return _parsed_input(data, "--input-json")
    assert source is not None
    if source == "-":
        import sys

        data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            return _input_invalid("Standard input holds more than 65,536 bytes.")
        return _parsed_input(data, "Standard input")
    return read_input(source[1:] if source.startswith("@") else source)


_KEY_MESSAGE: Final = "must hold 1–256 characters in 0x21–0x7E"


def start_key(key: str | None, key_file: str | None) -> tuple[str, bool] | Diagnostic:
    """`start`'s Idempotency-Key: `--key`, the `--key-file`'s, or a new one; and whether it
    was generated here (then it is printed, so that a retry can reuse it)."""
    if key is not None and key_file is not None:
        return Diagnostic(
            "coordinator.command.usage",
            path="",
            message="`start` takes the Idempotency-Key once: --key or --key-file.",
            hint="Drop one of them; without either a new key is generated and printed.",
        )
    if key_file is not None:
        found = read_key(key_file)
        return found if isinstance(found, Diagnostic) else (found, False)
    if key is None:
        return generated_key(), True
    if not 1 <= len(key) <= MAX_KEY_BYTES or any(not 0x21 <= ord(ch) <= 0x7E for ch in key):
        return _input_invalid(f"--key {_KEY_MESSAGE}.")
    return key, False


def generated_key() -> str:
    """A fresh Idempotency-Key: `ctl-` and a random UUID."""
    import uuid

    return f"ctl-{uuid.uuid4()}"


def read_key(path: str) -> str | Diagnostic:
    message = f"The --key-file {_KEY_MESSAGE}, optionally with one line feed."
    try:
        data = _strip_one_line_feed(_read_bounded(path, MAX_KEY_BYTES + 1))
    except _FileProblem as problem:
        if problem.kind == "too-large":
            return _input_invalid(message, path)
        return Diagnostic("coordinator.command.input-unavailable", path="", file=path)
    if not 1 <= len(data) <= MAX_KEY_BYTES or any(not 0x21 <= byte <= 0x7E for byte in data):
        return _input_invalid(message, path)
    return data.decode("ascii")
