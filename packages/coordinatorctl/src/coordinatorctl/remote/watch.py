"""Following a run: `start --wait` and `status --watch` (09 §4, an addition of this build).

After the command's own call (`POST /v1/runs` or `GET /v1/runs/{run}`) the run is read again with
`GET /v1/runs/{run}`, each call under the client policy of 09 §4 (remote.exchange.exchange), until it
settles, never past `--timeout`. Each read is the service's waiting read (06 §5.3, `wait` and
`seen`): it names the `ETag` of the last answer and the service answers when the run changes, or
after `WAIT_SECONDS` without a change, and the next read is sent at once, so a change is shown
as it happens and nothing is polled in between. An answer that came back unchanged well before
its wait was over (a service past its bound of waiting reads, or stopping) is followed by a
pause, as is every read of a service that sends no `ETag` (one without the waiting read): 1 s
after a change, growing by half up to 5 s while nothing changes. A run has settled for the watch when nothing will move it without an operator:
`finished`, `failed`, `cancelled`, `cancelled-after-effect`, `expired` or `attention` (06 §11.5).

What the caller sees while it runs depends on the output mode:

- text, stderr a terminal: a live panel on stderr (rich Live: status, step, next due, the wait
  timing of a wait step from one `GET /v1/runs/{run}/inspect` per step entered, elapsed,
  timeout), removed when the watch ends;
- text, stderr not a terminal: one plain line on stderr per observed change;
- `--format json`: nothing until the final report;
- `--format jsonl`: one report line on stdout per observed change (status word `observed`), the
  last line being the final report.

The final outcome, and the exit code:

| The watch ends because | Exit | Diagnostic |
|---|---|---|
| the run is `finished` | 0 | — (the command's status word: `admitted`/`replayed`, `completed`) |
| the run is `failed`, `cancelled`, `cancelled-after-effect`, `expired` or `attention` | 1 | `coordinator.command.run-not-finished` |
| `--timeout` passed first | 1 | `coordinator.command.watch-timeout` |
| Ctrl-C (SIGINT) | 130 (the report says `domain-refusal`) | `coordinator.command.watch-interrupted` |
| a call failed (a read: exit 3 three times in a row) | that call's 09 §4 outcome (1 or 3) | that call's |

The report's `run` is the last run observed, whenever one was. A watch never cancels or changes
anything: it only reads. No line carries the token, the input or the run's output; every string
from the service is shown through `sanitize`.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from coordinator_core.errors import Diagnostic
from coordinatorctl.remote.exchange import RemoteAnswer
from coordinatorctl.remote.outcome import RemoteOutcome, outcome_of, report_line
from coordinatorctl.remote.request import ApiRequest
from coordinatorctl.report import Outcome, sanitize

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

__all__ = [
    "FIRST_INTERVAL_SECONDS",
    "INTERRUPTED_EXIT",
    "MAX_INTERVAL_SECONDS",
    "POLL_ATTEMPTS",
    "SETTLED",
    "WAIT_SECONDS",
    "watch",
]

WAIT_SECONDS: int = 20
"""The `wait` of a waiting read: the service's maximum (06 §5.3), under the 30 s total timeout
of one exchange (09 §4)."""
FIRST_INTERVAL_SECONDS: float = 1.0
MAX_INTERVAL_SECONDS: float = 5.0
INTERVAL_GROWTH: Final = 1.5
POLL_ATTEMPTS: Final = 3  # consecutive reads that fail with exit 3 before the watch gives up
INTERRUPTED_EXIT: Final = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
SETTLED: Final = frozenset(
    {"finished", "failed", "cancelled", "cancelled-after-effect", "expired", "attention"}
)


def _duration(seconds: float) -> str:
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _word(run: Mapping[str, Any], member: str) -> str | None:
    value = run.get(member)
    return sanitize(value) if isinstance(value, str) else None


def change_line(run: Mapping[str, Any], elapsed: float) -> str:
    """One plain line for an observed run: elapsed time, status, step, and what is set of next
    due, outcome, failure code and the run's flags."""
    line = f"+{_duration(elapsed)} {_word(run, 'status')} at {_word(run, 'step')}"
    for label, member in (
        ("next due", "nextDueAt"),
        ("outcome", "outcome"),
        ("failure", "failureCode"),
    ):
        value = _word(run, member)
        if value is not None:
            line += f", {label} {value}"
    flags = [
        word
        for word, member in (
            ("cancel requested", "cancelRequested"),
            ("restore review", "restoreReview"),
            ("uncertain effect", "uncertain"),
        )
        if run.get(member) is True
    ]
    if flags:
        line += f" [{', '.join(flags)}]"
    return line


def _due_in(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        due = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return text
    left = (due - datetime.now(UTC)).total_seconds()
    return f"{text} ({'in ' + _duration(left) if left >= 1 else 'due now'})"


def wait_text(inspection: Mapping[str, Any] | None, step: object) -> str | None:
    """The wait timing of the current step from an inspection (06 §11.3 `wait`), or None."""
    if inspection is None:
        return None
    waits = [
        entry["wait"]
        for entry in inspection.get("steps", [])
        if isinstance(entry, dict)
        and entry.get("step") == step
        and isinstance(entry.get("wait"), dict)
    ]
    if not waits:
        return None
    wait: Mapping[str, Any] = waits[-1]
    if "until" in wait:
        return f"until {_due_in(_word(wait, 'until'))}"
    text = f"{_word(wait, 'result')}, {wait.get('observations')} observations"
    following = _word(wait, "nextObservationAt")
    if following is not None:
        text += f", next {following}"
    return text + f", times out {_due_in(_word(wait, 'timeoutAt'))}"


# --------------------------------------------------------------------------------------------
# What is shown while watching.


@dataclass
class _Display:
    """Nothing while watching (`--format json`)."""

    command: str
    started: float = field(default_factory=time.monotonic)
    deadline: float | None = None

    def __enter__(self) -> _Display:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def change(self, run: Mapping[str, Any], *, settled: bool) -> None:
        return None

    def trouble(self, failures: int) -> None:
        """A read failed with exit 3 (`failures` in a row); it is tried again."""
        return None

    def following(self, line: str) -> None:
        """The run id (and a generated key) first, before any change: a watch that never
        ends still named its run."""
        return None


@dataclass
class _JsonLines(_Display):
    """One report line on stdout per change; the settled run is left to the final report."""

    def change(self, run: Mapping[str, Any], *, settled: bool) -> None:
        if not settled:
            sys.stdout.write(report_line(self.command, "observed", {"run": dict(run)}))
            sys.stdout.flush()


@dataclass
class _Lines(_Display):
    """One plain line on stderr per change."""

    def following(self, line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def change(self, run: Mapping[str, Any], *, settled: bool) -> None:
        sys.stderr.write(change_line(run, time.monotonic() - self.started) + "\n")
        sys.stderr.flush()

    def trouble(self, failures: int) -> None:
        if not failures:
            return
        sys.stderr.write(
            f"+{_duration(time.monotonic() - self.started)} the service could not be read"
            f" ({failures} of {POLL_ATTEMPTS - 1} retries); reading again\n"
        )
        sys.stderr.flush()


@dataclass
class _LivePanel(_Display):
    """A live panel on the stderr terminal, redrawn four times a second, removed at the end."""

    run: Mapping[str, Any] | None = None
    live: Live | None = None
    failures: int = 0
    # Reads the run's inspection (06 §11.2) for the wait timing of its current step; set by
    # `watch`, called once per step entered. None, or a failed read, shows no wait row.
    inspect: Callable[[], Mapping[str, Any] | None] | None = None
    wait: str | None = None

    def __enter__(self) -> _LivePanel:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=sys.stderr, highlight=False)
        self.live = Live(_Renderable(self), console=console, refresh_per_second=4, transient=True)
        self.live.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self.live is not None:
            self.live.stop()

    def change(self, run: Mapping[str, Any], *, settled: bool) -> None:
        entered = self.run is None or self.run.get("step") != run.get("step")
        self.run = run
        self.failures = 0
        if settled:
            self.wait = None
        elif entered and self.inspect is not None:
            self.wait = wait_text(self.inspect(), run.get("step"))
        if self.live is not None:
            self.live.refresh()

    def trouble(self, failures: int) -> None:
        self.failures = failures

    def following(self, line: str) -> None:
        if self.live is not None:
            self.live.console.print(line, markup=False, highlight=False)

    def render(self) -> RenderableType:
        from rich.table import Table
        from rich.text import Text

        now = time.monotonic()
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        run = self.run
        if run is None:
            grid.add_row("Run", Text("waiting for the service's answer…"))
        else:
            grid.add_row("Run", Text(_word(run, "runId") or "-"))
            grid.add_row("Status", Text(_word(run, "status") or "-", style="bold"))
            grid.add_row("Step", Text(_word(run, "step") or "-"))
            due = _due_in(_word(run, "nextDueAt"))
            if due is not None:
                grid.add_row("Next due", Text(due))
            if self.wait is not None:
                grid.add_row("Wait", Text(self.wait))
            failure = _word(run, "failureCode")
            if failure is not None:
                grid.add_row("Failure", Text(failure))
        if self.failures:
            grid.add_row(
                "Service",
                Text(f"not answering; reading again ({self.failures} of {POLL_ATTEMPTS - 1})"),
            )
        grid.add_row("Elapsed", Text(_duration(now - self.started)))
        if self.deadline is not None:
            grid.add_row("Timeout", Text(f"in {_duration(self.deadline - now)}"))
        grid.add_row("", Text("Ctrl-C stops watching; nothing is cancelled.", style="dim"))
        return grid


@dataclass
class _Renderable:
    panel: _LivePanel

    def __rich__(self) -> RenderableType:
        return self.panel.render()


def _display(command: str, output_format: str, deadline: float | None) -> _Display:
    started = time.monotonic()
    if output_format == "json":
        return _Display(command, started, deadline)
    if output_format == "jsonl":
        return _JsonLines(command, started, deadline)
    if sys.stderr.isatty():
        return _LivePanel(command, started, deadline)
    return _Lines(command, started, deadline)


# --------------------------------------------------------------------------------------------
# The final outcomes.


def _not_finished(command: str, run: Mapping[str, Any]) -> RemoteOutcome:
    status = _word(run, "status")
    step = _word(run, "step")
    failure = _word(run, "failureCode")
    if status == "attention":
        message = f"The run needs an operator (`attention`) at step `{step}`"
    else:
        message = f"The run ended `{status}` at step `{step}`"
    message += f" (failure code `{failure}`)." if failure is not None else "."
    return RemoteOutcome(
        command,
        [Diagnostic("coordinator.command.run-not-finished", path="", message=message)],
        result={"run": dict(run)},
        forced_exit=1,
    )


def _ended(
    command: str, code: str, run: Mapping[str, Any] | None, *, forced_exit: int
) -> RemoteOutcome:
    message: str | None = None
    hint: str | None = None
    if run is not None:
        message = (
            f"The watch ended with the run `{_word(run, 'status')}` at step `{_word(run, 'step')}`;"
            " nothing was cancelled."
        )
    elif command == "start":
        message = (
            "The watch was interrupted before the service answered the admission; the run may"
            " have been admitted."
        )
        hint = (
            "Repeat the command with the same `--key-file` and the same input: the same key never"
            " admits a second run."
        )
    outcome = RemoteOutcome(
        command,
        [Diagnostic(code, path="", message=message, hint=hint)],
        result={"run": dict(run)} if run is not None else None,
        forced_exit=1,
    )
    if forced_exit != 1:
        outcome.process_exit = forced_exit
    return outcome


def _final_text(command: str, status_word: str, run_text: str | None, run_id: str) -> str | None:
    if run_text is None or command != "start":
        return run_text
    return f"{status_word.capitalize()} run {sanitize(run_id)}\n{run_text}"


# --------------------------------------------------------------------------------------------
# The loop.


def _next_read(
    run_id: str, tag: str | None, deadline: float | None, now: float
) -> tuple[ApiRequest, int]:
    """The next read of the run and how long the service may wait with it: the waiting read
    naming the last `ETag` (at most `WAIT_SECONDS`, never past the deadline), or a plain read
    (0) when there is no tag or less than a second is left."""
    wait = WAIT_SECONDS if deadline is None else min(WAIT_SECONDS, int(deadline - now))
    if tag is None or wait <= 0:
        return ApiRequest("GET", f"/v1/runs/{run_id}"), 0
    query = (("wait", str(wait)), ("seen", tag))
    return ApiRequest("GET", f"/v1/runs/{run_id}", query=query), wait


def watch(
    command: str,
    origin: str,
    token: str,
    request: ApiRequest,
    *,
    timeout: int | None,
    output_format: str,
    announce: str | None = None,
) -> Outcome:
    """Send the command's own request, then follow its run until it settles (module docstring).
    `announce` is a generated Idempotency-Key, named with the run id first."""
    from coordinatorctl.remote.exchange import exchange

    started = time.monotonic()
    deadline = started + timeout if timeout is not None else None
    display = _display(command, output_format, deadline)
    last: Mapping[str, Any] | None = None
    try:
        with display:
            answered = exchange(origin, request, token)
            outcome = outcome_of(command, answered, stdout_is_terminal=False)
            if outcome.exit_code != 0:
                return outcome
            status_word = outcome.status
            assert outcome.result is not None
            run: Mapping[str, Any] = outcome.result["run"]
            run_id = str(uuid.UUID(run["runId"]))
            what = f"{status_word.capitalize()} run" if command == "start" else "Run"
            line = f"{what} {run_id}"
            if announce is not None:
                line += f" (Idempotency-Key {sanitize(announce)})"
            display.following(line + "; following it until it settles (Ctrl-C stops watching)")
            if isinstance(display, _LivePanel):

                def inspect() -> Mapping[str, Any] | None:
                    read = ApiRequest("GET", f"/v1/runs/{run_id}/inspect")
                    found = outcome_of(
                        "inspect", exchange(origin, read, token), stdout_is_terminal=False
                    )
                    return found.result if found.exit_code == 0 else None

                display.inspect = inspect
            interval = FIRST_INTERVAL_SECONDS
            failures = 0
            tag = answered.tag if isinstance(answered, RemoteAnswer) else None
            # Whether the next read waits out a pause first: after a failed read, a read of a
            # service without the waiting read (no tag), and a waiting read that came back
            # unchanged before half its wait (a service past its bound, or stopping). The read
            # after `start`'s admission goes at once: an admission's answer has no tag, and
            # that plain read fetches it.
            pause = tag is None and request.method == "GET"
            while True:
                changed = run != last
                last = run
                settled = run.get("status") in SETTLED
                if changed:
                    display.change(run, settled=settled)
                    interval = FIRST_INTERVAL_SECONDS
                else:
                    interval = min(interval * INTERVAL_GROWTH, MAX_INTERVAL_SECONDS)
                if settled:
                    if run.get("status") != "finished":
                        return _not_finished(command, run)
                    if outcome.command != command:  # a poll's: the command's own word and text
                        outcome.command = command
                        outcome.status = status_word
                        outcome.text = _final_text(command, status_word, outcome.text, run_id)
                    return outcome
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return _ended(command, "coordinator.command.watch-timeout", run, forced_exit=1)
                read, wait = _next_read(run_id, tag, deadline, now)
                if pause or (wait == 0 and tag is not None):  # or under a second is left
                    time.sleep(interval if deadline is None else min(interval, deadline - now))
                    read, wait = _next_read(run_id, tag, deadline, time.monotonic())
                seen, began = tag, time.monotonic()
                answered = exchange(origin, read, token)
                polled = outcome_of("status", answered, stdout_is_terminal=False)
                if isinstance(answered, RemoteAnswer) and answered.status == 200:
                    tag = answered.tag
                early = time.monotonic() - began < wait / 2 and tag == seen
                pause = polled.exit_code != 0 or tag is None or early
                if polled.exit_code == 3 and failures + 1 < POLL_ATTEMPTS:
                    failures += 1  # unreachable, timed out or 5xx: read again at the next pause
                    display.trouble(failures)
                    continue
                if polled.exit_code != 0:
                    polled.command = command
                    polled.result = {**(polled.result or {}), "run": dict(last)}
                    return polled
                if failures:
                    failures = 0
                    display.trouble(0)
                outcome = polled
                assert outcome.result is not None
                run = outcome.result["run"]
    except KeyboardInterrupt:
        return _ended(
            command, "coordinator.command.watch-interrupted", last, forced_exit=INTERRUPTED_EXIT
        )
