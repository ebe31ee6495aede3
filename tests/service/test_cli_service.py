"""``pipetune tune``, ``pipetune db upgrade``, ``pipetune serve --help``."""

from __future__ import annotations

import json

import pytest

import migrations
from service.cli import main
from service.db.models import SCHEMA_VERSION


def test_db_upgrade(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade", "--database-url", database_url]) == 0
    assert f"schema revision {SCHEMA_VERSION}" in capsys.readouterr().out
    assert migrations.current(database_url) == migrations.head()
    assert main(["db", "current", "--database-url", database_url]) == 0


def test_tune_prints_the_best_then_answers_from_the_cache(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "gemm", "--m", "1024", "--n", "1024", "--k", "1024", "--dtype", "float16",
            "--device", "sim:h200", "--trials", "12", "--database-url", database_url]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "best:" in out and "us (simulated: a cost-model estimate" in out
    assert "(run 1, 12 measured in" in out
    assert "12/12" in err  # the progress bar
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cached"] is True and result["latency_us"] > 0 and result["schedule"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "gemm", "--m", "1024", "--n", "1023", "--k", "1024"], "n: n=1023"),
        (["tune", "gemm", "--m", "x"], "expected an integer"),
        (["tune", "gemm", "--m", "64", "--n", "64", "--k", "64", "--trials", "0"],
         "budget.trials"),
        (["tune", "gemm", "--m", "64", "--n", "64", "--k", "64", "--device", "tpu"], "device"),
    ],
)
def test_tune_bad_input_exits_2(
    argv: list[str], message: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main([*argv, "--database-url", url]) == 2
    assert message in capsys.readouterr().err


def test_serve_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--help"])
    assert exit_info.value.code == 0
    assert "--database-url" in capsys.readouterr().out
