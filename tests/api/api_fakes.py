"""In-memory stand-ins for the API's seams: a `RunService`, an `AuditJournal`, signing keys,
access tokens and a settings builder. Test-only: the real service lives over the store."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from coordinator_api import ApiSettings, EventTrigger, WorkflowSummary
from coordinator_core.config.model import Authentication, JwksStatic, Policy, SecretRef
from coordinator_core.engine import RunState, StepRecord
from coordinator_core.operations import descriptor
from coordinator_core.shell.service import (
    RUN_STATUSES,
    AdmissionRequest,
    AfterAnswer,
    AttemptPage,
    AuditRequest,
    AuditResponse,
    AuditUnavailable,
    BlockReason,
    Caller,
    Doctor,
    DoctorState,
    EffectStatus,
    EventAdmitted,
    EventDelivery,
    HoldState,
    ReconcileResult,
    Recovery,
    RunAdmitted,
    RunChanges,
    RunInspection,
    RunList,
    RunQuery,
    RunStatus,
    ServiceRefusal,
    StepRoute,
    StepStatus,
)
from coordinator_core.shell.store import StepAttempt, StoredRun
from coordinator_core.values import canonical_json

NOW = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)  # the delivery time of 05 §7.1 test vector 2
NOW_MS = (NOW - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
DAY_MS = 86_400_000
ISSUER = "https://issuer.test"
AUDIENCE = "coordinator"
WORKFLOW = "reviewed-notice"
REVISION = "sha256:" + "5" * 64  # the example revision of spec/schemas/api.schema.json
DIGEST = "sha256:" + "a" * 64
EVENT_KEY = b"webhook-delivery-signing-key-0123456789abcdef"
EVENT_SOURCE = "urn:registrystack:registry:example:instance:primary"
COMPLETION_TOKEN = b"casework-completion-secret-0123456789"
CANARY = "canary-7f3e-do-not-echo"
BASE_URL = "http://coordinator.test"

ALL_ACTIONS = frozenset(
    {
        "start",
        "status",
        "inspect",
        "retry-same",
        "cancel",
        "reconcile",
        "doctor",
        "restore-hold",
        "release-restore-hold",
        "release-admission-hold",
        "retain",
    }
)
RUN_ACTIONS = frozenset({"start", "status", "inspect", "retry-same", "cancel", "reconcile"})


# ---------------------------------------------------------------------------------------------
# Keys and tokens


def _coordinate(value: int) -> str:
    return base64.urlsafe_b64encode(value.to_bytes(32, "big")).rstrip(b"=").decode("ascii")


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@dataclass
class SigningKeys:
    rsa_key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    ec_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    other_rsa_key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    def jwks(self) -> dict[str, Any]:
        public_rsa = self.rsa_key.public_key().public_numbers()
        public_ec = self.ec_key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "kid": "rsa-1",
                    "use": "sig",
                    "alg": "RS256",
                    "n": _b64(public_rsa.n),
                    "e": _b64(public_rsa.e),
                },
                {
                    "kty": "EC",
                    "kid": "ec-1",
                    "use": "sig",
                    "crv": "P-256",
                    "x": _coordinate(public_ec.x),
                    "y": _coordinate(public_ec.y),
                },
                {"kty": "oct", "kid": "hmac-1", "k": "c2VjcmV0"},  # ignored by the API
            ]
        }

    def rsa_public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def claims(
    *,
    client: str = "ops-console",
    scopes: str | list[str] = "coordinator:operate",
    subject: str = "operator-1",
    now: datetime = NOW,
    lifetime: int = 600,
    **overrides: Any,
) -> dict[str, Any]:
    issued = int(now.timestamp())
    out: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": subject,
        "client_id": client,
        "registry_scopes": scopes,
        "iat": issued,
        "exp": issued + lifetime,
        "jti": str(uuid.uuid4()),
    }
    out.update(overrides)
    return {key: value for key, value in out.items() if value is not None}


def token(
    keys: SigningKeys,
    payload: Mapping[str, Any] | None = None,
    *,
    algorithm: str = "RS256",
    kid: str | None = "rsa-1",
    typ: str | None = "at+jwt",
    key: Any = None,
    headers: Mapping[str, Any] | None = None,
) -> str:
    header: dict[str, Any] = {}
    if typ is not None:
        header["typ"] = typ
    if kid is not None:
        header["kid"] = kid
    header.update(headers or {})
    signing_key = key
    if signing_key is None:
        signing_key = keys.ec_key if algorithm == "ES256" else keys.rsa_key
    return jwt.encode(
        dict(payload if payload is not None else claims()),
        signing_key,
        algorithm=algorithm,
        headers=header,
    )


def bearer(
    keys: SigningKeys, payload: Mapping[str, Any] | None = None, **kwargs: Any
) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(keys, payload, **kwargs)}"}


# ---------------------------------------------------------------------------------------------
# Settings


def caller_jwks(keys: SigningKeys) -> bytes:
    """The static key set's document, as `Secrets.caller_jwks` holds it."""
    return json.dumps(keys.jwks()).encode()


def authentication(keys: SigningKeys) -> Authentication:
    """`deployment.authentication` with a static key set (its document: `caller_jwks`)."""
    return Authentication(
        issuer=ISSUER,
        audience=AUDIENCE,
        jwks_source=JwksStatic(
            SecretRef("file", "caller-jwks", "/deployment/authentication/jwksSource/documentRef")
        ),
        allowed_clients=frozenset({"ops-console", "starter", "reader", "stranger"}),
        policies=(
            Policy(
                client_id="ops-console",
                required_scopes=frozenset({"coordinator:operate"}),
                workflows=frozenset({WORKFLOW, "retired-flow"}),
                actions=ALL_ACTIONS,
                operator=True,
            ),
            Policy(
                client_id="starter",
                required_scopes=frozenset({"coordinator:start"}),
                workflows=frozenset({WORKFLOW}),
                actions=RUN_ACTIONS,
            ),
            Policy(
                client_id="reader",
                required_scopes=frozenset({"coordinator:read"}),
                workflows=frozenset({WORKFLOW}),
                actions=frozenset({"status"}),
            ),
            Policy(
                client_id="stranger",
                required_scopes=frozenset({"coordinator:start"}),
                workflows=frozenset({"other-workflow"}),
                actions=RUN_ACTIONS,
            ),
        ),
        assertion_issuers=frozenset({"https://assertions.test"}),
    )


WORKFLOW_SUMMARY = WorkflowSummary(
    workflow_id=WORKFLOW,
    title="Reviewed notice",
    version="1",
    revision=REVISION,
    definition_digest=DIGEST,
    package_digest="sha256:" + "b" * 64,
    input_schema={"type": "object", "required": ["applicationId"]},
    triggers=("application-submitted",),
    outcomes=("notice-sent", "decided-after-timeout"),
)


def settings(keys: SigningKeys, **changes: Any) -> ApiSettings:
    base = ApiSettings(
        authentication=authentication(keys),
        caller_jwks=caller_jwks(keys),
        workflow=WORKFLOW_SUMMARY,
        event_triggers={
            "application-submitted": EventTrigger(
                event="application-submitted-v1",
                source_name="applications",
                source=EVENT_SOURCE,
                signing_key=EVENT_KEY,
            )
        },
        completion_tokens={"reviews": COMPLETION_TOKEN},
        validate_responses=True,
        clock=lambda: NOW,
    )
    return dataclasses.replace(base, **changes)


# ---------------------------------------------------------------------------------------------
# The fake run service


@dataclass
class _Run:
    owner: tuple[str, str]
    status: RunStatus
    identity: tuple[Any, ...]
    digest: bytes


class FakeRunService:
    """Keeps runs in a dict; enough behaviour to exercise every response shape.

    It carries no rule of the domain about who sees a run: every run it holds is found by
    every caller, and `callers` records the caller each call was made for, so that the API's
    own part (the caller it builds from the token) is what the API tests check. Ownership is
    held by the real service (tests/e2e/test_run_ownership.py, tests/integration)."""

    def __init__(self) -> None:
        self.runs: dict[uuid.UUID, _Run] = {}
        self.callers: list[Caller] = []
        self.events: dict[tuple[str, str, str], uuid.UUID] = {}
        self.completions: list[tuple[str, uuid.UUID]] = []
        self.calls: list[str] = []
        self.hold = HoldState(restore_hold=False, admissions_hold=False, restore_review=0)
        self.is_ready = True
        self.refusal: ServiceRefusal | None = None  # raised by the next command when set
        self.clock_step = 0
        self.changes = RunChanges()
        self.looks = 0  # `fingerprints` calls (the waiting reads' looks at the store)

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _moment(self) -> int:
        self.clock_step += 1
        return NOW_MS + self.clock_step

    def _new_run(self, *, origin: str, trigger: str | None) -> RunStatus:
        admitted = self._moment()
        state = RunState(
            status="running",
            current_step="read-application",
            admitted_at=admitted,
            deadline_at=admitted + 30 * DAY_MS,
            input=None,
        )
        run = StoredRun(
            run_id=uuid.uuid4(),
            start_identity="a" * 64,
            input_digest="b" * 64,
            owner="c" * 64,
            origin=origin,  # type: ignore[arg-type]
            trigger=trigger,
            workflow_id=WORKFLOW,
            workflow_version="1",
            revision=REVISION,
            definition_digest=DIGEST,
            binding_digest="sha256:" + "c" * 64,
            state=state,
        )
        return RunStatus(run=run, next_due_at=admitted)

    def _answered(self) -> None:
        """The wake-up an admission hands to the API (`after_answer`)."""
        self.calls.append("woken")

    def _command(self, name: str) -> None:
        self.calls.append(name)
        if self.refusal is not None:
            refusal, self.refusal = self.refusal, None
            raise refusal

    def _found(self, caller: Caller, run_id: uuid.UUID) -> _Run:
        self.callers.append(caller)
        run = self.runs.get(run_id)
        if run is None:
            raise ServiceRefusal("coordinator.command.run-absent")
        return run

    def ready(self) -> str | None:
        if not self.is_ready:
            return "coordinator.command.store-unavailable"
        if self.hold.restore_hold:
            return "coordinator.command.restore-hold"
        if self.hold.admissions_hold:
            return "coordinator.command.restore-admissions-held"
        return None

    def admit(
        self, admission: AdmissionRequest, *, after_answer: AfterAnswer | None = None
    ) -> RunAdmitted:
        if after_answer is not None:
            after_answer(self._answered)
        self._command("admit")
        owner = (admission.caller.issuer, admission.caller.subject)
        identity = (owner, admission.workflow, admission.idempotency_key)
        digest = canonical_json([admission.revision, admission.input])
        if self.hold.restore_hold:
            raise ServiceRefusal("coordinator.command.restore-hold")
        if self.hold.admissions_hold:
            raise ServiceRefusal("coordinator.command.restore-admissions-held")
        for run in self.runs.values():
            if run.identity == identity:
                if run.digest != digest:
                    raise ServiceRefusal("idempotency.key-reused")
                return RunAdmitted(run=run.status, created=False)
        if admission.revision != REVISION:
            raise ServiceRefusal("admission.revision-mismatch")
        if not isinstance(admission.input, dict) or "applicationId" not in admission.input:
            raise ServiceRefusal("coordinator.definition.input")
        status = self._new_run(origin="api", trigger=None)
        self.runs[status.run_id] = _Run(owner, status, identity, digest)
        return RunAdmitted(run=status, created=True)

    def get_run(self, caller: Caller, run_id: uuid.UUID) -> RunStatus | None:
        self.callers.append(caller)
        run = self.runs.get(run_id)
        return run.status if run is not None else None

    def fingerprints(self, run_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
        self.looks += 1
        return {
            run_id: self.runs[run_id].status.fingerprint
            for run_id in run_ids
            if run_id in self.runs
        }

    def move(self, run_id: uuid.UUID, **changes: Any) -> None:
        """Change a run's state as a worker would (without telling `changes`)."""
        run = self.runs[run_id]
        stored = run.status.run
        state = dataclasses.replace(stored.state, **changes)
        run.status = RunStatus(run=dataclasses.replace(stored, state=state))

    def list_runs(self, caller: Caller, query: RunQuery) -> RunList:
        self.callers.append(caller)
        filters = [query.status, query.workflow]
        listed = sorted(
            (
                run.status
                for run in self.runs.values()
                if (query.status is None or run.status.status == query.status)
                and (query.workflow is None or run.status.run.workflow_id == query.workflow)
            ),
            key=lambda status: (status.run.state.admitted_at, str(status.run_id)),
            reverse=True,
        )
        start = 0
        if query.cursor is not None:
            try:
                payload = json.loads(base64.urlsafe_b64decode(query.cursor.encode()))
                start, cursor_filters = int(payload["o"]), payload["f"]
            except (ValueError, KeyError, TypeError):
                raise ServiceRefusal("coordinator.request.cursor-invalid") from None
            if cursor_filters != filters:
                raise ServiceRefusal("coordinator.request.cursor-invalid")
        page = listed[start : start + query.limit]
        following = start + query.limit
        cursor = None
        if following < len(listed):
            cursor = base64.urlsafe_b64encode(
                json.dumps({"o": following, "f": filters}).encode()
            ).decode()
        return RunList(runs=page, next_cursor=cursor)

    def inspect_run(self, caller: Caller, run_id: uuid.UUID) -> RunInspection | None:
        status = self.get_run(caller, run_id)
        if status is None:
            return None
        entered = status.run.state.admitted_at
        attempts = self._attempts(run_id, entered)
        operation = descriptor("casework.submit-review-request/v1")
        return RunInspection(
            run=status,
            steps=[
                StepStatus(
                    StepRecord(
                        step="request-review",
                        type="call",
                        state="delivered",
                        entered_at=entered,
                        attempt=1,
                        finished_at=entered + 1000,
                        route=StepRoute(kind="next"),
                        operation="casework.submit-review-request/v1",
                        effect="mutation",
                        command_prepared=True,
                    ),
                    attempts=attempts["request-review"],
                    attempt_count=2,
                ),
                StepStatus(
                    StepRecord(
                        step="await-review",
                        type="wait-for",
                        state="pending",
                        entered_at=entered + 1000,
                        due_at=entered + 15 * 60_000,
                        wait_started_at=entered + 1000,
                        timeout_at=entered + 7 * DAY_MS,
                        interval_seconds=900,
                    ),
                    awaits=("request-review", "result"),
                    attempts=attempts["await-review"][:2],
                    attempt_count=3,
                ),
                StepStatus(
                    StepRecord(
                        step="pause",
                        type="wait-until",
                        state="pending",
                        entered_at=entered + 2000,
                        failure_code="transport-uncertain",
                        route=StepRoute(kind="case", label="approved"),
                        wait_until=entered + DAY_MS,
                    )
                ),
            ],
            effects=[
                EffectStatus(
                    step="request-review",
                    operation="casework.submit-review-request/v1",
                    state="accepted",
                    settled_by="response",
                )
            ],
            recovery=Recovery(
                retry_allowed=False,
                retry_blocked_by="not-recoverable",
                reconcile_allowed=False,
                reconcile_blocked_by="no-receipt",
                operation=operation,
            ),
        )

    def _attempts(self, run_id: uuid.UUID, entered: int) -> dict[str, tuple[StepAttempt, ...]]:
        """Each step's ended attempts, newest first: a call retried once, a wait observed
        three times, none for the wait-until."""
        review = (
            StepAttempt(run_id, "request-review", 1, 2, entered + 600, entered + 900, "delivered"),
            StepAttempt(
                run_id,
                "request-review",
                1,
                1,
                entered + 10,
                entered + 100,
                "retry",
                "transport-unavailable",
            ),
        )
        observations = tuple(
            StepAttempt(run_id, "await-review", 1, n, None, entered + 1000 + n * 60_000, "pending")
            for n in (3, 2, 1)
        )
        return {"request-review": review, "await-review": observations, "pause": ()}

    def step_attempts(
        self, caller: Caller, run_id: uuid.UUID, step: str, cursor: str | None, limit: int
    ) -> AttemptPage | None:
        """Pages by position (the real cursor is a keyset bound to caller, run and step)."""
        status = self.get_run(caller, run_id)
        if status is None:
            return None
        attempts = self._attempts(run_id, status.run.state.admitted_at)
        if step not in attempts:
            raise ServiceRefusal("coordinator.command.step-absent")
        start = 0
        if cursor is not None:
            if not cursor.startswith(f"{step}:") or not cursor[len(step) + 1 :].isdigit():
                raise ServiceRefusal("coordinator.request.cursor-invalid")
            start = int(cursor[len(step) + 1 :])
        found = attempts[step]
        following = f"{step}:{start + limit}" if start + limit < len(found) else None
        return AttemptPage(attempts=found[start : start + limit], next_cursor=following)

    def cancel(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        self._command("cancel")
        run = self._found(caller, run_id)
        if run.status.status == "running":
            stored = run.status.run
            state = dataclasses.replace(
                stored.state,
                status="cancelled",
                cancel_mode="stopping",
                cancel_requested=True,
                completed_at=self._moment(),
            )
            run.status = RunStatus(run=dataclasses.replace(stored, state=state))
        return run.status

    def retry_same(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        self._command("retry-same")
        run = self._found(caller, run_id)
        if run.status.status != "attention":
            blocked: BlockReason = (
                "cancelled" if run.status.status == "cancelled" else "not-recoverable"
            )
            raise ServiceRefusal("coordinator.command.retry-refused", blocked)
        return run.status

    def reconcile(self, caller: Caller, run_id: uuid.UUID, reason: str) -> ReconcileResult:
        self._command("reconcile")
        run = self._found(caller, run_id)
        inspection = self.inspect_run(caller, run.status.run_id)
        assert inspection is not None
        return ReconcileResult(result="unresolved", inspection=inspection)

    def doctor(self) -> Doctor:
        self._command("doctor")
        counts = dict.fromkeys(RUN_STATUSES, 0)  # every status, as the service counts them
        for run in self.runs.values():
            counts[run.status.status] += 1
        return Doctor(
            activation_ready=True,
            state=DoctorState(
                database_id="reviewed-notice-dev",
                store="sqlite",
                schema_version=1,
                active_package_digest="sha256:" + "b" * 64,
                active_revision=REVISION,
                restore_hold=self.hold.restore_hold,
                admissions_hold=self.hold.admissions_hold,
                audit_ready=True,
                restore_review=self.hold.restore_review,
                statuses=counts,
                unknown_effects=0,
                waits=0,
                oldest_due_at=NOW_MS if self.runs else None,
                terminal_payloads=0,
                oldest_terminal_payload_at=None,
                audit_head="sha256:" + "d" * 64,
            ),
        )

    def restore_hold(self, reason: str) -> HoldState:
        self._command("restore-hold")
        self.hold = HoldState(restore_hold=True, admissions_hold=True, restore_review=0)
        return self.hold

    def release_restore_hold(self, reason: str) -> HoldState:
        self._command("release-restore-hold")
        self.hold = dataclasses.replace(self.hold, restore_hold=False)
        return self.hold

    def release_admission_hold(self, reason: str) -> HoldState:
        self._command("release-admission-hold")
        if self.hold.restore_hold:
            raise ServiceRefusal("coordinator.command.restore-hold")
        self.hold = dataclasses.replace(self.hold, admissions_hold=False)
        return self.hold

    def retain(self, before: int, limit: int) -> int:
        self._command("retain")
        return 0

    def admit_event(
        self, delivery: EventDelivery, *, after_answer: AfterAnswer | None = None
    ) -> EventAdmitted:
        if after_answer is not None:
            after_answer(self._answered)
        self._command("admit-event")
        if self.hold.restore_hold or self.hold.admissions_hold:
            raise ServiceRefusal("coordinator.event.admissions-held")
        key = (delivery.source_name, delivery.trigger, delivery.event_id)
        if key in self.events:
            return EventAdmitted(run_id=self.events[key], created=False)
        status = self._new_run(origin="event", trigger=delivery.trigger)
        owner = ("event-source:" + delivery.source_name, "trigger:" + delivery.trigger)
        self.runs[status.run_id] = _Run(owner, status, key, canonical_json(delivery.body))
        self.events[key] = status.run_id
        return EventAdmitted(run_id=status.run_id, created=True)

    def complete_review(self, connection: str, request_id: uuid.UUID) -> None:
        self._command("complete-review")
        self.completions.append((connection, request_id))


class FakeJournal:
    """Records the audit entries; `fail_requests` / `fail_responses` simulate a broken disk."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, AuditRequest | AuditResponse]] = []
        self.until_commit: list[str] = []  # actions whose request entry the commit makes durable
        self.fail_requests = False
        self.fail_responses = False

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def request(self, entry: AuditRequest) -> str:
        if self.fail_requests:
            raise AuditUnavailable
        correlation = str(uuid.uuid4())
        self.entries.append(("request", correlation, entry))
        return correlation

    def request_until_commit(self, entry: AuditRequest) -> tuple[str, Callable[[], None]]:
        correlation = self.request(entry)
        self.until_commit.append(entry.action)
        return correlation, lambda: None

    def response(self, correlation: str, entry: AuditResponse) -> None:
        if self.fail_responses:
            raise AuditUnavailable
        self.entries.append(("response", correlation, entry))
