"""Schemathesis against the live app (in process, its lifespan running), on SQLite and
PostgreSQL: requests generated from the OpenAPI schema, valid and not, never get a 5xx.

Bounded for CI: a few examples per operation (about 150 requests per backend)."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from service_helpers import service_settings

from service.main import create_app

EXAMPLES_PER_OPERATION = 8
#: Generate and report; no shrinking (a failure prints its request as it was).
_PHASES = (Phase.explicit, Phase.generate)


def test_no_server_errors(database_url: str, tmp_path) -> None:
    app = create_app(service_settings(database_url, tmp_path), run_background=False)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    statuses: list[int] = []
    with asgi.get_client(app) as session:  # starts the lifespan: migrations, run manager
        try:
            for result in schema.get_all_operations():
                operation = result.ok()

                @given(case=operation.as_strategy())
                @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck), phases=_PHASES)
                def no_5xx(case: schemathesis.Case) -> None:
                    response = case.call_and_validate(session=session,
                                                      checks=[not_a_server_error])
                    statuses.append(response.status_code)

                no_5xx()
        finally:
            asgi.shutdown_lifespans()
    assert len(statuses) >= 100 and max(statuses) < 500
    assert {200, 404, 422} <= set(statuses)  # valid requests too, not only refusals
