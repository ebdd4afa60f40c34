"""`labkit simulate`: run a scenario file or a named preset; write events, summary and report.

    labkit simulate --preset small-swarm --out runs/sim
    labkit simulate scenario.json --mode fluid --out runs/sim
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from tqdm import tqdm

from labkit.config import ConfigError
from labkit.sim import MODES, Scenario
from labkit.sim.events_sim import run_events
from labkit.sim.fluid import run_fluid
from labkit.sim.presets import PRESETS
from labkit.sim.summary import summarize, throughput_series


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `simulate` sub-command."""
    parser = sub.add_parser("simulate", help="simulate SWARM at internet scale in virtual time")
    parser.add_argument("scenario", nargs="?", type=Path, help="scenario JSON file (fields of labkit.sim.Scenario)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a named scenario instead of a file")
    parser.add_argument("--mode", choices=MODES, default="events", help="microbatch events or the fluid model")
    parser.add_argument("--out", type=Path, default=Path("runs/simulate"), help="folder for the outputs")
    parser.add_argument("--duration", type=float, help="override the scenario's simulated seconds")
    parser.add_argument("--seed", type=int, help="override the scenario's seed")
    parser.add_argument("--max-hops", type=int, default=200_000, help="hop events kept (events mode)")
    parser.set_defaults(handler=_run, parser=parser)


def _load(args: argparse.Namespace) -> Scenario:
    if (args.scenario is None) == (args.preset is None):
        args.parser.error("give exactly one of SCENARIO or --preset")
    if args.preset:
        scenario = PRESETS[args.preset]()
    else:
        try:
            data = json.loads(args.scenario.read_text())
        except OSError as err:
            args.parser.error(f"cannot read {args.scenario}: {err.strerror}")
        except json.JSONDecodeError as err:
            args.parser.error(f"{args.scenario} is not JSON: {err.msg} at line {err.lineno}")
        if not isinstance(data, dict):
            args.parser.error(f"{args.scenario} must hold one JSON object")
        scenario = Scenario.from_dict(data)
    changes = {k: v for k, v in (("duration", args.duration), ("seed", args.seed)) if v is not None}
    return dataclasses.replace(scenario, **changes) if changes else scenario


def _run(args: argparse.Namespace) -> int:
    try:
        scenario = _load(args)
        if args.max_hops < 0:
            raise ConfigError("simulate", "max_hops", args.max_hops, "an integer >= 0")
    except (ConfigError, TypeError) as err:
        args.parser.error(str(err).splitlines()[0])
    with tqdm(total=scenario.duration, unit="s", desc=f"{scenario.name} ({args.mode})", leave=False) as bar:
        def progress(t: float) -> None:
            bar.update(t - bar.n)

        if args.mode == "events":
            result = run_events(scenario, max_hops=args.max_hops, progress=progress)
        else:
            result = run_fluid(scenario)
            progress(scenario.duration)
    summary = summarize(result)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "events.jsonl", "w") as f:
        for event in result.events:
            f.write(json.dumps(_finite(event)) + "\n")
    (args.out / "summary.json").write_text(json.dumps(_finite(summary), indent=2))
    from labkit.cli.sim_report import write_report
    write_report(args.out / "report.html", title=f"labkit simulate: {scenario.name}", summary=summary,
                 series=throughput_series(result), events=result.events)
    print(f"simulated {scenario.duration:.0f} s of {scenario.name} ({args.mode}) in {result.wall_seconds:.1f} s: "
          f"{summary['samples_per_s']:.1f} samples/s, {summary['percent_of_optimal']:.1f} % of optimal -> {args.out}")
    return 0


def _finite(value: object) -> object:
    """JSON has no NaN (a simulated step has no loss): write it as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
