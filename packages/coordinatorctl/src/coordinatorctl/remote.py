"""The remote commands of contract 09 §4: one service API call (file 06) each.

Everything a command needs is checked locally first — `--url` (09 §1), the token file, and the
command's own inputs (`--run`, `--reason`, `--input`, `--key-file`, `--before`) — and nothing is
sent unless all of it holds. Then exactly one request goes out under the client policy of 09 §4:
a total deadline of 30 s (connect 5 s), redirects never followed, no proxy or netrc from the
environment, at most 1 MiB of answer read incrementally and parsed as strict JSON. The answer is
mapped to an outcome by the table of 09 §4; the exit code comes from that mapping (02 §3), not
from the catalogue's class of a code the service chose.

The access token is read, sent in the `Authorization` header and otherwise never touched: no
diagnostic, result or text line carries it, nor the URL (which could carry user info), nor any
exception text. A problem's `detail` and `suggestedAction` are the service's fixed sentences and
are passed through, but stripped of control and format characters and capped in length.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from coordinator_core.errors import Diagnostic, entry
from coordinatorctl.report import RESERVED_MEMBERS, Outcome

if TYPE_CHECKING:
    import ssl

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "MAX_RESPONSE_BYTES",
    "TOTAL_TIMEOUT_SECONDS",
    "RemoteOutcome",
    "parse_origin",
    "run",
]

TOTAL_TIMEOUT_SECONDS: float = 30.0
CONNECT_TIMEOUT_SECONDS: float = 5.0
MAX_RESPONSE_BYTES: Final = 1_048_576
MAX_TOKEN_BYTES: Final = 16_384
MAX_INPUT_BYTES: Final = 65_536
MAX_KEY_BYTES: Final = 256
MAX_REASON_BYTES: Final = 256
MAX_TEXT_ARGUMENT_BYTES: Final = 1_024
MAX_PASSED_TEXT_CHARS: Final = 512

BLOCK_REASONS: Final = frozenset(
    {
        "terminal",
        "not-recoverable",
        "deadline-reached",
        "receipt-expired",
        "binding-changed",
        "snapshot-incompatible",
        "cancelled",
        "payload-erased",
        "evaluation-uncertain",
        "lease-active",
        "no-receipt",
        "not-uncertain",
    }
)

# Which command answers with what (09 §4) and how a failed exchange should be followed up.
Shape = Literal["run", "runs", "inspection", "reconcile", "merged"]
FollowUp = Literal["read", "start", "run", "operator"]


@dataclass(frozen=True, slots=True)
class _Spec:
    shape: Shape
    follow_up: FollowUp


SPECS: Final[Mapping[str, _Spec]] = {
    "workflow": _Spec("merged", "read"),
    "start": _Spec("run", "start"),
    "status": _Spec("run", "read"),
    "list": _Spec("runs", "read"),
    "inspect": _Spec("inspection", "read"),
    "cancel": _Spec("run", "run"),
    "retry-same": _Spec("run", "run"),
    "reconcile": _Spec("reconcile", "run"),
    "doctor": _Spec("merged", "read"),
    "restore-hold": _Spec("merged", "operator"),
    "release-restore-hold": _Spec("merged", "operator"),
    "release-admission-hold": _Spec("merged", "operator"),
    "retain": _Spec("merged", "operator"),
}

# The advice that follows a failed exchange (09 §4: inspect before retrying what changes state).
_FOLLOW_UP: Final[Mapping[FollowUp, str]] = {
    "read": "Check that the service is running and reachable at `--url`, then repeat the command.",
    "start": (
        "Repeat the command with the same `--key-file` and the same input: the same key never "
        "admits a second run."
    ),
    "run": (
        "Inspect the run with `coordinatorctl inspect --run` before repeating the command: it "
        "may already have taken effect."
    ),
    "operator": (
        "Check the state with `coordinatorctl doctor` before repeating the command: it may "
        "already have taken effect."
    ),
}
_PROBLEM_DEFAULT_HINT: Final = (
    "Read the message, correct the request or the state it names, and try again."
)

# --------------------------------------------------------------------------------------------
# The outcome: the exit class comes from the HTTP answer (02 §3), not from the catalogue.


@dataclass
class RemoteOutcome(Outcome):
    """An Outcome whose exit code is fixed by the outcome mapping of 09 §4 when set."""

    forced_exit: int | None = None

    @property
    def exit_code(self) -> int:
        if self.forced_exit is not None:
            return self.forced_exit
        return super().exit_code


# --------------------------------------------------------------------------------------------
# Local checks: origin, token, inputs.


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


def check_reason(reason: str) -> Diagnostic | None:
    """09 §4: 1–256 bytes of UTF-8 without control characters."""
    try:
        size = len(reason.encode("utf-8"))
    except UnicodeEncodeError:
        return _input_invalid("--reason is not valid UTF-8.")
    if not 1 <= size <= MAX_REASON_BYTES or any(_is_control(ch) for ch in reason):
        return _input_invalid("--reason must be 1–256 bytes without control characters.")
    return None


def _check_text_argument(flag: str, value: str | None) -> Diagnostic | None:
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


def _run_id(text: str) -> str | Diagnostic:
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


def check_date_time(text: str) -> Diagnostic | None:
    """`--before`: an RFC 3339 date-time with an offset (the service checks "not in future")."""
    message = "--before is not an RFC 3339 date-time with an offset, e.g. 2025-01-31T00:00:00Z."
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


def _read_input(path: str) -> object | Diagnostic:
    from coordinator_core.values import (
        JsonBoundsError,
        StrictJsonError,
        check_json_value,
        parse_strict_json,
    )

    try:
        data = _read_bounded(path, MAX_INPUT_BYTES)
    except _FileProblem as problem:
        if problem.kind == "too-large":
            return _input_invalid("The --input file holds more than 65,536 bytes.", path)
        return Diagnostic("coordinator.command.input-unavailable", path="", file=path)
    try:
        value = parse_strict_json(data)
        check_json_value(value)
    except (StrictJsonError, JsonBoundsError, ValueError):
        return _input_invalid(
            "The --input file is not strict JSON within the JSON value bounds.", path
        )
    return value


def _read_key(path: str) -> str | Diagnostic:
    message = (
        "The --key-file must hold 1–256 characters in 0x21–0x7E, optionally with one line feed."
    )
    try:
        data = _strip_one_line_feed(_read_bounded(path, MAX_KEY_BYTES + 1))
    except _FileProblem as problem:
        if problem.kind == "too-large":
            return _input_invalid(message, path)
        return Diagnostic("coordinator.command.input-unavailable", path="", file=path)
    if not 1 <= len(data) <= MAX_KEY_BYTES or any(not 0x21 <= byte <= 0x7E for byte in data):
        return _input_invalid(message, path)
    return data.decode("ascii")


# --------------------------------------------------------------------------------------------
# The request of each command.


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One API call: method, path (already safe), query, JSON body and extra headers."""

    method: Literal["GET", "POST"]
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Mapping[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def build_request(options: argparse.Namespace) -> ApiRequest | list[Diagnostic]:
    """The API call of `options.command` (09 §4), or the diagnostics of its inputs."""
    name = options.command
    problems: list[Diagnostic] = []

    def note(found: Diagnostic | None) -> None:
        if found is not None:
            problems.append(found)

    run_path = ""
    if hasattr(options, "run"):
        run_id = _run_id(options.run)
        if isinstance(run_id, Diagnostic):
            problems.append(run_id)
        else:
            run_path = f"/v1/runs/{run_id}"
    reason: str = getattr(options, "reason", "")
    if hasattr(options, "reason"):
        note(check_reason(reason))

    request: ApiRequest | None = None
    if name == "workflow":
        request = ApiRequest("GET", "/v1/workflow")
    elif name == "start":
        note(_check_text_argument("--workflow", options.workflow))
        note(_check_text_argument("--revision", options.revision))
        value = _read_input(options.input)
        key = _read_key(options.key_file)
        if isinstance(value, Diagnostic):
            problems.append(value)
        if isinstance(key, Diagnostic):
            problems.append(key)
        else:
            request = ApiRequest(
                "POST",
                "/v1/runs",
                body={"workflow": options.workflow, "revision": options.revision, "input": value},
                headers=(("Idempotency-Key", key),),
            )
    elif name == "status":
        request = ApiRequest("GET", run_path)
    elif name == "list":
        note(_check_text_argument("--cursor", options.cursor))
        note(_check_text_argument("--workflow", options.workflow))
        query = [("limit", str(options.limit))]
        for key_name in ("cursor", "status", "workflow"):
            given = getattr(options, key_name)
            if given is not None:
                query.append((key_name, given))
        request = ApiRequest("GET", "/v1/runs", query=tuple(query))
    elif name == "inspect":
        request = ApiRequest("GET", f"{run_path}/inspect")
    elif name in ("cancel", "retry-same", "reconcile"):
        request = ApiRequest("POST", f"{run_path}/{name}", body={"reason": reason})
    elif name == "doctor":
        request = ApiRequest("GET", "/v1/doctor")
    elif name in ("restore-hold", "release-restore-hold"):
        request = ApiRequest("POST", f"/v1/{name}", body={"reason": reason})
    elif name == "release-admission-hold":
        request = ApiRequest(
            "POST",
            "/v1/release-admission-hold",
            body={
                "reason": reason,
                "admissionHistoryComplete": bool(options.admission_history_complete),
                "priorDeploymentFenced": bool(options.prior_deployment_fenced),
            },
        )
    elif name == "retain":
        note(check_date_time(options.before))
        request = ApiRequest(
            "POST", "/v1/retention", body={"before": options.before, "limit": options.limit}
        )
    if problems or request is None:
        return problems or [Diagnostic("coordinator.command.usage", path="")]
    return request


# --------------------------------------------------------------------------------------------
# The exchange.

Failure = Literal["unreachable", "timeout", "oversize", "invalid", "redirect"]


@dataclass(frozen=True, slots=True)
class RemoteAnswer:
    """A complete answer: status, media type (lowercase, without parameters) and body."""

    status: int
    media_type: str
    body: bytes = field(repr=False)


def _user_agent() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"coordinatorctl/{version('coordinatorctl')}"
    except PackageNotFoundError:
        return "coordinatorctl"


def _ssl_context() -> ssl.SSLContext:
    """The system trust store (which honours SSL_CERT_FILE / SSL_CERT_DIR) plus certifi's."""
    import ssl

    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        import certifi

        context.load_verify_locations(cafile=certifi.where())
    except (ImportError, OSError):  # pragma: no cover - certifi ships with httpx
        pass
    return context


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


async def _exchange(origin: str, request: ApiRequest, token: str) -> RemoteAnswer | Failure:
    import asyncio

    import httpx  # noqa: TID251 - remote commands are a shell module; see the module docstring

    headers = {
        "Accept": "application/json, application/problem+json",
        # Answers are counted as sent; asking for no content coding keeps the count honest.
        "Accept-Encoding": "identity",
        "User-Agent": _user_agent(),
        "Authorization": f"Bearer {token}",
    }
    content: bytes | None = None
    if request.body is not None:
        headers["Content-Type"] = "application/json"
        content = json.dumps(request.body, ensure_ascii=False, separators=(",", ":")).encode()
    headers.update(request.headers)
    timeout = httpx.Timeout(TOTAL_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
    verify: ssl.SSLContext | bool = _ssl_context() if origin.startswith("https:") else False
    try:
        async with (
            asyncio.timeout(TOTAL_TIMEOUT_SECONDS),
            httpx.AsyncClient(
                timeout=timeout,
                follow_redirects=False,
                trust_env=False,  # no proxy, netrc or certificate settings from the environment
                verify=verify,
                http2=False,
            ) as client,
            client.stream(
                request.method,
                origin + request.path,
                params=list(request.query),
                headers=headers,
                content=content,
            ) as response,
        ):
            status = response.status_code
            if 300 <= status < 400:
                return "redirect"
            if not 200 <= status < 600:
                return "invalid"
            if _media_type(response.headers.get("content-encoding")) not in ("", "identity"):
                return "invalid"
            declared = response.headers.get("content-length", "").strip()
            if declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
                return "oversize"
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES:
                    return "oversize"
            return RemoteAnswer(
                status, _media_type(response.headers.get("content-type")), bytes(body)
            )
    except (TimeoutError, httpx.TimeoutException):
        return "timeout"
    except (httpx.ConnectError, httpx.UnsupportedProtocol):
        return "unreachable"
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError, UnicodeError):
        return "invalid"


def send(origin: str, request: ApiRequest, token: str) -> RemoteAnswer | Failure:
    """Send one request and read its complete answer (blocking)."""
    import asyncio

    return asyncio.run(_exchange(origin, request, token))


# --------------------------------------------------------------------------------------------
# The outcome mapping of 09 §4.

_FAILURE_MESSAGES: Final[Mapping[str, str]] = {
    "unreachable": "The service could not be reached.",
    "timeout": "The service did not answer within the time limit.",
    "oversize": "The service's answer is larger than 1,048,576 bytes.",
    "invalid": "The service's answer is not a valid HTTP answer of the service API.",
    "redirect": "The service answered with a redirect, which is never followed.",
    "json": "The service's answer is not strict JSON.",
    "shape": "The service's answer does not have the documented shape.",
    "status": "The service answered with an undocumented success status.",
    "failed": "The service failed and answered without a valid problem body.",
}
_PROBLEM_CODE: Final = re.compile(
    r"(?:(?:idempotency|admission)\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*"
    r"|coordinator\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*)"
)
_MEMBER_NAME: Final = re.compile(r"[a-z][A-Za-z0-9]*")


def passed_text(text: str) -> str:
    """Remote text shown to the user: control, format and separator characters removed,
    whitespace collapsed, at most 512 characters."""
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in text
        if unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
        or ch in "\t\n\r"
    )
    collapsed = " ".join(kept.split())
    if len(collapsed) > MAX_PASSED_TEXT_CHARS:
        collapsed = collapsed[: MAX_PASSED_TEXT_CHARS - 1].rstrip() + "…"
    return collapsed


@dataclass(frozen=True, slots=True)
class RemoteProblem:
    code: str
    detail: str
    suggested_action: str | None
    reason: str | None


def problem_of(answer: RemoteAnswer) -> RemoteProblem | None:
    """The problem body of 06 §3, or None unless the answer carries a valid one."""
    from coordinator_core.values import StrictJsonError, parse_strict_json

    if answer.media_type != "application/problem+json":
        return None
    try:
        body = parse_strict_json(answer.body)
    except (StrictJsonError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    code, detail, action = body.get("code"), body.get("detail"), body.get("suggestedAction")
    status = body.get("status")
    if not (
        isinstance(code, str)
        and len(code) <= 128
        and _PROBLEM_CODE.fullmatch(code)
        and isinstance(status, int)
        and not isinstance(status, bool)
        and status == answer.status
        and isinstance(body.get("type"), str)
        and isinstance(body.get("title"), str)
        and isinstance(detail, str)
        and "suggestedAction" in body
        and (action is None or isinstance(action, str))
    ):
        return None
    reason = body.get("reason")
    return RemoteProblem(
        code=code,
        detail=passed_text(detail),
        suggested_action=passed_text(action) if isinstance(action, str) else None,
        reason=reason if isinstance(reason, str) and reason in BLOCK_REASONS else None,
    )


def _unavailable(command: str, kind: str) -> RemoteOutcome:
    return RemoteOutcome(
        command,
        [
            Diagnostic(
                "coordinator.command.service-unavailable",
                path="",
                message=_FAILURE_MESSAGES[kind],
                hint=_FOLLOW_UP[SPECS[command].follow_up],
            )
        ],
        forced_exit=3,
    )


def _refusal(command: str, answer: RemoteAnswer) -> RemoteOutcome:
    server_failure = answer.status >= 500
    problem = problem_of(answer)
    if problem is None:
        if server_failure:
            return _unavailable(command, "failed")
        return RemoteOutcome(
            command, [Diagnostic("coordinator.command.service-refused", path="")], forced_exit=1
        )
    if problem.suggested_action:
        hint = problem.suggested_action
    elif server_failure:
        hint = _FOLLOW_UP[SPECS[command].follow_up]
    elif problem.code in _catalogued():
        hint = entry(problem.code).hint
    else:
        hint = _PROBLEM_DEFAULT_HINT
    message = problem.detail or None
    if message is None and problem.code in _catalogued():
        message = entry(problem.code).title
    message = message or "The service refused the request."
    if problem.reason is not None:
        message += f" Blocked by: {problem.reason}."
    outcome = RemoteOutcome(
        command,
        [
            Diagnostic(
                problem.code,
                path="",
                message=message,
                hint=hint,
                severity="error",
            )
        ],
        forced_exit=3 if server_failure else 1,
    )
    if problem.reason is not None:
        # 06 §11.6: the first failing condition of retry-same / reconcile, a closed word.
        outcome.result = {"blockedBy": problem.reason}
    return outcome


def _catalogued() -> Mapping[str, Any]:
    from coordinator_core.errors import catalogue

    return catalogue()


def _merged_members(body: Mapping[str, Any]) -> bool:
    return all(
        isinstance(name, str) and _MEMBER_NAME.fullmatch(name) and name not in RESERVED_MEMBERS
        for name in body
    )


def _shape_result(shape: Shape, body: object) -> dict[str, Any] | None:
    """The envelope members of a success answer (02 §3, 09 §4), or None if malformed."""
    if not isinstance(body, dict):
        return None
    if shape == "run":
        return {"run": body}
    if shape == "runs":
        runs, cursor = body.get("runs"), body.get("nextCursor")
        if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
            return None
        if cursor is not None and not isinstance(cursor, str):
            return None
        return {"runs": runs, "nextCursor": cursor}
    if shape == "reconcile":
        result, inspection = body.get("result"), body.get("inspection")
        if not isinstance(result, str) or not isinstance(inspection, dict):
            return None
        if not isinstance(inspection.get("run"), dict):
            return None
        return {"result": result, "inspection": inspection}
    if shape == "inspection" and not isinstance(body.get("run"), dict):
        return None
    return body if _merged_members(body) else None


def outcome_of(
    command: str, answer: RemoteAnswer | Failure, *, stdout_is_terminal: bool
) -> Outcome:
    """09 §4's mapping of one answer to the command's outcome."""
    from coordinator_core.values import StrictJsonError, parse_strict_json

    if isinstance(answer, str):
        return _unavailable(command, answer)
    if answer.status >= 400:
        return _refusal(command, answer)
    if not 200 <= answer.status < 300:
        return _unavailable(command, "invalid")
    status_word = "completed"
    if command == "start":
        if answer.status not in (200, 201):
            return _unavailable(command, "status")
        status_word = "admitted" if answer.status == 201 else "replayed"
    if answer.media_type != "application/json" and not (
        answer.media_type.startswith("application/") and answer.media_type.endswith("+json")
    ):
        return _unavailable(command, "invalid")
    try:
        body = parse_strict_json(answer.body)
    except (StrictJsonError, ValueError):
        return _unavailable(command, "json")
    result = _shape_result(SPECS[command].shape, body)
    if result is None:
        return _unavailable(command, "shape")
    outcome = RemoteOutcome(command, status=status_word, result=result, forced_exit=0)
    from coordinatorctl.remote_text import render_text

    outcome.text = render_text(
        SPECS[command].shape, command, status_word, result, terminal=stdout_is_terminal
    )
    return outcome


# --------------------------------------------------------------------------------------------
# The command.


def run(options: argparse.Namespace) -> Outcome:
    """Run one remote command of 09 §4 from parsed options."""
    command: str = options.command
    usage: list[Diagnostic] = []
    origin: str | None = None
    if options.url is None:
        usage.append(Diagnostic("coordinator.command.service-required", path=""))
    else:
        origin = parse_origin(options.url)
        if origin is None:
            # Never echoed: the value may carry user info.
            usage.append(
                Diagnostic(
                    "coordinator.command.usage",
                    path="",
                    message=(
                        "--url must be an origin: https://host[:port], or http:// with a "
                        "loopback host, without user info, path, query or fragment."
                    ),
                    hint="Pass the service origin only, e.g. --url https://coordinator.example.org.",
                )
            )
    token_file: str | None = options.token_file
    if token_file is None:
        usage.append(Diagnostic("coordinator.command.token-file-required", path=""))
    elif not os.path.isabs(token_file):
        usage.append(
            Diagnostic(
                "coordinator.command.usage",
                path="",
                message="--token-file must be an absolute path.",
                hint="Name the token file by its absolute path, e.g. /home/ops/token.",
            )
        )
    if usage:
        return Outcome(command, usage)
    assert origin is not None and token_file is not None

    local: list[Diagnostic] = []
    token = read_token(token_file)
    if isinstance(token, Diagnostic):
        local.append(token)
    request = build_request(options)
    if isinstance(request, list):
        local.extend(request)
    if local or isinstance(token, Diagnostic) or isinstance(request, list):
        return Outcome(command, local)
    answer = send(origin, request, token)
    if isinstance(answer, RemoteAnswer) and token.encode("ascii") in answer.body:
        # 06 §12: the service never returns a token; an answer that repeats the caller's is not
        # a valid answer of the service, and it must not reach the output.
        answer = "invalid"
    return outcome_of(command, answer, stdout_is_terminal=sys.stdout.isatty())
