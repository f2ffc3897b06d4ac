"""schemathesis against the in-process app: generated requests for every operation (examples,
coverage, fuzzing) and the stateful links (POST /v1/runs → GET /v1/runs/{run}); no server error,
every status, header, media type and body as the 3.1 bundle documents it.

STACK.md pitfalls: the schema is loaded from the committed bundle with `from_path` and the app
attached (not `from_fixture`, P9); the token is set on the schema config, not per call (P10); the
fake service is reset before every case and in the state machine's `setup` (P11); no
schemathesis.toml is read from the repository (P12).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from api_fakes import (
    COMPLETION_TOKEN,
    FakeJournal,
    FakeRunService,
    SigningKeys,
    bearer,
    settings,
)
from hypothesis import HealthCheck, Phase, seed
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ensure_resource_availability,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    use_after_free,
)

from coordinator_api import create_app

BUNDLED = Path(__file__).resolve().parents[2] / "generated" / "openapi.bundled.yaml"
MAX_EXAMPLES = 8
SEED = 20260302

KEYS = SigningKeys()
SERVICE = FakeRunService()
JOURNAL = FakeJournal()
APP = create_app(settings(KEYS), service=SERVICE, journal=JOURNAL)

schema = schemathesis.openapi.from_path(BUNDLED)
schema.app = APP


@schema.auth()
class AccessToken:
    """An explicit auth provider (not config headers): `ignored_auth` then knows the token is
    meant to be valid and probes the operation without it and with a forged one."""

    def get(self, case: Any, context: Any) -> str:
        if case.operation.path == "/v1/review-completions":  # the Casework secret, not a token
            return "Bearer " + COMPLETION_TOKEN.decode()
        return bearer(KEYS)["Authorization"]

    def set(self, case: Any, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": data}


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]


@schema.parametrize()
@seed(SEED)
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
    database=None,
)
def test_generated_requests_conform(case: Any) -> None:
    SERVICE.reset()
    case.call_and_validate(checks=CHECKS)


class Workflow(schema.as_state_machine()):  # type: ignore[misc]
    def setup(self) -> None:
        SERVICE.reset()

    def get_call_kwargs(self, case: Any) -> dict[str, Any]:
        return {"headers": {"Authorization": AccessToken().get(case, None)}}

    def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
        case.validate_response(
            response,
            checks=[*CHECKS, use_after_free, ensure_resource_availability],
            transport_kwargs=kwargs or None,
            recorder=self.recorder,
        )


Workflow.TestCase.settings = hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    stateful_step_count=4,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
TestStatefulLinks = Workflow.TestCase
