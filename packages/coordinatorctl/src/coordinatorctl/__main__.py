"""`python -m coordinatorctl`."""

import os
import sys

from coordinatorctl.cli import main

try:
    code = main()
except BrokenPipeError:
    # The reader went away (e.g. `| head`); say nothing more and do not write to the closed pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
raise SystemExit(code)
