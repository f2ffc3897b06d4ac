"""`python -m coordinator_sandbox`."""

from __future__ import annotations

import sys

from coordinator_sandbox.cli import main

sys.exit(main())
