"""`labkit simulate`: run a scenario file or a named preset; write events, summary and report.

    labkit simulate --preset small-swarm --out runs/sim
    labkit simulate scenario.json --mode fluid

The outputs go to --out, which must not hold an earlier run's, plan's or simulation's records,
or by default to a new `runs/simulate/<date-time>` each time: nothing earlier is overwritten.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from tqdm import tqdm

from labkit.cli.args import fresh_out_dir, int_in, new_run_dir
from labkit.config import ConfigError
from labkit.sim import MODES, SimScenario
from labkit.sim.events_sim import MAX_HOPS, check_events, run_events
from labkit.sim.fluid import run_fluid
from labkit.sim.presets import SIM_PRESETS
from labkit.sim.summary import summarize, throughput_series


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `simulate` sub-command."""
    parser = sub.add_parser("simulate", help="simulate SWARM at internet scale in virtual time")
    parser.add_argument("scenario", nargs="?", type=Path, help="scenario JSON file (fields of labkit.sim.SimScenario)")
    parser.add_argument("--preset", choices=sorted(SIM_PRESETS), help="a named scenario instead of a file")
    parser.add_argument("--mode", choices=MODES, default="events", help="microbatch events or the fluid model")
    parser.add_argument("--out", type=fresh_out_dir, default=None,
                        help="a new or empty folder for the outputs (default: a new runs/simulate/<date-time>)")
    parser.add_argument("--duration", type=float, help="override the scenario's simulated seconds")
    parser.add_argument("--seed", type=int_in(0, 2**32 - 1), help="override the scenario's seed")
    parser.add_argument("--max-hops", type=int_in(0, MAX_HOPS, "each is an event in memory and a line on disk"),
                        default=200_000, help=f"hop events kept (events mode; default 200000, at most {MAX_HOPS})")
    parser.add_argument("--plan", type=Path, help="simulate a plan.json from `labkit plan` (with --network)")
    parser.add_argument("--network", help="with --plan: the planner preset (sized to the plan's devices) or scenario JSON it was made for")
    parser.add_argument("--model", default="small", help="with --plan: the simulated model (default small)")
    parser.set_defaults(handler=_run, parser=parser)


def _from_plan(args: argparse.Namespace) -> SimScenario:
    """The scenario that runs a planner's plan on the network it was planned for."""
    from labkit.plan.network import NetworkScenario
    from labkit.plan.plan import Plan
    from labkit.plan.presets import NETWORK_PRESETS
    from labkit.sim.from_plan import scenario_from_plan

    if args.network is None:
        args.parser.error("--plan needs --network: the planner preset or scenario JSON the plan was made for")
    plan = Plan.load(args.plan)
    if args.network in NETWORK_PRESETS:
        network = NETWORK_PRESETS[args.network](n=sum(len(s.devices) for s in plan.stages))
    elif Path(args.network).is_file():
        network = NetworkScenario.load(args.network)
    else:
        known = ", ".join(sorted(NETWORK_PRESETS))
        args.parser.error(f"--network {args.network!r} is neither a planner preset ({known}) nor a file")
    return scenario_from_plan(plan, network, model=args.model)


def _load(args: argparse.Namespace) -> SimScenario:
    if sum(x is not None for x in (args.scenario, args.preset, args.plan)) != 1:
        args.parser.error("give exactly one of SCENARIO, --preset or --plan")
    if args.plan:
        scenario = _from_plan(args)
    elif args.preset:
        scenario = SIM_PRESETS[args.preset]()
    else:
        scenario = SimScenario.load(args.scenario)
    changes = {k: v for k, v in (("duration", args.duration), ("seed", args.seed)) if v is not None}
    return dataclasses.replace(scenario, **changes) if changes else scenario


def _run(args: argparse.Namespace) -> int:
    try:
        scenario = _load(args)
        if args.mode == "events":
            check_events(scenario, args.max_hops)
    except (ConfigError, FileNotFoundError, TypeError) as err:
        args.parser.error(str(err).splitlines()[0])
    with tqdm(total=scenario.duration, unit="s", desc=f"{scenario.name} ({args.mode})", leave=False) as bar:
        def progress(t: float) -> None:
            bar.update(t - bar.n)

        try:
            if args.mode == "events":
                result = run_events(scenario, max_hops=args.max_hops, progress=progress)
            else:
                result = run_fluid(scenario)
                progress(scenario.duration)
        except KeyboardInterrupt:
            bar.close()
            print(f"labkit simulate: interrupted at {bar.n:.0f} of {scenario.duration:.0f} simulated seconds of "
                  f"{scenario.name} ({args.mode}); nothing written", file=sys.stderr)
            return 130
    summary = summarize(result)
    out = args.out or new_run_dir(Path("runs/simulate"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        f = open(out / "events.jsonl", "x")  # exclusively: never over records written since the flags were read
    except FileExistsError:
        args.parser.error(f"{str(out)!r} received another run's or simulation's records meanwhile: simulate again "
                          "with a new --out")
    with f:
        for event in result.events:
            f.write(json.dumps(_finite(event)) + "\n")
    (out / "summary.json").write_text(json.dumps(_finite(summary), indent=2))
    from labkit.lab.report import SIM_SERIES, write_report  # altair and vl-convert: 2 s to import, only here

    (out / SIM_SERIES).write_text(json.dumps(_finite(throughput_series(result))))
    report = write_report(out)
    print(f"simulated {scenario.duration:.0f} s of {scenario.name} ({args.mode}) in {result.wall_seconds:.1f} s: "
          f"{summary['samples_per_s']:.1f} samples/s, {summary['percent_of_optimal']:.1f} % of optimal -> {out}")
    print(f"report: {report}")
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
