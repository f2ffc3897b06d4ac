"""The runtime file as the service and the deployment commands load it (contract 05, 09 §3, §5).

`coordinatorctl check` reads a runtime file offline, with stand-ins for environment expressions
(`coordinator_core.config.read`). `coordinator serve`/`worker` and `migrate`, `plan`,
`apply`, `deployment-status` load it: values are always substituted from the environment (05 §3
item 4), and the `database` and `deployment` blocks are required (09 §3). This module is that
loading: the path rules of 05 §1, the environment the caller gives, and the file read; the
check, the build and the model are `coordinator_core.config` (`read`, `build`, `model`), the
secrets `coordinator_core.shell.secrets`.

`load_deployment(path, *, environment, require_deployment=True) -> Deployment`
    Start step 1 of 09 §5. Applies the path rules of 05 §1, then the whole check of 05 §9 with
    substitution from `environment` (the caller passes the process environment; this module
    never reads `os.environ`), then builds the typed, frozen `Deployment` with every default
    filled (`config.build`). Any error raises `DeploymentRefused` carrying every diagnostic
    found: `platform.runtime-config.unavailable` (exit 3) for the path rules, the reader and
    rule codes of 05 §9 (exit 1; `config.substitution` for an unset variable), and
    `coordinator.command.deployment-required` (exit 2) when `database` or (with
    `require_deployment`) `deployment` is missing.

`package_binding_problems(deployment, workflow) -> list[Diagnostic]`
    What refuses a package's workflow under the loaded file: its bindings (02 §5.8) and the
    operations this build's adapters serve.

`bound_connections(deployment, secrets) -> dict[str, Connection]`
    The file's connections as the adapters call them, each with its resolved secret.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.yamlreader import escape_pointer_token
from coordinator_core.config.build import build_deployment
from coordinator_core.config.model import ClientAuthorization, Deployment, DeploymentRefused
from coordinator_core.config.read import check_bindings, check_runtime_file
from coordinator_core.errors import Diagnostic
from coordinator_core.shell.adapters.base import (
    ClientCredentials,
    Connection,
    EvaluationConnection,
    ExternalConnection,
    ProductConnection,
)
from coordinator_core.shell.adapters.registry import unserved_operations
from coordinator_core.shell.secrets import Secrets

__all__ = ["bound_connections", "load_deployment", "package_binding_problems"]

_UNAVAILABLE: Final = "platform.runtime-config.unavailable"
_REQUIRED: Final = "coordinator.command.deployment-required"

# Fixed sentences (02 §1 item 2): they name no path, value or secret.
_PATH_MESSAGES: Final = {
    "relative": "The runtime file must be named by an absolute path.",
    "dot-segment": "The runtime file's path must not contain . or .. segments.",
    "missing": "The runtime file does not exist.",
    "symlink": "The runtime file is a symbolic link; name the file itself.",
    "not-regular": "The runtime file is not a regular file.",
    "empty": "The runtime file is empty.",
    "unreadable": "The runtime file cannot be read.",
}
_MISSING_BLOCK: Final = {
    "database": "The runtime file has no database block.",
    "deployment": "The runtime file has no deployment block.",
}


# -- loading -------------------------------------------------------------------------------


def load_deployment(
    path: str | os.PathLike[str],
    *,
    environment: Mapping[str, str],
    require_deployment: bool = True,
) -> Deployment:
    """Read, check and build the runtime file at `path` (see the module documentation).

    `path` should be given as written on the command line: a `pathlib.Path` has already
    dropped `.` segments, so only a string lets the `.` rule of 05 §1 see them.
    """
    text = os.fspath(path)
    problem = _path_problem(text)
    if problem is not None:
        raise DeploymentRefused([_file_diagnostic(text, problem)])
    check = check_runtime_file(Path(text), display_file=text, environment=environment)
    diagnostics = list(check.diagnostics)
    if any(d.code == _UNAVAILABLE for d in diagnostics):
        # Say which rule of 05 §1 failed; the read itself stays the checker's (no race).
        reason = _unreadable_reason(text)
        diagnostics = [
            _file_diagnostic(text, reason) if d.code == _UNAVAILABLE else d for d in diagnostics
        ]
    document = check.authored.document
    written = document.value if document is not None else None
    if isinstance(written, dict):
        blocks = ["database", "deployment"] if require_deployment else ["database"]
        diagnostics.extend(
            Diagnostic(
                _REQUIRED,
                path=f"/{block}",
                file=text,
                message=_MISSING_BLOCK[block],
                artifact=limits.KIND_RUNTIME,
            )
            for block in blocks
            if block not in written
        )
    if any(d.effective_severity == "error" for d in diagnostics):
        raise DeploymentRefused(diagnostics)
    if check.authored.decoded is None or document is None:  # pragma: no cover - reported
        raise DeploymentRefused([_file_diagnostic(text, "unreadable")])
    return build_deployment(check, file=text, warnings=tuple(diagnostics))


def _path_problem(text: str) -> str | None:
    if not text.startswith("/"):
        return "relative"
    if any(segment in (".", "..") for segment in text.split("/")):
        return "dot-segment"
    return None


def _unreadable_reason(text: str) -> str:
    """Which rule of 05 §1 the file breaks, for the message only."""
    try:
        status = os.lstat(text)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(status.st_mode):
        return "symlink"
    if not stat.S_ISREG(status.st_mode):
        return "not-regular"
    if status.st_size == 0:
        return "empty"
    return "unreadable"


def _file_diagnostic(text: str, reason: str) -> Diagnostic:
    return Diagnostic(
        _UNAVAILABLE,
        path="",
        file=text,
        message=_PATH_MESSAGES[reason],
        artifact=limits.KIND_RUNTIME,
    )


# -- a package under this deployment ----------------------------------------------------------


def package_binding_problems(
    deployment: Deployment, workflow: Mapping[str, Any]
) -> list[Diagnostic]:
    """What refuses a package's workflow under this runtime file before any run is admitted
    (`apply`, `deployment-status`, the service start): the bindings of 02 §5.8 as
    `load_deployment` read and checked the file (it is not read again), and every alias's
    operation served by an adapter of this build (`coordinator.runtime.operation-unserved`, at
    the alias in the workflow)."""
    checked = deployment.runtime_check
    if checked is None:
        raise ValueError("The deployment was not built by load_deployment.")
    problems = [d for d in check_bindings(workflow, checked) if d.exit_code != 0]
    for alias, operation in unserved_operations(workflow):
        problems.append(
            Diagnostic(
                "coordinator.runtime.operation-unserved",
                path=f"/operations/{escape_pointer_token(alias)}/operation",
                message=f"The alias `{alias}` uses `{operation}`, which no adapter of this "
                "build serves.",
                artifact=limits.KIND_PROJECT,
            )
        )
    return problems


def bound_connections(deployment: Deployment, secrets: Secrets) -> dict[str, Connection]:
    """Every connection of the runtime file's three maps (05 §5), with its resolved secret:
    the signing key of an `authorization`, or an evaluation connection's bearer token."""

    def credentials(name: str, authorization: ClientAuthorization) -> ClientCredentials:
        return ClientCredentials(
            token_endpoint=authorization.token_endpoint,
            client_id=authorization.client_id,
            signing_key=secrets.client_signing_keys.get(name, ""),
            resource=authorization.resource,
            scopes=tuple(authorization.scopes),
            client_assertion_audience=authorization.client_assertion_audience,
        )

    found: dict[str, Connection] = {}
    for name, product in deployment.connections.items():
        found[name] = ProductConnection(
            name=name,
            product=product.product,
            base_url=product.base_url,
            profile=product.profile,
            authorization=credentials(name, product.authorization),
        )
    for name, external in deployment.external_http_connections.items():
        found[name] = ExternalConnection(
            name=name,
            base_url=external.base_url,
            paths=frozenset(external.paths),
            query_parameters=frozenset(external.query_parameters),
            response_schema=external.response_schema,
            authorization=(
                None
                if external.authorization is None
                else credentials(name, external.authorization)
            ),
            attempt_timeout_milliseconds=external.attempt_timeout_milliseconds,
            maximum_response_bytes=external.maximum_response_bytes,
        )
    for name, evaluation in deployment.evaluation_connections.items():
        found[name] = EvaluationConnection(
            name=name,
            base_url=evaluation.base_url,
            model=evaluation.model,
            bearer_token=secrets.evaluation_tokens.get(name),
            protocol=evaluation.protocol,
            attempt_timeout_milliseconds=evaluation.attempt_timeout_milliseconds,
            maximum_request_bytes=evaluation.maximum_request_bytes,
            maximum_response_bytes=evaluation.maximum_response_bytes,
        )
    return found
