"""`coordinatorctl openapi` (09 §2): the shipped OpenAPI 3.1 document, or the one `--url` serves."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any, Final

from coordinator_core.errors import Diagnostic
from coordinatorctl.report import Outcome

__all__ = ["SHIPPED_DOCUMENT", "openapi"]

# Package data of coordinator-models, written by `nox -s generate`; the service answers the same
# bytes at `GET /openapi.json` (06 §14).
SHIPPED_DOCUMENT: Final = "openapi.json"
_FAILURES: Final = {
    "unreachable": "The service could not be reached.",
    "tls": "The service's TLS certificate could not be verified (see SSL_CERT_FILE, SSL_CERT_DIR).",
    "timeout": "The service did not answer within the time limit.",
    "oversize": "The service's answer is larger than 1,048,576 bytes.",
    "invalid": "The service's answer is not a valid HTTP answer.",
    "redirect": "The service answered with a redirect, which is never followed.",
}
_NOT_A_DOCUMENT: Final = "The answer of GET /openapi.json is not an OpenAPI 3.1 document."
_URL_USAGE: Final = Diagnostic(
    "coordinator.command.usage",
    path="",
    message=(
        "--url must be an origin: https://host[:port], or http:// with a loopback host, "
        "without user info, path, query or fragment."
    ),
    hint="Pass the service origin only, e.g. --url https://coordinator.example.org.",
)


def _document(text: str) -> dict[str, Any] | None:
    """The parsed document when `text` is strict JSON of an OpenAPI 3.1 document, else None."""
    from coordinator_core.values import StrictJsonError, parse_strict_json

    try:
        document = parse_strict_json(text.encode("utf-8"))
    except (StrictJsonError, ValueError):
        return None
    if (
        not isinstance(document, dict)
        or not str(document.get("openapi", "")).startswith("3.1.")
        or not isinstance(document.get("paths"), dict)
    ):
        return None
    return document


def _printed(text: str) -> Outcome:
    outcome = Outcome("openapi", status="printed")
    outcome.raw = text if text.endswith("\n") else text + "\n"
    document = _document(text)
    assert document is not None
    outcome.text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return outcome


def _unavailable(message: str) -> Outcome:
    return Outcome(
        "openapi",
        [
            Diagnostic(
                "coordinator.command.service-unavailable",
                path="",
                message=message,
                hint="Check that --url names the running coordinator service and that it is up.",
            )
        ],
    )


def openapi(url: str | None) -> Outcome:
    """The shipped document, or with `url` the document that service serves (no token)."""
    if url is None:
        return _printed(files("coordinator_models").joinpath(SHIPPED_DOCUMENT).read_text("utf-8"))
    from coordinatorctl.remote.checks import parse_origin
    from coordinatorctl.remote.exchange import RemoteAnswer, send
    from coordinatorctl.remote.request import ApiRequest

    origin = parse_origin(url)
    if origin is None:
        return Outcome("openapi", [_URL_USAGE])  # never echoed: it may carry user info
    answer = send(origin, ApiRequest("GET", "/openapi.json"), None)
    if not isinstance(answer, RemoteAnswer):
        return _unavailable(_FAILURES[answer])
    if answer.status != 200:
        if answer.status >= 500:
            return _unavailable(f"The service answered GET /openapi.json with {answer.status}.")
        from coordinator_core.errors import catalogue
        from coordinatorctl.remote.outcome import problem_of

        problem = problem_of(answer)
        code = problem.code if problem is not None else "coordinator.command.service-refused"
        if code not in catalogue():  # pragma: no cover - a code this build does not know
            code = "coordinator.command.service-refused"
        return Outcome("openapi", [Diagnostic(code, path="")])
    try:
        text = answer.body.decode("utf-8")
    except UnicodeDecodeError:
        return _unavailable(_NOT_A_DOCUMENT)
    if answer.media_type != "application/json" or _document(text) is None:
        return _unavailable(_NOT_A_DOCUMENT)
    return _printed(text)
