"""The service's log: one JSON line per event on stderr, `{time, level, code, message, …}` (09 §5).

A line carries only a catalogue code and a fixed sentence, never a value: the message of a
standard `logging` record is its *format string* (`record.msg`), never the interpolated text,
and neither its arguments nor an exception's text or traceback are written. Records of other
libraries (uvicorn, connexion) are admitted only at WARNING and above, under a generic code.

A line about a run (06 §14: an admission, a step outcome, a status change) adds *keyed* members
(`keyed(...)`, passed as a record's `extra={"keyed": ...}`): a `…Ref` member is a keyed reference
of 07 §11 (`hmac-sha256:<64 hex>`), any other member a fixed word (a workflow id, a step type,
an outcome, a status, a catalogue code). A member of any other name or form is dropped.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, TextIO

__all__ = ["GENERIC_CODE", "KEYED_MEMBERS", "JsonLineHandler", "ServiceLog", "install", "keyed"]

GENERIC_CODE: Final = "coordinator.service.event"
_MAX_MESSAGE_CHARS: Final = 200
_OWN_LOGGERS: Final = ("coordinator", "coordinator_api", "coordinator_core")
_PLACEHOLDER: Final = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdrfixXeEgGc]")
KEYED_MEMBERS: Final = frozenset(
    {"runRef", "stepRef", "workflow", "origin", "stepType", "operation", "outcome", "status",
     "previous", "refusal"}
)  # fmt: skip
_REFERENCE: Final = re.compile(r"hmac-sha256:[0-9a-f]{64}")
_WORD: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_MAX_WORDS: Final = 1024
_WORDS: Final[set[str]] = set()  # words `keyed` accepted before (workflow ids, outcomes, codes)
_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-?(?:[0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}")


def _now() -> str:
    moment = datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _fixed(text: object) -> str:
    """The fixed part of a message: a format string stripped of control characters."""
    if not isinstance(text, str):
        return "An event without a fixed message."
    if text.isprintable():  # the usual case, checked at C speed: nothing to strip
        return text[:_MAX_MESSAGE_CHARS]
    cleaned = "".join(ch for ch in text if ch.isprintable())
    return cleaned[:_MAX_MESSAGE_CHARS]


def keyed(members: Mapping[str, object]) -> dict[str, str]:
    """The members a line may carry: known names only, references in the keyed form, the rest
    fixed words; anything else (a value, an identifier in the clear) is dropped."""
    kept: dict[str, str] = {}
    for name, value in members.items():
        if name not in KEYED_MEMBERS or not isinstance(value, str):
            continue
        if name.endswith("Ref"):
            if _REFERENCE.fullmatch(value):
                kept[name] = value
        elif value in _WORDS or _is_word(value):
            kept[name] = value
    return kept


def _is_word(value: str) -> bool:
    """A fixed word, not a run id in disguise; the few words a process uses are remembered."""
    if not _WORD.fullmatch(value) or (len(value) >= 32 and _UUID.search(value)):
        return False
    if len(_WORDS) < _MAX_WORDS:
        _WORDS.add(value)
    return True


class ServiceLog:
    """Writes the service's own events (start, ready, refusals, shutdown) as JSON lines."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def emit(
        self, level: str, code: str, message: str, members: Mapping[str, object] | None = None
    ) -> None:
        entry = {"time": _now(), "level": level, "code": code, "message": _fixed(message)}
        if members:
            entry |= keyed(members)
        line = json.dumps(
            entry,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        stream = self._stream or sys.stderr
        with self._lock:
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed stderr must never stop the service


class JsonLineHandler(logging.Handler):
    """Routes `logging` records to the service log without their arguments or exceptions."""

    def __init__(self, log: ServiceLog) -> None:
        super().__init__()
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        own = record.name.split(".", 1)[0] in _OWN_LOGGERS
        if not own and record.levelno < logging.WARNING:
            return
        code = getattr(record, "code", None)
        members = getattr(record, "keyed", None)
        level = record.levelname.lower()
        if level == "critical":
            level = "error"
        self._log.emit(
            level if level in ("debug", "info", "warning", "error") else "info",
            code if isinstance(code, str) else GENERIC_CODE,
            _PLACEHOLDER.sub("…", _fixed(record.msg)),
            members if isinstance(members, Mapping) else None,
        )


def install(log: ServiceLog, *, level: int = logging.INFO) -> None:
    """Send every `logging` record through `log` (and nowhere else). Our own loggers log from
    `level`; every other logger from WARNING, the least the handler passes on for them, so
    that a library's INFO record (Connexion writes one per request with a body) is not even
    made."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(JsonLineHandler(log))
    root.setLevel(max(level, logging.WARNING))
    for name in _OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "connexion"):
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    logging.captureWarnings(True)
