"""The pictures of `explain --graph` and `inspect --graph` (docs/graphs.md): drawing is pure
(coordinator_core.checking.explain.render_graph); this module does the I/O around it — finding
a PNG converter, running it, and writing `--output FILE`.

`mermaid`, `dot` and `svg` are text, printed on stdout unless `--output` names a file. `png` is
the SVG rasterised by a converter that is already installed — the `cairosvg` Python package,
`rsvg-convert` (librsvg) or, failing both, Graphviz `dot` drawing the `dot` text — and is always
written to `--output FILE`. No converter is a dependency of coordinatorctl: without one, `png`
is `coordinator.command.graph-tool-missing` and the other styles still work.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from coordinator_core.errors import Diagnostic
from coordinatorctl.report import sanitize

if TYPE_CHECKING:
    from coordinator_core.checking.graph_svg import RunPath

__all__ = ["CONVERTER_TIMEOUT_SECONDS", "STYLES", "check_request", "converter", "produce"]

STYLES: Final = ("mermaid", "dot", "svg", "png")
CONVERTER_TIMEOUT_SECONDS: Final = 60
PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


def converter() -> str | None:
    """The PNG converter this machine has, in order of preference, or None."""
    try:
        found = importlib.util.find_spec("cairosvg") is not None
    except (ImportError, ValueError):  # a broken or spec-less module of that name
        found = False
    if found:
        return "cairosvg"
    for tool in ("rsvg-convert", "dot"):
        if shutil.which(tool) is not None:
            return tool
    return None


def check_request(style: str | None, output: str | None) -> Diagnostic | None:
    """The local problem of a `--graph` request, before anything is read or sent."""
    if style is None:
        if output is not None:
            return Diagnostic(
                "coordinator.command.usage",
                path="",
                message="--output names the file of a picture; it needs --graph.",
                hint="Add --graph mermaid|dot|svg|png, or drop --output.",
            )
        return None
    if style == "png":
        if converter() is None:
            return Diagnostic("coordinator.command.graph-tool-missing", path="")
        if output is None:
            return Diagnostic(
                "coordinator.command.usage",
                path="",
                message="--graph png writes a binary file; it needs --output FILE.",
                hint="Add --output graph.png, or use --graph svg to print the picture as text.",
            )
    return None


def _png(explained: Mapping[str, Any], path: RunPath | None) -> bytes | Diagnostic:
    from coordinator_core.checking.explain import render_graph

    tool = converter()
    if tool is None:
        return Diagnostic("coordinator.command.graph-tool-missing", path="")
    if tool == "cairosvg":
        import cairosvg  # type: ignore[import-not-found,unused-ignore]

        data = cairosvg.svg2png(bytestring=render_graph(explained, "svg", path).encode())
        return bytes(data) if isinstance(data, bytes) else _tool_failed()
    executable = shutil.which(tool)
    if executable is None:
        return Diagnostic("coordinator.command.graph-tool-missing", path="")
    if tool == "rsvg-convert":
        command, source = [executable, "--format", "png"], render_graph(explained, "svg", path)
    else:
        command, source = [executable, "-Tpng"], render_graph(explained, "dot", path)
    try:
        done = subprocess.run(
            command,
            input=source.encode(),
            capture_output=True,
            timeout=CONVERTER_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return _tool_failed()
    if done.returncode != 0 or not done.stdout.startswith(PNG_SIGNATURE):
        return _tool_failed()
    return done.stdout


def _tool_failed() -> Diagnostic:
    return Diagnostic(
        "coordinator.command.output-unavailable",
        path="",
        message="The PNG converter did not produce a PNG image.",
        hint="Check the converter (cairosvg, rsvg-convert or dot), or use --graph svg.",
    )


def _write(target: Path, data: bytes) -> Diagnostic | None:
    """Write `data` to `target` whole or not at all (a temporary file beside it, renamed)."""
    try:
        directory = target.parent
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".graph-", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        return Diagnostic("coordinator.command.output-unavailable", path="")
    return None


def produce(
    explained: Mapping[str, Any],
    style: str,
    *,
    output: str | None,
    path: RunPath | None = None,
) -> str | Diagnostic:
    """Draw the picture; answer the text for stdout (the picture itself, or with `--output` one
    line naming the file written), or the diagnostic that stopped it."""
    from coordinator_core.checking.explain import render_graph

    if style == "png":
        data: bytes | Diagnostic = _png(explained, path)
    else:
        data = render_graph(explained, style, path).encode()
    if isinstance(data, Diagnostic):
        return data
    if output is None:
        return data.decode()
    failed = _write(Path(output), data)
    if failed is not None:
        return failed
    return f"Wrote the {style} graph of {explained['workflow']} to {sanitize(output)}\n"
