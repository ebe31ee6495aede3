"""docker-compose.yml and the Dockerfile: the topology README.md's "Deployment" describes.
PostgreSQL, the API (no Ray), a Ray head running the fleet's run manager and a GPU node
(profile ``gpu``), each with a health check, built from the Dockerfile's targets with
nothing installed at container start, and every pipetune command line they run is one the
CLI accepts."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _targets() -> dict[str, str]:
    """Dockerfile stage name -> the text of its stage."""
    text = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    return {stage.split()[2]: stage for stage in stages}


def _command(service: dict[str, Any]) -> str:
    command = service["command"]
    return command if isinstance(command, str) else " ".join(command)


def test_services_profiles_and_health_checks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"db", "api", "ray-head", "gpu-node"}
    assert services["gpu-node"]["profiles"] == ["gpu"]
    assert all("profiles" not in services[s] for s in ("db", "api", "ray-head"))
    for name, service in services.items():
        assert service["healthcheck"]["test"], name
    assert services["api"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert services["gpu-node"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert "127.0.0.1:8000:8000" in services["api"]["ports"]


def test_images_are_built_with_everything_installed(compose: dict[str, Any]) -> None:
    targets = _targets()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for name in ("api", "ray-head", "gpu-node"):
        service = compose["services"][name]
        assert service["build"]["target"] in targets, name
        assert "pip install" not in _command(service), name
    assert compose["services"]["api"]["build"]["target"] == "service"
    assert "[" not in targets["service"].split("pip install", 1)[1].splitlines()[0]
    fleet_extras = re.search(r"\[([a-z0-9,-]+)\]", targets["fleet"]).group(1).split(",")
    assert "fleet" in fleet_extras and set(fleet_extras) <= set(extras)


def test_the_api_never_uses_ray_and_the_head_drives_the_fleet(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "PIPETUNE_EXECUTOR" not in services["api"]["environment"]
    assert services["ray-head"]["environment"]["PIPETUNE_EXECUTOR"] == "ray"
    head = _command(services["ray-head"])
    assert "ray start --head --port=6379" in head and "exec pipetune worker" in head


def test_every_pipetune_command_parses(compose: dict[str, Any]) -> None:
    parser = build_parser()
    found = 0
    for name, service in compose["services"].items():
        command = service.get("command")
        if command is None:
            continue
        text = _command(service).replace('"$$(hostname -i)"', "10.0.0.2")
        for part in re.findall(r"(?:exec )?(pipetune [^&]*)", text):
            argv = shlex.split(part.replace("$$RAY_PORTS", ""))[1:]
            args, extra = parser.parse_known_args(argv)
            assert args.handler is not None, (name, argv)
            if argv[:2] == ["node", "start"]:
                assert args.address == "ray-head:6379" and extra[:2] == ["--", "--block"]
            found += 1
    assert found == 3  # serve, worker, node start
