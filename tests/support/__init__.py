"""Test support shared across suites (e2e, the chaos suite): importable as `support.*` because
pytest puts `tests/` on `sys.path` (tests/conftest.py, no package above it)."""
