"""Test support shared across suites, only what the tests need alone (a missing tool, instants,
wheels, a private PostgreSQL cluster, parsed sources): importable as `support.*` because pytest
puts `tests/` on `sys.path` (tests/conftest.py, no package above it). What the demo and the
benchmarks share with the tests (processes, the sandbox, tokens, the runtime file, scratch
databases) is the test kit, `coordinator_sandbox.testing`."""
