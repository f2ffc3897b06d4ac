"""`python -m coordinatorctl` (a closed or full output is handled by `main`: exit 3)."""

from coordinatorctl.cli import main

raise SystemExit(main())
