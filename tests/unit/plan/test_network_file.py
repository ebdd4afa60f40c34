"""`labkit plan --network FILE`: matrices in ms and Gbit/s with DT-FM's message sizes, and bad files."""

from __future__ import annotations

import json
import re

import pytest

from labkit.cli.main import main
from labkit.plan.plan import Plan

# two pairs of close devices 50 ms apart: the planner prices both ways of cutting them by hand below
NET = {"delay_ms": [[0, 5, 50, 50], [5, 0, 50, 50], [50, 50, 0, 5], [50, 50, 5, 0]],
       "bandwidth_gbps": [[0, 2, 1, 1], [2, 0, 1, 1], [1, 1, 0, 2], [1, 1, 2, 0]],
       "stages": 2, "dp_message_gb": 0.9, "pp_message_gb": 0.5}


def _write(tmp_path, data) -> str:
    path = tmp_path / "net.json"
    path.write_text(json.dumps(data))
    return str(path)


def _last_line(out: str) -> dict[str, float]:
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"plan cost=\S+ dp=\S+ pp=\S+ cpu_seconds=\S+", last), last
    return {k: float(v) for k, v in re.findall(r"(\w+)=(\S+)", last)}


def test_plan_from_matrices_uses_the_files_message_sizes(tmp_path, capsys) -> None:
    assert main(["plan", "--network", _write(tmp_path, NET), "--out", str(tmp_path / "out")]) == 0
    got = _last_line(capsys.readouterr().out)
    # stages across the 50 ms link: DP 2(0.05 + 0.9·8/(2·1)) = 7.3 s, PP 2(0.005 + 0.5·8/2) = 4.01 s,
    # cheaper than stages inside the pairs (3.61 + 8.1 s)
    assert got["cost"] == pytest.approx(11.31) and got["dp"] == pytest.approx(7.3) and got["pp"] == pytest.approx(4.01)
    plan = Plan.from_json((tmp_path / "out" / "plan.json").read_text())
    assert sorted(len(s.devices) for s in plan.stages) == [2, 2]


def test_flags_override_the_files_message_sizes(tmp_path, capsys) -> None:
    args = ["plan", "--network", _write(tmp_path, NET), "--out", str(tmp_path / "out")]
    assert main([*args, "--dp-message-gb", "0.1", "--pp-message-gb", "2"]) == 0
    got = _last_line(capsys.readouterr().out)
    # with the flags' sizes: DP 2(0.05 + 0.1·8/(2·1)) = 0.9, PP 2(0.005 + 2·8/2) = 16.01 (the file's sizes gave 7.3 / 4.01)
    assert got["dp"] == pytest.approx(0.9) and got["pp"] == pytest.approx(16.01)


@pytest.mark.parametrize("change, names", [
    ({"delay_ms": None}, ["delay_ms", "present"]),
    ({"bandwidth_gbps": [[0, 1], [1, 0]]}, ["bandwidth_gbps", "4x4"]),
    ({"bandwidth_gbps": [[0, 2, 1, 1], [2, 0, 1, 1], [1, 1, 0, 0], [1, 1, 2, 0]]}, ["bandwidth_gbps[2][3]", "> 0"]),
    ({"delay_ms": [[0, 5, 50, 50], [5, 0, "x", 50], [50, 50, 0, 5], [50, 50, 5, 0]]}, ["delay_ms[1][2]", "number"]),
    ({"stages": 3}, ["stages=3", "divisor", "[1, 2, 4]"]),
    ({"pp_message_gb": -1}, ["pp_message_gb=-1", "> 0"]),
    ({"latency": 1}, ["latency", "one of the keys"]),
])
def test_a_malformed_file_gets_one_line_naming_the_problem(tmp_path, capsys, change, names) -> None:
    data = {k: v for k, v in {**NET, **change}.items() if v is not None}
    assert main(["plan", "--network", _write(tmp_path, data), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    for name in names:
        assert name in err


def test_not_json_and_not_an_object(tmp_path, capsys) -> None:
    (tmp_path / "a.json").write_text("{delay")
    (tmp_path / "b.json").write_text("[1, 2]")
    for name, expect in (("a.json", "valid JSON"), ("b.json", "a JSON object with keys")):
        assert main(["plan", "--network", str(tmp_path / name), "--out", str(tmp_path / "out")]) == 2
        assert expect in capsys.readouterr().err
