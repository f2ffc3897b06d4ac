"""External HTTP: `external-http.get/v1`, a fixed read-only GET (contract 08 §7, 05 §5.2).

The runtime connection fixes everything that could make the request go elsewhere: the base
URL, the exact relative paths, the query parameter names, the credential (or none), the
attempt timeout and the response maximum. The command only chooses one of the paths and the
values of allowed parameters. Any status is a success when `{status, body}` validates against
the connection's `responseSchema`; a read never has an effect, so every failure is definite.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import quote

from coordinator_core.engine.inputs import CallOutcome
from coordinator_core.shell.adapters.base import (
    EXTERNAL_HTTP,
    AccessToken,
    Connection,
    ExternalConnection,
    PreparedCommand,
)
from coordinator_core.shell.adapters.http import ProductAnswer, json_body
from coordinator_core.shell.adapters.product import Attempt, AttemptEffect, ProductAdapter, Stop
from coordinator_core.shell.adapters.transport import TransportFailure
from coordinator_core.shell.adapters.validation import (
    ShapeError,
    closed_object,
    json_object,
    output_shape,
)

__all__ = ["EXTERNAL_GET", "ExternalHttpAdapter", "external_url"]

EXTERNAL_GET: Final = "external-http.get/v1"
MAX_QUERY_ENTRIES: Final = 16
MAX_QUERY_VALUE_CHARS: Final = 1024
# C0 controls, DEL and the C1 controls: none may travel in a query value (08 §7).
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class ExternalHttpAdapter(ProductAdapter):
    """The external GET adapter (08 §7)."""

    product = EXTERNAL_HTTP
    call_operations = frozenset({EXTERNAL_GET})
    invalid_command_code = "external-invalid-command"
    destination_refused_code = "external-destination-refused"

    def credential_for(
        self, connection: Connection, step: str, attempt_deadline: float
    ) -> AccessToken | CallOutcome:
        """A fresh token when the connection has `authorization`; otherwise the attempt sends
        no credential (a public read; the caller's token is never forwarded)."""
        assert isinstance(connection, ExternalConnection)
        if connection.authorization is None:
            return AccessToken(None)
        return self.credentials.obtain(
            connection.authorization, step=step, attempt_deadline=attempt_deadline
        )

    def transport_outcome(
        self, attempt: Attempt, failure: TransportFailure, effect: AttemptEffect
    ) -> CallOutcome:
        """A read: DNS, connect, timeout and send errors are all retryable (08 §7); the attempt
        budget running out is `attempt-timeout` as for any read (08 §9)."""
        if failure.budget:
            return attempt.retryable("attempt-timeout")
        return attempt.retryable("external-unavailable")

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        connection = attempt.connection
        if not isinstance(connection, ExternalConnection):
            return attempt.refused("operation-unbound")
        url = external_url(connection, command.input)
        answer = attempt.send("GET", url, effect="read")
        if 300 <= answer.status < 400:
            return attempt.refused("external-redirect")  # never followed (08 §2.1)
        output = {"status": answer.status, "body": _body(attempt, answer)}
        try:
            output_shape(EXTERNAL_GET, output)
        except ShapeError:
            return attempt.refused("external-invalid-response")
        if not connection.accepts(output):
            return attempt.refused("external-invalid-response")
        return attempt.success(output)


def external_url(connection: ExternalConnection, request: Any) -> str:
    """The request path and query for a command input; raises ShapeError (refused
    `external-invalid-command`) for anything the connection does not allow."""
    found = closed_object(request, {"path"}, {"query"})
    path = found["path"]
    if not isinstance(path, str) or path not in connection.paths:
        raise ShapeError()
    query = json_object(found.get("query", {}))
    if len(query) > MAX_QUERY_ENTRIES:
        raise ShapeError()
    pairs: list[str] = []
    for name in sorted(query):
        value = query[name]
        if name not in connection.query_parameters or not isinstance(value, str):
            raise ShapeError()
        if len(value) > MAX_QUERY_VALUE_CHARS or _CONTROL.search(value):
            raise ShapeError()
        pairs.append(quote(name, safe="") + "=" + quote(value, safe=""))
    return "/" + path + ("?" + "&".join(pairs) if pairs else "")


def _body(attempt: Attempt, answer: ProductAnswer) -> Any:
    """The parsed body: None for an empty one; refused `external-invalid-response` when it is
    larger than the maximum, unreadable, or not strict JSON within the value bounds."""
    if answer.body_problem is not None:
        raise Stop(attempt.refused("external-invalid-response"))
    if not answer.body:
        return None
    value = json_body(answer)
    if value is None:
        raise Stop(attempt.refused("external-invalid-response"))
    return value
