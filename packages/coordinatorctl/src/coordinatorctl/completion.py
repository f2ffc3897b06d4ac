"""Shell completion for bash, zsh and fish, answered from the parser itself (argcomplete).

`coordinatorctl completion bash|zsh|fish` prints a script that registers `coordinatorctl` with
the shell. On each TAB the shell runs `coordinatorctl` with `_ARGCOMPLETE` set, and `complete`
answers from `cli.build_parser()`: the commands, each command's options (hidden global flags
left out) and the choices of `--format`, `--graph`, `schema`, … , with each help text as the
description where the shell shows one. So completion never drifts from the installed version,
and no static script has to be regenerated after an upgrade.

argcomplete rather than shtab: shtab writes static scripts for bash, zsh and tcsh but not fish;
argcomplete covers all three from one mechanism. It is imported only here, and only when a
script is printed or a completion is asked for.
"""

from __future__ import annotations

import argparse
from typing import Final

__all__ = ["SHELLS", "complete", "script"]

SHELLS: Final = ("bash", "zsh", "fish")
PROGRAM: Final = "coordinatorctl"


def script(shell: str) -> str:
    """The registration script of `shell` for `coordinatorctl`."""
    from argcomplete.shell_integration import shellcode

    text = shellcode([PROGRAM], shell=shell)
    return text if text.endswith("\n") else text + "\n"


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (`_ARGCOMPLETE` is set) and exit the process."""
    import argcomplete

    argcomplete.autocomplete(parser)
