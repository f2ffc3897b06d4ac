"""The operator console in a real browser (headless Chromium) against a live `coordinator
serve` with the sandbox products (docs/console.md): the runs list and its counts, a run's
path on the graph, an uncertain effect reconciled from its page, a cancel that asks for
confirmation, a non-operator token without operator pages, and no input value, product
response or token in any page or network response (canaries, every response recorded)."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import ROOT, Project

from coordinator_sandbox.testing import Policy, Processes, Sandbox, wait_for

MESSAGING = "messaging.submit-message/v1"
RUN_TIMEOUT = 60.0
IMAGES = ROOT / "docs" / "images"
CANARY_NAME = "Canary-Applicant-" + uuid.uuid4().hex[:12]
CANARY_EMAIL = f"canary-{uuid.uuid4().hex[:12]}@example.org"
# A second client of the operator's scope that may only read: the console shows it no action.
VIEWER = Policy(
    ["delayed-follow-up"], client_id="viewer", actions=("status", "inspect"), operator=False
)


@dataclass
class Console:
    url: str
    token: str


@dataclass
class Live:
    project: Project
    sandbox: Sandbox
    token: Path
    operator: Console
    viewer: Console
    applications: list[str] = field(default_factory=list)

    def seed(self) -> str:
        application = str(uuid.uuid4())
        self.sandbox.seed_application(application, contact=CANARY_EMAIL, name=CANARY_NAME)
        self.applications.append(application)
        return application

    def start(self, delay: float = 0.2) -> str:
        application = self.seed()
        status, body = self.project.api_start(
            self.token, application, uuid.uuid4().hex, datetime.now(UTC) + timedelta(seconds=delay)
        )
        assert status == 201, body
        run_id: str = body["runId"]
        return run_id

    def wait(self, run_id: str, wanted: set[str]) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            run = self.project.api_status(self.token, run_id)
            return run if run["status"] in wanted else None

        found: dict[str, Any] = wait_for(reached, RUN_TIMEOUT, f"run to reach {wanted}", 0.2)
        return found


def _start_console(project: Project, name: str, token: Path) -> Console:
    process = project.processes.start(
        name,
        [
            "-m", "coordinatorctl", "--url", project.origin, "--token-file", str(token),
            "console", "--port", "0", "--project", str(project.root),
        ],
        env=project.env,
    )  # fmt: skip

    def address() -> str | None:
        if process.poll() is not None:
            raise AssertionError(f"{name} exited: " + project.processes.log(name))
        found = re.search(r"http://127\.0\.0\.1:\d+", project.processes.log(name))
        return found.group(0) if found else None

    url = wait_for(address, 30, f"{name} to listen")
    return Console(url, token.read_text().strip())


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    directory = tmp_path_factory.mktemp("console")
    processes = Processes(directory)
    try:
        project = Project.create(directory, processes)
        sandbox = project.start_sandbox()
        project.write_runtime(sandbox, policies=[VIEWER])
        assert project.deploy_ctl("migrate")["status"] == "migrated"
        assert project.deploy_ctl("apply", "--reference", "BROWSER-1")["status"] == "applied"
        service = project.start_service()
        project.wait_healthy(service)
        token = project.token_file()
        viewer_token = project.token_file(client_id="viewer", name="viewer-token")
        operator = _start_console(project, "console", token)
        viewer = _start_console(project, "console-viewer", viewer_token)
        yield Live(project, sandbox, token, operator, viewer)
    finally:
        processes.stop_all()


@dataclass
class Recorder:
    """Every response the page received, read after the fact (bodies stay available)."""

    responses: list[Any] = field(default_factory=list)

    def bodies(self) -> list[tuple[str, bytes]]:
        found = []
        for response in self.responses:
            try:
                found.append((response.url, response.body()))
            except Exception:  # a redirect or an aborted load has no body
                found.append((response.url, b""))
        return found


@pytest.fixture
def recorded(browser: Any) -> Iterator[tuple[Any, Recorder]]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    recorder = Recorder()
    errors: list[str] = []

    def record(response: Any) -> None:  # Playwright wraps handlers: a bound builtin fails
        recorder.responses.append(response)

    def complain(message: Any) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("response", record)
    page.on("console", complain)
    try:
        yield page, recorder
        assert not [e for e in errors if "Content Security Policy" in e], errors
    finally:
        context.close()


def assert_no_canary(live: Live, recorder: Recorder, *pages: str) -> None:
    secrets = [CANARY_NAME, CANARY_EMAIL, live.operator.token, live.viewer.token,
               *live.applications]  # fmt: skip
    for url, body in recorder.bodies():
        for secret in secrets:
            assert secret.encode() not in body, f"a canary in the answer of {url}"
            # the SVG travels base64-encoded inside the page: look there too
            for encoded in re.findall(rb"base64,([A-Za-z0-9+/=]+)", body):
                assert secret.encode() not in base64.b64decode(encoded)
    for text in pages:
        for secret in secrets:
            assert secret not in text


def test_the_runs_list_shows_the_runs_and_the_counts(
    live: Live, recorded: tuple[Any, Recorder]
) -> None:
    page, recorder = recorded
    finished = live.start()
    live.wait(finished, {"finished"})
    waiting = live.start(delay=3600)
    page.goto(live.operator.url + "/")
    assert page.title().startswith("Runs")
    assert page.locator(f'tr[data-run="{finished}"]').count() == 1
    assert page.locator(f'tr[data-run="{waiting}"]').count() == 1
    assert int(page.locator('dd[data-status="finished"]').inner_text()) >= 1
    assert int(page.locator('dd[data-status="running"]').inner_text()) >= 1
    assert page.locator('a[href="/holds"]').count() >= 1
    page.select_option("#status", "finished")
    page.click("text=Filter")
    assert page.locator(f'tr[data-run="{waiting}"]').count() == 0
    assert page.locator(f'tr[data-run="{finished}"]').count() == 1
    page.click('header a[href="/workflow"]')
    assert live.project.revision in page.locator("#workflow-info").inner_text()
    assert page.locator("img#graph").count() == 1  # --project is the active definition
    page.click('header a[href="/holds"]')
    assert page.locator("#form-restore-hold").count() == 1
    assert page.locator("#form-retention").count() == 1
    headers = recorder.responses[0].headers
    assert headers["content-security-policy"].startswith("default-src 'none'")
    assert_no_canary(live, recorder, page.content())


def test_a_run_page_shows_its_path_on_the_graph(live: Live, recorded: tuple[Any, Recorder]) -> None:
    page, recorder = recorded
    run_id = live.start()
    live.wait(run_id, {"finished"})
    page.goto(live.operator.url + "/")
    page.click(f'a[href="/runs/{run_id}"]')
    assert page.locator("#run-status").inner_text() == "finished"
    graph = page.locator("img#graph")
    assert graph.count() == 1
    source = graph.get_attribute("src") or ""
    svg = base64.b64decode(source.split(",", 1)[1]).decode()
    assert "notify" in svg and "accepted" in svg
    assert "now: delivered" in svg  # the current step, marked on the path
    assert page.evaluate("document.getElementById('graph').naturalWidth") > 0
    assert page.locator('tr[data-step="notify"]').count() == 1
    assert "messageId" in page.locator("#output").inner_text()  # the declared output
    assert page.locator("#form-cancel").count() == 0  # finished: nothing to cancel
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "console-run.png"), full_page=True)
    assert_no_canary(live, recorder, page.content())


def test_an_uncertain_effect_is_reconciled_from_the_run_page(
    live: Live, recorded: tuple[Any, Recorder]
) -> None:
    page, recorder = recorded
    live.sandbox.fault(MESSAGING, kind="commit-then-drop")
    run_id = live.start()
    held = live.wait(run_id, {"attention", "finished", "failed"})
    assert held["status"] == "attention", held
    page.goto(live.operator.url + "/")
    row = page.locator(f'tr[data-run="{run_id}"]')
    assert "uncertain effect" in row.inner_text()
    row.locator("a").click()
    assert page.locator('li[data-effect="notify"]').inner_text().startswith("unknown")
    assert page.locator("#form-reconcile").count() == 1
    page.fill("#reason-reconcile", "INC-7")
    page.check("#confirm-reconcile")
    page.click("#submit-reconcile")
    assert page.locator("#reconcile-result").inner_text() == "settled"
    live.wait(run_id, {"finished"})
    page.click("#refresh")
    assert page.locator("#run-status").inner_text() == "finished"
    assert "settled by reconcile" in page.locator('li[data-effect="notify"]').inner_text()
    assert_no_canary(live, recorder, page.content())


def test_a_cancel_asks_for_confirmation(live: Live, recorded: tuple[Any, Recorder]) -> None:
    page, recorder = recorded
    run_id = live.start(delay=3600)
    page.goto(f"{live.operator.url}/runs/{run_id}")
    page.fill("#reason-cancel", "INC-8")
    page.click("#submit-cancel")  # the required checkbox stops the browser from sending
    assert page.url.endswith(f"/runs/{run_id}")
    assert live.project.api_status(live.token, run_id)["status"] == "running"
    # Without the browser's check (the form's `required` removed) the console asks again.
    page.evaluate("document.getElementById('confirm-cancel').removeAttribute('required')")
    page.click("#submit-cancel")
    assert "I confirm" in page.locator("#confirm-problem").inner_text()
    assert live.project.api_status(live.token, run_id)["status"] == "running"
    page.fill("#reason-cancel", "INC-8")
    page.check("#confirm-cancel")
    page.click("#submit-cancel")
    assert page.locator("#action-status").inner_text() == "cancelled"
    assert live.project.api_status(live.token, run_id)["status"] == "cancelled"
    assert_no_canary(live, recorder, page.content())


def test_a_non_operator_token_sees_no_operator_pages(
    live: Live, recorded: tuple[Any, Recorder]
) -> None:
    page, recorder = recorded
    run_id = live.start(delay=3600)
    page.goto(live.viewer.url + "/")
    assert page.locator("#counts").count() == 0
    assert page.locator('a[href="/holds"]').count() == 0
    assert page.locator(f'tr[data-run="{run_id}"]').count() == 1
    answer = page.goto(live.viewer.url + "/holds")
    assert answer is not None and answer.status == 403
    assert page.locator("form").count() == 0
    page.goto(f"{live.viewer.url}/runs/{run_id}")
    assert page.locator('a[href="/holds"]').count() == 0
    assert_no_canary(live, recorder, page.content())


def test_attention_runs_come_first_in_the_list(live: Live, recorded: tuple[Any, Recorder]) -> None:
    page, recorder = recorded
    live.sandbox.fault(MESSAGING, kind="commit-then-drop")
    held = live.start()
    assert live.wait(held, {"attention", "finished", "failed"})["status"] == "attention"
    live.start(delay=3600)  # a newer run, still listed after the attention run
    page.goto(live.operator.url + "/")
    first = page.locator("#runs tbody tr").first
    assert first.get_attribute("data-run") == held
    assert "uncertain effect" in first.inner_text()
    assert int(page.locator('dd[data-count="unknown-effects"]').inner_text()) == 1
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / "console-runs.png"), full_page=True)
    assert_no_canary(live, recorder, page.content())


def test_another_host_name_is_refused(live: Live) -> None:
    port = live.operator.url.rsplit(":", 1)[1]
    answer = httpx.get(f"http://localhost:{port}/", timeout=5)
    assert answer.status_code == 421
    rebound = httpx.get(live.operator.url + "/", headers={"Host": "attacker.example"}, timeout=5)
    assert rebound.status_code == 421


def test_the_list_refreshes_in_place_and_waits_count_down(
    live: Live, recorded: tuple[Any, Recorder]
) -> None:
    page, recorder = recorded
    page.goto(f"{live.operator.url}/?auto=2")
    page.evaluate("window.__kept = 42")  # gone if the page were reloaded
    run_id = live.start(delay=3600)
    page.wait_for_selector(f'tr[data-run="{run_id}"]', timeout=15_000)
    assert page.evaluate("window.__kept") == 42, "the list was reloaded, not refreshed in place"
    page.goto(f"{live.operator.url}/runs/{run_id}")
    countdown = page.locator("#next-due .countdown")
    first = countdown.inner_text()
    assert first.startswith("(in ") and (" min" in first or " h" in first)
    page.wait_for_function(
        "text => document.querySelector('#next-due .countdown').textContent !== text",
        arg=first,
        timeout=5_000,
    )
    assert_no_canary(live, recorder, page.content())
