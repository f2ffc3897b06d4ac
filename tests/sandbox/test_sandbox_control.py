"""`coordinator-sandbox` driving a running sandbox from the command line (control.py): seed a
record, list and decide reviews, inject and list faults, list what each product received, bind
a project's connections; and the caller token's default lifetime and `--output`. Every command
runs as its own process against the session's sandbox, found through its state directory."""

from __future__ import annotations

import json
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from sandbox_support import CLIENTS, PROFILE, Receiver, Sandbox, run_cli
from test_sandbox_casework import review_request, submit

from coordinator_sandbox import testing


def control(sandbox: Sandbox, *argv: str) -> Any:
    done = run_cli(*argv, "--state-dir", str(sandbox.state_dir))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_seed_puts_a_record_the_product_then_answers(sandbox: Sandbox, tmp_path: Path) -> None:
    record_id = str(uuid.uuid4())
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"domainData": {"followUpAllowed": False}}))
    out = control(sandbox, "seed", "applications", record_id, "--file", str(record))
    assert out == f"Seeded BReg record applications/{record_id} (revision 1)\n"
    read = sandbox.http.get(
        sandbox.url("breg", f"/v1/records/applications/{record_id}"),
        headers=sandbox.headers("breg"),
    )
    assert read.status_code == 200
    assert read.json()["data"]["domainData"] == {"followUpAllowed": False}


def test_a_record_file_without_domain_data_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"followUpAllowed": True}))
    done = run_cli(
        "seed", "applications", "x", "--file", str(record), "--state-dir", str(sandbox.state_dir)
    )
    assert done.returncode == 1 and "`domainData`" in done.stderr


def test_reviews_lists_and_decide_latest_approves_the_last_pending_one(
    sandbox: Sandbox, receiver: Receiver, key: str
) -> None:
    earlier = submit(sandbox, key, review_request()).json()["requestId"]
    request_id = submit(sandbox, f"{key}-2", review_request()).json()["requestId"]
    rows = [line.split()[:2] for line in control(sandbox, "reviews").splitlines()]
    assert [earlier, "pending"] in rows and [request_id, "pending"] in rows
    before = len(receiver.wait_for(0, "/v1/review-completions"))
    out = control(sandbox, "decide", "latest", "reject")
    assert out.startswith(f"Decided review request {request_id}: rejected")
    receiver.wait_for(before + 1, "/v1/review-completions")
    rows = [line.split()[:2] for line in control(sandbox, "reviews").splitlines()]
    assert [request_id, "rejected"] in rows and [earlier, "pending"] in rows


def test_decide_inconclusive_is_changes_requested_and_a_bad_decision_lists_the_words(
    sandbox: Sandbox, key: str
) -> None:
    request_id = submit(sandbox, key, review_request()).json()["requestId"]
    decided = json.loads(control(sandbox, "decide", request_id, "inconclusive", "--json"))
    assert decided["status"] == "changes_requested"
    done = run_cli("decide", request_id, "maybe", "--state-dir", str(sandbox.state_dir))
    assert done.returncode == 1 and "approve, reject, inconclusive" in done.stderr


def test_a_fault_applies_to_the_next_call_and_faults_lists_and_clears_them(
    sandbox: Sandbox, key: str
) -> None:
    control(sandbox, "fault", "scheduling.read-availability/v1", "fail", "--status", "503")
    out = control(sandbox, "fault", "messaging.submit-message/v1", "fail", "--status", "429")
    assert out == "Fault fail set for the next call of messaging.submit-message/v1\n"
    listed = control(sandbox, "faults")
    rows = [line.split() for line in listed.splitlines()]
    assert ["messaging", "messaging.submit-message/v1", "fail", "1"] in rows
    assert ["scheduling", "scheduling.read-availability/v1", "fail", "1"] in rows
    message = {
        "senderProfile": "p",
        "to": {"email": "ada@example.org"},
        "template": {"id": "t", "version": "1"},
        "locale": "en",
        "data": {},
    }
    sent = sandbox.http.post(
        sandbox.url("messaging", "/v1/messages"),
        headers=sandbox.headers("messaging", Idempotency_Key=key),
        json=message,
    )
    assert sent.status_code == 429
    assert "messaging.submit-message/v1" not in control(sandbox, "faults")
    assert control(sandbox, "faults", "--clear") == "Cleared every pending fault\n"
    assert control(sandbox, "faults") == "No pending faults.\n"


def test_received_lists_each_products_requests_with_their_answers(
    sandbox: Sandbox, key: str
) -> None:
    submit(sandbox, key, review_request())
    listed = control(sandbox, "received", "--product", "casework")
    assert listed.splitlines()[0].split() == [
        "PRODUCT", "#", "OPERATION", "REQUEST", "ANSWER", "FAULT",
    ]  # fmt: skip
    rows = [line.split() for line in listed.splitlines()[1:]]
    assert ["casework.submit-review-request/v1", "POST", "/v1/review-requests", "201", "-"] in [
        row[2:] for row in rows
    ]
    everything = json.loads(control(sandbox, "received", "--json"))
    assert set(everything) >= {"identity", "breg", "casework", "messaging"}


def test_bind_makes_registers_and_describes_a_connection_per_alias(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets"
    out = control(
        sandbox, "bind", "permits=breg", "reviews-2=casework", "--event-source", "permits",
        "--secrets-dir", str(secrets),
    )  # fmt: skip
    bound = json.loads(out)
    permits = bound["connections"]["permits"]
    assert permits["baseUrl"] == sandbox.endpoints["breg"] and permits["profile"] == PROFILE
    authorization = permits["authorization"]
    assert authorization["clientId"] == "coordinator-permits"
    assert authorization["signingKeyRef"] == "secret:file/permits-client.jwk"
    assert authorization["scopes"] == ["breg:actions:invoke", "breg:records:read"]
    reviews = bound["connections"]["reviews-2"]
    assert reviews["reviewCompletions"] == {"tokenRef": "secret:file/casework-completions-token"}
    assert bound["eventSources"]["permits"]["signingKeyRef"] == (
        "secret:file/applications-events.key"
    )
    key_file = secrets / "permits-client.jwk"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # The running identity provider knows the new client: its assertion gets a token.
    jwk = json.loads(key_file.read_text())
    now = int(time.time())
    assertion = jwt.encode(
        {"iss": "coordinator-permits", "sub": "coordinator-permits", "jti": str(uuid.uuid4()),
         "aud": sandbox.token_endpoint, "iat": now, "exp": now + 60},
        jwt.PyJWK(jwk).key, algorithm="ES256", headers={"kid": jwk["kid"], "typ": "JWT"},
    )  # fmt: skip
    answer = sandbox.token_request(assertion, authorization["resource"], authorization["scopes"])
    assert answer.status_code == 200, answer.text
    clients = json.loads((sandbox.state_dir / "clients.json").read_text())["clients"]
    assert "coordinator-permits" in {entry["clientId"] for entry in clients}
    assert set(CLIENTS.values()) <= {entry["clientId"] for entry in clients}


def test_decide_latest_without_a_pending_review_says_so(tmp_path: Path) -> None:
    """A sandbox of its own, with Casework only and no review yet."""
    processes = testing.Processes(tmp_path)
    try:
        testing.Sandbox.start(processes, tmp_path / "state", services=["casework"])
        state = str(tmp_path / "state")
        done = run_cli("decide", "latest", "approve", "--state-dir", state)
        assert done.returncode == 1 and "No review request is pending" in done.stderr
        assert run_cli("reviews", "--state-dir", state).stdout == "No review requests.\n"
    finally:
        processes.stop_all()


def test_without_a_running_sandbox_the_command_says_how_to_start_one(tmp_path: Path) -> None:
    done = run_cli("received", "--state-dir", str(tmp_path))
    assert done.returncode == 1
    assert "No running sandbox found" in done.stderr and "coordinatorctl dev" in done.stderr


def test_a_caller_token_lasts_the_hour_the_coordinator_accepts_and_output_is_private(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    target = tmp_path / "caller-token"
    done = run_cli("caller-token", "--state-dir", str(sandbox.state_dir), "--output", str(target))
    assert done.returncode == 0 and done.stdout == ""
    token = target.read_text().strip()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 3600
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
