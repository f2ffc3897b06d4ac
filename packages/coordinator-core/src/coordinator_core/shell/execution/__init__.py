"""Running runs: the worker's tick, one leased record's attempt, the one row<->engine codec, the
wake-up the loops of a process share, and the run-life lines (07 §7, §11; 06 §14)."""
