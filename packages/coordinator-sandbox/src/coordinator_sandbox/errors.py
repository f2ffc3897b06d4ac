"""The one refusal type of the sandbox products: a problem answer (file 08 §2.3) to be written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ProblemError", "default_code"]

_DEFAULT_CODES = {
    400: "request.invalid",
    401: "authentication.refused",
    403: "operation.not-authorized",
    404: "resource.not-found",
    405: "request.method-not-allowed",
    409: "request.conflict",
    410: "resource.gone",
    413: "request.body-too-large",
    415: "request.unsupported-media-type",
    422: "request.unprocessable",
    429: "rate-limit.exceeded",
    500: "service.internal-error",
    503: "service.unavailable",
}


def default_code(status: int) -> str:
    """The problem code a sandbox answers for a status when nothing more specific applies."""
    return _DEFAULT_CODES.get(status, "request.refused" if status < 500 else "service.failed")


class ProblemError(Exception):
    """A refusal answered as `application/problem+json` (file 08 §2.3)."""

    def __init__(
        self,
        status: int,
        code: str | None = None,
        detail: str | None = None,
        *,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(code or default_code(status))
        self.status = status
        self.code = code or default_code(status)
        self.detail = detail
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})
