"""Running the sandbox: one uvicorn server per service, all on loopback in one process and one
event loop, with a single readiness line once every port answers.

State directory (`--state-dir`), all files optional:

| File | Content |
|---|---|
| `issuer-keys.json` | the identity provider's private JWKS (created on first start, mode 0600) |
| `clients.json` | `{"clients": [{clientId, jwks, scopes?, resources?}]}` — public client keys |
| `sandbox.json` | configuration and seed data (records, actions, templates, offerings, …) |
| `secrets.json` | written by `keys`: where the completion token and event signing key live |
| `endpoints.json` | written at readiness: the origin of every service |
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import signal
import socket
import sys
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from coordinator_sandbox.breg import BregService
from coordinator_sandbox.casework import CaseworkService
from coordinator_sandbox.defaults import (
    DEFAULT_COORDINATOR_URL,
    DEFAULT_PORTS,
    DEFAULT_RESOURCES,
    SERVICES,
)
from coordinator_sandbox.delivery import Deliverer, DeliveryPolicy
from coordinator_sandbox.evaluation import EvaluationService
from coordinator_sandbox.external import ExternalService
from coordinator_sandbox.identity import ClientRegistry, IdentityService, client_from_json
from coordinator_sandbox.keys import read_json_file
from coordinator_sandbox.messaging import MessagingService
from coordinator_sandbox.scheduling import SchedulingService
from coordinator_sandbox.service import Service
from coordinator_sandbox.tokens import load_issuer

__all__ = [
    "READY_PREFIX",
    "ConfigurationError",
    "ServePlan",
    "build_services",
    "require_loopback",
    "serve",
]

READY_PREFIX = "coordinator-sandbox ready "


@dataclass
class ServePlan:
    """What `serve` runs: services, ports, the state directory and overrides."""

    host: str = "127.0.0.1"
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    services: tuple[str, ...] = SERVICES
    state_dir: Path | None = None
    config_file: Path | None = None
    issuer: str | None = None
    coordinator_url: str | None = None
    log_level: str = "warning"
    access_log: bool = False


def _origin(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def require_loopback(host: str) -> None:
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError("the sandbox listens on a numeric loopback address only")


def _read_config(plan: ServePlan) -> dict[str, Any]:
    candidates = [plan.config_file] if plan.config_file else []
    if plan.state_dir is not None:
        candidates.append(plan.state_dir / "sandbox.json")
    for candidate in candidates:
        if candidate is not None and candidate.exists():
            value = read_json_file(candidate)
            if not isinstance(value, dict):
                raise ValueError(f"{candidate} must hold a JSON object")
            return value
    return {}


class ConfigurationError(Exception):
    """`sandbox.json`, `clients.json` or a file they name cannot be used."""


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the sandbox (several run at once)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on accepted sockets whose
    # proto says TCP; without it every answer on a kept-alive connection waits ~40 ms for the
    # peer's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(False)
    return sock


def build_services(
    plan: ServePlan, origins: dict[str, str], config: dict[str, Any], deliverer: Deliverer
) -> dict[str, Service]:
    """Every requested service, configured from the plan, the state directory and the config."""
    state = plan.state_dir
    identity_origin = origins.get("identity", _origin(plan.host, plan.ports["identity"]))
    issuer_url = plan.issuer or config.get("issuer") or identity_origin
    issuer = load_issuer(state, issuer_url, int(config.get("accessTokenLifetimeSeconds", 300)))
    resources = {**DEFAULT_RESOURCES, **config.get("resources", {})}
    retention = float(config.get("idempotencyRetentionSeconds", 86_400))
    coordinator = plan.coordinator_url or config.get("coordinatorUrl") or DEFAULT_COORDINATOR_URL
    links: dict[str, Any] = {}
    if state is not None and (state / "secrets.json").exists():
        links = read_json_file(state / "secrets.json")

    clients = ClientRegistry()
    client_entries = list(config.get("clients", []))
    if state is not None and (state / "clients.json").exists():
        client_entries = read_json_file(state / "clients.json").get("clients", []) + client_entries
    for entry in client_entries:
        clients.register(client_from_json(entry))

    services: dict[str, Service] = {}
    if "identity" in plan.services:
        served = [value for value in resources.values() if isinstance(value, str)]
        services["identity"] = IdentityService(
            issuer, clients, served, config.get("assertionAudiences", [])
        )
    if "breg" in plan.services:
        breg = BregService(issuer, resources["breg"], deliverer)
        if "bregEventSigningKeyFile" in links:
            breg.configure_events(
                {"url": coordinator, "signingKeyFile": links["bregEventSigningKeyFile"]}, state
            )
        breg.load(config.get("breg", {}), state)
        services["breg"] = breg
    if "casework" in plan.services:
        casework = CaseworkService(issuer, resources["casework"], deliverer)
        if "caseworkCompletionTokenFile" in links:
            casework.configure_destinations(
                [{"url": coordinator, "tokenFile": links["caseworkCompletionTokenFile"]}], state
            )
        casework.load(config.get("casework", {}), state)
        services["casework"] = casework
    if "messaging" in plan.services:
        messaging = MessagingService(issuer, resources["messaging"])
        messaging.load(config.get("messaging", {}))
        services["messaging"] = messaging
    if "scheduling" in plan.services:
        scheduling = SchedulingService(issuer, resources["scheduling"])
        scheduling.load(config.get("scheduling", {}))
        services["scheduling"] = scheduling
    if "external" in plan.services:
        external_resource = resources.get("external")
        external = ExternalService(
            issuer if external_resource else None,
            external_resource if isinstance(external_resource, str) else None,
        )
        external.load(config.get("external", {}))
        services["external"] = external
    if "evaluation" in plan.services:
        evaluation_config = config.get("evaluation", {})
        token = evaluation_config.get("bearerToken")
        if "bearerTokenFile" in evaluation_config:
            token_path = Path(evaluation_config["bearerTokenFile"])
            token = token_path.read_text(encoding="ascii").removesuffix("\n")
        services["evaluation"] = EvaluationService(token)
    for name, service in services.items():
        service.base_url = origins[name]
        service.idempotency.retention_seconds = retention
    return services


async def serve(plan: ServePlan) -> int:
    """Bind every port, serve until SIGINT/SIGTERM, print one readiness line when up."""
    require_loopback(plan.host)
    try:
        config = _read_config(plan)
    except (ValueError, OSError) as exc:
        raise ConfigurationError(f"the sandbox configuration is unreadable: {exc}") from exc
    delivery = config.get("delivery", {})
    deliverer = Deliverer(
        DeliveryPolicy(
            initial_seconds=float(delivery.get("initialSeconds", 0.5)),
            maximum_seconds=float(delivery.get("maximumSeconds", 30)),
            maximum_attempts=int(delivery.get("maximumAttempts", 1000)),
        )
    )
    sockets = {name: _bind(plan.host, plan.ports[name]) for name in plan.services}
    origins = {name: _origin(plan.host, sock.getsockname()[1]) for name, sock in sockets.items()}
    try:
        services = build_services(plan, origins, config, deliverer)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        for sock in sockets.values():
            sock.close()
        raise ConfigurationError(f"the sandbox configuration is unusable: {exc}") from exc
    servers: list[_Server] = []
    tasks: list[asyncio.Task[None]] = []
    for name, service in services.items():
        server = _Server(
            uvicorn.Config(
                service.app(),
                log_level=plan.log_level,
                access_log=plan.access_log,
                lifespan="off",
                proxy_headers=False,
                server_header=False,
                timeout_graceful_shutdown=1,
            )
        )
        servers.append(server)
        tasks.append(asyncio.create_task(server.serve(sockets=[sockets[name]])))

    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop)

    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            stop()
            break
        await asyncio.sleep(0.01)
    else:
        ready: dict[str, Any] = dict(origins)
        if "identity" in services:
            identity = services["identity"]
            assert isinstance(identity, IdentityService)
            ready["issuer"] = identity.provider.url
            ready["tokenEndpoint"] = identity.provider.token_endpoint
            ready["jwksUri"] = identity.provider.url + "/.well-known/jwks.json"
        if plan.state_dir is not None:
            (plan.state_dir / "endpoints.json").write_text(json.dumps(ready, indent=2) + "\n")
        sys.stdout.write(READY_PREFIX + json.dumps(ready, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    await asyncio.gather(*tasks, return_exceptions=True)
    await deliverer.close()
    return 0 if all(server.started for server in servers) else 1
