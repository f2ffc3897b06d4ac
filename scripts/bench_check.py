"""Benchmark: a whole `coordinatorctl check` process on a 64-step project.

Prints the median of 5 runs next to two baselines measured in the same run: a bare Python
interpreter start (`python -c pass`) and `coordinatorctl --help`-free import of the CLI module,
so the ratio shows what checking itself costs on this machine. `--smoke` runs each command
once (CI: `nox -s bench_smoke`), so it proves the bench runs and means nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 5


def synthetic_project(directory: Path, steps: int = 64) -> None:
    """A valid project of `steps` steps: alternating calls and chooses ending in one finish."""
    lines = [
        "apiVersion: id.registrystack.org/formats/coordinator/project/v1alpha1",
        "kind: CoordinatorProject",
        "project:",
        "  id: bench-sixty-four",
        '  version: "1"',
        "input:",
        "  type: object",
        "  properties:",
        "    recordId: {type: string, format: uuid}",
        "operations:",
        "  record:",
        "    operation: breg.read-record/v1",
        "    connection: registry",
        "functionsFile: functions.rhai",
        "deadlineSeconds: 86400",
        "start: step-0",
        "steps:",
    ]
    for index in range(steps - 1):
        this, following = f"step-{index}", f"step-{index + 1}"
        if index % 2 == 0:
            lines += [
                f"  {this}:",
                "    type: call",
                f"    title: Read the record, pass {index}",
                "    operation: record",
                "    input:",
                "      function: read_request",
                "      arguments:",
                "        - type: input",
            ]
            if index >= 2:
                lines += ["        - type: step", f"          step: step-{index - 2}"]
            else:
                lines += ["        - type: literal", "          value: first"]
            lines += [f"    next: {following}"]
        else:
            lines += [
                f"  {this}:",
                "    type: choose",
                "    choose:",
                "      function: route",
                "      arguments:",
                "        - type: step",
                f"          step: step-{index - 1}",
                "    cases:",
                f"      onward: {following}",
                f"      again: {following}",
            ]
    lines += [
        f"  step-{steps - 1}:",
        "    type: finish",
        "    outcome: done",
        "outcomes:",
        "  done:",
        '    type: "null"',
    ]
    (directory / "workflow.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "functions.rhai").write_text(
        "fn read_request(input, previous) {\n"
        '    #{ collection: "records", recordId: input.recordId }\n'
        "}\n"
        "fn route(record) {\n"
        '    if record.data == () { "again" } else { "onward" }\n'
        "}\n",
        encoding="utf-8",
    )


def median_seconds(command: list[str], runs: int = RUNS) -> float:
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, check=False)
        samples.append(time.perf_counter() - began)
        if completed.returncode != 0:
            sys.stderr.write(completed.stderr.decode("utf-8", "replace"))
            raise SystemExit(f"command failed: {' '.join(command)}")
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="each command once (CI)")
    runs = 1 if parser.parse_args().smoke else RUNS
    if runs == 1:
        print("# SMOKE RUN: each command once, the figures mean nothing")
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        synthetic_project(project)
        python = median_seconds([sys.executable, "-c", "pass"], runs)
        imports = median_seconds([sys.executable, "-c", "import coordinatorctl.cli"], runs)
        check = median_seconds(
            [sys.executable, "-m", "coordinatorctl", "check", "--project", str(project)], runs
        )
    print(f"check.python_start_seconds {python:.4f}")
    print(f"check.cli_import_seconds {imports:.4f}")
    print(f"check.64_steps_process_seconds {check:.4f}  (median of {runs}; goal < 0.3)")
    print(f"check.ratio_to_python_start {check / python:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
