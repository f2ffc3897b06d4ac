"""The public surface of coordinator_api and the small pure helpers behind the wire format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from api_fakes import FakeJournal, FakeRunService

import coordinator_api
from coordinator_api.bodies import is_json_media_type, parse_rfc3339
from coordinator_api.wire import timestamp
from coordinator_core.shell.service import AuditJournal, RunService

PUBLIC = {"ApiSettings", "AppState", "EventTrigger", "WorkflowSummary", "create_app"}


def test_the_public_surface_is_pinned() -> None:
    assert set(coordinator_api.__all__) == PUBLIC
    for name in PUBLIC:
        assert hasattr(coordinator_api, name)


def test_the_fakes_implement_the_protocols() -> None:
    service: RunService = FakeRunService()
    journal: AuditJournal = FakeJournal()
    assert isinstance(service, RunService) and isinstance(journal, AuditJournal)


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 3, 2, 9, 0, 0, 999_999, tzinfo=UTC), "2026-03-02T09:00:00.999Z"),
        (datetime(2026, 3, 2, 10, 0, 0, 1_000, tzinfo=timezone(timedelta(hours=1))), "2026-03-02T09:00:00.001Z"),
        (datetime(2026, 3, 2, 9, 0, tzinfo=UTC), "2026-03-02T09:00:00.000Z"),
    ],
)  # fmt: skip
def test_timestamps_are_utc_with_milliseconds(moment: datetime, text: str) -> None:
    assert timestamp(moment) == text


def test_naive_timestamps_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        timestamp(datetime(2026, 3, 2, 9, 0))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-02T09:00:00Z", datetime(2026, 3, 2, 9, tzinfo=UTC)),
        ("2026-03-02t10:00:00.5+01:00", datetime(2026, 3, 2, 9, 0, 0, 500_000, tzinfo=UTC)),
        ("2026-03-02T09:00:00", None),
        ("2026-03-02 09:00:00Z", None),
        ("2026-02-30T09:00:00Z", None),
        ("tomorrow", None),
    ],
)
def test_rfc3339_parsing_is_strict(text: str, expected: datetime | None) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize(
    ("content_type", "accepted"),
    [
        ("application/json", True),
        ("application/problem+json", True),
        ("application/json;charset=UTF-8", True),
        ("application/json; charset=iso-8859-1", False),
        ("application/json; boundary=x", False),
        ("text/json", False),
        ("application/+json", False),
        (None, False),
    ],
)
def test_json_media_types(content_type: str | None, accepted: bool) -> None:
    assert is_json_media_type(content_type) is accepted


def test_one_error_type_carries_every_catalogue_code() -> None:
    """Architecture rule 4: the service's refusals and the HTTP problems are `CoordinatorError`s
    whose diagnostic is the code, and keep their code, reason and message as before."""
    from coordinator_api.problems import ApiProblem
    from coordinator_core.errors import CoordinatorError
    from coordinator_core.shell.service import ServiceRefusal

    refusal = ServiceRefusal("coordinator.command.retry-refused", "terminal")
    assert isinstance(refusal, CoordinatorError)
    assert (refusal.code, refusal.reason, str(refusal)) == (
        "coordinator.command.retry-refused",
        "terminal",
        "coordinator.command.retry-refused",
    )
    assert refusal.diagnostic.code == refusal.code and refusal.diagnostic.path == ""
    problem = ApiProblem("coordinator.access.denied", headers={"X-Test": "1"})
    assert isinstance(problem, ServiceRefusal) and isinstance(problem, CoordinatorError)
    assert (problem.code, problem.reason, problem.status_code) == (
        "coordinator.access.denied",
        None,
        403,
    )
    assert problem.headers == {"X-Test": "1"}
