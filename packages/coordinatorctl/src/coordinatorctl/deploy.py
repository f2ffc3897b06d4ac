"""The deployment commands of contract 09 §3: `migrate`, `plan`, `apply`, `deployment-status`.

Each reads the runtime file with values substituted from the environment (05 §3 item 4), needs
its `database` and `deployment` blocks, and resolves every secret it names (05 §2.2) with the
database credentials the command is entitled to: the migration URL for `migrate` and `apply`,
the runtime URL for `plan` and `deployment-status` (on SQLite, the file). `migrate` and `apply`
journal a request entry before they touch the store and a response entry after (role `ctl`,
07 §11); `plan` and `deployment-status` are read-only and open no journal.

Nothing here prints a secret, a URL or a path of a secret: refusals carry catalogue codes and the
fixed sentences of the loaders.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from coordinator_core.config.model import (
    Deployment,
    DeploymentRefused,
    DeploymentSettings,
    PostgresqlDatabase,
)
from coordinator_core.definition.ir import Definition
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit import (
    AuditWriter,
    apply_request,
    ctl_applied,
    migrate_request,
    new_correlation,
    response,
)
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.clock import wall_clock
from coordinator_core.shell.deployment import load_deployment, package_binding_problems
from coordinator_core.shell.execution.codec import DefinitionCache
from coordinator_core.shell.package_files import LoadedPackage, load_package
from coordinator_core.shell.sealing import Sealer
from coordinator_core.shell.secrets import DatabaseRole, Secrets, resolve_secrets
from coordinator_core.shell.service.bindings import LiveBindings
from coordinator_core.shell.store import (
    ActivationRequest,
    DeploymentIdentity,
    DeploymentState,
    Store,
    apply_activation,
    inspect_deployment,
    migrate,
)
from coordinatorctl.report import Outcome

__all__ = ["run"]

MAX_REFERENCE_CHARS: Final = 256

_ROLE_OF: Final[Mapping[str, DatabaseRole]] = {
    "migrate": "migration",
    "apply": "migration",
    "plan": "runtime",
    "deployment-status": "runtime",
    "audit verify": "runtime",
}
_STORE_UNAVAILABLE: Final = "coordinator.command.store-unavailable"


# -- the shared preparation ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Context:
    """A runtime file loaded for one deployment command, with its secrets resolved."""

    deployment: Deployment
    settings: DeploymentSettings
    secrets: Secrets
    environment: Mapping[str, str]

    @property
    def namespace(self) -> str | None:
        database = self.deployment.database
        return database.namespace if isinstance(database, PostgresqlDatabase) else None

    def identity(self) -> DeploymentIdentity:
        database_id = self.settings.database_id
        return DeploymentIdentity(
            database_id=database_id,
            admission_key_commitment=self.secrets.admission_key.custody_marker(database_id),
            state_key_commitments=self.secrets.state_keys.custody_markers(database_id),
            active_state_key=self.settings.active_state_key,
            package_digest=self.settings.package.expected_digest,
            runtime_role=self.settings.runtime_role,
        )


def journal_heads(runtime_config: str) -> dict[str, JournalPosition] | Outcome:
    """The journal heads the deployment's store holds (07 §12.1 item 4, `audit verify
    --runtime-config`), read after the deployment check; an Outcome when that refuses."""
    command = "audit verify"
    environment = dict(os.environ)
    try:
        deployment = load_deployment(runtime_config, environment=environment)
        settings = deployment.deployment
        assert settings is not None
        secrets = resolve_secrets(deployment, environment=environment, database_role="runtime")
        context = _Context(deployment, settings, secrets, environment)
        with (
            _store_url(context) as url,
            Store.open(url, context.identity(), namespace=context.namespace, pool_size=1) as store,
        ):
            return store.reads.journal_heads()
    except DeploymentRefused as refused:
        return Outcome(command, list(refused.diagnostics))
    except CoordinatorError as error:
        return Outcome(command, [error.diagnostic])


def run(options: argparse.Namespace) -> Outcome:
    """Run the deployment command `options.command`; every refusal becomes the Outcome's
    diagnostics (all of them for a runtime file or secret refusal)."""
    command: str = options.command
    if options.runtime_config is None:
        return Outcome(command, [Diagnostic("coordinator.command.runtime-config-required")])
    environment = dict(os.environ)
    try:
        deployment = load_deployment(options.runtime_config, environment=environment)
        settings = deployment.deployment
        assert settings is not None  # require_deployment
        secrets = resolve_secrets(
            deployment, environment=environment, database_role=_ROLE_OF[command]
        )
    except DeploymentRefused as refused:
        return Outcome(command, list(refused.diagnostics))
    context = _Context(deployment, settings, secrets, environment)
    warnings = list(deployment.warnings)
    try:
        with _store_url(context) as url:
            if command == "migrate":
                outcome = _migrate(context, url)
            elif command == "plan":
                outcome = _plan(context, url)
            elif command == "apply":
                outcome = _apply(context, url, options.reference)
            else:
                outcome = _status(context, url)
    except DeploymentRefused as refused:
        outcome = Outcome(command, list(refused.diagnostics))
    except CoordinatorError as error:
        outcome = Outcome(command, [error.diagnostic])
    outcome.diagnostics[:0] = warnings
    return outcome


@contextlib.contextmanager
def _store_url(context: _Context) -> Iterator[str]:
    """The store URL: the SQLite file, or the resolved PostgreSQL URL of the command's role.

    `trustedRootCertificateRef` (05 §4.1) reaches the driver as an `sslrootcert` file that
    exists, owner-only, for the duration of the command.
    """
    database = context.deployment.database
    if not isinstance(database, PostgresqlDatabase):
        yield "sqlite:///" + database.path
        return
    resolved = context.secrets.database_url
    assert resolved is not None
    roots = context.secrets.trusted_root_certificates
    if roots is None:
        yield resolved.url
        return
    with tempfile.TemporaryDirectory(prefix="coordinator-roots-") as scratch:
        path = Path(scratch) / "roots.pem"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(roots)
        yield _with_query(resolved.url, sslrootcert=str(path))


def _with_query(url: str, **members: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in members]
    query.extend(members.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


def _load_package(context: _Context) -> LoadedPackage:
    """Load and verify the pinned package (02 §9.2) and check its workflow's bindings against
    the runtime file (02 §5.8)."""
    pin = context.settings.package
    loaded = load_package(Path(pin.root), pin.expected_digest)
    problems = package_binding_problems(context.deployment, loaded.snapshot.workflow)
    if problems:
        raise DeploymentRefused(problems)
    return loaded


def _open_journal(context: _Context) -> AuditWriter:
    return AuditWriter.open(context.settings.audit_directory, "ctl")


# -- migrate --------------------------------------------------------------------------------------


def _migrate(context: _Context, url: str) -> Outcome:
    before = inspect_deployment(url, namespace=context.namespace)
    from_version = max(before.applied, default=0)
    journal = _open_journal(context)
    try:
        correlation = new_correlation()
        journal.append(migrate_request(correlation, from_version, before.supported))
        try:
            result = migrate(url, context.identity(), namespace=context.namespace)
        except CoordinatorError as error:
            _journal_failure(journal, correlation, "store.migrate", error.diagnostic.code)
            raise
        journal.append(ctl_applied(correlation))
    finally:
        journal.close()
    outcome = Outcome("migrate", status="migrated")
    outcome.result = {
        "store": result.store,
        "fromVersion": result.from_version,
        "toVersion": result.to_version,
    }
    outcome.text = (
        f"Migrated the {result.store} store from schema version {result.from_version}"
        f" to {result.to_version}\n"
    )
    return outcome


def _journal_failure(journal: AuditWriter, correlation: str, action: str, code: str) -> None:
    """The response entry of a refused (4xx-like) or unknown (store unavailable) command."""
    outcome: Literal["refused", "unknown"] = "unknown" if code == _STORE_UNAVAILABLE else "refused"
    with contextlib.suppress(CoordinatorError, ValueError):
        journal.append(response(correlation, action, outcome, code=code))


# -- plan -----------------------------------------------------------------------------------------


def _plan(context: _Context, url: str) -> Outcome:
    loaded = _load_package(context)
    state = inspect_deployment(url, namespace=context.namespace)
    if not state.checksums_match:
        raise CoordinatorError(Diagnostic("coordinator.deployment.schema-mismatch"))
    database_id = context.settings.database_id
    control = state.control
    registered: Mapping[int, str] = {}
    if control is not None:
        if control.database_id != database_id:
            raise CoordinatorError(Diagnostic("coordinator.deployment.database-id-mismatch"))
        context.secrets.admission_key.check_custody(database_id, control.admission_key_commitment)
        registered = control.state_key_commitments
    new_keys = context.secrets.state_keys.check_custody(database_id, registered, registering=True)
    snapshot = loaded.snapshot
    project = snapshot.workflow.get("project", {})
    active: dict[str, Any] | None = None
    if control is not None and control.active_package_digest is not None:
        active = {
            "packageDigest": control.active_package_digest,
            "revision": control.active_revision,
        }
    activation = active is None or active["packageDigest"] != loaded.package_digest
    outcome = Outcome("plan", status="planned")
    outcome.result = {
        "store": state.store,
        "databaseId": database_id,
        "schema": {
            "supported": state.supported,
            "applied": list(state.applied),
            "pending": list(state.pending),
        },
        "package": {
            "digest": loaded.package_digest,
            "workflow": project.get("id"),
            "version": project.get("version"),
            "revision": snapshot.revision,
            "definitionDigest": snapshot.definition_digest,
        },
        "active": active,
        "changes": {"activation": activation, "newStateKeys": sorted(new_keys)},
    }
    outcome.text = _plan_text(state, outcome.result)
    return outcome


def _plan_text(state: DeploymentState, result: Mapping[str, Any]) -> str:
    schema = result["schema"]
    package = result["package"]
    active = result["active"]
    changes = result["changes"]
    lines = [
        f"Store: {state.store}{'' if state.exists else ' (not created yet: run migrate)'}",
        f"Database id: {result['databaseId']}",
        f"Schema: supported {schema['supported']}, applied {schema['applied'] or 'none'},"
        f" pending {schema['pending'] or 'none'}",
        f"Package: {package['digest']} (workflow {package['workflow']} version"
        f" {package['version']})",
        f"Revision: {package['revision']}",
        f"Active: {active['packageDigest'] if active else 'none'}",
        "apply would: "
        + (
            "activate this package"
            if changes["activation"]
            else "change nothing (this package is active)"
        )
        + (f"; register state keys {changes['newStateKeys']}" if changes["newStateKeys"] else ""),
    ]
    return "\n".join(lines) + "\n"


# -- apply ----------------------------------------------------------------------------------------


def _reference_problem(reference: str | None) -> Diagnostic | None:
    if reference is None:
        return None
    if 1 <= len(reference) <= MAX_REFERENCE_CHARS and all(
        ord(ch) >= 0x20 and not 0x7F <= ord(ch) <= 0x9F for ch in reference
    ):
        return None
    return Diagnostic(
        "coordinator.command.input-invalid",
        path="",
        message="--reference must be 1 to 256 characters without control characters.",
    )


def _apply(context: _Context, url: str, reference: str | None) -> Outcome:
    problem = _reference_problem(reference)
    if problem is not None:
        return Outcome("apply", [problem])
    loaded = _load_package(context)
    snapshot = loaded.snapshot
    project = snapshot.workflow.get("project", {})
    request = ActivationRequest(
        package_digest=loaded.package_digest,
        workflow_id=str(project.get("id")),
        revision=snapshot.revision,
        definition_digest=snapshot.definition_digest,
    )
    identity = context.identity()
    bindings_ok = _live_bindings(context, url, loaded.definition)
    journal = _open_journal(context)
    try:
        correlation = new_correlation()
        reason_ref = (
            context.secrets.audit_references.reason(reference) if reference is not None else None
        )
        journal.append(apply_request(correlation, loaded.package_digest, reason_ref=reason_ref))
        try:
            row = apply_activation(
                url, identity, request, bindings_ok=bindings_ok, namespace=context.namespace
            )
        except CoordinatorError as error:
            # store-unavailable: the commit's outcome is unknown; the catalogue's advice is to
            # run deployment-status before repeating apply (09 §3).
            _journal_failure(journal, correlation, "activation.apply", error.diagnostic.code)
            raise
        journal.append(ctl_applied(correlation, activation_id=str(row.activation_id)))
    finally:
        journal.close()
    outcome = Outcome("apply", status="applied")
    outcome.result = {
        "activationId": str(row.activation_id),
        "packageDigest": row.package_digest,
        "revision": row.revision,
    }
    outcome.text = (
        f"Applied package {row.package_digest}\nRevision: {row.revision}\n"
        f"Activation: {row.activation_id}\n"
    )
    return outcome


def _live_bindings(
    context: _Context, url: str, definition: Definition
) -> Callable[[frozenset[tuple[str, str]]], bool]:
    """The service's live-binding check (05 §10, `LiveBindings`) over (definition digest,
    binding digest) pairs, for this command: the package's definition is known; an older
    one is restored from the sealed snapshot stored for it (`DefinitionCache`, the one way a
    snapshot is opened); one that cannot be restored, or whose workflow uses a connection the
    runtime file no longer binds, counts as a conflict."""
    identity = DeploymentIdentity(
        database_id=context.settings.database_id,
        admission_key_commitment=context.identity().admission_key_commitment,
        state_key_commitments=context.identity().state_key_commitments,
        active_state_key=context.settings.active_state_key,
    )

    def stored(definition: str) -> tuple[uuid.UUID, bytes] | None:
        try:
            with Store.open(url, identity, namespace=context.namespace, pool_size=1) as store:
                return store.reads.definition_snapshot(definition)
        except CoordinatorError:
            return None

    sealer = Sealer(context.secrets.state_keys, context.settings.database_id)
    definitions = DefinitionCache(sealer, stored)
    definitions.add(definition.snapshot, definition)
    return LiveBindings(context.deployment, definitions).all_match


# -- deployment-status ----------------------------------------------------------------------------


def _iso(instant: int) -> str:
    """An instant as `datetime.isoformat` writes it, with `Z` for UTC."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=instant)
    return moment.isoformat().replace("+00:00", "Z")


def _status(context: _Context, url: str) -> Outcome:
    loaded = _load_package(context)
    with Store.open(url, context.identity(), namespace=context.namespace, pool_size=1) as store:
        control = store.verify()
        pairs = store.reads.unsettled_bindings(wall_clock())
    check = _live_bindings(context, url, loaded.definition)
    if not check(pairs):
        raise CoordinatorError(Diagnostic("coordinator.command.live-binding-conflict"))
    state = inspect_deployment(url, namespace=context.namespace)
    active: dict[str, Any] | None = None
    if state.active is not None:
        active = {
            "activationId": str(state.active.activation_id),
            "applyOrder": state.active.apply_order,
            "appliedAt": _iso(state.active.applied_at),
        }
    outcome = Outcome("deployment-status", status="checked")
    result: dict[str, Any] = {
        "store": store.kind,
        "databaseId": control.database_id,
        "packageDigest": control.active_package_digest,
        "revision": control.active_revision,
        "schemaVersion": control.schema_version,
    }
    if context.settings.runtime_role is not None:
        result["runtimeRole"] = context.settings.runtime_role
    result["active"] = active
    outcome.result = result
    outcome.text = (
        f"Deployment check passed: {store.kind} store {control.database_id},"
        f" schema version {control.schema_version}\n"
        f"Active package: {control.active_package_digest}\nRevision: {control.active_revision}\n"
    )
    return outcome
