"""The product's modules parsed once per test process: several architecture tests walk every
module of the packages (one word per concept, private names, the generated models' adapters, the
engine's purity), and parsing them all is seconds each time."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

__all__ = ["parsed"]


@cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of the module at `path` (read once; a test must not change it)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
