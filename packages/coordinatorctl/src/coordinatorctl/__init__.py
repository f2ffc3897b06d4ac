"""coordinatorctl: the Registry Coordinator command line."""

from __future__ import annotations

__all__ = ["main"]


def main() -> int:
    """Run the command line with the process arguments; returns the exit code."""
    from coordinatorctl.cli import main as cli_main

    return cli_main()
