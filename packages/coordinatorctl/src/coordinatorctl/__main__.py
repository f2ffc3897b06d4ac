"""`python -m coordinatorctl`."""

from coordinatorctl.cli import main

raise SystemExit(main())
