"""`labkit simulate`: outputs from a preset, one-line errors for bad input."""

import json

import pytest

from labkit.cli.main import main


def test_preset_writes_events_summary_and_report(tmp_path, capsys):
    assert main(["simulate", "--preset", "small-swarm", "--duration", "150", "--out", str(tmp_path)]) == 0
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    kinds = {e["type"] for e in events}
    assert {"run", "peer", "hop", "step"} <= kinds
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["samples_per_s"] > 0 and summary["counters"]["finished"] > 0
    report = (tmp_path / "report.html").read_text()
    assert report.count("<svg") >= 4 and "<script" not in report  # static pictures: it opens offline
    for title in ("Throughput, achieved vs optimal", "Routing: who serves each stage", "Peer timeline"):
        assert title in report
    assert "<h2>loss</h2>" not in report  # a simulation has no loss: no empty chart for it
    assert f'<p class="headline">{summary["samples_per_s"]:.4g} samples/s</p>' in report  # the run in a line
    assert "<td>&quot;" not in report and "<th>mode</th><td>events</td>" in report  # values as text, not JSON
    out = capsys.readouterr().out
    assert "samples/s" in out and out.strip().splitlines()[-1] == f"report: {tmp_path / 'report.html'}"


def test_labkit_report_rewrites_the_report_of_a_run_directory_and_refuses_a_folder_without_events(tmp_path, capsys):
    assert main(["simulate", "--preset", "small-swarm", "--duration", "60", "--out", str(tmp_path)]) == 0
    (tmp_path / "report.html").unlink()
    assert main(["report", str(tmp_path)]) == 0
    assert "<svg" in (tmp_path / "report.html").read_text()
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2
    assert "holds no events.jsonl" in capsys.readouterr().err


def test_fluid_mode_from_a_scenario_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"stages": 2, "model": "small", "duration": 3600, "rebalance_period": 60,
                                "peers": [{"device": "A100", "count": 2, "stage": 0}, {"device": "A100", "count": 2, "stage": 1}],
                                "churn": {"hours": 1, "join_per_hour": 4, "leave_per_peer_hour": 1}}))
    assert main(["simulate", str(path), "--mode", "fluid", "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["mode"] == "fluid"


@pytest.mark.parametrize("argv", [
    ["simulate", "--preset", "nope"],
    ["simulate", "--preset", "small-swarm", "--mode", "slow"],
    ["simulate", "--preset", "small-swarm", "--duration", "-1"],
    ["simulate"],
    ["simulate", "BAD"],
])
def test_bad_flags_and_files_give_one_line_errors(tmp_path, capsys, argv):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stages": 1, "peers": [{"device": "T4", "count": 1, "stage": 0}], "rtt_ms": "fast"}))
    argv = [str(bad) if a == "BAD" else a for a in argv]
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("labkit simulate: error:") and "\n" not in message


def test_a_plan_from_labkit_plan_runs_in_the_simulator(tmp_path):
    assert main(["plan", "--preset", "dtfm_regional", "--n", "16", "--stages", "4", "--generations", "3",
                 "--out", str(tmp_path / "p")]) == 0
    assert main(["simulate", "--plan", str(tmp_path / "p" / "plan.json"), "--network", "dtfm_regional",
                 "--duration", "20", "--out", str(tmp_path / "s")]) == 0
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["samples_per_s"] > 0
    with pytest.raises(SystemExit):
        main(["simulate", "--plan", str(tmp_path / "p" / "plan.json")])  # no --network
