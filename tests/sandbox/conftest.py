"""Fixtures of the sandbox tests: one sandbox process and one stand-in coordinator per session."""

from __future__ import annotations

from sandbox_support import key, receiver, sandbox

__all__ = ["key", "receiver", "sandbox"]
