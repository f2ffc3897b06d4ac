"""`coordinator-sandbox`: serve the sandbox products, generate development keys, mint tokens,
and drive a running sandbox (seed records, decide reviews, inject faults, list what each
product received, bind a project's connections: control.py).

coordinator-sandbox keys  --secrets-dir DIR/.coordinator/secrets
coordinator-sandbox serve --state-dir DIR/.coordinator/sandbox
coordinator-sandbox caller-token --state-dir DIR/.coordinator/sandbox --subject alice
coordinator-sandbox seed applications 0b0e… --file record.json
coordinator-sandbox decide 6f1c… approve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator_sandbox.defaults import DEFAULT_ISSUER, DEFAULT_PORTS, SERVICES
from coordinator_sandbox.keys import (
    SigningKey,
    generate_private_jwk,
    read_json_file,
    write_secret_bytes,
    write_secret_json,
)
from coordinator_sandbox.tokens import CALLER_TOKEN_SECONDS, load_issuer, mint_caller_token

# The server module (starlette, uvicorn, httpx, jsonschema) is imported only by `serve`, so
# `keys` and `caller-token` start fast.

__all__ = ["DEFAULT_CLIENTS", "main"]

# The client ids and key files of the runtime examples (file 05 §11.1 and §11.3).
DEFAULT_CLIENTS = {
    "coordinator-applications": "applications-client.jwk",
    "coordinator-reviews": "reviews-client.jwk",
    "coordinator-notices": "notices-client.jwk",
    "coordinator-appointments": "appointments-client.jwk",
}
COMPLETION_TOKEN_FILE = "casework-completions-token"
EVENT_KEY_FILE = "applications-events.key"
CALLER_JWKS_FILE = "caller-jwks.json"


def _parse_ports(text: str) -> dict[str, int]:
    """`0` (every port ephemeral), or `name=port,…` over the defaults."""
    if text.strip() == "0":
        return dict.fromkeys(DEFAULT_PORTS, 0)
    ports = dict(DEFAULT_PORTS)
    for item in text.split(","):
        name, _, value = item.partition("=")
        name = name.strip()
        if name not in DEFAULT_PORTS or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"expected name=port with name in {SERVICES}")
        port = int(value)
        if port > 65_535:
            raise argparse.ArgumentTypeError("ports are 0–65535")
        ports[name] = port
    return ports


def _parse_services(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names or not set(names) <= set(SERVICES):
        raise argparse.ArgumentTypeError(f"services are a comma list of {SERVICES}")
    return names


def _default_state_dir(secrets_dir: Path) -> Path:
    return secrets_dir.parent / "sandbox"


def command_keys(args: argparse.Namespace) -> int:
    """Write client signing keys (private JWKs) into the secrets directory and register their
    public halves in the sandbox state directory; existing keys are kept unless `--force`."""
    secrets_dir: Path = args.secrets_dir.absolute()
    state_dir: Path = (args.state_dir or _default_state_dir(secrets_dir)).absolute()
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    clients: dict[str, str] = dict(DEFAULT_CLIENTS)
    if args.client:
        clients = {}
        for item in args.client:
            client_id, _, file_name = item.partition("=")
            if not client_id or not file_name or "/" in file_name:
                print(f"--client expects CLIENT_ID=FILE_NAME, got {item!r}", file=sys.stderr)
                return 2
            clients[client_id] = file_name
    written: list[str] = []
    registered: list[dict[str, Any]] = []
    for client_id, file_name in clients.items():
        path = secrets_dir / file_name
        if path.exists() and not args.force:
            key = SigningKey(read_json_file(path))
        else:
            key = SigningKey(generate_private_jwk(args.key_type))
            write_secret_json(path, key.jwk)
            written.append(str(path))
        registered.append({"clientId": client_id, "jwks": {"keys": [key.public]}})
    clients_path = state_dir / "clients.json"
    existing = read_json_file(clients_path).get("clients", []) if clients_path.exists() else []
    kept = [entry for entry in existing if entry.get("clientId") not in clients]
    clients_path.write_text(json.dumps({"clients": kept + registered}, indent=2) + "\n")

    issuer = load_issuer(state_dir, DEFAULT_ISSUER)
    write_secret_json(secrets_dir / CALLER_JWKS_FILE, issuer.jwks())
    links: dict[str, str] = {}
    # A bearer secret of visible ASCII and a raw HMAC key of 32 bytes (file 05 §2.2).
    for file_name, link, fresh in (
        (COMPLETION_TOKEN_FILE, "caseworkCompletionTokenFile", secrets.token_urlsafe(48).encode()),
        (EVENT_KEY_FILE, "bregEventSigningKeyFile", secrets.token_bytes(32)),
    ):
        path = secrets_dir / file_name
        if not path.exists() or args.force:
            write_secret_bytes(path, fresh)
            written.append(str(path))
        links[link] = str(path)
    (state_dir / "secrets.json").write_text(json.dumps(links, indent=2) + "\n")
    summary = {
        "secretsDir": str(secrets_dir),
        "stateDir": str(state_dir),
        "clients": {client_id: f"secret:file/{name}" for client_id, name in clients.items()},
        "callerJwks": f"secret:file/{CALLER_JWKS_FILE}",
        "reviewCompletionsToken": f"secret:file/{COMPLETION_TOKEN_FILE}",
        "eventSigningKey": f"secret:file/{EVENT_KEY_FILE}",
        "written": written,
    }
    print(json.dumps(summary, indent=2))
    return 0


def command_serve(args: argparse.Namespace) -> int:
    from coordinator_sandbox.server import ConfigurationError, ServePlan, require_loopback, serve

    try:
        require_loopback(args.host)
    except ValueError as exc:
        print(f"coordinator-sandbox: {exc}", file=sys.stderr)
        return 2
    state_dir: Path | None = args.state_dir.absolute() if args.state_dir else None
    if state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    plan = ServePlan(
        host=args.host,
        ports=args.ports,
        services=args.services,
        state_dir=state_dir,
        config_file=args.config,
        issuer=args.issuer,
        coordinator_url=args.coordinator_url,
        log_level=args.log_level,
        access_log=args.access_log,
    )
    try:
        return asyncio.run(serve(plan))
    except ConfigurationError as exc:
        print(f"coordinator-sandbox: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"coordinator-sandbox: cannot listen: {exc}", file=sys.stderr)
        return 3


def _issuer_url(state_dir: Path, explicit: str | None) -> str:
    if explicit:
        return explicit
    endpoints = state_dir / "endpoints.json"
    if endpoints.exists():
        return str(read_json_file(endpoints).get("issuer", DEFAULT_ISSUER))
    return DEFAULT_ISSUER


def command_caller_token(args: argparse.Namespace) -> int:
    """Mint a caller token offline with the issuer key of the state directory; print it, or
    write it to `--output` (mode 0600, replaced atomically, never printed)."""
    state_dir: Path = args.state_dir.absolute()
    if not (state_dir / "issuer-keys.json").exists():
        print("coordinator-sandbox: no issuer keys; run `keys` or `serve` first", file=sys.stderr)
        return 2
    issuer = load_issuer(state_dir, _issuer_url(state_dir, args.issuer))
    spec: dict[str, Any] = {
        "subject": args.subject,
        "clientId": args.client_id,
        "scopes": args.scope or ["coordinator:operate"],
        "audience": args.audience,
        "expiresIn": args.expires_in,
        "algorithm": args.algorithm,
    }
    token, _ = mint_caller_token(issuer, spec)
    if args.output is None:
        print(token)
        return 0
    try:
        write_secret_bytes(args.output.absolute(), (token + "\n").encode("ascii"))
    except OSError as exc:
        print(f"coordinator-sandbox: cannot write the token file: {exc.strerror}", file=sys.stderr)
        return 3
    return 0


def command_jwks(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir.absolute()
    if not (state_dir / "issuer-keys.json").exists():
        print("coordinator-sandbox: no issuer keys; run `keys` or `serve` first", file=sys.stderr)
        return 2
    print(json.dumps(load_issuer(state_dir, DEFAULT_ISSUER).jwks(), indent=2))
    return 0


def _control(args: argparse.Namespace) -> int:
    """Run one command against a running sandbox (control.py)."""
    from coordinator_sandbox import control

    state_dir: Path = args.state_dir.absolute()
    try:
        if args.command == "seed":
            answer = control.seed(state_dir, args.collection, args.record_id, args.file)
        elif args.command == "reviews":
            answer = control.reviews(state_dir)
        elif args.command == "decide":
            answer = control.decide(
                state_dir,
                args.request_id,
                args.decision,
                outcome=args.outcome,
                result_file=args.result_file,
            )
        elif args.command == "fault":
            answer = control.fault(
                state_dir,
                args.operation,
                args.kind,
                count=args.count,
                status=args.status,
                code=args.code,
                delay_seconds=args.delay_seconds,
                refusal_code=args.refusal_code,
            )
        elif args.command == "faults":
            answer = control.faults(state_dir, clear=args.clear)
        elif args.command == "received":
            answer = control.received(state_dir, product=args.product)
        else:
            connections: dict[str, str] = {}
            for item in args.connection:
                name, _, product = item.partition("=")
                if not name or not product:
                    print("coordinator-sandbox: a connection is NAME=PRODUCT", file=sys.stderr)
                    return 2
                connections[name] = product
            answer = control.bind(
                state_dir, args.secrets_dir.absolute(), connections, args.event_source or ()
            )
    except control.ControlError as exc:
        print(f"coordinator-sandbox: {exc}", file=sys.stderr)
        return 1
    answer.write(args.json)
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError("a whole number from 1 to 1000")
    return int(text)


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".coordinator") / "sandbox",
        help="the running sandbox's state directory (default: .coordinator/sandbox, where"
        " `coordinatorctl dev` keeps it)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the sandbox's JSON answer instead of text"
    )


def build_parser() -> argparse.ArgumentParser:
    # control.py (and the products it reads its words from) is imported by its commands only,
    # so `keys` and `caller-token` start fast: choices are checked there.
    parser = argparse.ArgumentParser(
        prog="coordinator-sandbox",
        description="Stand-in products for Registry Coordinator development and tests"
        " (docs/running-locally.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_parser = commands.add_parser("serve", help="serve every sandbox product on loopback")
    serve_parser.add_argument(
        "--host", default="127.0.0.1", help="numeric loopback address (default 127.0.0.1)"
    )
    serve_parser.add_argument(
        "--ports",
        type=_parse_ports,
        default=dict(DEFAULT_PORTS),
        help="`0` for ephemeral ports, or name=port,… (defaults: "
        + ",".join(f"{k}={v}" for k, v in DEFAULT_PORTS.items())
        + ")",
    )
    serve_parser.add_argument(
        "--services",
        type=_parse_services,
        default=SERVICES,
        help=f"comma list of the services to serve (default: all of {','.join(SERVICES)})",
    )
    serve_parser.add_argument(
        "--state-dir",
        type=Path,
        help="keys, clients and seed data; `endpoints.json` is written there when ready",
    )
    serve_parser.add_argument(
        "--config", type=Path, help="sandbox.json to use instead of <state-dir>/sandbox.json"
    )
    serve_parser.add_argument("--issuer", help="issuer URL (default: the identity origin)")
    serve_parser.add_argument(
        "--coordinator-url",
        help="where BReg events and Casework completions go (default http://127.0.0.1:8108)",
    )
    serve_parser.add_argument(
        "--log-level", default="warning", help="uvicorn's log level (default warning)"
    )
    serve_parser.add_argument(
        "--access-log", action="store_true", help="log every request on stderr"
    )
    serve_parser.set_defaults(handler=command_serve)

    keys_parser = commands.add_parser("keys", help="generate development keys and secrets")
    keys_parser.add_argument(
        "--secrets-dir",
        type=Path,
        required=True,
        help="where the secret files go (0700; files 0600), the runtime file's `file` root",
    )
    keys_parser.add_argument(
        "--state-dir",
        type=Path,
        help="the sandbox state directory (default: <secrets-dir>/../sandbox)",
    )
    keys_parser.add_argument(
        "--client",
        action="append",
        metavar="CLIENT_ID=FILE",
        help="a client and its key file name (repeatable; default: the four example clients)",
    )
    keys_parser.add_argument(
        "--key-type", choices=("EC", "RSA"), default="EC", help="P-256 (default) or RSA-2048"
    )
    keys_parser.add_argument("--force", action="store_true", help="replace existing keys")
    keys_parser.set_defaults(handler=command_keys)

    token_parser = commands.add_parser("caller-token", help="mint a coordinator caller token")
    token_parser.add_argument(
        "--state-dir", type=Path, required=True, help="the sandbox state directory (issuer keys)"
    )
    token_parser.add_argument(
        "--issuer", help="the `iss` claim (default: the running sandbox's issuer)"
    )
    token_parser.add_argument(
        "--subject", default="demo-operator", help="the `sub` claim (default demo-operator)"
    )
    token_parser.add_argument(
        "--client-id", default="ops-console", help="the `client_id` claim (default ops-console)"
    )
    token_parser.add_argument(
        "--scope", action="append", help="a scope (repeatable; default coordinator:operate)"
    )
    token_parser.add_argument(
        "--audience", default="coordinator", help="the `aud` claim (default coordinator)"
    )
    token_parser.add_argument(
        "--expires-in",
        type=int,
        default=CALLER_TOKEN_SECONDS,
        metavar="SECONDS",
        help=f"lifetime (default {CALLER_TOKEN_SECONDS}, the longest the coordinator accepts)",
    )
    token_parser.add_argument(
        "--algorithm", choices=("ES256", "RS256"), default="ES256", help="default ES256"
    )
    token_parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the token to FILE (0600, replaced atomically) instead of printing it",
    )
    token_parser.set_defaults(handler=command_caller_token)

    jwks_parser = commands.add_parser("jwks", help="print the identity provider's public JWKS")
    jwks_parser.add_argument(
        "--state-dir", type=Path, required=True, help="the sandbox state directory"
    )
    jwks_parser.set_defaults(handler=command_jwks)

    seed_parser = commands.add_parser("seed", help="put a BReg record into the running sandbox")
    seed_parser.add_argument("collection", help="the record's collection, e.g. applications")
    seed_parser.add_argument("record_id", metavar="RECORD_ID", help="the record id")
    seed_parser.add_argument(
        "--file",
        required=True,
        metavar="FILE",
        help='the record as JSON: {"domainData": {…}} (`-`: standard input)',
    )
    _add_state_dir(seed_parser)
    seed_parser.set_defaults(handler=_control)

    reviews_parser = commands.add_parser("reviews", help="list the review requests Casework got")
    _add_state_dir(reviews_parser)
    reviews_parser.set_defaults(handler=_control)

    decide_parser = commands.add_parser(
        "decide", help="decide a pending review; Casework then notifies the coordinator"
    )
    decide_parser.add_argument(
        "request_id",
        metavar="REQUEST_ID",
        help="a review request id from `reviews`, or `latest`: the last one still pending",
    )
    decide_parser.add_argument(
        "decision",
        metavar="DECISION",
        help="approve, reject, inconclusive (sent as changes_requested), or a Casework status:"
        " approved, rejected, changes_requested, answered, cancelled, superseded",
    )
    decide_parser.add_argument("--outcome", help="the result's `outcome` word")
    decide_parser.add_argument(
        "--result-file", metavar="FILE", help="the result's `result` object, as a JSON file"
    )
    _add_state_dir(decide_parser)
    decide_parser.set_defaults(handler=_control)

    fault_parser = commands.add_parser(
        "fault", help="make the next call(s) of an operation fail in a chosen way"
    )
    fault_parser.add_argument("operation", help="an operation id, e.g. messaging.submit-message/v1")
    fault_parser.add_argument(
        "kind",
        metavar="KIND",
        help="fail, drop, commit-then-drop, delay, expired, declared-refusal or respond",
    )
    fault_parser.add_argument(
        "--count", type=_positive, default=1, help="how many calls it applies to (default 1)"
    )
    fault_parser.add_argument("--status", type=int, help="`fail`/`respond`: the HTTP status")
    fault_parser.add_argument("--code", help="`fail`: the problem code")
    fault_parser.add_argument(
        "--delay-seconds", type=float, help="`delay`: how long to wait (default 5)"
    )
    fault_parser.add_argument("--refusal-code", help="`declared-refusal`: the refusal code")
    _add_state_dir(fault_parser)
    fault_parser.set_defaults(handler=_control)

    faults_parser = commands.add_parser("faults", help="list (or clear) the pending faults")
    faults_parser.add_argument("--clear", action="store_true", help="remove every pending fault")
    _add_state_dir(faults_parser)
    faults_parser.set_defaults(handler=_control)

    received_parser = commands.add_parser(
        "received", help="list the requests each product received, in order"
    )
    received_parser.add_argument(
        "--product",
        help="only this product's requests (identity, breg, casework, messaging, scheduling,"
        " external, evaluation)",
    )
    _add_state_dir(received_parser)
    received_parser.set_defaults(handler=_control)

    bind_parser = commands.add_parser(
        "bind", help="runtime-file connections of a project to the running sandbox (JSON)"
    )
    bind_parser.add_argument(
        "connection",
        nargs="*",
        metavar="NAME=PRODUCT",
        help="a connection name and its product (breg, casework, messaging, scheduling)",
    )
    bind_parser.add_argument(
        "--event-source", action="append", metavar="NAME", help="an event source (repeatable)"
    )
    bind_parser.add_argument(
        "--secrets-dir", type=Path, required=True, help="where the client keys are kept"
    )
    _add_state_dir(bind_parser)
    bind_parser.set_defaults(handler=_control)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result
