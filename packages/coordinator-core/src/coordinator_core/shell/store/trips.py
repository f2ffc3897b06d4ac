"""Many statements in one round trip on PostgreSQL, on libpq's pipeline mode directly.

psycopg's own pipeline (`Connection.pipeline()`) sends each statement as it is executed and
looks for answers after every one: for the five statements of an inspection that is five
sends, ten polls and five passes through its generators, each send waking the server for a
few bytes. A `Trip` keeps the statements of a block (`dialect.pipelined`) until the block
ends, then sends them all with one sync and one flush, and reads every answer once, through
psycopg's public `pq` layer and its `Transformer` (the same dumpers and loaders a cursor
uses). Measured on this machine's PostgreSQL, five one-row reads: 190–250 µs of the client's
CPU and 320–390 µs of wall time through psycopg's pipeline, 30 µs and 70 µs as one trip.

What a trip keeps per connection (`TripState`): the names of the statements it prepared on
that connection (named server-side statements, as psycopg's prepared statements are; a name is
remembered only once the server answered its preparation), and a `Transformer`. A statement
whose plan asks never to be prepared is sent unnamed, planned with its parameters each time.

The first failed statement is raised as psycopg raises it (`psycopg.errors`, with its
SQLSTATE) once every answer up to the sync has been read, so the connection is left idle in
the transaction the failure aborted. A failure of the connection itself (a send, flush or
read that libpq refuses, or anything else raised between the first send and the last
answer) closes it: what the server received is unknown, and a closed connection is what the
pool and the store's retry rules already treat as lost.
"""

from __future__ import annotations

import itertools
import select
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer

__all__ = ["MAX_PREPARED", "Trip", "TripRows", "TripState"]

_STATES: Final = itertools.count()
MAX_PREPARED: Final = 512
"""Statements a connection keeps prepared at most; past that, all are deallocated and
prepared again as they come (the store has fewer distinct statements than that)."""
_OK: Final = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
_BINARY: Final = pq.Format.BINARY
"""Rows come in PostgreSQL's binary form: no text to parse for an instant, no hex for bytes
(on either side), the same Python values from psycopg's loaders."""


class TripState:
    """What trips keep of one driver connection: its prepared statements and a transformer.
    Each state names its statements with a prefix of its own and never gives a name twice, so
    that no name meets one prepared earlier on the session (by an earlier state, or before a
    deallocation that failed)."""

    __slots__ = ("_made", "driver", "names", "prefix", "transformer")

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self.prefix = b"coordinator_%d_" % next(_STATES)
        self.transformer = Transformer(driver)
        self._made = itertools.count()

    def new_name(self) -> bytes:
        """A name never given before on this state's session (not after a deallocation or a
        failed preparation either)."""
        return self.prefix + b"%d" % next(self._made)


class TripRows:
    """The rows one statement of a trip answers; reading them sends the trip if it has not
    been sent yet (as psycopg's pipeline syncs when a result is fetched)."""

    __slots__ = ("_rows", "_trip")

    def __init__(self, trip: Trip) -> None:
        self._trip: Trip | None = trip
        self._rows: list[tuple[Any, ...]] | None = None

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._rows is None and self._trip is not None:
            self._trip.send_queued()
        if self._rows is None:
            raise RuntimeError("The statement's trip failed; it answered no rows.")
        return self._rows

    def close(self) -> None:
        self._trip = None


@dataclass(slots=True)
class _Queued:
    sql: bytes
    params: Sequence[Any] | None
    types: Sequence[int]
    formats: Sequence[Any] | None
    prepare: bool
    rows: TripRows | None


class Trip:
    """The statements of one block on one connection, sent together by `send`."""

    __slots__ = ("_queued", "_sender", "_state")

    def __init__(self, state: TripState, sender: Callable[[Trip], None] | None = None) -> None:
        """`sender` sends the trip for `TripRows.fetchall` (the store's, which raises a
        failure as SQLAlchemy raises it); `send` itself by default."""
        self._state = state
        self._queued: list[_Queued] = []
        self._sender = sender

    @property
    def pending(self) -> bool:
        return bool(self._queued)

    def add(self, sql: bytes, params: Sequence[Any] | None, *, prepare: bool = True) -> TripRows:
        """Queue `sql` (with `$n` placeholders) and its parameters, dumped now as a cursor
        dumps them; answers the handle of its rows."""
        transformer = self._state.transformer
        if params:
            dumped = transformer.dump_sequence(params, [PyFormat.AUTO] * len(params))
            types: Sequence[int] = transformer.types or ()
            formats: Sequence[Any] | None = transformer.formats
        else:
            dumped, types, formats = None, (), None
        rows = TripRows(self)
        self._queued.append(_Queued(sql, dumped, types, formats, prepare, rows))
        return rows

    def command(self, sql: bytes) -> None:
        """Queue a statement without parameters whose answer is not read (BEGIN, COMMIT)."""
        self._queued.append(_Queued(sql, None, (), None, False, None))

    def send_queued(self) -> None:
        """Send what is queued through the trip's sender."""
        if self._sender is None:
            self.send()
        else:
            self._sender(self)

    def discard(self) -> None:
        """Forget what is queued (the block failed before it was sent)."""
        self._queued.clear()

    def send(self) -> None:
        """Send what is queued in one pipeline with one sync, begin the driver's transaction
        first when it has none and is not in autocommit (as a cursor would), and read every
        answer; raises the first failed statement's error."""
        queued, self._queued = self._queued, []
        if not queued:
            return
        state = self._state
        driver = state.driver
        pgconn = driver.pgconn
        if len(state.names) >= MAX_PREPARED:
            queued.insert(0, _Queued(b"DEALLOCATE ALL", None, (), None, False, None))
            state.names.clear()  # a connection keeps a bounded number of statements
        if not driver.autocommit and pgconn.transaction_status == pq.TransactionStatus.IDLE:
            queued.insert(0, _Queued(driver._get_tx_start_command(), None, (), None, False, None))
        names = state.names
        new_names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}  # prepared by this trip
        preparing: dict[int, tuple[bytes, tuple[int, ...]]] = {}  # answer index -> its key
        answers: list[TripRows | None] = []
        try:
            pgconn.enter_pipeline_mode()
            for item in queued:
                types = item.types or None
                if not item.prepare:
                    pgconn.send_query_params(item.sql, item.params, types, item.formats, _BINARY)
                    answers.append(item.rows)
                    continue
                key = (item.sql, tuple(item.types))
                name = names.get(key) or new_names.get(key)
                if name is None:
                    name = state.new_name()
                    new_names[key] = name
                    preparing[len(answers)] = key
                    pgconn.send_prepare(name, item.sql, types)
                    answers.append(None)
                pgconn.send_query_prepared(name, item.params, item.formats, _BINARY)
                answers.append(item.rows)
            pgconn.pipeline_sync()
            _flush(pgconn)
            results = _read_to_sync(pgconn, len(answers))
            pgconn.exit_pipeline_mode()
        except BaseException:
            pgconn.finish()  # the protocol's state is unknown: the connection is lost
            raise
        failure: BaseException | None = None
        transformer = state.transformer
        for index, (result, rows) in enumerate(zip(results, answers, strict=True)):
            status = None if result is None else result.status
            if status == pq.ExecStatus.FATAL_ERROR and failure is None:
                failure = errors.error_from_result(result, encoding=driver.info.encoding)
                if isinstance(failure, errors.InvalidSqlStatementName):
                    names.clear()  # deallocated behind the store's back: prepare them again
            if status not in _OK:
                continue
            prepared = preparing.get(index)
            if prepared is not None:
                names[prepared] = new_names[prepared]
            if rows is not None:
                transformer.set_pgresult(result)
                rows._rows = transformer.load_rows(0, result.ntuples, tuple)
        if failure is not None:
            raise failure


def _wait(pgconn: Any, events: int) -> int:
    poller = select.poll()
    poller.register(pgconn.socket, events)
    ready = poller.poll()
    return ready[0][1] if ready else 0


def _flush(pgconn: Any) -> None:
    """libpq's non-blocking flush: when it cannot send all, wait for the socket; read what the
    server sends meanwhile so that neither side waits for the other."""
    while pgconn.flush():
        ready = _wait(pgconn, select.POLLIN | select.POLLOUT)
        if ready & select.POLLIN:
            pgconn.consume_input()


def _read_to_sync(pgconn: Any, count: int) -> list[Any]:
    """The answer of each of `count` queued statements (the last result of each, or None),
    read up to the pipeline's sync."""
    answers: list[Any] = []
    current: Any = None
    while True:
        while pgconn.is_busy():
            _wait(pgconn, select.POLLIN)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            answers.append(current)
            current = None
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            if len(answers) != count:
                raise errors.InternalError("The pipeline answered another number of statements.")
            return answers
        current = result
