"""`labkit train`: the main job. With no flags, nano on the stdlib corpus, 2 stages x 2 peers.

Shows a progress bar (step, loss, tokens/s), reports validation loss before and where the run
ended, and leaves a run directory with events.jsonl, summary.json, config.json and checkpoint.pt.
Exits 0 when the run finished, 1 when it failed or diverged, 2 on a bad flag, and 130 (SIGINT: Ctrl-C)
or 143 (SIGTERM) when a signal stopped it: at the next step boundary, with its checkpoint and summary.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.cli.args import int_in, new_run_dir, out_dir
from labkit.cli.interrupts import Interrupts
from labkit.cli.executor_flags import add_executor_flags, executor_from_args
from labkit.config import (INNER_STATES, MODEL_SIZES, OPTIMIZERS, POSITIONS, SYNC_MODES, ConfigError, DataConfig,
                           ModelConfig, RunConfig, SyncConfig)

if TYPE_CHECKING:
    from labkit.runtime.handle import RunHandle

MAX_PEERS_PER_STAGE = 256  # with --plan: each peer is a thread of this process


def _split(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 3,1") from None


def _peers(text: str) -> int | tuple[int, ...]:
    parts = _split(text)
    return parts[0] if len(parts) == 1 else parts


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `train` sub-command and its flags."""
    defaults = RunConfig()
    p = sub.add_parser("train", help="train a GPT with SWARM parallelism or another executor (--executor)",
                       description="Train a GPT with SWARM parallelism. With no flags: the nano model on the Python "
                                   "standard library's source, 2 stages x 2 peers, about a minute on 2 CPU cores.")
    p.add_argument("--size", choices=sorted(MODEL_SIZES), default="nano", help="model size (default nano)")
    p.add_argument("--seq-len", type=int, default=ModelConfig().seq_len, help="context length in bytes")
    p.add_argument("--positions", choices=POSITIONS, default="learned", help="position encoding")
    p.add_argument("--share-layers", action="store_true", help="ALBERT-style: blocks of a stage share parameters")
    p.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], default="float32", help="parameter dtype")
    p.add_argument("--data", default=None, metavar="PATH", help="a text file or folder (default: the stdlib's .py files)")
    p.add_argument("--stages", type=int, default=defaults.stages, help="pipeline stages")
    p.add_argument("--peers", type=_peers, default=defaults.peers, help="peers per stage: N, or N1,N2,... one per stage")
    p.add_argument("--layer-split", type=_split, default=None, metavar="N1,N2,...",
                   help="blocks per stage, e.g. 3,1 (default: as even as the stages allow)")
    p.add_argument("--trainers", type=int, default=defaults.trainers, help="trainers (threads; worker processes with --backend dask)")
    p.add_argument("--inflight", type=int, default=defaults.inflight, help="microbatches each trainer keeps in flight")
    p.add_argument("--steps", type=int, default=defaults.steps, help="optimizer steps")
    p.add_argument("--global-batch", type=int, default=defaults.global_batch, help="samples per optimizer step")
    p.add_argument("--microbatch", type=int, default=defaults.microbatch, help="samples per routed microbatch")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=defaults.optimizer, help="optimizer")
    p.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps, help="linear warm-up steps")
    sync = SyncConfig()
    p.add_argument("--sync", choices=SYNC_MODES, default=sync.mode, help="within a stage: SWARM all-reduce or DiLoCo")
    p.add_argument("--inner-steps", type=int, default=sync.inner_steps, help="DiLoCo: local steps H between outer steps")
    p.add_argument("--outer-lr", type=float, default=sync.outer_lr, help="DiLoCo: outer Nesterov SGD learning rate")
    p.add_argument("--outer-momentum", type=float, default=sync.outer_momentum, help="DiLoCo: outer momentum")
    p.add_argument("--inner-state", choices=INNER_STATES, default=sync.inner_state, help="DiLoCo: inner optimizer state across rounds")
    p.add_argument("--rebalance-period", type=float, default=defaults.rebalance_period,
                   help="seconds between Algorithm 2 rebalancing rounds (0: off)")
    p.add_argument("--delayed-updates", action="store_true", help="delayed parameter updates (one step stale)")
    p.add_argument("--eval-every", type=int, default=defaults.eval_every, help="steps between validation losses")
    p.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every,
                   help="steps between periodic checkpoints, what --resume RUN_DIR goes on from after a crash "
                        "(0: start and stop only)")
    p.add_argument("--activation-checkpointing", action="store_true", help="peers recompute activations in backward")
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed of parameters and data order")
    add_executor_flags(p)
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch threads (0: torch's default)")
    p.add_argument("--links", default=None, metavar="SCENARIO_JSON",
                   help="emulate a `labkit simulate` scenario's internet links between trainers and peers")
    p.add_argument("--world", default=None, metavar="SCENARIO_JSON",
                   help="run the world a scenario file describes: its model, stages, peers on virtual devices, links, "
                        "trainers and churn (the other flags set the rest)")
    p.add_argument("--plan", type=Path, default=None, metavar="PLAN_JSON",
                   help="follow a plan from `labkit plan`: its stages, devices as peers (at most --max-peers each) and layer split")
    p.add_argument("--max-peers", type=int_in(1, MAX_PEERS_PER_STAGE, "each is a thread here"), default=4,
                   help=f"with --plan: peers per stage at most (each is a thread here; 1 to {MAX_PEERS_PER_STAGE})")
    p.add_argument("--backend", choices=["inprocess", "dask"], default=None,
                   help="inprocess: threads of this process; dask: every peer and trainer a Dask worker process "
                        "(default: dask with --scheduler, else inprocess)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --backend dask: a running `dask scheduler`, e.g. tcp://10.0.0.5:8786 (default: a local cluster)")
    p.add_argument("--run-dir", type=out_dir, default=None, help="output folder (default runs/<date-time>)")
    p.add_argument("--resume", type=Path, default=None, metavar="CHECKPOINT",
                   help="continue from a checkpoint.pt, or from a run directory (its newest checkpoint: the one "
                        "written when the run ended, or the last its peers wrote if the run's process died)")
    p.add_argument("--no-progress", action="store_true", help="print one line per evaluation instead of a bar")
    p.add_argument("--no-report", action="store_true", help="skip writing report.html (charts of the run) at the end")
    p.set_defaults(handler=run_train)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig the flags describe (raises ConfigError on a bad value)."""
    return RunConfig(
        model=ModelConfig(size=args.size, seq_len=args.seq_len, positions=args.positions,
                          share_layers=args.share_layers, dtype=args.dtype),
        data=DataConfig(path=args.data), stages=args.stages, peers=args.peers, layer_split=args.layer_split,
        trainers=args.trainers, inflight=args.inflight, global_batch=args.global_batch, microbatch=args.microbatch, steps=args.steps,
        optimizer=args.optimizer, lr=args.lr, warmup_steps=args.warmup_steps, eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every, activation_checkpointing=args.activation_checkpointing, delayed_updates=args.delayed_updates,
        seed=args.seed, threads=args.threads, rebalance_period=args.rebalance_period,
        sync=SyncConfig(mode=args.sync, inner_steps=args.inner_steps, outer_lr=args.outer_lr,
                        outer_momentum=args.outer_momentum, inner_state=args.inner_state),
        executor=executor_from_args(args), links=args.links,
    )


def _launch(args: argparse.Namespace, cfg: RunConfig) -> tuple[RunHandle, Path]:
    """Launch the run into --run-dir, or into a new `runs/<date-time>` (removed again if the launch fails)."""
    import labkit

    run_dir = args.run_dir or new_run_dir(Path("runs"))
    try:
        run = labkit.launch(cfg, backend=args.backend, scheduler=args.scheduler, run_dir=run_dir, resume=args.resume)
    except Exception:
        if args.run_dir is None:
            with suppress(OSError):
                run_dir.rmdir()  # made for this run: removed unless the launch wrote into it
        raise
    return run, run_dir


def check_data(cfg: RunConfig) -> None:
    """Read the corpus a --data run asks for now, so a missing or too small one is a bad flag, not a failed run."""
    from labkit.data import load_corpus

    corpus = load_corpus(cfg.data)
    window = cfg.model.seq_len + 2
    if min(corpus.train.size, corpus.val.size) < window:
        raise ConfigError("train", "data", cfg.data.path, f"a corpus whose train ({corpus.train.size:,} bytes) and "
                                                          f"validation ({corpus.val.size:,}) parts each hold one "
                                                          f"window of --seq-len + 2 = {window} bytes")


def run_train(args: argparse.Namespace) -> int:
    """Launch the run, draw its progress from the event stream, print the summary."""
    try:
        cfg = config_from_args(args)
        if args.plan is not None and args.world is not None:
            raise ValueError("--plan and --world are not allowed together: each sets the run's stages and peers")
        if args.plan is not None:
            from labkit.plan.plan import Plan

            cfg = Plan.load(args.plan).run_config(cfg, max_peers_per_stage=args.max_peers)
        if args.world is not None:
            from labkit.runtime.world import world_config

            cfg = world_config(args.world, cfg)
        if args.data is not None:
            check_data(cfg)
    except (ValueError, FileNotFoundError) as exc:
        print(f"labkit train: error: {exc}", file=sys.stderr)
        return 2
    with Interrupts() as interrupts:
        try:
            run, run_dir = _launch(args, cfg)
        except (ValueError, OSError) as exc:
            print(f"labkit train: error: {exc}", file=sys.stderr)
            return 2
        return _follow(args, cfg, run, run_dir, interrupts)


def _follow(args: argparse.Namespace, cfg: RunConfig, run: RunHandle, run_dir: Path, interrupts: Interrupts) -> int:
    """Draw the run's progress from its event stream until it ends (stopping it on a signal),
    then print and write its summary and report; the exit code."""
    from tqdm import tqdm

    shape = cfg.spec.shape(cfg) + (f", split {list(cfg.layer_split)}" if cfg.spec.staged else "")
    print(f"labkit: {cfg.model.size} model ({cfg.model.num_params():,} parameters), {shape}, {cfg.steps} steps -> {run_dir}")
    events = run.events.subscribe()
    dashboard = run.dashboard()
    if dashboard:
        print(f"labkit: Dask dashboard: {dashboard}")
    bar = tqdm(total=cfg.steps, unit="step", disable=args.no_progress, dynamic_ncols=True)
    tokens, t_first = 0, None
    stopping = False
    while not (run.done and events.empty()):
        if interrupts.received and not stopping:
            stopping = True
            run.stop()
        try:
            event = events.get(timeout=0.2)
        except queue.Empty:
            continue
        if event["type"] == "step":
            if t_first is None:
                t_first = event["t"]
                bar.n = event["step"] - 1
            else:
                tokens += event["tokens"]
            rate = tokens / (event["t"] - t_first) if event["t"] > t_first else 0.0
            bar.set_postfix(loss=f"{event['loss']:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
            bar.update(event["step"] - bar.n)
        elif event["type"] == "eval":
            tqdm.write(f"step {event['step']:>5}  validation loss {event['val_loss']:.4f} nats/byte")
        elif event["type"] == "setting" and event["name"] == "atom_partition":
            v = event["value"]
            tqdm.write(f"atom: sub-models of {v['sizes']} layers in a budget of {v['budget_bytes'] / 1e6:.2f} MB "
                       f"(the whole model's parameters and gradients: {v['model_bytes'] / 1e6:.2f} MB)")
        elif event["type"] == "run" and event["state"] in ("paused", "resumed", "failed"):
            tqdm.write(f"run {event['state']}: {event['reason']}")
    summary = run.wait()
    bar.close()
    print(json.dumps({k: summary.get(k) for k in ("status", "steps", "val_loss_before", "val_loss_after",
                                                  "tokens_per_second", "seconds", "pipeline_bytes_total",
                                                  "dp_bytes_total")}, indent=None))
    if not args.no_report:
        from labkit.lab.report import write_report  # altair and vl-convert: 2 s to import, only here

        print(f"report: {write_report(run_dir)}")
    code = _report(summary, run_dir)
    return interrupts.exit_code if code == 0 and interrupts.received else code


def _report(summary: dict[str, Any], run_dir: Path) -> int:
    """Say how the run ended; the exit code: 0 finished or stopped, 1 failed or diverged."""
    if summary.get("status") == "failed":
        print(f"labkit train: error: {summary.get('error')}", file=sys.stderr)
        return 1
    if summary.get("status") == "diverged":
        print(f"labkit train: error: the run diverged: {summary.get('reason')}, saved in {summary.get('checkpoint')}",
              file=sys.stderr)
        return 1
    print(f"{_validation(summary)}; run directory: {run_dir}, checkpoint: {summary.get('checkpoint')}")
    return 0


def _validation(summary: dict[str, Any]) -> str:
    """The validation losses the run measured: before, and where it ended (finished or stopped)."""
    before, after = summary.get("val_loss_before"), summary.get("val_loss_after")
    where = f"at step {summary.get('steps')} ({summary.get('status')})"
    if before is None:
        return f"validation loss not measured {where}"
    if after is None:
        return f"validation loss {before:.3f} nats/byte before, not measured {where}"
    return f"validation loss {before:.3f} -> {after:.3f} nats/byte {where}"
