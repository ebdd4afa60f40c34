"""DT-FM's scheduler (the DT-FM paper, Sections 2-3): cost model, hybrid genetic search, baselines, Plan.

The search space is balanced partitions of the N devices into D_PP stage groups of D_DP devices.
Each candidate is priced by COMM-COST = DP cost (Eq. 2, max over groups) + PP cost (open-loop TSP
over the coarsened graph of bottleneck matchings, Eq. 3-4); the kernels live in
`labkit.kernels.plan_cost`. The hybrid GA keeps a population, breeds one offspring per iteration
by swapping nodes between two parents, improves it by local search (the paper's, or
Kernighan-Lin), and replaces the worst member if the offspring is better.

Methods: "dtfm" is labkit's planner: the same GA, but its initial population holds partitions
shaped by the network (`structured_partitions`) and every member is improved by a tabu search
that prices every single swap (`tabu_local_search`); "dtfm-paper" is the GA with the paper's own
local search (the Figure 5 reproduction), "kl" the GA with Kernighan-Lin, "random" one random
assignment.

>>> from labkit.plan.presets import preset
>>> plan = plan_dtfm(preset("dtfm_world", n=16), stages=4, generations=5, seed=0)
>>> len(plan.stages), plan.parts["dp"] + plan.parts["pp"] == plan.time
(4, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from labkit.config import ConfigError, even_split
from labkit.kernels.plan_cost import (
    assignment_cost,
    bottleneck_matching,
    coarse_graph,
    comm_cost,
    open_tsp,
)
from labkit.kernels.plan_tabu import device_classes
from labkit.plan.local_search import (
    dtfm_local_search,
    groups_of,
    kl_local_search,
    labels_of,
    structured_partitions,
    tabu_local_search,
)
from labkit.plan.network import NetworkScenario
from labkit.plan.plan import Plan, PlanStage
from labkit.plan.workload import Workload

METHODS = ("dtfm", "dtfm-paper", "kl", "random")
LOCAL_SEARCHES = ("tabu", "dtfm", "kl")
# GA iterations when not given: the paper's 60 for its own local searches; each tabu search
# costs ~20-200x one of theirs, and 4 offspring after the structured seeds already beat them
DEFAULT_GENERATIONS = {"dtfm": 4, "dtfm-paper": 60, "kl": 60}
RANDOM_SEEDS = (2022, 2023, 2024)  # the paper's seeds for its random layouts (Appendix B.1)


@dataclass
class CostModel:
    """Pair costs of one scenario and workload, and a counter of full cost evaluations."""

    w_dp: np.ndarray  # 2(α + c_DP / (D_DP β)) on the symmetrized graph G
    w_pp: np.ndarray  # 2(α + c_PP / β)
    stages: int
    replicas: int
    classes: np.ndarray  # interchangeable devices share a class (`device_classes`)
    evals: int = field(default=0)

    @classmethod
    def build(cls, scenario: NetworkScenario, stages: int, workload: Workload) -> CostModel:
        """G's edges average both directions (Section 2: same bytes go each way)."""
        replicas = scenario.check_stages(stages)
        alpha = (scenario.delay + scenario.delay.T) / 2
        beta = (scenario.bandwidth + scenario.bandwidth.T) / 2
        np.fill_diagonal(beta, np.inf)
        np.fill_diagonal(alpha, 0.0)
        w_dp = 2 * (alpha + workload.c_dp(stages) / (replicas * beta))
        w_pp = 2 * (alpha + workload.c_pp(replicas) / beta)
        return cls(w_dp=w_dp, w_pp=w_pp, stages=stages, replicas=replicas, classes=device_classes(w_dp, w_pp))

    def parts(self, groups: np.ndarray) -> tuple[float, float]:
        """(DP, PP) seconds of a partition."""
        self.evals += 1
        dp, pp = comm_cost(groups, self.w_dp, self.w_pp)
        return float(dp), float(pp)

    def __call__(self, groups: np.ndarray) -> float:
        return sum(self.parts(groups))


def random_partition(n: int, stages: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random balanced partition, (stages, n // stages) device indices."""
    return np.sort(rng.permutation(n).reshape(stages, n // stages), axis=1)


def crossover(p1: np.ndarray, p2: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Offspring: p1 with a random half of its devices taking p2's group, then rebalanced.

    p2's group labels are first aligned to p1's (greedy largest overlap) so "same group" means the
    same thing in both parents; over-full groups give random devices to under-full ones.
    """
    k, m = p1.shape
    l1, l2 = labels_of(p1), labels_of(p2)
    overlap = np.zeros((k, k), np.int64)
    np.add.at(overlap, (l2, l1), 1)
    align = -np.ones(k, np.int64)
    for flat in np.argsort(-overlap, axis=None, kind="stable"):
        a, b = divmod(int(flat), k)
        if align[a] < 0 and b not in align:
            align[a] = b
    child = np.where(rng.random(len(l1)) < 0.5, l1, align[l2])
    counts = np.bincount(child, minlength=k)
    for dev in rng.permutation(len(child)):  # rebalance: move surplus devices to short groups
        g = child[dev]
        if counts[g] > m:
            short = np.flatnonzero(counts < m)
            target = short[rng.integers(len(short))]
            counts[g] -= 1
            counts[target] += 1
            child[dev] = target
    return groups_of(child, k)


def hybrid_ga(cost: CostModel, n: int, rng: np.random.Generator, local: str = "dtfm",
              population: int = 10, generations: int = 60,
              progress: Callable[[int, float], None] | None = None,
              seeds: list[np.ndarray] | None = None) -> tuple[np.ndarray, list[float]]:
    """Run the hybrid GA; returns the best partition and the best cost after every iteration
    (history[0] = best of the initial population, so the result is never worse than it).

    `local` is "tabu", "dtfm" (the paper's) or "kl". `seeds` take the first places of the initial
    population (random partitions fill the rest); with "tabu" they are improved before the GA starts.
    """
    if local not in LOCAL_SEARCHES:
        raise ConfigError("hybrid_ga", "local", local, f"one of {list(LOCAL_SEARCHES)}")

    def improve(g: np.ndarray) -> tuple[np.ndarray, float]:
        if local == "tabu":
            out = tabu_local_search(g, cost.w_dp, cost.w_pp, cost.classes, seed=int(rng.integers(2**31)))
            return out, cost(out)
        if local == "dtfm":
            return dtfm_local_search(cost, g, cost.w_pp)
        return kl_local_search(cost, g, cost.w_dp)

    seeds = list(seeds or [])[:population]
    pop = [random_partition(n, cost.stages, rng) for _ in range(population - len(seeds))]
    pop = [improve(g)[0] if local == "tabu" else g for g in seeds] + pop
    costs = [cost(g) for g in pop]
    history = [min(costs)]
    for it in range(generations):
        i, j = rng.choice(population, 2, replace=False)
        child, c = improve(crossover(pop[i], pop[j], rng))
        worst = int(np.argmax(costs))
        if c < costs[worst] and not any(np.array_equal(child, g) for g in pop):
            pop[worst], costs[worst] = child, c
        history.append(min(costs))
        if progress is not None:
            progress(it + 1, history[-1])
    return pop[int(np.argmin(costs))], history


def _compute_seconds(scenario: NetworkScenario, stages: list[list[int]], layers: tuple[int, ...],
                     workload: Workload, replicas: int) -> float:
    """Slowest device's forward+backward time on its macro-batch (reported, overlapped in DT-FM)."""
    flops = workload.batch / replicas * workload.seq_len * workload.layer_flops_per_token()
    return max(flops * layers[k] / scenario.devices[d].flops for k, s in enumerate(stages) for d in s)


def plan_from_groups(scenario: NetworkScenario, groups: np.ndarray, cost: CostModel, workload: Workload,
                     method: str, meta: dict) -> Plan:
    """Order the groups by the open-loop TSP, match neighbours by bottleneck matching, build a Plan."""
    dp, _ = cost.parts(groups)
    coarse = coarse_graph(groups, cost.w_pp)
    pp, order = open_tsp(coarse) if cost.stages > 1 else (0.0, np.zeros(1, np.int64))
    ordered = [list(groups[j]) for j in order]
    rows = [np.arange(cost.replicas)]  # rows[k][i]: position in stage k of replica i's device
    for k in range(len(ordered) - 1):
        sub = cost.w_pp[np.ix_(ordered[k], ordered[k + 1])]
        _, match = bottleneck_matching(sub)
        rows.append(match[rows[-1]])
    sigma = np.array([[ordered[k][rows[k][i]] for k in range(cost.stages)] for i in range(cost.replicas)])
    return _plan_from_sigma(scenario, sigma, workload, method, dp, float(pp), meta)


def _plan_from_sigma(scenario: NetworkScenario, sigma: np.ndarray, workload: Workload, method: str,
                     dp: float, pp: float, meta: dict) -> Plan:
    """sigma[i, k] = device of replica i at stage k (pipeline order) -> Plan."""
    names = scenario.names()
    m, k = sigma.shape
    layers = even_split(workload.n_layer, k)
    stage_devs = [list(sigma[:, j]) for j in range(k)]
    stages = tuple(PlanStage(devices=tuple(names[d] for d in devs), layers=layers[j])
                   for j, devs in enumerate(stage_devs))
    links = tuple(tuple((names[sigma[i, j]], names[sigma[i, j + 1]], 1.0 / m) for i in range(m)) for j in range(k - 1))
    compute = _compute_seconds(scenario, stage_devs, layers, workload, m)
    return Plan(method=method, scenario=scenario.name, stages=stages, links=links, time=dp + pp,
                parts={"dp": dp, "pp": pp, "compute": compute}, meta=meta)


def plan_dtfm(scenario: NetworkScenario, stages: int = 8, workload: Workload | None = None, *,
              method: str = "dtfm", seed: int = 0, population: int = 10, generations: int | None = None,
              progress: Callable[[int, float], None] | None = None) -> Plan:
    """Plan a scenario with DT-FM's cost model: method "dtfm" (labkit's search: structured seeds,
    GA, tabu search), "dtfm-paper" (GA + the paper's local search), "kl" (GA + Kernighan-Lin) or
    "random" (one uniformly random tasklet assignment, no matching or TSP). `generations` defaults
    to DEFAULT_GENERATIONS[method]. `meta["history"]` holds the GA's best cost per iteration."""
    if method not in METHODS:
        raise ConfigError("plan_dtfm", "method", method, f"one of {list(METHODS)}")
    if not (isinstance(population, int) and population >= 2):
        raise ConfigError("plan_dtfm", "population", population, "an integer >= 2 (two parents per offspring)")
    if generations is None:
        generations = DEFAULT_GENERATIONS.get(method, 0)
    if not (isinstance(generations, int) and generations >= 0):
        raise ConfigError("plan_dtfm", "generations", generations, "an integer >= 0")
    workload = workload or Workload.gpt3_xl()
    scenario.check_stages(stages)
    if stages > workload.n_layer:
        raise ConfigError("plan_dtfm", "stages", stages, f"at most the model's {workload.n_layer} layers")
    cost = CostModel.build(scenario, stages, workload)
    rng = np.random.default_rng(seed)
    meta = {"stages": stages, "replicas": cost.replicas, "seed": seed, "c_dp": workload.c_dp(stages),
            "c_pp": workload.c_pp(cost.replicas), "batch": workload.batch, "n_layer": workload.n_layer}
    if method == "random":
        sigma = rng.permutation(scenario.n).reshape(cost.replicas, stages)
        dp, pp = assignment_cost(sigma, cost.w_dp, cost.w_pp)
        return _plan_from_sigma(scenario, sigma, workload, method, float(dp), float(pp), meta)
    local = {"dtfm": "tabu", "dtfm-paper": "dtfm", "kl": "kl"}[method]
    seeds = structured_partitions(cost.w_pp, stages) if method == "dtfm" else None
    best, history = hybrid_ga(cost, scenario.n, rng, local, population, generations, progress, seeds)
    meta |= {"history": history, "evals": cost.evals, "population": population, "generations": generations}
    return plan_from_groups(scenario, best, cost, workload, method, meta)
