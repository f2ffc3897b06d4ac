"""Benchmark: the pure-function interpreter's speed on this machine.

Prints plain `name value` lines: operations per second of the evaluator, the time of a call
that spends ~75,000 operations in a tight `for` loop (three quarters of the 100,000 budget),
the time of a trivial call measured in the same run, and their ratio. The goal is that the
worst-case budget stays under 0.1 s. Also: a `while` loop of the same budget, a map/string
workload, and compiling a ~60 KB functions file.

Run: `python scripts/bench_functions.py` (`nox -s bench -- functions`); `--smoke` measures
each figure once (CI: `nox -s bench_smoke`), so it proves the bench runs and means nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from coordinator_core.functions import compile_functions
from coordinator_core.functions.compiler import invoke
from coordinator_core.functions.rvalues import Ctx

GOAL_SECONDS = 0.1
RUNS = 15
SMOKE = False  # --smoke: every median of one sample

SOURCE = """
fn trivial() { 1 }
fn for_loop(n) { let t = 0; for i in 0..n { t += i; } t }
fn while_loop(n) { let i = 0; let t = 0; while i < n { t += i; i += 1; } t }
fn mixed(n) {
    let m = #{};
    let s = "";
    for i in 0..n {
        let k = `k${i % 50}`;
        m[k] = (m[k] ?? 0) + i;
        if i % 7 == 0 { s += "x"; }
    }
    #{count: m.len(), total: m.values().len(), text: s}
}
"""


def median_seconds(action: Callable[[], object], runs: int = RUNS) -> float:
    samples = []
    for _ in range(1 if SMOKE else runs):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def operations(program: object, name: str, args: list[object]) -> int:
    """The operations a call spends, read from a fresh per-call context."""
    fns = program._fns  # type: ignore[attr-defined]  # the benchmark may look inside
    ctx = Ctx()
    invoke(fns[name], args, ctx)
    return ctx.ops


def size_for(program: object, name: str, target: int) -> tuple[int, int]:
    """The loop size whose call spends closest to `target` operations."""
    per_item = operations(program, name, [1000]) / 1000
    n = int(target / per_item)
    return n, operations(program, name, [n])


def big_source() -> str:
    lines = []
    for i in range(120):
        lines.append(
            f"fn f{i}(x, y) {{\n"
            f"    let total = 0;\n"
            f'    for item in x.items {{ if item.n > {i} && item.tag != "skip" {{ total += item.n; }} }}\n'
            f"    let names = [];\n"
            f"    for (entry, index) in x.entries {{\n"
            f"        if entry?.name != () {{ names.push(`${{index}}:${{entry.name}}`); }}\n"
            f"    }}\n"
            f'    let summary = #{{ total: total, names: names, first: names.get(0) ?? "none" }};\n'
            f"    switch y {{ 1 => total, 2 | 3 => total * 2, 4..=9 => -total, _ => summary }}\n"
            f"}}\n"
        )
    return "".join(lines)


def main() -> None:
    global SMOKE  # noqa: PLW0603 - one process, one setting
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="one sample per figure (CI)")
    SMOKE = parser.parse_args().smoke
    if SMOKE:
        print("# SMOKE RUN: one sample per figure, the figures mean nothing")
    compiled = compile_functions(SOURCE)
    assert compiled.program is not None, compiled.errors
    program = compiled.program

    trivial = median_seconds(lambda: program.call("trivial", []), runs=2000)
    n_for, ops_for = size_for(program, "for_loop", 75_000)
    n_while, ops_while = size_for(program, "while_loop", 75_000)
    n_mixed, ops_mixed = size_for(program, "mixed", 75_000)
    t_for = median_seconds(lambda: program.call("for_loop", [n_for]))
    t_while = median_seconds(lambda: program.call("while_loop", [n_while]))
    t_mixed = median_seconds(lambda: program.call("mixed", [n_mixed]))

    source = big_source()
    t_compile = median_seconds(lambda: compile_functions(source), runs=5)

    print(f"functions.ops_per_second {ops_for / t_for:.0f}")
    print(f"functions.for_loop_operations {ops_for}")
    print(f"functions.for_loop_seconds {t_for:.4f}")
    print(f"functions.trivial_call_seconds {trivial:.7f}")
    print(f"functions.for_loop_to_trivial_ratio {t_for / trivial:.0f}")
    print(f"functions.while_loop_operations {ops_while}")
    print(f"functions.while_loop_seconds {t_while:.4f}")
    print(f"functions.mixed_operations {ops_mixed}")
    print(f"functions.mixed_seconds {t_mixed:.4f}")
    print(f"functions.compile_bytes {len(source.encode())}")
    print(f"functions.compile_seconds {t_compile:.4f}")
    worst = max(t_for, t_while, t_mixed) * 100_000 / 75_000
    print(f"functions.full_budget_estimate_seconds {worst:.4f}")
    print(f"functions.goal_seconds {GOAL_SECONDS}")
    print(f"functions.within_goal {'yes' if worst < GOAL_SECONDS else 'no'}")


if __name__ == "__main__":
    main()
