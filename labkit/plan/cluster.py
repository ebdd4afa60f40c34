"""The task pool paper's clustering planner (§3.3): parameter-server stages from reliable devices, clients from
unreliable ones.

Steps, as the paper lists them:
1. graph of reliable devices, edge w_ij = α_ij + α_ji + t/β_ij + t/β_ji (t = minibatch activations);
2. divisive hierarchical clustering (DIANA: split the cluster of largest diameter, seeding a
   splinter group with its most distant member); at each level p order the clusters (step 3) and
   price the pipeline with Eq. 2, approximating DT_k by Eq. 3, B|H| / (d·p·ΣC_s); stop at the first
   level whose time is higher than the previous one and keep the previous level;
3. order the stage groups by an open-loop TSP on the coarsened graph, solved by simulated annealing;
4. frontal (FS) or backward (BS) server: whichever neighbouring stage is closer on average, each
   side keeping at least one device (the slowest device is moved when one side is empty);
5. each unreliable device joins the group with the smallest mean α + t/β to it;
6. layers per stage proportional to the stage's total compute (largest remainder, at least 1).

>>> from labkit.plan.presets import preset
>>> plan = plan_cluster(preset("ps_realworld"), max_stages=3)
>>> plan.meta["chosen"], plan.layer_split
(3, (22, 22, 16))
"""

from __future__ import annotations

import math

import numpy as np

from labkit.config import ConfigError
from labkit.plan.network import NetworkScenario
from labkit.plan.plan import Plan, PlanStage
from labkit.plan.workload import Workload
from labkit.taskpool.segments import segments


def llama_33b(bytes_per_value: int = 2) -> Workload:
    """The task pool paper's larger model, approximated as a GPT block stack: d=6656, 60 layers;
    batch 512, minibatch 4."""
    return Workload(d_model=6656, n_layer=60, seq_len=2048, batch=512, microbatch=4, bytes_per_value=bytes_per_value)


def hop_seconds(scenario: NetworkScenario, t: float) -> np.ndarray:
    """(N, N) one-way cost α_ij + t/β_ij of moving t bytes from i to j (0 on the diagonal)."""
    with np.errstate(divide="ignore"):
        cost = scenario.delay + t / scenario.bandwidth
    np.fill_diagonal(cost, 0.0)
    return cost


def diana_split(members: list[int], w: np.ndarray) -> tuple[list[int], list[int]]:
    """Split one cluster in two: start the splinter with the member farthest on average, then keep
    moving whoever is closer on average to the splinter than to the rest."""
    rest = list(members)
    avg = [np.mean([w[a, b] for b in rest if b != a]) for a in rest]
    splinter = [rest.pop(int(np.argmax(avg)))]
    while len(rest) > 1:
        diff = [np.mean([w[a, b] for b in rest if b != a]) - np.mean([w[a, b] for b in splinter]) for a in rest]
        best = int(np.argmax(diff))
        if diff[best] <= 0:
            break
        splinter.append(rest.pop(best))
    return sorted(rest), sorted(splinter)


def anneal_open_tsp(c: np.ndarray, rng: np.random.Generator, steps: int = 3000) -> list[int]:
    """Open-loop TSP by simulated annealing: segment-reversal moves, geometric cooling from the
    mean edge cost, Metropolis acceptance; returns the best order seen."""
    k = c.shape[0]
    order = list(rng.permutation(k))
    if k < 3:
        return order

    def length(o: list[int]) -> float:
        return sum(c[o[i], o[i + 1]] for i in range(k - 1))

    cur = best = length(order)
    best_order = order[:]
    temp = float(np.mean(c)) or 1.0
    cool = (1e-4) ** (1 / steps)
    for _ in range(steps):
        i, j = sorted(rng.choice(k, 2, replace=False))
        trial = order[:i] + order[i:j + 1][::-1] + order[j + 1:]
        val = length(trial)
        if val <= cur or rng.random() < math.exp((cur - val) / temp):
            order, cur = trial, val
            if cur < best:
                best, best_order = cur, order[:]
        temp *= cool
    return best_order


def _mean_hop(hop: np.ndarray, a: list[int], b: list[int]) -> float:
    return float(hop[np.ix_(a, b)].mean())


def pipeline_time(hop: np.ndarray, ordered: list[list[int]], d: int, dt: list[float]) -> tuple[float, int]:
    """Eq. 2: PT = d · max_k (forward hop in + backward hop in + DT_k); returns PT and the argmax k."""
    terms = []
    for k, group in enumerate(ordered):
        f = _mean_hop(hop, ordered[k - 1], group) if k > 0 else 0.0
        b = _mean_hop(hop, ordered[k + 1], group) if k + 1 < len(ordered) else 0.0
        terms.append(f + b + dt[k])
    k = int(np.argmax(terms))
    return d * terms[k], k


def cluster_levels(scenario: NetworkScenario, workload: Workload, max_stages: int, seed: int = 0) -> list[dict]:
    """Every level of the divisive hierarchy up to `max_stages` clusters: ordered groups (device
    indices) and the Eq. 2/3 pipeline time the planner compares."""
    reliable = [i for i, dev in enumerate(scenario.devices) if dev.reliable]
    if not reliable:
        raise ConfigError("plan_cluster", "devices", "no reliable device", "at least one reliable device (a server)")
    rng = np.random.default_rng(seed)
    hop = hop_seconds(scenario, workload.minibatch_bytes())
    w = hop + hop.T
    total_c = sum(scenario.devices[i].flops for i in reliable)
    d = workload.minibatches()
    clusters, levels = [reliable], []
    while True:
        p = len(clusters)
        coarse = np.array([[_mean_hop(w, a, b) if a is not b else 0.0 for b in clusters] for a in clusters])
        ordered = [clusters[i] for i in anneal_open_tsp(coarse, rng)]
        dt = workload.batch_flops() / (d * p * total_c)  # Eq. 3
        pt, _ = pipeline_time(hop, ordered, d, [dt] * p)
        levels.append({"stages": p, "groups": ordered, "time": pt})
        splittable = [c for c in clusters if len(c) > 1]
        if p >= max_stages or not splittable:
            return levels
        widest = max(splittable, key=lambda c: max(w[a, b] for a in c for b in c))
        clusters = [c for c in clusters if c is not widest] + [g for g in diana_split(widest, w) if g]


def choose_level(levels: list[dict]) -> int:
    """Index of the level kept: the one before the first level whose time went up."""
    for i in range(1, len(levels)):
        if levels[i]["time"] > levels[i - 1]["time"]:
            return i - 1
    return len(levels) - 1


def _server_roles(scenario: NetworkScenario, hop: np.ndarray, ordered: list[list[int]]) -> list[list[str]]:
    """FS if the previous stage is closer on average than the next one, else BS; each side >= 1."""
    roles = []
    for k, group in enumerate(ordered):
        prev = [_mean_hop(hop, ordered[k - 1], [x]) if k > 0 else 0.0 for x in group]
        nxt = [_mean_hop(hop, [x], ordered[k + 1]) if k + 1 < len(ordered) else 0.0 for x in group]
        r = ["frontal" if p <= n else "backward" for p, n in zip(prev, nxt)]
        if len(group) > 1:
            for side, other in (("frontal", "backward"), ("backward", "frontal")):
                if side not in r:  # move the slowest device of the other side
                    pick = min((i for i in range(len(r)) if r[i] == other), key=lambda i: scenario.devices[group[i]].flops)
                    r[pick] = side
        roles.append(r)
    return roles


def layer_split(compute: list[float], n_layer: int) -> tuple[int, ...]:
    """Layers proportional to compute, largest remainder, at least one per stage."""
    k = len(compute)
    if k > n_layer:
        raise ConfigError("plan_cluster", "stages", k, f"at most the model's {n_layer} layers")
    share = np.array(compute) / sum(compute) * (n_layer - k)
    layers = np.floor(share).astype(int) + 1
    for i in np.argsort(-(share - np.floor(share)), kind="stable")[: n_layer - layers.sum()]:
        layers[i] += 1
    return tuple(int(x) for x in layers)


def even_links(senders: tuple[str, ...], receivers: tuple[str, ...]) -> tuple[tuple[str, str, float], ...]:
    """The task pool paper's even segmentation: sender i holds [i/S, (i+1)/S) of the activations, receiver j
    takes [j/R, (j+1)/R); each pair carries their overlap (2 BS -> 3 FS: 1/3, 1/6, 1/6, 1/3)."""
    n = len(senders) * len(receivers)  # every boundary of both even splits falls on a whole index
    return tuple((a, b, (end - start) / n) for a, b, start, end in segments(n, senders, receivers))


def plan_cluster(scenario: NetworkScenario, workload: Workload | None = None, *, max_stages: int = 16,
                 stages: int | None = None, seed: int = 0) -> Plan:
    """Plan with the task pool paper's clustering planner; meta holds every level tried and its time.

    `stages` forces a level of the hierarchy instead of the stopping rule (to compare levels).
    `time` re-prices the final plan with Eq. 1-2 (actual layer split, client hops), so it can
    differ from the level's search-time estimate (Eq. 2 with Eq. 3), kept in meta["levels"].
    """
    workload = workload or llama_33b(int(scenario.extra.get("bytes_per_value", 2)))
    levels = cluster_levels(scenario, workload, min(max(max_stages, stages or 1), workload.n_layer), seed)
    chosen = choose_level(levels)
    if stages is not None:
        if stages not in [lv["stages"] for lv in levels]:
            raise ConfigError("plan_cluster", "stages", stages,
                              f"a level the hierarchy reaches: 1..{levels[-1]['stages']}")
        chosen = stages - 1
    ordered = [list(g) for g in levels[chosen]["groups"]]
    t, d = workload.minibatch_bytes(), workload.minibatches()
    hop = hop_seconds(scenario, t)
    roles = _server_roles(scenario, hop, ordered)
    clients: list[list[int]] = [[] for _ in ordered]
    for u, dev in enumerate(scenario.devices):  # 5. unreliable devices join the closest group
        if not dev.reliable:
            clients[int(np.argmin([_mean_hop(hop, [u], g) for g in ordered]))].append(u)
    flops = [sum(scenario.devices[i].flops for i in g + c) for g, c in zip(ordered, clients)]
    layers = layer_split(flops, workload.n_layer)
    dt = []  # Eq. 1 with the final allocation: compute shared by speed + client hops via FS and BS
    for k, (g, c) in enumerate(zip(ordered, clients)):
        compute = workload.batch_flops(layers[k]) / d / flops[k]
        fs = [x for x, r in zip(g, roles[k]) if r == "frontal"] or g
        bs = [x for x, r in zip(g, roles[k]) if r == "backward"] or g
        share = [scenario.devices[u].flops / flops[k] * t for u in c]
        a, bw = scenario.delay, scenario.bandwidth
        comm = [min(a[f, u] + s / bw[f, u] for f in fs) + min(a[u, b] + s / bw[u, b] for b in bs)
                for u, s in zip(c, share)]
        dt.append(compute + max(comm, default=0.0))
    pt, worst = pipeline_time(hop, ordered, d, dt)
    names = scenario.names()
    stages = tuple(PlanStage(devices=tuple(names[x] for x in g + c), layers=layers[k],
                             roles=tuple(roles[k]) + ("client",) * len(c))
                   for k, (g, c) in enumerate(zip(ordered, clients)))
    links = tuple(even_links(stages[k].with_role("backward") or stages[k].with_role("frontal"),
                             stages[k + 1].with_role("frontal") or stages[k + 1].with_role("backward"))
                  for k in range(len(stages) - 1))
    compute_part = d * workload.batch_flops(layers[worst]) / d / flops[worst]
    meta = {"chosen": levels[choose_level(levels)]["stages"], "levels": [{"stages": lv["stages"], "time": lv["time"]} for lv in levels],
            "seed": seed, "n_layer": workload.n_layer, "batch": workload.batch, "minibatches": d}
    return Plan(method="cluster", scenario=scenario.name, stages=stages, links=links, time=pt,
                parts={"dp": 0.0, "pp": pt - compute_part, "compute": compute_part}, meta=meta)
