"""The error catalogue (spec/errors.yaml), its generator, and the schemas that cite its codes.

The contract is not available to tests, so the codes it names are copied to
tests/data/contract_codes.txt and the exit classes, HTTP statuses and failure codes it fixes are
copied below, each with the section it comes from.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec" / "errors.yaml"
GENERATED = ROOT / "generated" / "coordinator_models" / "error_catalogue.py"
DOC = ROOT / "docs" / "reference" / "error-codes.md"
CONTRACT_CODES = ROOT / "tests" / "data" / "contract_codes.txt"
SCENARIOS_SCHEMA = ROOT / "spec" / "schemas" / "scenarios.schema.json"
CTL_REPORT_SCHEMA = ROOT / "spec" / "schemas" / "ctl-report.schema.json"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_errors", ROOT / "scripts" / "generate_errors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture(scope="module")
def catalogue() -> dict[str, Any]:
    data: dict[str, Any] = gen.load_catalogue(SPEC)
    return data


def _contract_codes() -> list[str]:
    lines = CONTRACT_CODES.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


# Contract 02 §3 and 09 §7: the codes whose exit class is not 1.
EXIT_2 = {
    "coordinator.cli.usage",
    "coordinator.command.usage",
    "coordinator.command.runtime-config-required",
    "coordinator.command.extra-required",  # of this implementation (PRODUCT_CODES)
    "coordinator.command.graph-tool-missing",  # of this implementation (PRODUCT_CODES)
    "coordinator.command.deployment-required",
    "coordinator.command.service-required",
    "coordinator.command.token-file-required",
    "coordinator.dev.extra-required",  # of this implementation (PRODUCT_CODES)
}
# Codes of this implementation that the contract does not name (with why, where they are used).
PRODUCT_CODES = (
    "coordinator.request.internal-error",
    # A deployment whose workflow names an operation no adapter of this build serves is
    # refused before any run is admitted (apply, deployment-status, serve); the contract names
    # no code for a build that lacks an adapter.
    "coordinator.runtime.operation-unserved",
    # The connection guard of `coordinator serve` (docs/operations.md, HTTP edge limits): the
    # contract bounds bodies and tokens but not request heads or open connections.
    "coordinator.request.headers-too-large",
    # The waiting status read (`GET /v1/runs/{run}?wait=&seen=`, docs/reference/api.md), an
    # addition of this build that the contract's 06 §5.3 does not have.
    "coordinator.request.wait-invalid",
    "coordinator.request.connections-exhausted",
    "coordinator.request.peer-connections-exhausted",
    # A deployment command of a `coordinatorctl` installed without its `deploy` extra (the
    # offline commands install without a store driver, docs/installing.md).
    "coordinator.command.extra-required",
    # `--graph png` (explain, inspect) without a PNG converter on the machine: none is a
    # dependency of coordinatorctl (docs/graphs.md, PNG).
    "coordinator.command.graph-tool-missing",
    # `inspect --graph --project DIR` over a project whose definition digest is not the run's:
    # the API answers no step graph, so the run is drawn over the local project's (docs/graphs.md).
    "coordinator.command.graph-definition-mismatch",
    # `start --wait` / `status --watch` (docs/cli.md): the watched run settled without a finish,
    # the watch's `--timeout` passed, or Ctrl-C ended it (the process exits 130).
    "coordinator.command.run-not-finished",
    "coordinator.command.watch-timeout",
    "coordinator.command.watch-interrupted",
    # Issue 26: `check` warns when a cancel or a timeout leaves an accepted mutation open at a
    # product that supports withdrawal (docs/reference/02-check-and-package.md), and when a
    # function calls a function nothing defines (`timestamp()`: docs/functions.md); and
    # `coordinatorctl schema operation ID` refuses an id that is not in the catalogue.
    "coordinator.definition.open-mutation",
    "coordinator.function.unknown-call",
    "coordinator.command.unknown-operation",
    # `coordinatorctl dev` (docs/running-locally.md): the local loop the contract does not
    # have; a second session on one project, a child process that did not start, and an
    # installation without the service and the sandbox.
    "coordinator.dev.already-running",
    "coordinator.dev.component-unavailable",
    "coordinator.dev.extra-required",
    # `audit verify` (07 §12.1 item 6, docs/operations.md §8): the contract says a torn tail is
    # reported as `torn-tail`, not as tampering, and that a verify without the runtime file
    # says plainly that it cannot check the tail against the store; both are warnings.
    "coordinator.audit.torn-tail",
    "coordinator.audit.heads-unchecked",
    # Issue 24 item 6 (06 §5.4, beyond upstream): `GET /v1/runs/{run}/steps/{step}/attempts`
    # names a step the run's definition does not have.
    "coordinator.command.step-absent",
)

EXIT_3 = {
    "coordinator.request.internal-error",
    "coordinator.dev.component-unavailable",  # of this implementation (PRODUCT_CODES)
    "coordinator.definition.read",
    "platform.runtime-config.unavailable",
    "coordinator.secret.unavailable",
    "coordinator.command.input-unavailable",
    "coordinator.command.output-unavailable",
    "coordinator.command.service-unavailable",
    "coordinator.command.store-unavailable",
    "coordinator.command.store-busy",
    "coordinator.command.audit-unavailable",
    "coordinator.command.listener-unavailable",
    "coordinator.command.worker-unavailable",
    "coordinator.audit.unreadable",
    # 5xx problems of 06 §3.1 (02 §10: their exit class follows the HTTP status)
    "coordinator.access.unavailable",
    "coordinator.command.audit-response-unavailable",
    "coordinator.event.admissions-held",
    "coordinator.request.connections-exhausted",  # a 503 of this implementation
    "coordinator.request.peer-connections-exhausted",  # a 503 of this implementation
}
# Contract 02 §10, 05 §3, 09 §7: the warnings.
WARNINGS = {
    "platform.runtime-config.check-incomplete",
    "coordinator.project.unread-directory",
    "coordinator.definition.unused-operation",
    "coordinator.runtime.completion-events-unconfigured",
    "coordinator.deployment.version-reused",
    "coordinator.definition.open-mutation",  # of this implementation (PRODUCT_CODES)
    "coordinator.function.unknown-call",  # of this implementation (PRODUCT_CODES)
    "coordinator.audit.torn-tail",  # of this implementation (PRODUCT_CODES)
    "coordinator.audit.heads-unchecked",  # of this implementation (PRODUCT_CODES)
}
# Contract 06 §3.1.
HTTP_STATUS = {
    400: [
        "coordinator.request.invalid",
        "coordinator.request.cursor-invalid",
        "coordinator.request.wait-invalid",  # of this implementation (PRODUCT_CODES)
        "coordinator.command.start-key-invalid",
        "coordinator.command.input-invalid",
        "coordinator.definition.input",
        "coordinator.command.reason-invalid",
        "coordinator.command.retention-invalid",
        "coordinator.event.headers-invalid",
        "coordinator.event.body-invalid",
    ],
    401: [
        "coordinator.access.unauthenticated",
        "coordinator.event.signature-invalid",
        "coordinator.event.stale",
        "coordinator.completion.unauthenticated",
    ],
    403: ["coordinator.access.denied"],
    404: [
        "coordinator.request.not-found",
        "coordinator.command.run-absent",
        "coordinator.command.step-absent",  # of this implementation (PRODUCT_CODES)
        "coordinator.command.workflow-absent",
        "coordinator.event.trigger-unknown",
    ],
    405: ["coordinator.request.method-not-allowed"],
    409: [
        "idempotency.key-reused",
        "admission.revision-mismatch",
        "coordinator.command.recovery-only",
        "coordinator.command.restore-hold",
        "coordinator.command.restore-admissions-held",
        "coordinator.command.live-binding-conflict",
        "coordinator.command.activation-changed",
        "coordinator.command.retry-refused",
        "coordinator.command.reconcile-refused",
        "coordinator.command.reconciliation-unavailable",
        "coordinator.command.reconcile-raced",
        "coordinator.command.attestation-required",
    ],
    413: ["coordinator.request.too-large"],
    415: ["coordinator.request.content-type-invalid"],
    431: ["coordinator.request.headers-too-large"],  # of this implementation (PRODUCT_CODES)
    422: [
        "coordinator.event.type-mismatch",
        "coordinator.event.mapping-invalid",
        "coordinator.event.input-invalid",
    ],
    500: ["coordinator.request.internal-error"],
    503: [
        "coordinator.access.unavailable",
        "coordinator.command.store-unavailable",
        "coordinator.command.audit-unavailable",
        "coordinator.command.audit-response-unavailable",
        "coordinator.event.admissions-held",
        "coordinator.request.connections-exhausted",  # of this implementation (PRODUCT_CODES)
        "coordinator.request.peer-connections-exhausted",  # of this implementation
    ],
}
# Contract 08 §10: the closed failure codes.
ADAPTER_FAILURES = [
    "credential-unavailable", "credential-configuration", "credential-refused",
    "product-forbidden", "product-not-found", "product-refused", "invalid-command",
    "invalid-response", "transport-unavailable", "transport-uncertain", "rate-limited",
    "operation-unbound", "attempt-timeout", "action-unavailable", "prepared-command-mismatch",
    "completion-expired", "receipt-expired", "external-invalid-command",
    "external-destination-refused", "external-redirect", "external-invalid-response",
    "external-unavailable", "evaluation-invalid-command", "evaluation-invalid-response",
    "evaluation-unavailable", "evaluation-uncertain", "evaluation-refused",
]  # fmt: skip
FALLBACK_FAILURES = ["remote-retryable", "remote-refused", "remote-uncertain"]
RUN_FAILURES = [
    "mapping-invalid", "choice-invalid", "outcome-invalid", "wait-timed-out",
    "deadline-reached", "protected-state-invalid", "snapshot-incompatible", "binding-conflict",
    "step-invalid", "preparation-invalid", "preparation-too-large",
]  # fmt: skip


# -- the committed catalogue --------------------------------------------------------------------


def test_committed_catalogue_validates(catalogue: dict[str, Any]) -> None:
    assert gen.validate_catalogue(catalogue) == []


def test_every_contract_code_is_catalogued(catalogue: dict[str, Any]) -> None:
    contract = _contract_codes()
    assert len(contract) == len(set(contract)), "tests/data/contract_codes.txt repeats a code"
    missing = sorted(set(contract) - set(catalogue["codes"]))
    assert missing == []


def test_catalogue_adds_no_code_beyond_the_contract(catalogue: dict[str, Any]) -> None:
    # Product-internal codes, listed here on purpose (PRODUCT_CODES says why for each).
    beyond_contract: set[str] = set(PRODUCT_CODES)
    extra = sorted(set(catalogue["codes"]) - set(_contract_codes()) - beyond_contract)
    assert extra == []


def test_each_code_is_defined_once_in_the_file() -> None:
    text = SPEC.read_text(encoding="utf-8")
    keys = re.findall(r"^  ([a-z][a-z0-9.-]*):", text, flags=re.MULTILINE)
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    assert repeated == []
    for code in _contract_codes():
        assert keys.count(code) == 1, code


def test_exit_classes_follow_the_contract(catalogue: dict[str, Any]) -> None:
    for code, entry in catalogue["codes"].items():
        if code in WARNINGS:
            expected = 0
        elif code in EXIT_2:
            expected = 2
        elif code in EXIT_3:
            expected = 3
        else:
            expected = 1
        assert entry["exit"] == expected, code
        assert entry["severity"] == ("warning" if code in WARNINGS else "error"), code


def test_http_statuses_follow_the_contract(catalogue: dict[str, Any]) -> None:
    expected = {code: status for status, codes in HTTP_STATUS.items() for code in codes}
    actual = {code: entry["http"] for code, entry in catalogue["codes"].items() if "http" in entry}
    assert actual == expected


def test_failure_codes_are_the_closed_list(catalogue: dict[str, Any]) -> None:
    assert list(catalogue["failureCodes"]) == ADAPTER_FAILURES + FALLBACK_FAILURES + RUN_FAILURES


def test_scenario_hints_say_no_live_effect_was_attempted(catalogue: dict[str, Any]) -> None:
    # Contract 04 §4.10: every scenario diagnostic's suggestedAction says so.
    for code, entry in catalogue["codes"].items():
        if code.startswith(("coordinator.scenario.", "coordinator.scenarios.")):
            assert entry["hint"].endswith("no live effect was attempted."), code


def test_sentences_are_distinct_per_code(catalogue: dict[str, Any]) -> None:
    titles = [entry["title"] for entry in catalogue["codes"].values()]
    assert len(titles) == len(set(titles))


# -- the generated outputs ----------------------------------------------------------------------


def test_generated_python_matches_the_catalogue(catalogue: dict[str, Any]) -> None:
    assert GENERATED.read_text(encoding="utf-8") == gen.render_python(catalogue), (
        "generated/coordinator_models/error_catalogue.py is stale: run `nox -s generate`"
    )


def test_generated_markdown_matches_the_catalogue(catalogue: dict[str, Any]) -> None:
    assert DOC.read_text(encoding="utf-8") == gen.render_markdown(catalogue), (
        "docs/reference/error-codes.md is stale: run `nox -s generate`"
    )


def test_rendered_python_holds_the_catalogue(catalogue: dict[str, Any]) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(gen.render_python(catalogue), "error_catalogue.py", "exec"), namespace)
    codes = namespace["CODES"]
    assert list(codes) == sorted(catalogue["codes"])
    for code, entry in catalogue["codes"].items():
        assert codes[code] == (
            entry["title"],
            entry["hint"],
            entry["exit"],
            entry["severity"],
            entry.get("http"),
        )
    assert namespace["FAILURE_CODES"] == dict(sorted(catalogue["failureCodes"].items()))
    assert list(namespace["FAILURE_CODES"]) == sorted(catalogue["failureCodes"])


def test_rendering_is_deterministic(catalogue: dict[str, Any]) -> None:
    shuffled = dict(catalogue, codes=dict(reversed(list(catalogue["codes"].items()))))
    assert gen.render_python(shuffled) == gen.render_python(catalogue)
    assert gen.render_markdown(shuffled) == gen.render_markdown(catalogue)


def test_markdown_lists_every_code_once(catalogue: dict[str, Any]) -> None:
    text = gen.render_markdown(catalogue)
    for code in [*catalogue["codes"], *catalogue["failureCodes"]]:
        assert text.count(f"| `{code}` |") == 1, code


def test_main_writes_both_outputs(tmp_path: Path) -> None:
    python, markdown = tmp_path / "out" / "catalogue.py", tmp_path / "out" / "codes.md"
    argv = ["--spec", str(SPEC), "--python", str(python), "--markdown", str(markdown)]
    assert gen.main(argv) == 0
    assert python.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8")
    assert markdown.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")


def test_main_refuses_an_invalid_catalogue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "errors.yaml"
    broken.write_text(
        SPEC.read_text(encoding="utf-8").replace("    exit: 1\n", "    exit: 4\n", 1),
        encoding="utf-8",
    )
    output = tmp_path / "catalogue.py"
    assert gen.main(["--spec", str(broken), "--python", str(output)]) == 1
    assert not output.exists()
    assert "must be an integer from 0 to 3" in capsys.readouterr().err


# -- validation and loading ---------------------------------------------------------------------


def _minimal() -> dict[str, Any]:
    return {
        "codes": {
            "yaml.too-large": {
                "title": "The file is too large.",
                "hint": "Make it smaller.",
                "exit": 1,
                "severity": "error",
                "area": "reader",
                "contract": "01 §2 Y1",
            }
        },
        "failureCodes": {"deadline-reached": "The deadline passed."},
        "areas": {"reader": {"title": "Reader", "description": "Reader findings."}},
    }


def _with_code(code: str, **changes: Any) -> dict[str, Any]:
    data = _minimal()
    entry = dict(data["codes"].pop("yaml.too-large"))
    for name, value in changes.items():
        if value is None:
            entry.pop(name, None)
        else:
            entry[name] = value
    data["codes"][code] = entry
    return data


def test_minimal_catalogue_is_valid() -> None:
    assert gen.validate_catalogue(_minimal()) == []


@pytest.mark.parametrize(
    "code",
    [
        "coordinator.cli.usage",
        "coordinator.external-http.configuration",
        "platform.runtime-config.check-incomplete",
        "idempotency.key-reused",
        "admission.revision-mismatch",
        "config.expected-string",
    ],
)
def test_code_grammar_accepts(code: str) -> None:
    assert gen.code_grammar_ok(code)
    assert gen.validate_catalogue(_with_code(code)) == []


@pytest.mark.parametrize(
    "code",
    [
        "coordinator.cli",  # two segments
        "coordinator.command.store.busy",  # four segments
        "coordinator.Command.usage",  # not kebab-case
        "coordinator.command.store_busy",
        "coordinator.command.-busy",
        "yaml.too-large.file",
        "platform.runtime-config",
        "product-refused",  # a failure code, not a diagnostic code
        "request.invalid",  # a product's code, not a family of ours
    ],
)
def test_code_grammar_refuses(code: str) -> None:
    assert not gen.code_grammar_ok(code)
    problems = gen.validate_catalogue(_with_code(code))
    assert any("bad code grammar" in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"title": None}, "missing field `title`"),
        ({"contract": None}, "missing field `contract`"),
        ({"colour": "red"}, "unknown field `colour`"),
        ({"exit": 4}, "from 0 to 3"),
        ({"exit": True}, "from 0 to 3"),
        ({"severity": "fatal"}, "must be one of"),
        ({"severity": "warning"}, "a warning has exit class 0"),
        ({"exit": 0}, "an error has exit class 1, 2 or 3"),
        ({"http": 302}, "4xx or 5xx"),
        ({"http": 503}, "a 503 problem has exit class 3"),
        ({"area": "nowhere"}, "not declared under `areas`"),
        ({"title": "Step <step> failed."}, "placeholder"),
        ({"hint": "Rename {name}."}, "placeholder"),
        ({"hint": "Use %s instead."}, "placeholder"),
        ({"title": "No full stop"}, "full stop"),
        ({"title": "lower case start."}, "capital letter"),
        ({"title": 'Says "hi".'}, "placeholder"),
        ({"hint": "Two\nlines."}, "control character"),
    ],
)
def test_validation_reports(changes: dict[str, Any], fragment: str) -> None:
    problems = gen.validate_catalogue(_with_code("yaml.too-large", **changes))
    assert any(fragment in problem for problem in problems), problems


def test_validation_reports_catalogue_level_problems() -> None:
    data = _minimal()
    data["failureCodes"]["yaml.too-large"] = "Listed twice."
    data["failureCodes"]["Bad_Code"] = "Bad."
    data["areas"]["unused"] = {"title": "Unused", "description": "Nothing."}
    data["extra"] = {}
    problems = gen.validate_catalogue(data)
    for fragment in (
        "also listed under `codes`",
        "failureCodes.Bad_Code",
        "areas.unused: no code uses this area",
        "unknown top-level member `extra`",
    ):
        assert any(fragment in problem for problem in problems), (fragment, problems)
    assert gen.validate_catalogue({}) != []


def test_load_refuses_a_code_listed_twice(tmp_path: Path) -> None:
    path = tmp_path / "errors.yaml"
    path.write_text(
        "codes:\n"
        "  yaml.alias:\n    title: A.\n"
        "  yaml.anchor:\n    title: B.\n"
        "  yaml.alias:\n    title: C.\n",
        encoding="utf-8",
    )
    with pytest.raises(gen.CatalogueError, match=r"duplicate key 'yaml.alias' at line 6"):
        gen.load_catalogue(path)


# -- the schemas that cite catalogue codes ------------------------------------------------------


def _schema(path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


@pytest.mark.parametrize("path", [SCENARIOS_SCHEMA, CTL_REPORT_SCHEMA])
def test_schema_is_valid_2020_12(path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(_schema(path))


def _properties(node: Any, trail: str = "") -> list[tuple[str, Any]]:
    """Every (pointer, schema) under a `properties` member."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for name, child in node.items():
            if name == "properties" and isinstance(child, dict):
                found.extend((f"{trail}/properties/{key}", value) for key, value in child.items())
            found.extend(_properties(child, f"{trail}/{name}"))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found.extend(_properties(child, f"{trail}/{index}"))
    return found


def test_scenarios_schema_describes_every_property() -> None:
    schema = _schema(SCENARIOS_SCHEMA)
    undocumented = [pointer for pointer, prop in _properties(schema) if "description" not in prop]
    assert undocumented == []


def test_scenarios_schema_cites_the_failure_codes(catalogue: dict[str, Any]) -> None:
    definitions = _schema(SCENARIOS_SCHEMA)["$defs"]
    failure_code = definitions["Expect"]["properties"]["failureCode"]
    assert failure_code["anyOf"][0]["enum"] == list(catalogue["failureCodes"])
    assert definitions["ReplyCode"]["examples"] == ADAPTER_FAILURES + FALLBACK_FAILURES


SCENARIOS_EXAMPLE = {
    "apiVersion": "id.registrystack.org/formats/coordinator/scenarios/v1alpha1",
    "kind": "CoordinatorScenarios",
    "cases": [
        {
            "id": "uncertain-notice-reconciled",
            "admittedAt": "2026-03-02T09:00:00Z",
            "input": {"applicationId": "a8d12546-b2ca-46ac-b12b-06c199041bb2"},
            "replies": {
                "read-application": [{"type": "success", "value": {"data": {}}}],
                "send-notice": [
                    {"type": "uncertain", "code": "transport-uncertain"},
                    {"type": "success", "value": {"id": "45a8d043"}},
                ],
            },
            "observations": {
                "await-review": [{"type": "pending"}, {"type": "complete", "value": None}]
            },
            "recovery": {"send-notice": "reconcile"},
            "cancel": {"afterSeconds": 3600},
            "expect": {
                "status": "finished",
                "path": ["read-application", "send-notice"],
                "outcome": {"type": "named", "value": "notice-sent"},
                "output": None,
                "failureCode": None,
                "effects": [{"step": "send-notice", "state": "accepted"}],
                "workflowElapsedSeconds": 900,
            },
        },
        {
            "id": "by-event",
            "admittedAt": "2026-03-02T09:00:00Z",
            "event": {"trigger": "application-submitted", "data": {"recordIdentifier": "x"}},
            "replies": {"record-decision": [{"type": "declared-refusal", "refusalCode": "a.b"}]},
            "expect": {"status": "failed", "path": [], "failureCode": "product-refused"},
        },
    ],
}


def test_scenarios_schema_accepts_a_scenarios_document() -> None:
    validator = jsonschema.Draft202012Validator(_schema(SCENARIOS_SCHEMA))
    assert [error.message for error in validator.iter_errors(SCENARIOS_EXAMPLE)] == []


@pytest.mark.parametrize(
    "mutate",
    [
        lambda doc: doc["cases"][0].update(extra=1),
        lambda doc: doc["cases"][0]["replies"]["send-notice"].append({"type": "maybe"}),
        lambda doc: doc["cases"][0]["expect"].update(status="done"),
        lambda doc: doc["cases"][0]["expect"].update(failureCode="no-such-code"),
        lambda doc: doc["cases"][0].update(observationFloorSeconds=10),
        lambda doc: doc["cases"][0]["recovery"].update({"send-notice": "redo"}),
        lambda doc: doc.update(kind="CoordinatorProject"),
    ],
)
def test_scenarios_schema_refuses(mutate: Any) -> None:
    document = json.loads(json.dumps(SCENARIOS_EXAMPLE))
    mutate(document)
    validator = jsonschema.Draft202012Validator(_schema(SCENARIOS_SCHEMA))
    assert list(validator.iter_errors(document)) != []


ENVELOPE = {
    "apiVersion": "id.registrystack.org/formats/coordinator/ctl-report/v1alpha1",
    "kind": "CoordinatorCtlReport",
}
DIAGNOSTIC = {
    "severity": "error",
    "code": "coordinator.mapping.dominance",
    "path": "/steps/send-notice/input/arguments/1",
    "message": "The referenced step is not available on every route into this step.",
    "suggestedAction": "Reference only steps that succeed on every route into this step.",
    "source": {"file": "workflow.yaml", "line": 57, "column": 13},
    "related": [
        {
            "file": "workflow.yaml",
            "line": 48,
            "column": 16,
            "path": "/steps/await-review/onTimeout",
            "message": "A route on which it is missing.",
        }
    ],
}


@pytest.mark.parametrize(
    "report",
    [
        {
            **ENVELOPE, "command": "check", "ok": True, "status": "valid", "diagnostics": [],
            "workflow": "reviewed-notice", "version": "1", "revision": "sha256:0",
            "definitionDigest": "sha256:1", "steps": 15,
        },
        {
            **ENVELOPE, "command": "start", "ok": True, "status": "admitted", "diagnostics": [],
            "run": {"runId": "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "status": "running"},
        },
        {
            **ENVELOPE, "command": "check", "ok": False, "status": "domain-refusal",
            "diagnostics": [DIAGNOSTIC],
        },
        {
            **ENVELOPE, "command": "usage", "ok": False, "status": "usage-error",
            "diagnostics": [{**DIAGNOSTIC, "code": "coordinator.cli.usage", "path": ""}],
        },
        {
            **ENVELOPE, "command": "audit verify", "ok": True, "status": "verified",
            "diagnostics": [], "files": 1, "entries": 3, "groups": [],
        },
        {
            **ENVELOPE, "command": "eval", "ok": True, "status": "evaluated", "diagnostics": [],
            "function": "review_route", "result": "approved",
        },
    ],
)  # fmt: skip
def test_ctl_report_schema_accepts(report: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(_schema(CTL_REPORT_SCHEMA))
    assert [error.message for error in validator.iter_errors(report)] == []


@pytest.mark.parametrize(
    "changes",
    [
        {"ok": False},  # a failure needs a failure status word and a diagnostic
        {"status": "domain-refusal"},  # a failure status word on success
        {"diagnostics": [DIAGNOSTIC]},  # an error on success
        {"command": "usage"},  # a usage report is a failure
        {"diagnostics": [{**DIAGNOSTIC, "code": "product-refused"}]},
        {"diagnostics": [{**DIAGNOSTIC, "severity": "fatal"}]},
        {"diagnostics": [{**DIAGNOSTIC, "value": 1}]},
        {"diagnostics": [{**DIAGNOSTIC, "path": "steps"}]},
        {"diagnostics": [{**DIAGNOSTIC, "source": {"file": "w.yaml", "column": 3}}]},
        {"run": "0b7d3c52"},
        {"Workflow": "x"},
        {"kind": "CoordinatorProject"},
    ],
)
def test_ctl_report_schema_refuses(changes: dict[str, Any]) -> None:
    report = {**ENVELOPE, "command": "check", "ok": True, "status": "valid", "diagnostics": []}
    report.update(changes)
    validator = jsonschema.Draft202012Validator(_schema(CTL_REPORT_SCHEMA))
    assert list(validator.iter_errors(report)) != []


def test_ctl_report_code_pattern_accepts_every_catalogued_code(catalogue: dict[str, Any]) -> None:
    pattern = re.compile(
        _schema(CTL_REPORT_SCHEMA)["$defs"]["Diagnostic"]["properties"]["code"]["pattern"]
    )
    for code in catalogue["codes"]:
        assert pattern.match(code), code
    for code in catalogue["failureCodes"]:
        assert not pattern.match(code), code


def test_yaml_of_the_spec_is_plain_data() -> None:
    # The catalogue stays readable by any YAML 1.1/1.2 loader: no tags, anchors or aliases.
    text = SPEC.read_text(encoding="utf-8")
    events = list(yaml.parse(text))
    assert not any(getattr(event, "anchor", None) for event in events)
    assert not any(getattr(event, "tag", None) for event in events)
