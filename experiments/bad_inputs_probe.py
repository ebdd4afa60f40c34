"""Probe the `labkit` command with bad inputs (issue 23, item 3) and count what each one gives.

Every case runs `python -m labkit.cli.main ...` (or a few lines of Python for the API) in its own
process, under a memory cap and a time limit, and is classed by what came back:
clear (exit 2, one line naming what was wrong), misleading (exit 2 or 1 but not that line),
traceback, hang (past the time limit), crash (killed by a signal), silently wrong (exit 0 on input
that must be refused) or harmless (exit 0 on input a run may take).

    python experiments/bad_inputs_probe.py [--only SUBSTRING] [--verbose] [--code DIR]

`--code DIR` probes the labkit in DIR (e.g. an export of an older commit) instead of this checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the labkit probed (--code changes it)
MEMORY_CAP = 4 << 30  # bytes of data per case (RLIMIT_DATA): an OOM shows as a crash, not a dead machine
TIMEOUT_S = {"train": 240, "other": 90}  # a case still running then is a hang (a loaded machine is slow: no less)
TRAIN = ["train", "--seq-len", "32", "--global-batch", "16", "--microbatch", "4", "--eval-every", "0",
         "--no-progress", "--no-report"]
NEST = 100_000  # brackets of a deeply nested JSON value
SCENARIO = {"stages": 2, "duration": 30, "peers": [{"device": "T4", "count": 2, "stage": 0},
                                                   {"device": "T4", "count": 2, "stage": 1}]}
NETWORK = {"name": "n", "devices": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}],
           "delay": [[0, 0.01, 0.01, 0.01], [0.01, 0, 0.01, 0.01], [0.01, 0.01, 0, 0.01], [0.01, 0.01, 0.01, 0]],
           "bandwidth": [[0, 1e9, 1e9, 1e9], [1e9, 0, 1e9, 1e9], [1e9, 1e9, 0, 1e9], [1e9, 1e9, 1e9, 0]]}
MATRIX = {"delay_ms": [[0, 5, 5, 5], [5, 0, 5, 5], [5, 5, 0, 5], [5, 5, 5, 0]],
          "bandwidth_gbps": [[0, 2, 2, 2], [2, 0, 2, 2], [2, 2, 0, 2], [2, 2, 2, 0]]}

# the Python each damaged checkpoint is made by: `data` is the good checkpoint's dict, `s0` its stage 0
CHECKPOINT_DAMAGE = {
    "params_fp16": "s0['params'] = {k: v.half() for k, v in s0['params'].items()}",
    "params_int": "s0['params'] = {k: v.long() for k, v in s0['params'].items()}",
    "params_nan": "next(iter(s0['params'].values())).view(-1)[0] = float('nan')",
    "params_inf": "next(iter(s0['params'].values())).view(-1)[0] = float('inf')",
    "params_shape": "k = next(iter(s0['params'])); s0['params'][k] = s0['params'][k][:3].clone()",
    "params_missing": "s0['params'].pop(next(iter(s0['params'])))",
    "params_extra": "s0['params']['zzz'] = torch.zeros(2)",
    "params_not_tensor": "k = next(iter(s0['params'])); s0['params'][k] = [1.0, 2.0]",
    "optimizer_none": "s0['optimizer'] = None",
    "optimizer_removed": "s0.pop('optimizer')",
    "optimizer_empty_state": "s0['optimizer']['state'] = {}",
    "optimizer_nan": "st = next(iter(s0['optimizer']['state'].values())); st['exp_avg'].view(-1)[0] = float('nan')",
    "optimizer_shape": "st = next(iter(s0['optimizer']['state'].values())); st['exp_avg'] = st['exp_avg'][:1].clone()",
    "optimizer_fp16": "st = next(iter(s0['optimizer']['state'].values())); st['exp_avg'] = st['exp_avg'].half()",
    "optimizer_text": "s0['optimizer'] = 'adam'",
    "other_config": "data['config']['model']['size'] = 'tiny'",
    "other_stages": "data['config']['stages'] = 1; data['config']['layer_split'] = None; data['stages'] = data['stages'][:1]",
    "truncated": "TRUNCATE",
    "not_a_checkpoint_text": "TEXT",
    "step_huge": "data['step'] = 10**30",
}


def _json(path: Path, value: object) -> Path:
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    return path


def _nested(key: str) -> str:
    return "{" + json.dumps(key) + ": " + "[" * NEST + "]" * NEST + "}"


def _make_checkpoint(tmp: Path) -> Path:
    """A real checkpoint of a 3-step nano run (what --resume continues)."""
    run = tmp / "ckpt_run"
    subprocess.run([sys.executable, "-m", "labkit.cli.main", *TRAIN, "--steps", "3", "--run-dir", str(run)],
                   cwd=ROOT, check=True, capture_output=True)
    return run / "checkpoint.pt"


def _damaged(good: Path, path: Path, how: str) -> Path:
    """`good` damaged as CHECKPOINT_DAMAGE says (in a subprocess: the probe itself imports no torch)."""
    if how == "TRUNCATE":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        return path
    if how == "TEXT":
        return _json(path, "not a checkpoint\n")
    code = (f"import torch\ndata = torch.load({str(good)!r}, weights_only=True)\ns0 = data['stages'][0]\n{how}\n"
            f"torch.save(data, {str(path)!r})\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
    return path


def _run_dirs(tmp: Path) -> dict[str, Path]:
    """Malformed run directories for `labkit report` and `labkit.lab.replay`."""
    good = tmp / "run_good_events"
    out: dict[str, Path] = {}

    def make(name: str, files: dict[str, str | None]) -> None:
        d = tmp / f"rd_{name}"
        d.mkdir()
        for fname, text in files.items():
            if text is None:
                (d / fname).mkdir()
            else:
                (d / fname).write_text(text)
        out[name] = d

    hop = {"type": "hop", "t": 0.1, "trainer": "t0", "stage": 0, "peer": "s0p0", "direction": "forward", "bytes": 10,
           "seconds": 0.01, "microbatch": 1, "timing": {}, "link_seconds": 0.0}
    step = {"type": "step", "t": 0.2, "step": 1, "loss": 5.0, "samples": 16, "tokens": 512}
    ok = json.dumps(hop) + "\n" + json.dumps(step) + "\n"
    make("no_events", {"summary.json": "{}"})
    make("empty_events", {"events.jsonl": ""})
    make("truncated_events", {"events.jsonl": ok + '{"type": "st'})
    make("garbage_line", {"events.jsonl": "xx\x00garbage\n" + ok})
    make("unknown_type", {"events.jsonl": json.dumps({"type": "zap", "t": 0}) + "\n" + ok})
    make("hop_missing_fields", {"events.jsonl": json.dumps({"type": "hop", "t": 0}) + "\n"})
    make("step_text_fields", {"events.jsonl": json.dumps({**step, "step": "one", "loss": "low"}) + "\n"})
    make("t_text", {"events.jsonl": json.dumps({**step, "t": "soon"}) + "\n"})
    make("events_a_list_line", {"events.jsonl": "[1, 2]\n" + ok})
    make("events_dir", {"events.jsonl": None})
    make("events_non_utf8", {"events.jsonl": ok})
    (out["events_non_utf8"] / "events.jsonl").write_bytes(b"\xff\xfe" + ok.encode())
    make("config_garbage", {"events.jsonl": ok, "config.json": "{oops"})
    make("config_wrong", {"events.jsonl": ok, "config.json": json.dumps({"lr": "fast"})})
    make("config_nested", {"events.jsonl": ok, "config.json": _nested("model")})
    make("summary_list", {"events.jsonl": ok, "summary.json": "[1, 2]"})
    make("summary_garbage", {"events.jsonl": ok, "summary.json": "{oops"})
    make("event_nested", {"events.jsonl": _nested("type") + "\n" + ok})
    make("throughput_garbage", {"events.jsonl": ok, "throughput.json": json.dumps([{"t": "x"}])})
    d = tmp / "rd_events_fifo"
    d.mkdir()
    os.mkfifo(d / "events.jsonl")
    out["events_fifo"] = d
    out["missing_dir"] = tmp / "rd_nope"
    out["a_file"] = _json(tmp / "rd_a_file", "x")
    del good
    return out


def cases(tmp: Path) -> list[tuple[str, str, list[str], str, bool]]:
    """(class, name, argv or ["-c", code], what the error must name, must it be refused)."""
    out: list[tuple[str, str, list[str], str, bool]] = []
    good = _make_checkpoint(tmp)
    for name, how in CHECKPOINT_DAMAGE.items():
        path = _damaged(good, tmp / f"ck_{name}.pt", how)
        out.append(("checkpoint", name, [*TRAIN, "--steps", "5", "--resume", str(path), "--run-dir",
                                         str(tmp / f"ckrun_{name}")], path.name, True))
    fifo = tmp / "ck_fifo.pt"
    os.mkfifo(fifo)
    out.append(("checkpoint", "fifo", [*TRAIN, "--steps", "5", "--resume", str(fifo)], "not a regular file", True))
    out.append(("checkpoint", "dev_zero", [*TRAIN, "--steps", "5", "--resume", "/dev/zero"], "not a regular file", True))

    big = [("microbatch_huge", ["--size", "large", "--global-batch", "4096", "--microbatch", "4096"]),
           ("seq_len_huge", ["--size", "medium", "--seq-len", "65536", "--global-batch", "8", "--microbatch", "8"]),
           ("model_large_many_peers", ["--size", "large", "--peers", "8", "--global-batch", "64", "--microbatch", "16"]),
           ("batch_and_inflight", ["--size", "small", "--global-batch", "4096", "--microbatch", "1024",
                                   "--inflight", "64"])]
    for name, flags in big:
        out.append(("sizes", name, ["train", "--steps", "2", "--eval-every", "0", "--no-progress", "--no-report",
                                    "--run-dir", str(tmp / f"big_{name}"), *flags], "memory", True))
    for threads in ("100000", "1000000000"):
        out.append(("sizes", f"threads_{threads}", [*TRAIN, "--steps", "1", "--threads", threads, "--run-dir",
                                                    str(tmp / f"thr_{threads}")], "threads", True))

    for name, d in _run_dirs(tmp).items():
        refuse = name not in ("truncated_events", "empty_events", "unknown_type")
        needle = {"events_fifo": "FIFO", "a_file": "not a directory", "missing_dir": "does not exist"}.get(name, d.name)
        out.append(("rundir", f"report_{name}", ["report", str(d)], needle, refuse))
        read = refuse and not name.startswith(("summary", "throughput"))  # replay reads events and config only
        out.append(("rundir", f"replay_{name}", ["-c", f"import labkit.lab as l; l.replay({str(d)!r})"], needle, read))

    nested = {"plan": _json(tmp / "nested_plan.json", _nested("stages")),
              "scenario": _json(tmp / "nested_scenario.json", _nested("peers")),
              "network_scenario": _json(tmp / "nested_network.json", _nested("devices")),
              "matrix": _json(tmp / "nested_matrix.json", _nested("delay_ms"))}
    out.append(("json", "nested_plan_train", [*TRAIN, "--steps", "1", "--plan", str(nested["plan"])], "nested_plan", True))
    out.append(("json", "nested_plan_simulate", ["simulate", "--plan", str(nested["plan"]), "--network",
                                                 "dtfm_regional"], "nested_plan", True))
    out.append(("json", "nested_scenario", ["simulate", str(nested["scenario"])], "nested_scenario", True))
    out.append(("json", "nested_network", ["plan", str(nested["network_scenario"]), "--stages", "2", "--out",
                                           str(tmp / "po")], "nested_network", True))
    out.append(("json", "nested_matrix", ["plan", "--network", str(nested["matrix"]), "--stages", "2", "--out",
                                          str(tmp / "po")], "nested_matrix", True))

    def bad_matrix(name: str, key: str, value: object, refuse: bool = True) -> None:
        data = json.loads(json.dumps(MATRIX))
        data[key][0][1] = value
        text = json.dumps(data).replace('"NAN"', "NaN").replace('"INF"', "Infinity").replace('"BIG"', "1e400")
        path = _json(tmp / f"mx_{name}.json", text)
        out.append(("floats", f"matrix_{name}", ["plan", "--network", str(path), "--stages", "2", "--method", "random",
                                                  "--out", str(tmp / f"po_{name}")], "delay_ms" if "delay" in key else "bandwidth", refuse))

    for key in ("delay_ms", "bandwidth_gbps"):
        for name, value in (("1e308", 1e308), ("inf", "INF"), ("nan", "NAN"), ("neg", -1.0), ("1e400", "BIG"),
                            ("tiny", 1e-308)):
            bad_matrix(f"{key}_{name}", key, value, refuse=(key, name) != ("delay_ms", "tiny"))  # 1e-308 ms is 0
        bad_matrix(f"{key}_negzero", key, -0.0, refuse=key == "bandwidth_gbps")

    def bad_network(name: str, key: str, value: object, refuse: bool = True) -> None:
        data = json.loads(json.dumps(NETWORK))
        data[key][0][1] = value
        text = json.dumps(data).replace('"NAN"', "NaN").replace('"INF"', "Infinity")
        path = _json(tmp / f"net_{name}.json", text)
        out.append(("floats", f"network_{name}", ["plan", str(path), "--stages", "2", "--method", "dtfm",
                                                   "--generations", "2", "--out", str(tmp / f"pn_{name}")], key, refuse))

    for key in ("delay", "bandwidth"):
        for name, value in (("1e308", 1e308), ("inf", "INF"), ("nan", "NAN"), ("neg", -1.0), ("tiny", 1e-308),
                            ("zero", 0.0)):
            bad_network(f"{key}_{name}", key, value, refuse=not (key == "delay" and name in ("zero", "tiny")))
        bad_network(f"{key}_negzero", key, -0.0, refuse=key == "bandwidth")
    for name, field, value in (("flops_1e308", "flops", 1e308), ("memory_1e308", "memory", 1e308),
                               ("flops_tiny", "flops", 1e-308)):
        data = json.loads(json.dumps(NETWORK))
        data["devices"][0][field] = value
        path = _json(tmp / f"net_{name}.json", data)
        out.append(("floats", f"network_{name}", ["plan", str(path), "--stages", "2", "--method", "dtfm",
                                                   "--generations", "2", "--out", str(tmp / f"pn_{name}")], field, True))

    def bad_scenario(name: str, change: dict, field: str, refuse: bool = True) -> None:
        text = json.dumps({**SCENARIO, **change}).replace('"NAN"', "NaN").replace('"INF"', "Infinity")
        path = _json(tmp / f"sc_{name}.json", text)
        out.append(("floats", f"scenario_{name}", ["simulate", str(path), "--out", str(tmp / f"so_{name}")], field, refuse))

    for field in ("duration", "rtt_ms", "bandwidth_mbps", "overhead_ms", "compression", "service_cv", "bin_seconds"):
        for name, value in (("1e308", 1e308), ("inf", "INF"), ("nan", "NAN"), ("neg", -1.0), ("negzero", -0.0),
                            ("tiny", 1e-308)):
            harmless = (name in ("negzero", "tiny") and field in ("rtt_ms", "overhead_ms", "service_cv")
                        or (field, name) in (("duration", "tiny"), ("bin_seconds", "1e308")))  # nothing, or one bin
            bad_scenario(f"{field}_{name}", {field: value}, field, refuse=not harmless)
    bad_scenario("link_rtt_1e308", {"links": [{"stage": 0, "rtt_ms": 1e308, "bandwidth_mbps": 100}]}, "rtt_ms")
    bad_scenario("link_bw_tiny", {"links": [{"stage": 0, "rtt_ms": 1, "bandwidth_mbps": 1e-308}]}, "bandwidth_mbps")
    bad_scenario("churn_tiny_rate", {"churn": {"hours": 1, "join_per_hour": 1e-308}}, "churn", refuse=False)

    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)
    huge = tmp / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(3 << 30)  # 3 GiB of zero bytes, sparse
    for name, path, why in (("fifo", fifo, "FIFO"), ("dev_zero", Path("/dev/zero"), "device"),
                            ("huge_file", huge, "MiB"), ("dir", tmp, "folder")):
        out.append(("special", f"plan_file_{name}", [*TRAIN, "--steps", "1", "--plan", str(path)], why, True))
        out.append(("special", f"scenario_{name}", ["simulate", str(path)], why, True))
        out.append(("special", f"network_{name}", ["plan", "--network", str(path), "--out", str(tmp / "px")], why, True))
        out.append(("special", f"network_scenario_{name}", ["plan", str(path), "--out", str(tmp / "px")], why, True))
        out.append(("special", f"report_config_{name}", ["-c", f"from labkit.jsonfile import read_json; "
                                                               f"read_json({str(path)!r}, 'x', 'a file')"], why, True))
    out.append(("special", "data_fifo", [*TRAIN, "--steps", "1", "--data", str(fifo)], "FIFO", True))
    out.append(("special", "data_dev_zero", [*TRAIN, "--steps", "1", "--data", "/dev/zero"], "device", True))

    out.append(("long", "simulate_huge_duration", ["simulate", "--preset", "global-mix", "--duration", "1e9"],
                "duration", True))
    out.append(("long", "simulate_max_duration_events", ["simulate", "--preset", "global-mix", "--duration", "5e7",
                                                          "--out", str(tmp / "sl")], "duration", True))
    out.append(("long", "plan_huge_generations", ["plan", "--preset", "dtfm_world", "--n", "512", "--method", "kl",
                                                  "--generations", "10000", "--out", str(tmp / "pl")],
                "generations", True))
    return out


def classify(proc: subprocess.CompletedProcess | None, needle: str, refuse: bool) -> str:
    """The class of one result (see the module docstring)."""
    if proc is None:
        return "hang"
    err = proc.stderr.strip()
    if proc.returncode < 0 or proc.returncode in (134, 137, 139):
        return "crash"
    if "Traceback" in err:
        return "traceback"
    if proc.returncode == 0:
        return "silently wrong" if refuse else "harmless"
    lines = [ln for ln in err.splitlines() if "error" in ln.lower()]
    if proc.returncode == 2 and len(lines) == 1 and needle.lower() in lines[0].lower():
        return "clear"
    if proc.returncode == 130 and "interrupted" in err:
        return "clear"  # long work that Ctrl-C ends with one line saying what was interrupted
    return "misleading"


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_CAP, MEMORY_CAP))


def run_case(argv: list[str], tmp: Path) -> subprocess.CompletedProcess | None:
    """Run one case; past its time limit it gets a SIGINT (Ctrl-C) and 30 s more: None if it
    still runs (a hang)."""
    cmd = [sys.executable, *(argv if argv[0] == "-c" else ["-m", "labkit.cli.main", *argv])]
    if argv[0] == "-c":
        cmd[-1] = ("import sys\ntry:\n" + "".join(f"    {ln}\n" for ln in argv[1].split("; ")) +
                   "except (ValueError, OSError) as exc:\n    print('error: ' + str(exc), file=sys.stderr); sys.exit(2)\n")
    proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_limit, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S["train" if argv[0] == "train" else "other"])
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None
        if proc.returncode != 130:  # Ctrl-C must end long work as an interrupted one
            return None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="run the cases whose class or name contains this")
    p.add_argument("--verbose", action="store_true", help="print each case's last stderr line")
    p.add_argument("--code", type=Path, default=ROOT, help="the checkout whose labkit is probed")
    p.add_argument("--jobs", type=int, default=2, help="cases run at once")
    args = p.parse_args()
    globals()["ROOT"] = args.code.resolve()
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        todo = [c for c in cases(tmp) if args.only in f"{c[0]} {c[1]}"]
        with ThreadPoolExecutor(args.jobs) as pool:
            results = pool.map(lambda c: run_case(c[2], tmp), todo)
            for (kind, case, _, needle, refuse), proc in zip(todo, results):
                verdict = classify(proc, needle, refuse)
                counts[verdict] += 1
                tail = "" if proc is None else (proc.stderr.strip().splitlines() or [""])[-1][:160]
                print(f"{kind:10} {case:40} {verdict:15}" + (f" | {tail}" if args.verbose else ""), flush=True)
    print("probe " + " ".join(f"{k.replace(' ', '_')}={v}" for k, v in sorted(counts.items()))
          + f" total={sum(counts.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
