"""A mapping's arguments are parsed once per advance (issue 26): the run input and each recorded
output are canonical JSON text in the state, and however many arguments of the mappings of one
transition read them, each text is parsed once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine_support import SOURCE, Driver, call, definition, finish

import coordinator_core.engine.transition as transition

RECORD = {"data": {"status": "open", "items": list(range(20))}}
SOURCE_WITH_PICK = SOURCE + 'fn pick(a, b, c, d) { if c == d && a == b { "yes" } else { "no" } }\n'


def test_each_text_a_mapping_reads_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = {
        "read": call("record", "decide"),
        "decide": {
            "type": "choose",
            "choose": {
                "function": "pick",
                "arguments": [
                    {"type": "input"},
                    {"type": "input"},
                    {"type": "step", "step": "read"},
                    {"type": "step", "step": "read"},
                ],
            },
            "cases": {"yes": "done", "no": "other"},
        },
        "done": finish(),
        "other": finish(),
    }
    run = Driver(definition(steps, "read", source=SOURCE_WITH_PICK))
    run.succeed("read", RECORD)
    parsed: list[str] = []
    real = json.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(transition.json, "loads", counting)
    run.claim("decide")
    monkeypatch.undo()
    assert run.record("decide").route is not None
    assert run.record("decide").route.label == "yes"  # type: ignore[union-attr]
    output = run.record("read").output
    assert parsed.count(output) == 1  # two arguments read the call's output
    assert parsed.count(run.state.input) == 1  # two arguments read the run input
