"""The service process: its start sequence and loops, the command-line parser both programs
share, the service log, riding out a store outage, failpoints and the output streams (09 §5)."""
