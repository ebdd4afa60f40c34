"""`labkit plan` end to end on a small preset, and its one-line errors."""

from __future__ import annotations

import pytest

from labkit.cli.main import main
from labkit.plan.plan import Plan


@pytest.mark.parametrize("method", ["dtfm", "cluster"])
def test_plan_command_writes_plan_and_picture(method: str, tmp_path, capsys) -> None:
    preset = ["--preset", "dtfm_world", "--n", "16", "--stages", "4"] if method == "dtfm" else ["--preset", "ps_case3"]
    rc = main(["plan", *preset, "--method", method, "--generations", "3", "--out", str(tmp_path)])
    assert rc == 0
    plan = Plan.from_json((tmp_path / "plan.json").read_text())
    assert plan.method == method
    assert (tmp_path / "plan.png").exists() or (tmp_path / "plan.html").exists()
    assert f"{method} plan for" in capsys.readouterr().out


def test_bad_values_give_one_line(tmp_path, capsys) -> None:
    assert main(["plan", "--preset", "dtfm_world", "--stages", "5", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "stages=5" in err and "divisor" in err
    assert main(["plan", "--out", str(tmp_path)]) == 2
    assert "exactly one of SCENARIO.json, --preset NAME or --network FILE" in capsys.readouterr().err


def test_plan_command_reads_a_scenario_file(tmp_path) -> None:
    from labkit.plan.presets import preset

    preset("dtfm_multidc", n=8).save(tmp_path / "s.json")
    rc = main(["plan", str(tmp_path / "s.json"), "--method", "random", "--stages", "2", "--seed", "1",
               "--out", str(tmp_path / "out")])
    plan = Plan.from_json((tmp_path / "out" / "plan.json").read_text())
    assert rc == 0 and plan.scenario == "dtfm_multidc" and len(plan.stages) == 2
