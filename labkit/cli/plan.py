"""`labkit plan`: plan a scenario with DT-FM, Kernighan-Lin, random assignment or the clustering planner.

    labkit plan --preset dtfm_world --method dtfm --seed 0 --out runs/my-plan
    labkit plan my_scenario.json --method cluster
    labkit plan --network cluster.json --dp-message-gb 0.9 --pp-message-gb 0.5

Prints the plan and its cost parts (a progress bar while the GA searches), and writes
`plan.json` and a picture into --out (a folder holding an earlier plan's, run's or simulation's
records is refused), by default a new `runs/plan/<date-time>` each time: delay and bandwidth
heatmaps with devices ordered by their stage,
plus the pipeline drawn stage by stage (PNG through vl-convert when installed, else HTML).
`--network` reads a measured cluster as matrices (`labkit.plan.matrix_file`). The last line is
`plan cost=<s> dp=<s> pp=<s> cpu_seconds=<s>`.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from pathlib import Path

from labkit.cli.args import fresh_out_dir, int_in, new_run_dir
from labkit.config import ConfigError
from labkit.plan.cluster import plan_cluster
from labkit.plan.dtfm import DEFAULT_GENERATIONS
from labkit.plan.dtfm import METHODS as DTFM_METHODS
from labkit.plan.dtfm import plan_dtfm
from labkit.plan.matrix_file import MatrixNetwork, load_network
from labkit.plan.network import MAX_DEVICES, NetworkScenario
from labkit.plan.plan import Plan
from labkit.plan.presets import NETWORK_PRESETS, preset
from labkit.plan.workload import Workload

METHODS = (*DTFM_METHODS, "cluster")
MAX_GENERATIONS = 10_000  # each GA iteration is kept in the plan's history; 60 is the paper's
MAX_LAYERS = 10_000  # GPT3-XL has 24; a deeper stack only rescales the same costs
MAX_BATCH = 2**30  # sequences per iteration; the costs stay exact floats well beyond any real batch


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `plan` sub-command."""
    p = sub.add_parser("plan", help="plan stages, pipeline order and matching over a heterogeneous network")
    p.add_argument("scenario", nargs="?", help="scenario JSON file (or use --preset)")
    p.add_argument("--preset", choices=sorted(NETWORK_PRESETS), help="a named scenario instead of a file")
    p.add_argument("--network", help="a JSON file of delay_ms and bandwidth_gbps matrices (optional stages, "
                                     "dp_message_gb, pp_message_gb) instead of a scenario")
    p.add_argument("--dp-message-gb", type=_gb, help="c_DP in GB: one stage's gradients (default: the file's, "
                                                      "else what the model implies)")
    p.add_argument("--pp-message-gb", type=_gb, help="c_PP in GB: one macro-batch's activations between stages "
                                                      "(default: the file's, else what the model implies)")
    p.add_argument("--n", type=int_in(1, MAX_DEVICES, "what the planners handle on a laptop"),
                   help=f"devices for a preset (default: the preset's). At most {MAX_DEVICES}, here and in a "
                        "scenario file: what the planners handle on a laptop (kl, the slowest, ~15 min at the limit)")
    p.add_argument("--method", choices=METHODS, default="dtfm",
                   help="planner (default dtfm: labkit's search; dtfm-paper: the GA with the paper's local search)")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--stages", type=int_in(1, MAX_DEVICES, "at most one stage per device"),
                   help="D_PP for dtfm/kl/random (default 8); a forced level for cluster")
    p.add_argument("--generations", type=int_in(1, MAX_GENERATIONS, "each is kept in the plan's history"),
                   help=f"GA iterations (default 4 for dtfm, 60 for dtfm-paper and kl; at most {MAX_GENERATIONS})")
    p.add_argument("--batch", type=int_in(1, MAX_BATCH), default=1024,
                   help="sequences per iteration for dtfm/kl/random (at most 2^30)")
    p.add_argument("--layers", type=int_in(1, MAX_LAYERS), default=24,
                   help=f"GPT3-XL depth for dtfm/kl/random (at most {MAX_LAYERS})")
    p.add_argument("--out", type=fresh_out_dir, default=None,
                   help="a new or empty folder for plan.json and the picture (default: a new runs/plan/<date-time>)")
    p.set_defaults(handler=run)


def _gb(text: str) -> float:
    """An argparse type: a finite message size in GB > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{value} is not allowed: a finite number of GB > 0")
    return value


def _scenario(args: argparse.Namespace) -> tuple[NetworkScenario, MatrixNetwork | None]:
    """The scenario to plan, and the matrix file it came from (None for a preset or scenario file)."""
    if sum(x is not None for x in (args.scenario, args.preset, args.network)) != 1:
        raise ConfigError("plan", "scenario", args.scenario, "exactly one of SCENARIO.json, --preset NAME or --network FILE")
    if args.n is not None and args.preset is None:
        raise ConfigError("plan", "n", args.n, "only with --preset")
    if args.preset:
        return preset(args.preset, **({} if args.n is None else {"n": args.n})), None
    path = args.network or args.scenario
    if args.network:
        net = load_network(path)
        return net.scenario, net
    scenario = NetworkScenario.load(path)
    if scenario.n > MAX_DEVICES:
        raise ConfigError("plan", "scenario", path, f"at most {MAX_DEVICES} devices (it has {scenario.n}): "
                                                    "the most the planners handle on a laptop")
    return scenario, None


def _workload(args: argparse.Namespace, net: MatrixNetwork | None) -> Workload:
    """GPT3-XL at --layers / --batch, with c_DP / c_PP from the flags, else from the matrix file."""
    dp = args.dp_message_gb or (net.dp_message_gb if net else None)
    pp = args.pp_message_gb or (net.pp_message_gb if net else None)
    return Workload(d_model=2048, n_layer=args.layers, seq_len=2048, batch=args.batch,
                    c_dp_given=None if dp is None else dp * 1e9, c_pp_given=None if pp is None else pp * 1e9)


def _plan(args: argparse.Namespace, scenario: NetworkScenario, net: MatrixNetwork | None) -> Plan:
    if args.method == "cluster":
        if args.dp_message_gb or args.pp_message_gb:
            raise ConfigError("plan", "method", "cluster", f"one of {list(DTFM_METHODS)} with message sizes "
                                                           "(the clustering planner prices minibatches itself)")
        return plan_cluster(scenario, stages=args.stages, seed=args.seed)
    workload = _workload(args, net)
    stages = args.stages or (net.stages if net and net.stages else 8)
    scenario.check_stages(stages)
    if args.method == "random":
        return plan_dtfm(scenario, stages, workload, method="random", seed=args.seed)
    from tqdm import tqdm

    generations = args.generations or DEFAULT_GENERATIONS[args.method]
    if args.method == "dtfm":
        print("dtfm: improving the structured starting plans by tabu search before the GA's first iteration "
              "(the slowest part)", file=sys.stderr)
    with tqdm(total=generations, desc=f"{args.method} GA", unit="it", file=sys.stderr) as bar:
        def progress(it: int, best: float) -> None:
            bar.update(1)
            bar.set_postfix(best=f"{best:.3f}s")
        return plan_dtfm(scenario, stages, workload, method=args.method, seed=args.seed,
                         generations=generations, progress=progress)


def picture(scenario: NetworkScenario, plan: Plan):  # -> altair.Chart
    """Delay and bandwidth heatmaps (devices ordered by stage) beside the pipeline: one column per
    stage in pipeline order, a line per link (sender -> receiver)."""
    import altair as alt

    order = [d for s in plan.stages for d in s.devices] + [d for d in scenario.names()
                                                           if all(d not in s.devices for s in plan.stages)]
    idx = {n: i for i, n in enumerate(scenario.names())}
    stage_of = {d: k for k, s in enumerate(plan.stages) for d in s.devices}
    cells = alt.Data(values=[{"from": a, "to": b, "delay_ms": 1e3 * scenario.delay[idx[a], idx[b]],
                           "bandwidth_gbps": 8e-9 * scenario.bandwidth[idx[a], idx[b]]}
                          for a in order for b in order if a != b])
    enc = {"x": alt.X("to:N", sort=order, axis=alt.Axis(labels=len(order) <= 32)),
           "y": alt.Y("from:N", sort=order, axis=alt.Axis(labels=len(order) <= 32))}
    heat = [alt.Chart(cells, title=title).mark_rect().encode(
        color=alt.Color(f"{col}:Q", scale=alt.Scale(scheme=scheme, type="log")), tooltip=["from:N", "to:N", f"{col}:Q"], **enc
    ).properties(width=300, height=300) for col, title, scheme in
        (("delay_ms", "delay (ms, log), by stage", "oranges"),
         ("bandwidth_gbps", "bandwidth (Gbit/s, log), by stage", "blues"))]
    region = {d.name: d.region for d in scenario.devices}
    rows = [{"device": d, "stage": k, "slot": i, "region": region[d], "role": r}
            for k, s in enumerate(plan.stages) for i, (d, r) in enumerate(zip(s.devices, s.roles))]
    slot = {row["device"]: row["slot"] for row in rows}
    nodes = alt.Data(values=rows)
    edges = alt.Data(values=[{"link": f"{a}->{b}", "stage": stage_of[end], "slot": slot[end], "share": share}
                          for k, link in enumerate(plan.links) for a, b, share in link for end in (a, b)])
    pipe = alt.layer(
        alt.Chart(edges).mark_line(color="gray").encode(x="stage:O", y="slot:O", detail="link:N",
                                                        strokeWidth=alt.StrokeWidth("share:Q", legend=None)),
        alt.Chart(nodes).mark_point(filled=True, size=120).encode(x=alt.X("stage:O", title="stage (pipeline order)"),
                                                      y=alt.Y("slot:O", title="device slot"),
                                                      color="region:N", shape="role:N",
                                                      tooltip=["device:N", "region:N", "role:N"]),
    ).properties(width=300, height=300, title=f"{plan.method}: pipeline, time {plan.time:.2f}s")
    return alt.hconcat(*heat, pipe).resolve_scale(color="independent")


def save_chart(chart, stem: Path, fallback: str = ".html") -> Path:
    """Save as `stem`.png through vl-convert when it is installed, else with the `fallback` suffix
    (".html": a self-contained page; ".vl.json": the Vega-Lite spec)."""
    path = stem.with_suffix(".png" if importlib.util.find_spec("vl_convert") else fallback)
    chart.save(str(path))
    return path


def run(args: argparse.Namespace) -> int:
    """Handler: plan, print, write plan.json and the picture; a bad value is one line on stderr."""
    try:
        scenario, net = _scenario(args)
        cpu = time.process_time()
        plan = _plan(args, scenario, net)
        cpu = time.process_time() - cpu
    except (ConfigError, OSError) as err:
        print(f"labkit plan: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"labkit plan: interrupted while planning with {args.method}; nothing written", file=sys.stderr)
        return 130
    print(plan.describe())
    out = args.out or new_run_dir(Path("runs/plan"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        with open(out / "plan.json", "x") as f:  # exclusively: never over a plan written since the flags were read
            f.write(plan.to_json())
    except FileExistsError:
        print(f"labkit plan: error: {str(out / 'plan.json')!r} was written meanwhile: plan again with a new --out",
              file=sys.stderr)
        return 2
    import altair as alt

    alt.data_transformers.disable_max_rows()
    path = save_chart(picture(scenario, plan), out / "plan")
    print(f"wrote {out / 'plan.json'} and {path}")
    print(f"plan cost={plan.time:.6g} dp={plan.parts['dp']:.6g} pp={plan.parts['pp']:.6g} cpu_seconds={cpu:.3f}")
    return 0
