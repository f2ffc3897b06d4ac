"""Benchmark: what a read costs the serving process — our status GET, inspection and run list
beside the peer's status read and its reads of the same kinds.

Issue 25 item 3 asks that a status GET, an inspect and a list cost no more CPU of `coordinator
serve` than the peer's status read costs the peer. This script builds what
`scripts/bench_service.py` builds (the same project, sandbox, PostgreSQL store and caller
token; the same peer, DBOS Transact 3.4, `scripts/bench_peer/dbos_app.py`, on a system database
of its own, with the same authenticated admission), starts `coordinator serve` and one peer
process side by side, and lets each finish `--runs` runs (default 50) admitted through its
own API. Then, in rounds, one client thread (this process) sends `--requests` (default 2,000)
back-to-back reads of one kind over one keep-alive `httpx` client, a window per kind:

* `status`: ours, `GET /v1/runs/{run}` (06 §5.3);
* `inspect`: ours, `GET /v1/runs/{run}/inspect` (06 §5.4);
* `list`: ours, `GET /v1/runs?limit=20` (06 §5.2);
* `peer`: the peer, `GET /runs/{id}`: the caller's token checked as its admission checks it,
  then `DBOS.get_workflow_status_async`, as JSON (`run_status` in the peer's app says what it
  leaves out that ours does: the audit journal, visibility, the spec's body and validation).
* `peer-inspect`: the peer, `GET /runs/{id}/steps`: the same status and the workflow's steps
  (`DBOS.list_workflow_steps_async`, outputs not loaded), the counterpart of our inspection;
* `peer-list`: the peer, `GET /runs?limit=20`: the newest 20 statuses
  (`DBOS.list_workflows_async`, inputs not loaded), the counterpart of our list.

The peer's status read is always measured (issue 25 sets every read of ours against it: the
`cpu/peer` column); each of ours is also set against the peer's read of the same kind (the
`cpu/like` column), which does the like work.

The reads cycle over the finished runs' ids. Each window first sends `WARM_UP` reads of its
kind that are not measured, then measures: the serving process's CPU (`/proc/<pid>/stat`
utime+stime, all its threads: serve's, or the peer's) per read, the whole PostgreSQL server's
CPU per read (server-wide: other users count too), the client's, and what the machine spent
outside those (in % of one core: other users' work, the kernel's); the latency of each read
from the client's side (p50, p99); the 1-minute load average at the window's start and end. The
windows of a round run in the reverse order of the round before, so that a drift of the
machine's load does not read as a ratio. Each figure printed is the median over the rounds; the
ratios ours/peer (CPU per read, p50) are taken within each round against that round's peer
window (the status read, and the read of the same kind), then their median.

What "fair" means here: both servers are uvicorn on uvloop with httptools, on the same
loopback, answering the same caller token (each remembers a verified token and checks its
claims on every request), both processes started once before the rounds and left running
through them (each idle while the other is measured), both reading a run from their own
PostgreSQL database. The work differs where the products differ: ours journals each read's
request and response entries to the audit journal (not waiting for the fsync, 07 §7.7 item 5),
checks the run's visibility to the caller, validates the request against the spec and renders
the spec's body; the peer reads DBOS's own status row.

Run: `nox -s bench -- reads` (which builds the peer's environment), or `python
scripts/bench_reads.py --peer-python PATH [--runs N] [--requests N] [--rounds R] [--kinds
status,inspect,list] [--profile DIR [--profile-rate HZ]]`. `--profile DIR` then records the
serving process with py-spy (`record --gil -f raw`, the py-spy beside this Python or on PATH;
`--profile-rate` samples per second, 1,000 unless given) during one more window of each kind,
writes the folded stacks to DIR and prints the heaviest frames.
`--smoke` runs one round of 20 reads of each kind after 5 runs (CI: `nox -s bench_smoke`).
Loopback only; every process started is stopped and every database dropped whatever happens.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from bench_service import (
    ADMIN_URL_VARIABLE,
    DEFAULT_ADMIN_URL,
    DEFAULT_PEER_PYTHON,
    TLS,
    Bench,
    BenchError,
    Row,
    cpu_seconds,
    machine_cpu_seconds,
    median,
    one_at_a_time,
    percentile,
    postgres_cpu_seconds,
    table,
    with_bench,
)

from coordinator_sandbox.testing import KitFailure

OURS = ("status", "inspect", "list")
PEER = "peer"
LIKE = {"status": PEER, "inspect": "peer-inspect", "list": "peer-list"}
"""The peer's read of the same kind as each of ours: what `cpu/like` divides by."""
KINDS = (*OURS, PEER, "peer-inspect", "peer-list")
LINE_NUMBER = re.compile(r":\d+\)$")
RUNNER = "Runner.run (asyncio/runners.py)"  # the event loop's, in a py-spy frame
WARM_UP = 50  # unmeasured reads at the start of each window (at most --requests)
SMOKE = {"runs": 5, "requests": 20, "rounds": 1}
DEFAULTS = {"runs": 50, "requests": 2000, "rounds": 3}


def path_of(kind: str, run_id: str) -> str:
    if kind == "status":
        return f"/v1/runs/{run_id}"
    if kind == "inspect":
        return f"/v1/runs/{run_id}/inspect"
    if kind == "list":
        return "/v1/runs?limit=20"
    if kind == "peer-inspect":
        return f"/runs/{run_id}/steps"
    if kind == "peer-list":
        return "/runs?limit=20"
    return f"/runs/{run_id}"


def check_answer(kind: str, answer: httpx.Response) -> None:
    """The first answer of a window says the read reads what it should (the others: 200)."""
    body = answer.json()
    if kind == "inspect":
        read = body["run"]["status"] == "finished"
    elif kind == "peer-inspect":
        read = body["run"]["status"] == "SUCCESS" and len(body["steps"]) > 0
    elif kind in ("list", "peer-list"):
        read = len(body["runs"]) > 0
    else:
        read = body["status"] == ("SUCCESS" if kind == PEER else "finished")
    if not read:
        raise BenchError(f"{kind} answered {answer.text[:500]}")


@dataclass
class Window:
    """One kind's window: `requests` reads, the CPU they cost, their latencies."""

    kind: str
    requests: int
    elapsed: float
    server_cpu: float  # the serving process: serve, or the peer
    postgres_cpu: float
    client_cpu: float
    other_cpu_percent: float
    latencies: list[float]
    load: tuple[float, float]

    def per_read_ms(self, seconds: float) -> float:
        return 1000 * seconds / self.requests


def read_window(
    origin: str, token: str, kind: str, run_ids: Sequence[str], requests: int, pid: int
) -> Window:
    """`requests` back-to-back reads of `kind` over one keep-alive client, after WARM_UP."""
    headers = {"Authorization": "Bearer " + token}
    latencies: list[float] = []
    with httpx.Client(base_url=origin, headers=headers, timeout=30, verify=TLS) as client:

        def read(index: int) -> httpx.Response:
            answer = client.get(path_of(kind, run_ids[index % len(run_ids)]))
            if answer.status_code != 200:
                raise BenchError(f"{kind} answered {answer.status_code}: {answer.text[:500]}")
            return answer

        check_answer(kind, read(0))
        for index in range(1, min(WARM_UP, requests)):
            read(index)
        load_before = os.getloadavg()[0]
        server_before, postgres_before = cpu_seconds(pid), postgres_cpu_seconds()
        client_before, machine_before = time.process_time(), machine_cpu_seconds()
        began = time.perf_counter()
        for index in range(requests):
            start = time.perf_counter()
            read(index)
            latencies.append(time.perf_counter() - start)
        elapsed = time.perf_counter() - began
        server = cpu_seconds(pid) - server_before
        postgres = postgres_cpu_seconds() - postgres_before
        client_cpu = time.process_time() - client_before
        other = machine_cpu_seconds() - machine_before - server - postgres - client_cpu
    return Window(
        kind,
        requests,
        elapsed,
        server,
        postgres,
        client_cpu,
        100 * other / elapsed,
        latencies,
        (load_before, os.getloadavg()[0]),
    )


def describe(window: Window) -> str:
    return (
        f"{window.kind}: {window.requests / window.elapsed:.0f} reads/s, server CPU "
        f"{window.per_read_ms(window.server_cpu):.2f} ms/read, PostgreSQL "
        f"{window.per_read_ms(window.postgres_cpu):.2f} ms/read, p50 "
        f"{1000 * median(window.latencies):.2f} ms; 1-min load {window.load[0]:.2f} -> "
        f"{window.load[1]:.2f}; other processes {window.other_cpu_percent:.0f}% of a core"
    )


# -- the profile ----------------------------------------------------------------------------


def py_spy() -> str:
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if found is None:
        raise BenchError("--profile needs py-spy beside this Python or on PATH")
    return found


def heaviest(folded: Path, top: int, own: str) -> list[str]:
    """A summary of `folded` (py-spy's raw output: `frame;frame;… count` per line), line
    numbers dropped so that a function counts as one: the `top` functions by their own samples
    (the stack's last frame), then the `top` functions of the side's own code (frames whose file
    starts with `own`) by their inclusive samples (counted once per stack in which they appear),
    but for the frames above the event loop's runner (the process's `main`, which every request
    passes through), each as a share of all samples."""
    stacks: list[tuple[list[str], int]] = []
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            stacks.append(([LINE_NUMBER.sub(")", f) for f in stack.split(";")], int(count)))
    total = sum(samples for _, samples in stacks)
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, samples in stacks:
        leaves[frames[-1]] += samples
        below = frames[frames.index(RUNNER) :] if RUNNER in frames else frames
        for frame in set(below):
            if "(" + own in frame:
                inclusive[frame] += samples
    lines = [f"{total} samples; by their own samples:"]
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in leaves.most_common(top)]
    lines.append(f"{own}* functions, inclusive (below the event loop's runner):")
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)]
    return lines


def profile(token: str, targets: Callable[[str], Target], arguments: argparse.Namespace) -> None:
    """One more window of each kind with py-spy recording the serving process (`--gil`: the
    samples that hold the GIL, the Python CPU), its folded stacks written to `--profile`."""
    directory = Path(arguments.profile)
    directory.mkdir(parents=True, exist_ok=True)
    for kind in arguments.kinds:
        origin, run_ids, pid = targets(kind)
        output = directory / f"{'peer' if kind.startswith(PEER) else 'serve'}-{kind}.txt"
        recorder = subprocess.Popen(
            [
                py_spy(),
                "record",
                "--gil",
                "--rate",
                str(arguments.profile_rate),
                "-p",
                str(pid),
                "-f",
                "raw",
                "-o",
                str(output),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            time.sleep(1.0)  # py-spy attaches
            read_window(origin, token, kind, run_ids, arguments.requests, pid)
        finally:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            _, errors = recorder.communicate(timeout=60)
        if not output.exists():
            raise BenchError(f"py-spy wrote no profile: {errors.decode(errors='replace')[-500:]}")
        print(f"# profile of {NAMES[kind]} (the samples holding the GIL), {output}:")
        own = "dbos" if kind.startswith(PEER) else "coordinator_"
        print("\n".join("#   " + line for line in heaviest(output, 20, own)))


# -- the rounds -----------------------------------------------------------------------------


Results = dict[str, list[Window]]
Target = tuple[str, list[str], int]  # a kind's origin, the run ids it reads, the serving pid


def measure(arguments: argparse.Namespace) -> Callable[[Bench], Results]:
    def rounds(bench: Bench) -> Results:
        serve = bench.start_configuration("serve")["serve"]
        peer = bench.start_configuration("dbos")["peer"]
        run_ids: dict[str, list[str]] = {}
        for side, origin, configuration in (
            ("ours", bench.origin, "serve"),
            ("peer", bench.peer_origin, "dbos"),
        ):
            poller = bench.poller(configuration)
            try:
                finished = one_at_a_time(
                    origin, bench.token, bench.revision, bench.applications, poller
                )
            finally:
                poller.close()
            run_ids[side] = finished.run_ids
        sides = {
            "ours": (bench.origin, run_ids["ours"], serve.pid),
            "peer": (bench.peer_origin, run_ids["peer"], peer.pid),
        }

        def targets(kind: str) -> Target:
            return sides["peer" if kind.startswith(PEER) else "ours"]

        kinds = [kind for kind in KINDS if kind in arguments.kinds]
        results: Results = {kind: [] for kind in kinds}
        began = time.monotonic()
        for index in range(arguments.rounds):
            order = kinds if index % 2 == 0 else list(reversed(kinds))
            print(f"# round {index + 1}/{arguments.rounds}, order: {', '.join(order)}", flush=True)
            for kind in order:
                origin, ids, pid = targets(kind)
                window = read_window(origin, bench.token, kind, ids, arguments.requests, pid)
                results[kind].append(window)
                print(f"#   ({time.monotonic() - began:.0f} s) {describe(window)}", flush=True)
        if arguments.profile:
            profile(bench.token, targets, arguments)
        bench.processes.stop_all([serve, peer], grace=20)
        return results

    return rounds


def summarise(results: Results) -> list[Row]:
    rows = []
    peer = results.get(PEER)
    for kind, windows in results.items():
        figures = {
            "reads_per_second": median([w.requests / w.elapsed for w in windows]),
            "p50_ms": median([1000 * median(w.latencies) for w in windows]),
            "p99_ms": median([1000 * percentile(w.latencies, 0.99) for w in windows]),
            "server_cpu_ms": median([w.per_read_ms(w.server_cpu) for w in windows]),
            "postgres_cpu_ms": median([w.per_read_ms(w.postgres_cpu) for w in windows]),
            "client_cpu_ms": median([w.per_read_ms(w.client_cpu) for w in windows]),
            "load": median([w.load[1] for w in windows]),
            "load_max": max(max(w.load) for w in windows),
            "other_cpu_percent": median([w.other_cpu_percent for w in windows]),
        }
        like = results.get(LIKE.get(kind, ""))
        for name, baseline in (("peer", peer), ("like", like)):
            if kind.startswith(PEER) or baseline is None:
                continue
            pairs = list(zip(windows, baseline, strict=True))
            figures[f"cpu_ratio_to_{name}"] = median(
                [w.server_cpu / w.requests / (p.server_cpu / p.requests) for w, p in pairs]
            )
            figures[f"p50_ratio_to_{name}"] = median(
                [median(w.latencies) / median(p.latencies) for w, p in pairs]
            )
        rows.append(Row(kind, 1, figures))
    return rows


COLUMNS = (
    ("reads/s", "reads_per_second", "{:.0f}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("server", "server_cpu_ms", "{:.2f}"),
    ("cpu/peer", "cpu_ratio_to_peer", "{:.2f}"),
    ("p50/peer", "p50_ratio_to_peer", "{:.2f}"),
    ("cpu/like", "cpu_ratio_to_like", "{:.2f}"),
    ("p50/like", "p50_ratio_to_like", "{:.2f}"),
    ("pg*", "postgres_cpu_ms", "{:.2f}"),
    ("client", "client_cpu_ms", "{:.2f}"),
    ("load", "load", "{:.2f}"),
    ("load max", "load_max", "{:.2f}"),
    ("other cpu%", "other_cpu_percent", "{:.0f}"),
)
NAMES = {
    "status": "ours: GET /v1/runs/{run}",
    "inspect": "ours: GET /v1/runs/{run}/inspect",
    "list": "ours: GET /v1/runs?limit=20",
    PEER: "peer: GET /runs/{id} (DBOS 3.4.0)",
    "peer-inspect": "peer: GET /runs/{id}/steps",
    "peer-list": "peer: GET /runs?limit=20",
}
LEGEND = """\
c: one client thread, reads back to back over one keep-alive connection. reads/s, p50, p99:
as the client saw them. server: CPU ms per read of the serving process (serve, or the peer's
one process); cpu/peer, p50/peer: ours over the peer's status read (the issue's baseline),
per round, then the median; cpu/like, p50/like: the same over the peer's read of the same
kind (its status; its status and steps; its newest 20 statuses). pg*: CPU ms per read of the
whole PostgreSQL server (server-wide). client: this script's CPU ms per read. load: the
1-minute load average at the windows' end (median; load max: the highest at any window's
start or end). other cpu%: CPU the machine spent outside the serving process, PostgreSQL and
the client during a window, in % of one core (median)."""


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so that every `finally` stops processes and drops databases


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, help="finished runs to read (default 50)")
    parser.add_argument("--requests", type=int, help="reads per window (default 2000)")
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    parser.add_argument(
        "--kinds",
        default=",".join(OURS),
        help=f"comma-separated subset of {','.join(OURS)} (default all; the peer's status read "
        "always, and the peer's read of each kind chosen)",
    )
    parser.add_argument(
        "--peer-python",
        default=str(DEFAULT_PEER_PYTHON),
        help="the Python of the peer's environment (default .nox/bench_peer/bin/python)",
    )
    parser.add_argument("--profile", help="a directory: record serve with py-spy afterwards")
    parser.add_argument(
        "--profile-rate",
        type=int,
        default=1000,
        help="py-spy's samples per second with --profile (default 1000; py-spy's own default, "
        "100, leaves a few hundred samples per window, too few to rank a function under 5%%)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: 5 runs, 20 reads per window, one round (what is not given); it "
        "proves the bench runs, its figures mean nothing",
    )
    arguments = parser.parse_args(argv)
    for name, default in (SMOKE if arguments.smoke else DEFAULTS).items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, default)
    if arguments.runs < 1 or arguments.requests < 1 or arguments.rounds < 1:
        parser.error("--runs, --requests and --rounds must be at least 1")
    kinds = [part.strip() for part in arguments.kinds.split(",")]
    if not kinds or set(kinds) - set(OURS):
        parser.error(f"--kinds takes names of {', '.join(OURS)}")
    arguments.kinds = [*kinds, *dict.fromkeys([PEER, *(LIKE[kind] for kind in kinds)])]
    if not Path(arguments.peer_python).exists():
        parser.error(f"no peer environment at {arguments.peer_python} (nox -s bench -- reads)")
    # What bench_service's preparation reads: the one serve and the one peer it builds, with
    # bench_service's defaults (its worker loops, their poll, the peer started at once).
    arguments.configurations = ["serve", "dbos"]
    arguments.worker_concurrency, arguments.poll_ms = 4, 20
    arguments.peer_start, arguments.peer_concurrency, arguments.peer_processes = "direct", 0, 1
    arguments.peer_sqlite_journal = "default"
    arguments.extra_reads, arguments.prefill = 0, 0  # the service bench's own workflow and store
    admin_url = os.environ.get(ADMIN_URL_VARIABLE, DEFAULT_ADMIN_URL)
    signal.signal(signal.SIGTERM, _stop)
    began = time.monotonic()
    print(
        f"# bench_reads: {arguments.runs} finished runs, {arguments.requests} reads per window, "
        f"{arguments.rounds} rounds, alternating; 1-minute load average at the start "
        f"{os.getloadavg()[0]:.2f}; {os.cpu_count()} cores"
        + ("; SMOKE RUN: the figures mean nothing" if arguments.smoke else ""),
        flush=True,
    )
    try:
        results = with_bench(admin_url, arguments, measure(arguments))
    except (BenchError, KitFailure) as error:
        print(f"bench_reads: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench_reads: interrupted; processes stopped, databases dropped", file=sys.stderr)
        return 130
    rows = summarise(results)
    print(
        f"# {arguments.requests} reads per window over {arguments.runs} finished runs, "
        f"{arguments.rounds} rounds (alternating), medians over the rounds; CPU ms per read:"
    )
    print(table(rows, COLUMNS, NAMES))
    print("\n".join("# " + line for line in LEGEND.splitlines()))
    loads = [value for windows in results.values() for w in windows for value in w.load]
    print(
        f"# 1-minute load average {min(loads):.2f}-{max(loads):.2f} over the windows; the whole "
        f"benchmark took {time.monotonic() - began:.0f} s"
    )
    for row in rows:
        for key, value in row.figures.items():
            if not math.isnan(value):
                shown = f"{value:.1f}" if abs(value) >= 10 else f"{value:.4g}"
                print(f"reads.{row.configuration}.{key} {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
