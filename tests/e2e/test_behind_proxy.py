"""`coordinator serve` behind a real nginx (docs/operations.md, "HTTP edge limits": the service
owns the root of its origin, the proxy is named in `listener.trustedProxies` and limits each
client itself).

nginx forwards every path of its own origin unchanged to the service. Through it, the CLI
admits a run and reads it, and a burst of parallel requests (more connections from the proxy's
one address than a peer's share) is answered in full: the proxy counts only against the global
cap. A `--url` with a path prefix is refused by the CLI before anything is sent, as the guide
says. The test skips without nginx (`nginx-light` on Debian) and fails under `CI=true`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from e2e_support import Project
from support.needs import unavailable

from coordinator_sandbox.testing import free_port, wait_for

NGINX_CONF = """\
worker_processes 1;
error_log {root}/error.log;
pid {root}/nginx.pid;
{user}
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    limit_conn_zone $binary_remote_addr zone=per_client:1m;
    upstream coordinator {{ server 127.0.0.1:{upstream}; keepalive 16; keepalive_timeout 4s; }}
    server {{
        listen 127.0.0.1:{port};
        client_header_timeout 10s;
        client_body_timeout 10s;
        client_max_body_size 64k;
        large_client_header_buffers 4 32k;
        location / {{
            limit_conn per_client 64;
            proxy_pass http://coordinator;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def _nginx() -> str:
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if found is None:
        unavailable("nginx is not installed", "apt-get install nginx-light")
    return found


def test_the_service_behind_nginx_at_the_root_of_an_origin(project: Project) -> None:
    nginx = _nginx()
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    runtime = project.runtime.read_text()
    project.runtime.write_text(
        runtime.replace(
            "    tlsTermination: development-loopback\n",
            "    tlsTermination: development-loopback\n    trustedProxies: [127.0.0.1]\n"
            "    connectionsPerPeer: 4\n    headsPerPeer: 2\n",
        )
    )
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "PROXY")["status"] == "applied"
    service = project.start_service()
    project.wait_healthy(service)

    root = project.root.parent / "nginx"
    root.mkdir()
    port = free_port()
    user = "user root;" if os.geteuid() == 0 else ""
    (root / "nginx.conf").write_text(
        NGINX_CONF.format(root=root, port=port, upstream=project.listener_port, user=user)
    )
    proxy = subprocess.Popen(
        [nginx, "-p", str(root), "-c", str(root / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    project.processes.started.append(proxy)
    origin = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        assert proxy.poll() is None, (root / "error.log").read_text()
        try:
            return httpx.get(origin + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answering, 30, "nginx to forward to the service", 0.2)
    token = project.token_file()
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    direct = project.origin
    project.listener_port = port  # the CLI and the API helpers now go through the proxy
    try:
        started = project.start_run(token, application)
        assert started["exitCode"] == 0 and started["run"]["status"] == "running", started
        run_id = started["run"]["runId"]
        assert project.remote(token, "status", "--run", run_id)["run"]["runId"] == run_id

        # More parallel requests than a peer's share (4 open, 2 pending heads): all answered,
        # the proxy's address is trusted with the global cap only.
        def ask(_: int) -> int:
            return httpx.get(
                f"{origin}/v1/runs/{run_id}",
                headers={"Authorization": "Bearer " + token.read_text().strip()},
                timeout=30,
            ).status_code

        with ThreadPoolExecutor(24) as pool:
            statuses = list(pool.map(ask, range(96)))
        assert statuses.count(200) == len(statuses), statuses

        prefixed = project.ctl(
            "--url", origin + "/coordinator", "--token-file", str(token),
            "status", "--run", run_id, check=False,
        )  # fmt: skip
        assert prefixed["exitCode"] == 2
        assert "origin" in prefixed["diagnostics"][0]["message"]
    finally:
        project.listener_port = int(direct.rpartition(":")[2])
