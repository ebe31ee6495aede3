"""A new user's first minutes (issue 42, item 7): ``pipetune serve`` on an account whose
data folder does not exist yet, and ``import pipetune`` needing nothing outside the base
dependencies (``pip install .`` without extras)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE_START_S = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _new_account_env(home: Path) -> dict[str, str]:
    """The environment of a user who never ran pipetune: a new HOME, no XDG folders, no
    PIPETUNE_ settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIPETUNE_", "XDG_"))}
    return {**env, "HOME": str(home)}


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.mark.slow
def test_serve_on_a_new_account_makes_its_data_folder_and_answers(tmp_path: Path) -> None:
    home = tmp_path / "newhome"
    home.mkdir()
    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
        env=_new_account_env(home), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + SERVE_START_S
        while not _healthy(port) and serve.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        answered = _healthy(port)
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=30)
    assert answered, err
    assert "Traceback" not in err, err
    assert (home / ".local" / "share" / "pipetune" / "pipetune.db").is_file()


def _requirement_names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings, normalised; markers that do not hold
    here (``sys_platform == 'win32'``, extras) left out."""
    from packaging.requirements import Requirement

    names = set()
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        names.add(re.sub(r"[-_.]+", "-", requirement.name).lower())
    return names


def _closure(names: set[str]) -> set[str]:
    """``names`` and everything they require, as installed here."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(_requirement_names(distribution(name).requires or []))
        except PackageNotFoundError:
            continue
    return seen


#: Run in a fresh interpreter: imports of a distribution outside the allowed set fail as
#: if it were not installed (an optional import falls back, as it would after
#: ``pip install .``), then ``import pipetune`` and its client.
_WITHOUT_EXTRAS = """
import json, re, sys
from importlib.metadata import packages_distributions

allowed = set(json.loads(sys.argv[1]))
owners = packages_distributions()

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        dists = owners.get(name.split(".")[0], [])
        if dists and not any(re.sub(r"[-_.]+", "-", d).lower() in allowed for d in dists):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
import pipetune
pipetune.Client("http://127.0.0.1:9").close()
"""


def test_import_pipetune_needs_only_the_base_dependencies() -> None:
    """``import pipetune`` and its client work with only pipetune's base dependencies
    (and what they require) importable: ``pip install .`` is enough."""
    import json

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = _closure(_requirement_names(project["dependencies"])) | {"pipetune"}
    done = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS, json.dumps(sorted(allowed))],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_export_takes_the_short_hash_the_cli_prints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``pipetune schedules`` and the dashboard print 12 characters of a kernel's hash;
    ``pipetune export`` takes them (a simulated run stores its kernel too)."""
    import pipetune
    from service.cli import main

    url = f"sqlite:///{tmp_path / 'pipetune.db'}"
    result = pipetune.tune("gemm", m=256, n=256, k=256, dtype="float16", device="sim:h200",
                           budget={"trials": 4}, database_url=url, progress=False)
    assert main(["schedules", "--database-url", url]) == 0
    short = result.kernel_hash[:12]
    assert short in capsys.readouterr().out
    assert main(["export", short, "--out", str(tmp_path / "cu"), "--database-url", url]) == 0
    assert any((tmp_path / "cu").glob("*.cu"))

    capsys.readouterr()
    assert main(["export", "0" * 12, "--out", str(tmp_path / "none"),
                 "--database-url", url]) == 1
    err = capsys.readouterr().err
    assert "no kernel" in err and "GPU" not in err


def test_the_readme_names_devices_the_commands_take() -> None:
    """Every ``--device`` value the README shows (``a|b|c`` alternatives) is a device name
    the commands accept (``cuda:N`` needs a GPU, ``D`` is a filter's placeholder)."""
    from service.runs.devices import resolve_device

    readme = (ROOT / "README.md").read_text()
    shown = {name for found in re.findall(r"--device ([\w:|\\]+)", readme)
             for name in found.replace("\\|", "|").split("|")}
    assert "sim:h200" in shown
    for name in sorted(shown - {"cuda:N", "D"}):
        assert resolve_device(name).model is not None, name
