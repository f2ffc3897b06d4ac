"""Architecture rule 6 and the adapters' seams: the closed outcome set (the engine's own
events), the protocol, the worker's entry point, internal faults, and canaries."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from adapter_support import (
    CANARY,
    STEP,
    TOKEN_PATH,
    Reply,
    answered,
    call,
    command,
    command_key,
    confirmed,
    credential_of,
    deadline,
    dispatch_of,
    lookup,
    lookup_of,
    observe_of,
    observed,
    preparation_bytes,
    prepare_of,
    prepare_with,
    problem,
    refused,
    retryable,
    success,
    uncertain,
)

import coordinator_core.shell.adapters as adapters
from coordinator_core.engine import inputs as engine
from coordinator_core.engine.codes import REPLY_CODES
from coordinator_core.engine.commands import Dispatch, ObtainCredential, Prepare
from coordinator_core.operations import CATALOG
from coordinator_core.shell.adapters import (
    SERVED_OPERATIONS,
    AccessToken,
    Adapter,
    Adapters,
    CommandFormatError,
    EvaluationConnection,
    ExternalConnection,
    PreparedCommand,
    product_adapters,
    unserved_operations,
)
from coordinator_core.shell.adapters import validation as shapes
from coordinator_core.shell.adapters.messaging import MessagingAdapter
from coordinator_core.shell.adapters.scheduling import SchedulingAdapter
from coordinator_core.values import canonical_json

MESSAGE = {"senderProfile": "p", "to": {"email": "a@b.c"}, "content": {"text": CANARY}}
RECEIPT = {
    "id": "7d444840-9dc0-11d1-b245-5ffdce74fad2",
    "status": "accepted",
    "links": {"self": "s", "cancel": "c"},
}


def test_the_public_surface_is_pinned():
    assert sorted(adapters.__all__) == sorted(
        [
            "SERVED_OPERATIONS", "AccessToken", "Adapter", "Adapters", "ClientCredentials",
            "CommandFormatError", "Connection", "CredentialIssuer", "EvaluationConnection",
            "ExternalConnection", "HttpSettings", "PreparedCommand", "ProductConnection",
            "product_adapters", "unserved_operations",
        ]
    )  # fmt: skip


def test_every_adapter_implements_the_protocol():
    products = {adapter.product for adapter in product_adapters()}
    assert products == {
        "breg",
        "casework",
        "messaging",
        "scheduling",
        "external-http",
        "evaluation",
    }
    for adapter in product_adapters():
        assert isinstance(adapter, Adapter)
    served = set().union(*(adapter.operations for adapter in product_adapters()))
    assert served == SERVED_OPERATIONS


# -- the catalogue and the adapters cannot drift (08 §1.2) ---------------------------------------

# A valid command for every operation a run can contain: the catalogue walk below sends each
# through the worker's entry point and proves that a live request reached the product.
_SUBJECT = {
    "source": "urn:s",
    "type": "t",
    "id": "i",
    "version": "1",
    "digest": "sha256:" + "1" * 64,
}
_CATALOGUE_COMMANDS: dict[str, tuple[str, Any, str]] = {
    "breg.read-record/v1": ("breg", {"collection": "apps", "recordId": "r-1"}, "/v1/records/"),
    "breg.invoke-action/v1": ("breg", {"input": {"a": 1}}, "/v1/actions/"),
    "casework.submit-review-request/v1": (
        "casework",
        {
            "kind": "eligibility",
            "subject": _SUBJECT,
            "requesterReference": "run-1",
            "context": {"strategy": "submitted", "snapshot": {}},
        },
        "/v1/review-requests",
    ),
    "casework.read-review-result/v1": (
        "casework",
        {"requestId": "0b8f6d1e-6f51-4a39-9a0b-5a1d3c6f2e11"},
        "/v1/review-requests/",
    ),
    "casework.withdraw-review-request/v1": (
        "casework",
        {
            "requestId": "0b8f6d1e-6f51-4a39-9a0b-5a1d3c6f2e11",
            "subject": _SUBJECT,
            "reason": "no longer needed",
        },
        "/v1/review-requests/",
    ),
    "messaging.submit-message/v1": ("messaging", MESSAGE, "/v1/messages"),
    "scheduling.read-scheduling/v1": ("scheduling", {}, "/v1/scheduling"),
    "scheduling.read-availability/v1": (
        "scheduling",
        {
            "offering": "o",
            "start": "2026-03-01T08:00:00Z",
            "end": "2026-03-02T08:00:00Z",
            "limit": 5,
        },
        "/v1/availability",
    ),
    "scheduling.create-appointment/v1": (
        "scheduling",
        {
            "admission": {
                "offering": "o",
                "start": "2026-03-02T09:00:00Z",
                "party": {"reference": "p"},
                "channel": "video",
                "policyRevision": "r-1",
            }
        },
        "/v1/appointments",
    ),
    "external-http.get/v1": ("external-http", {"path": "status"}, "/status"),
    "evaluation.evaluate/v1": (
        "evaluation",
        {"state": {}, "questions": {"q": {"type": "predicate", "instructions": "Yes?"}}},
        "/v1/systemone",
    ),
}


def _bound_for(kind: str, connect: Any, origin: str) -> Any:
    if kind == "external-http":
        return ExternalConnection(
            name="conn", base_url=origin, paths=frozenset({"status"}),
            query_parameters=frozenset(), response_schema=True,
        )  # fmt: skip
    if kind == "evaluation":
        return EvaluationConnection(name="conn", base_url=origin, model="m-1")
    return connect(kind, profile="coordinator-writer" if kind == "breg" else None)


@pytest.mark.parametrize("operation", sorted(set(CATALOG) - {"breg.propose-action/v1"}))
def test_every_catalogue_operation_has_a_live_adapter(fake, live, connect, operation):
    """Walk the catalogue: each operation a run can contain goes out as a real request through
    `Adapters` (the worker's entry point), never `remote-refused` or `operation-unbound`."""
    kind, value, path = _CATALOGUE_COMMANDS[operation]
    fake.route("GET", "/status", Reply(200, {"ok": True}), public=True)
    registry = Adapters({"conn": _bound_for(kind, connect, live.origin)})
    descriptor = CATALOG[operation]
    frozen = command(
        operation, value, key=command_key() if descriptor.key_required else None, action="act"
    )
    token = registry.obtain_credential(credential_of(), attempt_deadline=deadline())
    assert isinstance(token, AccessToken)
    outcome: Any = None
    if descriptor.requires_preparation:
        outcome = registry.prepare(
            prepare_of(frozen), frozen, attempt_deadline=deadline(), credential=token
        )
        if isinstance(outcome, engine.PreparationDone):
            frozen = frozen.with_preparation(outcome.preparation)
    if not descriptor.requires_preparation or isinstance(outcome, engine.PreparationDone):
        outcome = registry.dispatch(
            dispatch_of(frozen), frozen, attempt_deadline=deadline(), credential=token
        )
    assert outcome not in (refused("remote-refused"), refused("operation-unbound"))
    assert any(seen.path.startswith(path) for seen in fake.requests("/")), outcome
    assert operation in SERVED_OPERATIONS


def test_a_workflow_naming_an_operation_no_adapter_serves_is_reported():
    workflow = {
        "operations": {
            "later": {"operation": "breg.read-record/v9", "connection": "a"},
            "proposal": {"operation": "breg.propose-action/v1", "connection": "a"},
            "record": {"operation": "breg.read-record/v1", "connection": "a"},
            "gate": {"operation": "evaluation.evaluate/v1", "connection": "e"},
        }
    }
    assert unserved_operations(workflow) == [
        ("later", "breg.read-record/v9"),
        ("proposal", "breg.propose-action/v1"),
    ]
    assert unserved_operations({}) == []


# -- the worker's entry point -------------------------------------------------------------------------


def test_adapters_route_by_operation_and_connection(fake, connect):
    fake.route("POST", "/v1/messages", Reply(202, RECEIPT))
    notices = connect("messaging", name="notices")
    registry = Adapters({"notices": notices, "slots": connect("scheduling", name="slots")})
    frozen = command(
        "messaging.submit-message/v1", MESSAGE, key=command_key(), connection_name="notices"
    )
    token = registry.obtain_credential(credential_of("notices"), attempt_deadline=deadline())
    assert isinstance(token, AccessToken)
    outcome = registry.dispatch(
        dispatch_of(frozen), frozen, attempt_deadline=deadline(), credential=token
    )
    assert outcome == success(RECEIPT)
    assert len(fake.requests(TOKEN_PATH)) == 1


def test_an_unbound_or_mismatched_connection_is_operation_unbound(fake, connect):
    registry = Adapters({"slots": connect("scheduling", name="slots")})
    missing = command(
        "messaging.submit-message/v1", MESSAGE, key=command_key(), connection_name="notices"
    )
    wrong = command(
        "messaging.submit-message/v1", MESSAGE, key=command_key(), connection_name="slots"
    )
    for frozen in (missing, wrong):
        until = deadline()
        assert registry.dispatch(dispatch_of(frozen), frozen, attempt_deadline=until) == refused(
            "operation-unbound"
        )
        assert registry.prepare(prepare_of(frozen), frozen, attempt_deadline=until) == refused(
            "operation-unbound"
        )
        assert registry.lookup_receipt(
            lookup_of(frozen), frozen, attempt_deadline=until
        ) == answered("unavailable")
    read = observe_of("casework.read-review-result/v1", "x", connection_name="slots")
    assert registry.observe(read, attempt_deadline=deadline()) == observed(
        "refused", "operation-unbound"
    )
    assert registry.obtain_credential(
        credential_of("notices"), attempt_deadline=deadline()
    ) == refused("operation-unbound")
    # An adapter handed a connection of another product refuses the same way.
    outcome = call(MessagingAdapter(), connect("scheduling"), missing, attempt_deadline=deadline())
    assert outcome == refused("operation-unbound")
    assert not fake.seen


@pytest.mark.parametrize("operation", ["breg.propose-action/v1", "breg.nothing/v9"])
def test_operations_without_an_adapter_are_refused_never_unbound(fake, connect, operation):
    registry = Adapters({"conn": connect("breg", profile="p")})
    frozen = command(operation, {})
    assert registry.dispatch(dispatch_of(frozen), frozen, attempt_deadline=deadline()) == refused(
        "remote-refused"
    )
    assert not fake.seen


def test_operations_without_preparation_or_receipt_say_so(fake, connect):
    bound = connect("messaging")
    adapter = MessagingAdapter()
    frozen = command("messaging.submit-message/v1", MESSAGE, key=command_key())
    assert prepare_with(adapter, bound, frozen, attempt_deadline=deadline()) == refused(
        "remote-refused"
    )
    scheduling = SchedulingAdapter()
    read = command("scheduling.read-scheduling/v1", {})
    assert lookup(scheduling, connect("scheduling"), read, attempt_deadline=deadline()) == answered(
        "unavailable"
    )


# -- the frozen command --------------------------------------------------------------------------------


def test_a_frozen_command_reads_back_from_the_engine_form():
    key = command_key()
    text = canonical_json(
        {"alias": "notify", "operation": "messaging.submit-message/v1", "connection": "notices",
         "input": MESSAGE, "idempotencyKey": key}
    ).decode()  # fmt: skip
    frozen = PreparedCommand.from_frozen(text, preparation=b"prep")
    assert (frozen.operation, frozen.connection, frozen.idempotency_key) == (
        "messaging.submit-message/v1",
        "notices",
        key,
    )
    assert frozen.input == MESSAGE and frozen.preparation == b"prep" and frozen.alias == "notify"
    for bad in ("[]", "{", '{"operation": "x"}', '{"operation": "x", "connection": "c"}'):
        with pytest.raises(CommandFormatError):
            PreparedCommand.from_frozen(bad)


def test_a_command_parsed_once_takes_its_preparation_later():
    """The worker parses the frozen command once per attempt: the `Dispatch` after the
    `Prepare` only adds the frozen preparation (its bytes, as the engine keeps them)."""
    text = canonical_json(
        {"operation": "breg.invoke-action/v1", "connection": "c", "input": {"input": {}}}
    ).decode()
    parsed = PreparedCommand.from_frozen(text, action="act")
    assert parsed.with_preparation(None) is parsed
    sent = parsed.with_preparation(b"prep")
    assert (sent.preparation, sent.action, sent.input) == (b"prep", "act", {"input": {}})
    assert sent == PreparedCommand.from_frozen(text, action="act", preparation=b"prep")


# -- one outcome vocabulary: the engine's events -------------------------------------------------


def test_the_adapters_define_no_outcome_type_of_their_own():
    """Rules 6 and 9: what leaves an adapter is the engine's own event; no adapter module
    spells the outcome set a second time, nor maps one onto the other."""
    import inspect
    import pkgutil
    from importlib import import_module

    modules = {info.name for info in pkgutil.iter_modules(adapters.__path__)}
    assert "events" not in modules
    for name in modules:
        module = import_module(f"coordinator_core.shell.adapters.{name}")
        for member, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == module.__name__:
                assert member not in engine.__all__, f"{name}.{member} spells an engine event"


def test_every_method_answers_the_engine_event_of_its_command_with_its_step(fake, connect):
    fake.route("POST", "/v1/messages", Reply(202, RECEIPT))
    fake.route("POST", "/v1/messages/receipt-lookup", Reply(200, RECEIPT))
    registry = Adapters({"conn": connect("messaging")})
    frozen = command("messaging.submit-message/v1", MESSAGE, key=command_key())
    until = deadline()
    token = registry.obtain_credential(credential_of(step="notify"), attempt_deadline=until)
    assert isinstance(token, AccessToken)
    sent = registry.dispatch(
        dispatch_of(frozen, step="notify"), frozen, attempt_deadline=until, credential=token
    )
    receipt = canonical_json(RECEIPT).decode()
    assert sent == engine.CallOutcome("notify", "success", value=receipt)
    answer = registry.lookup_receipt(
        lookup_of(frozen, step="notify", generation=3), frozen, attempt_deadline=until
    )
    assert answer == engine.ReceiptAnswer("notify", 3, "confirmed", receipt)


def _codes_in_source() -> set[str]:
    import re
    from pathlib import Path

    root = Path(adapters.__file__).parent
    pattern = re.compile(r'(?:\.(?:refused|retryable|uncertain)\(|_code = |code=)"([a-z-]+)"')
    return {code for path in root.glob("*.py") for code in pattern.findall(path.read_text())}


def test_every_failure_code_an_adapter_can_return_is_a_closed_code():
    codes = _codes_in_source()
    assert codes, "the scan found nothing"
    assert codes <= REPLY_CODES


# -- internal faults ----------------------------------------------------------------------------------------


def test_an_internal_fault_before_sending_is_remote_retryable(fake, connect, monkeypatch):
    def broken(value: Any) -> Any:
        raise RuntimeError(CANARY)

    monkeypatch.setattr("coordinator_core.shell.adapters.messaging._message", broken)
    outcome = call(
        MessagingAdapter(),
        connect("messaging"),
        command("messaging.submit-message/v1", MESSAGE, key=command_key()),
        attempt_deadline=deadline(),
    )
    assert outcome == retryable("remote-retryable")


def test_an_internal_fault_after_a_mutation_may_have_left_is_remote_uncertain(
    fake, connect, monkeypatch
):
    fake.route("POST", "/v1/messages", Reply(202, RECEIPT))

    def broken(value: Any) -> Any:
        raise KeyError(CANARY)

    monkeypatch.setattr("coordinator_core.shell.adapters.messaging.message_receipt", broken)
    outcome = call(
        MessagingAdapter(),
        connect("messaging"),
        command("messaging.submit-message/v1", MESSAGE, key=command_key()),
        attempt_deadline=deadline(),
    )
    assert outcome == uncertain("remote-uncertain")


# -- canaries: no value ever leaves in text -------------------------------------------------------------


def test_no_value_token_or_remote_text_appears_in_outcomes_or_logs(fake, connect, caplog):
    caplog.set_level(logging.DEBUG)
    fake.route("POST", "/v1/messages", problem(422, "template.locale-unavailable"))
    fake.route("POST", "/v1/messages/receipt-lookup", Reply(500, {"detail": CANARY}))
    bound = connect("messaging", client_id="coordinator-test")
    adapter = MessagingAdapter()
    frozen = command("messaging.submit-message/v1", MESSAGE, key=command_key())
    seen: list[object] = [
        call(adapter, bound, frozen, attempt_deadline=deadline()),
        lookup(adapter, bound, frozen, attempt_deadline=deadline()),
        adapter.obtain_credential(bound, credential_of(), attempt_deadline=deadline()),
        frozen,
        dispatch_of(frozen),
        bound,
        AccessToken(CANARY),
        success({"secret": CANARY}),
        engine.PreparationDone(STEP, CANARY),
        engine.ObservationOutcome.complete(STEP, {"secret": CANARY}),
        confirmed({"secret": CANARY}),
    ]
    fake.token_reply = lambda s: Reply(400, {"error": CANARY})
    seen.append(call(adapter, bound, frozen, attempt_deadline=deadline()))
    issued = list(fake.issued)
    text = " ".join(repr(item) + str(item) for item in seen) + caplog.text
    assert CANARY not in text
    for token in issued:
        assert token not in text
    assert "Bearer" not in text
    assert seen[0] == refused("product-not-found")


def test_shape_errors_never_quote_the_value():
    with pytest.raises(shapes.ShapeError) as error:
        shapes.text(CANARY, 1, 3)
    assert CANARY not in str(error.value) and CANARY not in repr(error.value)


# -- the worker's path, end to end over the fake ---------------------------------------------------------


def test_a_connection_is_built_from_its_runtime_entry(ec_pair):
    entry = {
        "product": "breg",
        "baseUrl": "http://127.0.0.1:8101/",
        "profile": "coordinator-reader",
        "authorization": {
            "tokenEndpoint": "http://127.0.0.1:8100/oauth/token",
            "clientId": "coordinator-applications",
            "signingKeyRef": "secret:file/applications-client.jwk",
            "resource": "urn:registrystack:breg:applications",
            "scopes": ["breg:records:read"],
        },
    }
    bound = adapters.ProductConnection.from_runtime(
        "applications", entry, signing_key=ec_pair.private
    )
    assert bound.base_url == "http://127.0.0.1:8101"
    assert bound.profile == "coordinator-reader"
    assert bound.authorization.audience == "http://127.0.0.1:8100/oauth/token"
    assert bound.authorization.scopes == ("breg:records:read",)
    assert CANARY not in repr(bound) and "signing_key" not in repr(bound)


def test_prepare_credential_dispatch_as_the_worker_drives_them(fake, connect):
    action = "record-decision"
    fake.route(
        "GET",
        f"/v1/actions/{action}",
        Reply(
            200,
            {
                "action": action,
                "kind": "immediate",
                "registryRevision": "rev-1",
                "contractFingerprint": "sha256:" + "e" * 64,
                "inputSchema": True,
                "conditionInputs": [],
                "maximumBodyBytes": 1024,
            },
        ),
    )
    fake.route("POST", f"/v1/actions/{action}", problem(422, "action.refused", refusalCode="late"))
    registry = Adapters({"applications": connect("breg", name="applications", profile="writer")})
    key = command_key()
    frozen_text = canonical_json(
        {"alias": "decide", "operation": "breg.invoke-action/v1", "connection": "applications",
         "input": {"input": {"decision": "approve"}}, "idempotencyKey": key}
    ).decode()  # fmt: skip
    # The frozen command is parsed once for the attempt.
    frozen = PreparedCommand.from_frozen(frozen_text, action=action)
    # Prepare (engine `Prepare`) → `PreparationDone` with the base64 preparation.
    prepare = Prepare("record", "breg.invoke-action/v1", "applications", frozen_text)
    done = registry.prepare(prepare, frozen, attempt_deadline=deadline())
    assert isinstance(done, engine.PreparationDone) and done.step == "record"
    assert b'"accessProfile":"writer"' in preparation_bytes(done)
    # Obtain the attempt's credential (engine `ObtainCredential`): the token, which the
    # worker keeps for the dispatch while it answers `ReadyToSend` (no token in an event).
    token = registry.obtain_credential(
        ObtainCredential("record", "applications"), attempt_deadline=deadline()
    )
    assert isinstance(token, AccessToken)
    # Dispatch with that token → the engine's `CallOutcome`.
    dispatch = Dispatch(
        "record", "breg.invoke-action/v1", "applications", frozen_text, key, done.preparation, 1, 1
    )
    sent = frozen.with_preparation(done.preparation)
    outcome = registry.dispatch(dispatch, sent, attempt_deadline=deadline(), credential=token)
    assert outcome == engine.CallOutcome("record", "declared-refusal", refusal_code="late")
    assert len(fake.requests(TOKEN_PATH)) == 2  # one for the preparation, one for the attempt


def test_a_connection_bound_in_another_map_is_operation_unbound(fake, live):
    """An external GET whose connection name is an evaluation connection (and the reverse)
    is `operation-unbound`: the connection of that kind really is not bound."""
    registry = Adapters(
        {
            "router": EvaluationConnection(name="router", base_url=live.origin, model="m"),
            "calendar": ExternalConnection(
                name="calendar", base_url=live.origin, paths=frozenset({"status"}),
                query_parameters=frozenset(), response_schema=True,
            ),
        }
    )  # fmt: skip
    external = command("external-http.get/v1", {"path": "status"}, connection_name="router")
    evaluation = command(
        "evaluation.evaluate/v1",
        {"state": {}, "questions": {"q": {"type": "predicate", "instructions": "?"}}},
        connection_name="calendar",
    )
    assert registry.dispatch(
        dispatch_of(external), external, attempt_deadline=deadline()
    ) == refused("operation-unbound")
    assert registry.prepare(
        prepare_of(evaluation), evaluation, attempt_deadline=deadline()
    ) == refused("operation-unbound")
    assert not fake.requests("/")
