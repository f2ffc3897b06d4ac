"""coordinator-sandbox: stand-in products served over loopback HTTP for the Registry Coordinator
demo and end-to-end tests. Never imported by the product (ARCHITECTURE.md)."""

from __future__ import annotations

__all__ = ["main"]


def main() -> int:
    """Run the command line with the process arguments; returns the exit code."""
    from coordinator_sandbox.cli import main as cli_main

    return cli_main()
