"""The standalone check of a runtime file (contract 05) and its bindings to a workflow (02 §5.8)."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from coordinator_core import limits
from coordinator_core.authoring.decode import (
    AuthoredFile,
    decode_body,
    load_schema,
    read_authored_file,
)
from coordinator_core.authoring.yamlreader import INVALID, YamlDocument, escape_pointer_token
from coordinator_core.config.expressions import (
    ExpressionSyntaxError,
    StandIns,
    UnsetVariableError,
    contains_expression,
    parse_expressions,
    substitute,
)
from coordinator_core.config.rules import (
    ARTIFACT,
    MESSAGES,
    RuntimeRules,
    diagnostic_at,
    holds_stand_in,
    is_reference_member,
)
from coordinator_core.errors import Diagnostic, Related, closest_name, is_identifier
from coordinator_core.operations import product_of

__all__ = [
    "RuntimeCheck",
    "check_bindings",
    "check_runtime_bytes",
    "check_runtime_file",
]

PRODUCTS: Final = frozenset({"breg", "casework", "messaging", "scheduling"})
REVIEW_OPERATION: Final = "casework.submit-review-request/v1"

# Decoding findings that depend on a member's value, so say nothing about a stand-in (05 §3).
_VALUE_CODES: Final = frozenset(
    {
        "config.invalid-value",
        "config.invalid-length",
        "config.unknown-variant",
        "config.out-of-range",
    }
)
_ENVELOPE_CODES: Final = frozenset(
    {"config.unsupported-api-version", "config.wrong-kind", "coordinator.project.misplaced-kind"}
)
# Reader and envelope only: the body is decoded later, after substitution (see _Preparer).
# An open object schema makes the decoder pass the body through without a finding.
_ENVELOPE_ONLY: Final[Mapping[str, Any]] = {"type": "object"}


@dataclass(frozen=True)
class RuntimeCheck:
    """A runtime file after the reader, substitution, decoding and the rules of 05 §9.

    `authored.decoded` holds substituted values (with `--environment`) or stand-ins (offline);
    `stand_ins` are the pointers of members holding a stand-in and `incomplete` the objects
    skipped because a stand-in could not be decoded (05 §3, item 3). `ok_for_bindings` is
    true when the file decoded without an error (02 §4.1 step 8): the reader, the envelope,
    substitution and decoding found nothing; findings of the rules V2–V10 do not count.
    """

    authored: AuthoredFile
    diagnostics: list[Diagnostic]
    ok_for_bindings: bool
    stand_ins: frozenset[str] = field(default_factory=frozenset)
    incomplete: frozenset[str] = field(default_factory=frozenset)

    def holds_stand_in(self, pointer: str) -> bool:
        """Whether `pointer` holds a stand-in or lies in an object skipped for one."""
        return holds_stand_in(pointer, self.stand_ins, self.incomplete)

    def response_schemas(self) -> dict[str, Any]:
        """The `responseSchema` of each external connection (05 §5.2) that decoded and passed
        its checks, by connection name: what a scripted `external-http.get/v1` reply on that
        connection must match too (04 §3 C13)."""
        decoded = self.authored.decoded or {}
        entries = decoded.get("externalHttpConnections")
        if not isinstance(entries, dict):
            return {}
        errors = [d.path for d in self.diagnostics if d.effective_severity == "error"]
        found: dict[str, Any] = {}
        for name, entry in entries.items():
            if not isinstance(entry, dict) or "responseSchema" not in entry:
                continue
            pointer = f"/externalHttpConnections/{escape_pointer_token(name)}/responseSchema"
            if self.holds_stand_in(pointer) or any(
                path == pointer or path.startswith(pointer + "/") for path in errors
            ):
                continue
            found[name] = entry["responseSchema"]
        return found


# -- reading ------------------------------------------------------------------------------


def check_runtime_file(
    path: Path, *, display_file: str, environment: Mapping[str, str] | None
) -> RuntimeCheck:
    """Read and check one runtime file alone (02 §4.1 step 8; never resolves a secret).

    `environment` is the mapping `--environment` substitutes from, or None to check offline
    with stand-ins; this function never reads the process environment itself.
    """
    data = _read_runtime_bytes(path)
    if data is None:
        unavailable = Diagnostic(
            "platform.runtime-config.unavailable", path="", file=display_file, artifact=ARTIFACT
        )
        authored = AuthoredFile(display_file, None, None, frozenset(), [unavailable])
        return RuntimeCheck(authored, [unavailable], ok_for_bindings=False)
    return check_runtime_bytes(data, display_file=display_file, environment=environment)


def _read_runtime_bytes(path: Path) -> bytes | None:
    """The bytes of a non-empty regular file that is not a symlink, or None (05 §1).

    At most one byte more than the reader's size limit is read, so the reader still reports
    `yaml.too-large` without this function holding a huge file in memory. O_NONBLOCK keeps a
    FIFO planted at the path from blocking the check before fstat refuses it.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_size == 0:
            return None
        chunks: list[bytes] = []
        remaining = limits.YAML_MAX_BYTES + 1
        while remaining > 0:
            chunk = os.read(descriptor, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def check_runtime_bytes(
    data: bytes, *, display_file: str, environment: Mapping[str, str] | None
) -> RuntimeCheck:
    """The check of `check_runtime_file` over bytes already read."""
    envelope = read_authored_file(
        data, file=display_file, expected_kind=ARTIFACT, schema=_ENVELOPE_ONLY
    )
    diagnostics = list(envelope.diagnostics)
    document = envelope.document
    if document is None or envelope.decoded is None:
        if document is not None:
            diagnostics = _refuse_envelope_expressions(document, display_file, diagnostics)
        authored = AuthoredFile(
            display_file, document, None, frozenset(), diagnostics, envelope.kind
        )
        return RuntimeCheck(authored, list(diagnostics), ok_for_bindings=False)

    schema = load_schema("runtime")
    preparer = _Preparer(document, schema, display_file, environment)
    effective = preparer.walk(document.value, schema, "", refused=False)
    body: list[Diagnostic] = list(preparer.diagnostics)

    decoding: list[Diagnostic] = []
    decoded, failed = decode_body(
        dataclasses.replace(document, value=effective),
        schema,
        file=display_file,
        artifact=ARTIFACT,
        out=decoding,
    )
    stand_ins = frozenset(preparer.stand_ins)
    incomplete: set[str] = set()
    for diagnostic in decoding:
        if diagnostic.path in stand_ins and diagnostic.code in _VALUE_CODES:
            if diagnostic.code == "config.unknown-variant":
                # An enum or tag the stand-in cannot stand for: the object is not checked.
                body.append(
                    dataclasses.replace(
                        diagnostic,
                        code="platform.runtime-config.check-incomplete",
                        severity="warning",
                        message=None,
                    )
                )
                incomplete.add(_enclosing_object(document.value, diagnostic.path))
            continue
        body.append(diagnostic)
    # The object around an undecodable stand-in is skipped: nothing inside it is reported,
    # neither decoding nor substitution findings (the reader's own yaml.* findings stay).
    diagnostics.extend(
        d
        for d in body
        if d.code == "platform.runtime-config.check-incomplete"
        or not any(d.path.startswith(skipped + "/") for skipped in incomplete)
    )

    authored = AuthoredFile(display_file, document, decoded, failed, diagnostics, ARTIFACT)
    check = RuntimeCheck(
        authored,
        list(diagnostics),
        ok_for_bindings=decoded is not None
        and not any(d.severity != "warning" for d in diagnostics),
        stand_ins=stand_ins,
        incomplete=frozenset(incomplete),
    )
    if decoded is not None:
        check.diagnostics.extend(RuntimeRules(authored, stand_ins, frozenset(incomplete)).run())
    return check


def _refuse_envelope_expressions(
    document: YamlDocument, file: str, diagnostics: list[Diagnostic]
) -> list[Diagnostic]:
    """`${…}` in `apiVersion` or `kind` is refused as such, not as a wrong envelope (05 §3)."""
    root = document.value
    if not isinstance(root, dict):
        return diagnostics
    result = diagnostics
    for member in ("apiVersion", "kind"):
        value = root.get(member)
        if isinstance(value, str) and contains_expression(value):
            pointer = f"/{member}"
            result = [d for d in result if not (d.path == pointer and d.code in _ENVELOPE_CODES)]
            result.append(diagnostic_at(document, file, "config.substitution-not-allowed", pointer))
    return result


def _enclosing_object(root: Any, pointer: str) -> str:
    """The pointer of the nearest object that contains the member at `pointer`."""
    tokens = pointer.split("/")[1:]
    nodes: list[Any] = [root]
    for token in tokens[:-1]:
        node = nodes[-1]
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            nodes.append(node.get(key))
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            nodes.append(node[int(key)])
        else:
            nodes.append(None)
    for depth in range(len(tokens) - 1, -1, -1):
        if isinstance(nodes[depth], dict):
            return "".join("/" + token for token in tokens[:depth])
    return ""


class _Preparer:
    """Builds the tree the decoder sees: every string holding an expression is substituted
    (with an environment) or replaced by its stand-in (without one), and refused or broken
    expressions become INVALID so the decoder skips them silently (they are reported here).
    """

    def __init__(
        self,
        document: YamlDocument,
        schema: Mapping[str, Any],
        file: str,
        environment: Mapping[str, str] | None,
    ) -> None:
        self.document = document
        self.root = schema
        self.file = file
        self.environment = environment
        self.stand_in_names = StandIns()
        self.stand_ins: set[str] = set()
        self.diagnostics: list[Diagnostic] = []

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            target: Any = self.root
            for token in str(schema["$ref"]).removeprefix("#/").split("/"):
                target = target[token]
            merged = dict(target)
            merged.update({k: v for k, v in schema.items() if k != "$ref"})
            schema = merged
        return schema

    def walk(
        self, node: Any, schema: Mapping[str, Any] | None, pointer: str, *, refused: bool
    ) -> Any:
        if node is INVALID:
            return node
        if schema is not None:
            schema = self.resolve(schema)
            if schema.get("x-foreign"):
                return node  # foreign values are data: a `${` in them is not an expression
        if isinstance(node, dict):
            return self.walk_object(node, schema, pointer, refused=refused)
        if isinstance(node, list):
            items = schema.get("items") if schema is not None else None
            return [
                self.walk(child, items, f"{pointer}/{index}", refused=refused)
                for index, child in enumerate(node)
            ]
        if (
            isinstance(node, str)
            and contains_expression(node)
            and schema is not None
            and schema.get("type") == "string"
        ):
            return self.string(node, pointer, refused=refused)
        # Integers and booleans cannot hold expressions: the decoder reports the wrong type.
        return node

    def walk_object(
        self, node: dict[str, Any], schema: Mapping[str, Any] | None, pointer: str, *, refused: bool
    ) -> dict[str, Any]:
        result: dict[str, Any] = {}
        branch = schema
        tag_name = schema.get("x-discriminator") if schema is not None else None
        if schema is not None and isinstance(tag_name, str) and tag_name in node:
            tag = node[tag_name]
            if isinstance(tag, str) and contains_expression(tag):
                tag = self.string(
                    tag, f"{pointer}/{escape_pointer_token(tag_name)}", refused=refused
                )
            result[tag_name] = tag
            branch = None
            for written in schema.get("oneOf", ()):
                candidate = self.resolve(written)
                if candidate.get("properties", {}).get(tag_name, {}).get("const") == tag:
                    branch = candidate
        for key, child in node.items():
            if key == tag_name and tag_name in result:
                continue
            child_pointer = f"{pointer}/{escape_pointer_token(key)}"
            child_refused = (
                refused
                or is_reference_member(key)
                or child_pointer in ("/apiVersion", "/kind", "/secretProviders")
            )
            result[key] = self.walk(
                child, _member_schema(branch, key), child_pointer, refused=child_refused
            )
        return result

    def string(self, text: str, pointer: str, *, refused: bool) -> Any:
        if refused:
            self.report("config.substitution-not-allowed", pointer)
            return INVALID
        try:
            parse_expressions(text)
        except ExpressionSyntaxError:
            self.report("config.substitution", pointer, message=MESSAGES["malformed"])
            return INVALID
        if self.environment is None:
            self.stand_ins.add(pointer)
            return self.stand_in_names.for_member(pointer, text)
        try:
            return substitute(text, self.environment)
        except UnsetVariableError:
            self.report("config.substitution", pointer)
            return INVALID

    def report(self, code: str, pointer: str, *, message: str | None = None) -> None:
        self.diagnostics.append(
            diagnostic_at(self.document, self.file, code, pointer, message=message)
        )


def _member_schema(schema: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    if schema is None:
        return None
    properties: Mapping[str, Any] = schema.get("properties", {})
    if key in properties:
        member: Mapping[str, Any] = properties[key]
        return member
    additional = schema.get("additionalProperties")
    return additional if isinstance(additional, Mapping) else None


# -- bindings (02 §5.8) -------------------------------------------------------------------


def check_bindings(
    workflow: Mapping[str, Any],
    runtime: RuntimeCheck,
    workflow_position: Callable[[str], tuple[int | None, int | None]] | None = None,
) -> list[Diagnostic]:
    """B1–B4 and B6 of a decoded workflow body against a runtime file (B5 is the file's own).

    Positions are in the runtime file. A member holding an environment stand-in, or inside an
    object skipped for one, is not judged. With `workflow_position` (a pointer's line and column
    in workflow.yaml), an unbound name gets a `related` entry where the workflow uses it.
    """
    decoded = runtime.authored.decoded
    document = runtime.authored.document
    if not runtime.ok_for_bindings or decoded is None or document is None:
        return []
    file = runtime.authored.file
    out: list[Diagnostic] = []
    reported: set[tuple[str, str]] = set()

    def report(
        pointer: str,
        *,
        message: str | None,
        code: str = "coordinator.runtime.workflow-binding",
        severity: Literal["error", "warning"] | None = None,
        unbound: tuple[str, str, str] | None = None,
    ) -> None:
        if (code, pointer) in reported:
            return
        reported.add((code, pointer))
        anchor: Literal["key", "value"] = "key" if document.key_positions.get(pointer) else "value"
        found = diagnostic_at(
            document, file, code, pointer, anchor=anchor, message=message, severity=severity
        )
        if unbound is not None:
            # (name, the runtime map it belongs in, the workflow pointer that uses it)
            name, map_name, used_at = unbound
            noun = "event source" if map_name == "eventSources" else "connection"
            entries = decoded.get(map_name)
            names = entries.keys() if isinstance(entries, dict) else ()
            related: tuple[Related, ...] = ()
            if workflow_position is not None:
                line, column = workflow_position(used_at)
                related = (
                    Related("workflow.yaml", used_at, f"{noun} {name} is used here", line, column),
                )
            found = dataclasses.replace(
                found,
                suggestion=closest_name(name, names) if is_identifier(name) else None,
                related=related,
            )
        out.append(found)

    def entry(map_name: str, name: str) -> Any:
        entries = decoded.get(map_name)
        return entries.get(name) if isinstance(entries, dict) else None

    operations = workflow.get("operations")
    aliases: Mapping[str, Any] = operations if isinstance(operations, dict) else {}
    for alias_id, alias in aliases.items():
        if not isinstance(alias, dict):
            continue
        operation, connection = alias.get("operation"), alias.get("connection")
        if not isinstance(operation, str) or not isinstance(connection, str):
            continue
        product = product_of(operation)
        if product in PRODUCTS:
            map_name = "connections"
        elif product == "external-http":
            map_name = "externalHttpConnections"
        elif product == "evaluation":
            map_name = "evaluationConnections"
        else:
            continue  # not in the catalog: a workflow rule reports the operation
        pointer = f"/{map_name}/{escape_pointer_token(connection)}"
        if runtime.holds_stand_in(pointer):
            continue
        bound = entry(map_name, connection)
        if bound is None:
            named = is_identifier(connection) and is_identifier(alias_id)
            report(
                pointer,
                message=(
                    f"Operation alias {alias_id} uses connection {connection}, "
                    f"which is not bound under `{map_name}`."
                )
                if named
                else MESSAGES["missing-connection"],
                unbound=(
                    connection,
                    map_name,
                    f"/operations/{escape_pointer_token(alias_id)}/connection",
                ),
            )
        elif map_name == "connections" and isinstance(bound, dict):
            if runtime.holds_stand_in(f"{pointer}/product"):
                continue
            if bound.get("product") != product:
                report(pointer, message=MESSAGES["wrong-product"])

    triggers = workflow.get("triggers")
    if isinstance(triggers, dict):
        for trigger_id, trigger in triggers.items():
            source = trigger.get("source") if isinstance(trigger, dict) else None
            if isinstance(source, str) and entry("eventSources", source) is None:
                named = is_identifier(source) and is_identifier(trigger_id)
                report(
                    f"/eventSources/{escape_pointer_token(source)}",
                    message=(
                        f"Trigger {trigger_id} names event source {source}, "
                        "which is not declared under `eventSources`."
                    )
                    if named
                    else MESSAGES["missing-event-source"],
                    unbound=(
                        source,
                        "eventSources",
                        f"/triggers/{escape_pointer_token(trigger_id)}/source",
                    ),
                )

    steps = workflow.get("steps")
    if isinstance(steps, dict):
        for step in steps.values():
            if not isinstance(step, dict) or step.get("type") != "wait-for":
                continue
            called = steps.get(step.get("call"))
            alias_name = called.get("operation") if isinstance(called, dict) else None
            alias = aliases.get(alias_name) if isinstance(alias_name, str) else None
            if not isinstance(alias, dict) or alias.get("operation") != REVIEW_OPERATION:
                continue
            connection = alias.get("connection")
            if not isinstance(connection, str):
                continue
            pointer = f"/connections/{escape_pointer_token(connection)}"
            bound = entry("connections", connection)
            if (
                isinstance(bound, dict)
                and bound.get("product") == "casework"
                and "reviewCompletions" not in bound
                and not runtime.holds_stand_in(pointer)
            ):
                report(
                    pointer,
                    code="coordinator.runtime.completion-events-unconfigured",
                    severity="warning",
                    message=None,
                )
    return out
