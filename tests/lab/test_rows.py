"""Chart rows after a known event sequence are exactly what the charts should show."""

from __future__ import annotations

import json

import pytest
import vl_convert

from labkit import events as ev
from labkit.config import RunConfig
from labkit.executors.registry import SPECS
from labkit.lab.charts import CHARTS, with_data
from labkit.lab.rows import Rows, Windows, hop_shares, rows_of_run


def fwd(t: float, trainer: str, stage: int, peer: str, seconds: float = 0.1) -> ev.Event:
    return ev.hop(t, trainer=trainer, stage=stage, peer=peer, direction="forward", nbytes=1000, seconds=seconds,
                  microbatch=0)


def known_run() -> list[ev.Event]:
    """Two stages; s0p0 twice as fast as s0p1 until s0p1 is killed at t=10; then int8."""
    out = [ev.peer(0.0, peer=p, stage=int(p[1]), state="joined", queue=0) for p in ("s0p0", "s0p1", "s1p0")]
    out.append(ev.run(0.5, state="started"))
    for k in range(10):
        t = 1.0 + k
        out += [fwd(t, "t0", 0, "s0p0"), fwd(t + 0.2, "t0", 0, "s0p1"), fwd(t + 0.3, "t0", 1, "s1p0"),
                fwd(t + 0.5, "t1", 0, "s0p0")]
    out.append(ev.load(5.0, peer="s0p1", stage=0, queue=3))
    out += [ev.router(t, trainer="t0", peers=[{"peer": "s0p0", "stage": 0, "ema": 0.1 + 0.1 / t, "priority": t},
                                               {"peer": "s0p1", "stage": 0, "ema": 0.2 + 0.1 / t, "priority": t}])
            for t in (2.0, 4.0)]
    out.append(ev.peer(10.8, peer="s0p1", stage=0, state="killed", queue=0))
    out.append(ev.peer(11.0, peer="s0p2", stage=0, state="joined", queue=0))
    out.append(ev.setting(11.5, name="codec", value="int8"))
    out.append(fwd(12.0, "t0", 0, "s0p0"))
    out.append(ev.sync(12.5, step=1, stage=0, kind="allreduce", peers=2, nbytes=5_000_000))
    out.append(ev.step(6.0, step=1, loss=3.0, samples=16, tokens=512))
    out.append(ev.step(8.0, step=2, loss=2.5, samples=16, tokens=512))
    out.append(ev.evaluation(8.1, step=2, val_loss=2.6))
    return out


def test_routing_counts_each_trainer_peer_pair_within_the_sliding_window() -> None:
    rows = Rows(windows=Windows(routing_s=5.0)).extend(known_run())
    # the latest event is at t = 12.5: forward hops at t >= 7.5 count
    assert rows.routing() == [
        {"stage": 0, "trainer": "t0", "peer": "s0p0", "microbatches": 4},  # 8.0, 9.0, 10.0, 12.0
        {"stage": 0, "trainer": "t0", "peer": "s0p1", "microbatches": 3},  # 8.2, 9.2, 10.2
        {"stage": 0, "trainer": "t1", "peer": "s0p0", "microbatches": 4},  # 7.5, 8.5, 9.5, 10.5
        {"stage": 1, "trainer": "t0", "peer": "s1p0", "microbatches": 3},  # 8.3, 9.3, 10.3
    ]
    assert rows.shares() == {"s0p0": 8 / 11, "s0p1": 3 / 11, "s1p0": 1.0}


def test_loads_marks_traffic_loss_and_throughput_rows() -> None:
    rows = Rows(tokens_per_microbatch=128).extend(known_run())
    data = rows.datasets()
    assert data["marks"] == [{"t": 10.8, "what": "kill s0p1"}, {"t": 11.0, "what": "join s0p2"},
                             {"t": 11.5, "what": "codec int8"}]  # the first joins (before "started") are not marked
    # the killed s0p1 leaves the loads chart (and its legend); the live peers stay
    assert {r["peer"] for r in data["loads"]} == {"s0p0", "s0p2", "s1p0"}
    assert {"t": 0.0, "peer": "s0p0", "stage": 0, "queue": 0} in data["loads"]
    assert data["traffic"] == [
        {"stage": 0, "kind": "data-parallel", "codec": "fp32", "megabytes": 5.0},
        {"stage": 0, "kind": "pipeline-parallel", "codec": "fp32", "megabytes": 0.03},
        {"stage": 0, "kind": "pipeline-parallel", "codec": "int8", "megabytes": 0.001},
        {"stage": 1, "kind": "pipeline-parallel", "codec": "fp32", "megabytes": 0.01},
    ]
    assert data["loss"] == [{"t": 6.0, "step": 1, "loss": 3.0, "kind": "train"},
                            {"t": 8.0, "step": 2, "loss": 2.5, "kind": "train"},
                            {"t": 8.1, "step": 2, "loss": 2.6, "kind": "validation"}]
    assert data["throughput"] == [{"t": 8.0, "step": 2, "tokens_per_s": 256.0}]
    assert rows.totals()["s0p1"]["microbatches"] == 10


def test_the_timeline_keeps_only_its_last_seconds_and_histories_are_capped() -> None:
    rows = Rows(windows=Windows(timeline_s=2.0, history_rows=3)).extend(known_run())
    # the latest event is at t = 12.5: work that ended at t >= 10.5 shows
    assert [(r["peer"], r["trainer"], r["end"]) for r in rows.datasets()["timeline"]] == [("s0p0", "t1", 10.5),
                                                                                         ("s0p0", "t0", 12.0)]
    many = [ev.load(float(k), peer="s0p0", stage=0, queue=k) for k in range(10)]
    assert [r["queue"] for r in Rows(windows=Windows(history_rows=3)).extend(many).datasets()["loads"]] == [7, 8, 9]


def test_hop_shares_reads_one_time_window() -> None:
    events = known_run()
    assert hop_shares(events, (0.0, 10.8)) == {"s0p0": 2 / 3, "s0p1": 1 / 3, "s1p0": 1.0}
    assert hop_shares(events, (10.8, float("inf"))) == {"s0p0": 1.0}


def turn(t: float, replica: str, submodel: int, phase: str, loaded: bool = True) -> ev.Event:
    """A 0.1 s turn starting at t; a load of 0.05 s just before it unless the copy was resident."""
    load = (t - 0.05, t) if loaded else (None, None)
    return ev.swap(t + 0.1, replica=replica, submodel=submodel, phase=phase, load_start=load[0], load_end=load[1],
                   compute_start=t, compute_end=t + 0.1)


def atom_run(t0: float, replicas: tuple[str, ...] = ("r0",), iterations: int = 3) -> list[ev.Event]:
    """Iterations of three sub-models (one optimizer step): forward 0, 1, then 2's forward and
    backward in one turn, backward 1 (still resident) and 0; the next forward finds 0 resident."""
    out, t = [], t0
    for it in range(iterations):
        for submodel, phase, loaded in ((0, "forward", it == 0), (1, "forward", True), (2, "forward+backward", True),
                                        (1, "backward", False), (0, "backward", True)):
            out += [turn(t, replica, submodel, phase, loaded) for replica in replicas]
            t += 0.1
    return out


def test_swap_turns_keep_each_replicas_last_iterations_and_their_residency() -> None:
    rows = Rows(windows=Windows(swap_iterations=2))
    rows.extend(atom_run(0.0, ("r0", "r1")))
    swaps = rows.dataset("swaps")
    assert [(r["replica"], r["iteration"]) for r in swaps] == [("r0", 1)] * 5 + [("r0", 2)] * 5 + [("r1", 1)] * 5 + [("r1", 2)] * 5
    last = swaps[5:10]  # r0's last iteration, starting at t = 1.0
    assert [(r["submodel"], r["phase"], r["load_start"]) for r in last] == [
        (0, "forward", None), (1, "forward", pytest.approx(1.05)), (2, "forward+backward", pytest.approx(1.15)),
        (1, "backward", None), (0, "backward", pytest.approx(1.35))]
    # a resident copy's turn shows when that copy started loading: backward 1 its forward's load,
    # forward 0 the previous iteration's backward load of sub-model 0
    assert [r["resident_from"] for r in last] == pytest.approx([0.85, 1.05, 1.15, 1.05, 1.35])
    version = rows.versions["swaps"]
    rows.add(turn(1.6, "r0", 0, "forward", loaded=False))
    assert rows.versions["swaps"] > version and [r["iteration"] for r in rows.swaps() if r["replica"] == "r0"] == [2] * 5 + [3]


def test_swap_turns_older_than_the_timeline_expire_with_their_replica() -> None:
    rows = Rows(windows=Windows(timeline_s=2.0)).extend(atom_run(0.0, ("r0", "r1"), iterations=1))
    rows.extend(atom_run(0.5, ("r0",), iterations=5)[5:])  # r1 left; r0 goes on until t = 3.0
    assert {r["replica"] for r in rows.swaps()} == {"r0"} and min(r["compute_end"] for r in rows.swaps()) >= 1.0


def slice_hop(t: float, stage: int, peer: str, kind: str, start: int, end: int) -> ev.Event:
    """A task-pool client's slice [start, end) of microbatch 0 (a recompute goes backward)."""
    return ev.hop(t, trainer="servers", stage=stage, peer=peer, direction="forward" if kind == "forward" else "backward",
                  nbytes=100, seconds=0.1, microbatch=0) | {"kind": kind, "start": start, "end": end}


def pool_stats(t: float, stage: int, pooled: int, lost: int) -> ev.Event:
    return ev.setting(t, name="pool", value={"stage": stage, "forward_samples": 4, "backward_samples": 4,
                                                 "lost_samples": lost, "pooled_samples": pooled, "discarded_samples": 0,
                                                 "pool_depth": 0, "repeated_beyond_lost": 0})


def pool_run() -> list[ev.Event]:
    """A task pool of microbatches of 4 samples: s0c1 is killed holding 3 samples, which s0c0
    recomputes; stage 1's only client is overdue (its pooled work known only at the pass's end)
    and rejoins."""
    out = [ev.peer(0.0, peer=p, stage=int(p[1]), state="joined", queue=0) for p in ("s0c0", "s0c1", "s1c0")]
    out += [ev.run(0.5, state="started"), slice_hop(1.0, 0, "s0c0", "forward", 0, 1),
            slice_hop(1.1, 0, "s0c1", "forward", 1, 4),
            ev.peer(1.2, peer="s0c1", stage=0, state="killed", queue=0) | {"reason": "killed", "pooled_samples": 3},
            slice_hop(1.4, 0, "s0c0", "recompute", 1, 4), pool_stats(1.5, 0, pooled=3, lost=3),
            ev.peer(1.7, peer="s1c0", stage=1, state="killed", queue=0) | {"reason": "overdue"},
            ev.peer(1.8, peer="s1c0", stage=1, state="joined", queue=0) | {"reason": "rejoined after it was overdue"},
            pool_stats(2.0, 1, pooled=2, lost=2)]
    return out


def test_a_task_pools_servers_clients_and_pool_and_its_clients_share_of_the_slices() -> None:
    rows = Rows(charts=SPECS["taskpool"].charts, microbatch=4, servers=lambda stage: 3).extend(pool_run())
    series = {(stage, name): [(r["t"], r["value"]) for r in rows.dataset("pool")
                              if r["stage"] == stage and r["series"] == name] for stage in (0, 1)
              for name in ("servers", "clients", "pool")}
    assert series[0, "clients"] == [(0.0, 1), (0.0, 2), (1.2, 1), (1.5, 1), (1.5, 1)]
    assert series[0, "pool"] == [(0.0, 0), (0.0, 0), (1.2, 3), (1.5, 3), (1.5, 0)]  # the kill's, then the next pass
    assert series[1, "clients"] == [(0.0, 1), (1.7, 0), (1.8, 1), (2.0, 1), (2.0, 1)]
    assert series[1, "pool"] == [(0.0, 0), (1.7, 0), (1.8, 0), (2.0, 2), (2.0, 0)]  # overdue: the servers' count
    assert {v for (_, name), values in series.items() if name == "servers" for _, v in values} == {3}
    ended = [r for r in rows.dataset("pool") if r["what"] == "pass ended" and r["series"] == "pool"]
    assert [(r["stage"], r["lost_samples"], r["repeated_beyond_lost"]) for r in ended] == [(0, 3, 0), (1, 2, 0)]
    # the forward slices as shares of a microbatch (the recompute is backward work)
    assert rows.routing() == [{"stage": 0, "trainer": "servers", "peer": "s0c0", "microbatches": 0.25},
                              {"stage": 0, "trainer": "servers", "peer": "s0c1", "microbatches": 0.75}]
    assert rows.shares() == {"s0c0": 0.25, "s0c1": 0.75}
    assert rows.totals()["s0c1"]["microbatches"] == 0.75
    assert Rows().extend(known_run()).dataset("pool") == []  # a SWARM run's peers are not clients


def test_chart_names_follow_the_executor() -> None:
    assert SPECS["taskpool"].charts == ("pool", "routing", "timeline", "throughput", "loss")
    assert SPECS["atom"].charts == ("swaps", "throughput", "loss")
    assert SPECS["swarm"].charts == ("routing", "loads", "router", "timeline", "throughput", "loss", "traffic")
    assert Rows.for_config(RunConfig(executor="atom")).charts == SPECS["atom"].charts


def test_every_chart_renders_the_rows_offline() -> None:
    data = Rows(tokens_per_microbatch=128, charts=SPECS["taskpool"].charts).extend(
        known_run() + atom_run(13.0, ("r0", "r1")) + pool_run()).datasets()
    for name, make in CHARTS.items():
        assert data[name], name
        svg = vl_convert.vegalite_to_svg(with_data(make().to_dict(), data))
        assert svg.startswith("<svg") and "<path" in svg, name
    svg = vl_convert.vegalite_to_svg(with_data(CHARTS["swaps"]().to_dict(), data))
    for text in ("ATOM swap timeline (Figure 12)", "execution", "device", "r0", "r1", "forward+backward", "loading", "resident"):
        assert f">{text}<" in svg, text
    svg = vl_convert.vegalite_to_svg(with_data(CHARTS["pool"]().to_dict(), data))
    for text in ("Task pool: servers, clients and pooled work", "servers and clients", "samples in the pool", "servers",
                 "clients", "pool"):
        assert f">{text}<" in svg, text


def test_router_views_become_one_row_per_trainer_and_peer() -> None:
    rows = Rows().extend(known_run()).dataset("router")
    # s0p1, killed at 10.8, leaves the chart and its legend
    assert [(r["t"], r["peer"], round(r["ema"], 9)) for r in rows] == [(2.0, "s0p0", 0.15), (4.0, "s0p0", 0.125)]
    assert {r["trainer"] for r in rows} == {"t0"}


def test_a_run_directory_without_events_or_with_a_bad_line_is_refused(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="holds no events.jsonl"):
        rows_of_run(tmp_path)
    (tmp_path / "events.jsonl").write_text(json.dumps(ev.run(0.0, state="started")) + "\nnot json\n"
                                           + json.dumps(ev.run(1.0, state="finished")) + "\n")
    with pytest.raises(ValueError, match=r"events.jsonl:2 is not a JSON event"):
        rows_of_run(tmp_path)
    (tmp_path / "events.jsonl").write_text(json.dumps(ev.run(0.0, state="started")) + '\n{"type": "hop", "t"')
    assert rows_of_run(tmp_path).started  # a last line cut short by a crash is dropped
