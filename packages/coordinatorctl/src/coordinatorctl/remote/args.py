"""The command lines of the remote commands (09 §4), kept apart from remote.py so that
building the parser imports nothing heavy; remote.py is imported only when one of them runs."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Final

from coordinator_core.limits import RUN_STATUSES

__all__ = ["COMMANDS", "MAX_WATCH_TIMEOUT_SECONDS", "RUN_STATUSES", "add_remote_commands"]

COMMANDS: Final = frozenset(
    {
        "workflow",
        "start",
        "status",
        "list",
        "inspect",
        "attempts",
        "cancel",
        "retry-same",
        "reconcile",
        "doctor",
        "restore-hold",
        "release-restore-hold",
        "release-admission-hold",
        "retain",
    }
)
LIST_DEFAULT_LIMIT: Final = 20
ATTEMPTS_DEFAULT_LIMIT: Final = 20
RETAIN_DEFAULT_LIMIT: Final = 100
MAX_WATCH_TIMEOUT_SECONDS: Final = 31_536_000  # a year: longer than any run deadline worth a watch


def _limit(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,3}", text) or not 1 <= int(text) <= 100:
        # Reported by the parser as coordinator.cli.usage, without echoing the value.
        raise argparse.ArgumentTypeError("out of range")
    return int(text)


def _timeout(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,8}", text) or not 1 <= int(text) <= MAX_WATCH_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError("out of range")  # never echoed, as for _limit
    return int(text)


def _add_timeout(parser: argparse.ArgumentParser, flag: str) -> None:
    parser.add_argument(
        "--timeout",
        type=_timeout,
        metavar="SECONDS",
        help=f"with {flag}: stop watching after SECONDS (1..{MAX_WATCH_TIMEOUT_SECONDS:,});"
        " nothing is cancelled",
    )


def add_remote_commands(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Add the subcommands of 09 §4 through cli.py's `command(name, help)` factory."""
    command("workflow", "show the active workflow (GET /v1/workflow)")

    start = command("start", "start a run of the active workflow (POST /v1/runs)")
    start.add_argument(
        "--workflow", metavar="ID", help="the workflow id (default: the service's workflow)"
    )
    start.add_argument(
        "--revision",
        metavar="REV",
        help="the revision to start, or `active` (default: the service's active revision)",
    )
    start.add_argument(
        "--input",
        metavar="FILE|@FILE|-",
        help="the run input: a JSON file (FILE or @FILE), or - for standard input",
    )
    start.add_argument("--input-json", metavar="JSON", help="the run input, inline")
    start.add_argument(
        "--key",
        metavar="KEY",
        help="the Idempotency-Key of the admission (default: a new one, printed so that a"
        " retry can reuse it)",
    )
    start.add_argument(
        "--key-file", metavar="FILE", help="a file holding the Idempotency-Key instead"
    )
    start.add_argument(
        "--wait",
        action="store_true",
        help="follow the admitted run until it settles; exit 0 only if it finished",
    )
    _add_timeout(start, "--wait")

    status = command("status", "show one run (GET /v1/runs/{run})")
    status.add_argument("--run", required=True, metavar="UUID", help="the run id")
    status.add_argument(
        "--watch",
        action="store_true",
        help="follow the run until it settles; exit 0 only if it finished",
    )
    _add_timeout(status, "--watch")

    listing = command("list", "list the runs visible to the caller (GET /v1/runs)")
    listing.add_argument(
        "--limit", type=_limit, default=LIST_DEFAULT_LIMIT, metavar="1..100", help="page size"
    )
    listing.add_argument("--cursor", metavar="C", help="the nextCursor of the previous page")
    listing.add_argument(
        "--status",
        choices=RUN_STATUSES,
        metavar="S",
        help=f"only runs in: {', '.join(RUN_STATUSES)}",
    )
    listing.add_argument("--workflow", metavar="W", help="only runs of this workflow id")

    inspect = command("inspect", "inspect one run (GET /v1/runs/{run}/inspect)")
    inspect.add_argument("--run", required=True, metavar="UUID", help="the run id")
    inspect.add_argument(
        "--graph",
        choices=("mermaid", "dot", "svg", "png"),
        help="draw the run's path over the step graph of --project (text mode)",
    )
    inspect.add_argument(
        "--project", metavar="DIR", help="the run's project (its definition digest must match)"
    )
    inspect.add_argument("--output", metavar="FILE", help="write the --graph picture to FILE")

    attempts = command(
        "attempts",
        "list a step's attempts, newest first (GET /v1/runs/{run}/steps/{step}/attempts)",
    )
    attempts.add_argument("--run", required=True, metavar="UUID", help="the run id")
    attempts.add_argument(
        "--step", required=True, metavar="STEP", help="the step id (as `inspect` shows it)"
    )
    attempts.add_argument(
        "--limit", type=_limit, default=ATTEMPTS_DEFAULT_LIMIT, metavar="1..100", help="page size"
    )
    attempts.add_argument("--cursor", metavar="C", help="the nextCursor of the previous page")

    for name, what in (
        ("cancel", "cancel a run"),
        (
            "retry-same",
            "continue a run as recorded: resend its saved command with the same key, or (under"
            " restore review) clear the review mark",
        ),
        ("reconcile", "ask the product whether a run's unknown effect was accepted"),
    ):
        sub = command(name, f"{what} (POST /v1/runs/{{run}}/{name})")
        sub.add_argument("--run", required=True, metavar="UUID", help="the run id")
        sub.add_argument("--reason", required=True, metavar="REF", help="investigation reference")

    command("doctor", "show the operator's view of the service state (GET /v1/doctor)")
    for name, what in (
        ("restore-hold", "set the restore hold"),
        ("release-restore-hold", "release the restore hold"),
    ):
        sub = command(name, f"{what} (POST /v1/{name})")
        sub.add_argument("--reason", required=True, metavar="REF", help="investigation reference")

    release = command(
        "release-admission-hold", "release the admission hold (POST /v1/release-admission-hold)"
    )
    release.add_argument("--reason", required=True, metavar="REF", help="investigation reference")
    release.add_argument(
        "--admission-history-complete",
        action="store_true",
        help="confirm that the admission history is complete",
    )
    release.add_argument(
        "--prior-deployment-fenced",
        action="store_true",
        help="confirm that the prior deployment is fenced",
    )

    retain = command("retain", "erase the payloads of old settled runs (POST /v1/retention)")
    retain.add_argument(
        "--before", required=True, metavar="RFC3339", help="runs settled before this instant"
    )
    retain.add_argument(
        "--limit", type=_limit, default=RETAIN_DEFAULT_LIMIT, metavar="1..100", help="at most"
    )
