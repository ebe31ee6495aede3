"""Searches outside the API's interpreter: a ``pipetune worker`` process claims and
executes the runs an API queued, and stops cleanly on SIGTERM (issue 16, item 6)."""

from __future__ import annotations

import os
import subprocess
import sys

from fastapi.testclient import TestClient
from service_helpers import tune_body, wait_for

from service.core.config import Settings
from service.main import create_app


def test_a_worker_process_executes_the_runs_the_api_queued(settings: Settings,
                                                           tmp_path) -> None:
    with TestClient(create_app(settings, run_background=False)) as api:
        run = api.post("/v1/tune", json=tune_body(trials=16)).json()["run"]
        env = {**os.environ, "PIPETUNE_DATA_DIR": str(tmp_path), "PIPETUNE_HEARTBEAT_S": "0.5"}
        worker = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--database-url",
             settings.database_url, "--log-level", "warning"], env=env)
        try:
            done = wait_for(api, run["id"], timeout_s=60)
            assert done["status"] == "succeeded" and done["trials_done"] == 16
            assert api.app.state.run_manager.active_runs == []  # not run by the API
        finally:
            worker.terminate()
            assert worker.wait(30) == 0
