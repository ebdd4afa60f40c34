"""Named scenarios: DT-FM's five cases (the DT-FM paper, Section 4) and the task pool paper's cases 1-4 and §4.4.

Where a paper gives a number it is used as given; everything else (intra-machine links, the
per-region delay table, the task pool paper's real-world matrices, which are only an image) is an assumption
written in the scenario's `notes`. Bandwidths are bytes/s, delays seconds.

>>> s = preset("dtfm_world", n=16)
>>> s.n, s.devices[0].region
(16, 'Oregon')
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labkit.config import ConfigError
from labkit.plan.network import MAX_DEVICES, Device, NetworkScenario
from labkit.plan.workload import Workload

GBIT = 1e9 / 8  # bytes/s in one Gbit/s
MBIT = 1e6 / 8

WORLD = ("Oregon", "Virginia", "Ohio", "Tokyo", "Seoul", "London", "Frankfurt", "Ireland")
# Delay (ms) between regions: near the AWS round-trip figures quoted in DT-FM's Figure 1,
# inside its stated 10-250 ms range.
WORLD_MS = {
    ("Oregon", "Virginia"): 67, ("Oregon", "Ohio"): 49, ("Oregon", "Tokyo"): 96, ("Oregon", "Seoul"): 124,
    ("Oregon", "London"): 136, ("Oregon", "Frankfurt"): 143, ("Oregon", "Ireland"): 124,
    ("Virginia", "Ohio"): 12, ("Virginia", "Tokyo"): 143, ("Virginia", "Seoul"): 172,
    ("Virginia", "London"): 76, ("Virginia", "Frankfurt"): 88, ("Virginia", "Ireland"): 67,
    ("Ohio", "Tokyo"): 130, ("Ohio", "Seoul"): 159, ("Ohio", "London"): 86, ("Ohio", "Frankfurt"): 97,
    ("Ohio", "Ireland"): 76, ("Tokyo", "Seoul"): 34, ("Tokyo", "London"): 210, ("Tokyo", "Frankfurt"): 223,
    ("Tokyo", "Ireland"): 199, ("Seoul", "London"): 235, ("Seoul", "Frankfurt"): 235,
    ("Seoul", "Ireland"): 228, ("London", "Frankfurt"): 14, ("London", "Ireland"): 12,
    ("Frankfurt", "Ireland"): 24,
}
REGIONAL = ("California", "Ohio", "Oregon", "Virginia")
REGIONAL_MS = {("California", "Ohio"): 52, ("California", "Oregon"): 12, ("California", "Virginia"): 62,
               ("Ohio", "Oregon"): 49, ("Ohio", "Virginia"): 11, ("Oregon", "Virginia"): 67}


def _need(preset_name: str, n: int, multiple: int, minimum: int, why: str) -> None:
    if not (isinstance(n, int) and not isinstance(n, bool) and minimum <= n <= MAX_DEVICES and n % multiple == 0):
        raise ConfigError(preset_name, "n", n, f"an integer >= {minimum} and a multiple of {multiple} ({why}), "
                                               f"at most {MAX_DEVICES} (the most the planners handle on a laptop)")


def _build(name: str, devices: list[Device], link: Callable[[int, int], tuple[float, float]],
           seed: int, jitter: float, notes: str) -> NetworkScenario:
    """Fill delay/bandwidth from `link(i, j) -> (seconds, bytes/s)`, then scale each entry by
    an independent factor in [1-jitter, 1+jitter] so that no two links are exactly equal."""
    n = len(devices)
    rng = np.random.default_rng(seed)
    delay, bw = np.zeros((n, n)), np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                delay[i, j], bw[i, j] = link(i, j)
    off = ~np.eye(n, dtype=bool)
    delay[off] *= 1 + jitter * rng.uniform(-1, 1, off.sum())
    bw[off] *= 1 + jitter * rng.uniform(-1, 1, off.sum())
    return NetworkScenario(name=name, devices=tuple(devices), delay=delay, bandwidth=bw, notes=notes,
                           extra={"preset": name, "n": n, "seed": seed, "jitter": jitter})


def _regions(name: str, regions: tuple[str, ...], table: dict, n: int, seed: int, jitter: float,
             inside: tuple[float, float], gbps_at: Callable[[float], float], notes: str) -> NetworkScenario:
    per = n // len(regions)
    devs = [Device(name=f"{r[:3].lower()}{k}", region=r) for r in regions for k in range(per)]

    def link(i: int, j: int) -> tuple[float, float]:
        a, b = devs[i].region, devs[j].region
        if a == b:
            return inside
        ms = table.get((a, b)) or table[(b, a)]
        return ms / 1e3, gbps_at(ms) * GBIT

    return _build(name, devs, link, seed, jitter, notes)


def dtfm_ondemand(n: int = 64, seed: int = 0, jitter: float = 0.05) -> NetworkScenario:
    """Case 1: p3.16xlarge machines of 8 V100; 100 Gbps inside a machine, 25 Gbps between."""
    _need("dtfm_ondemand", n, 8, 8, "8 GPUs per machine")
    devs = [Device(name=f"m{i // 8}g{i % 8}", region=f"M{i // 8}") for i in range(n)]
    return _build("dtfm_ondemand", devs, lambda i, j: (1e-5, 100 * GBIT) if devs[i].region == devs[j].region
                  else (5e-5, 25 * GBIT), seed, jitter,
                  "DT-FM case 1; latency not controlled in the paper: 10 us in, 50 us between machines (assumed)")


def dtfm_spot(n: int = 64, seed: int = 0, jitter: float = 0.05) -> NetworkScenario:
    """Case 2: half the GPUs on 4-GPU machines (100 Gbps inside), half on 1-GPU machines; 10 Gbps between."""
    _need("dtfm_spot", n, 8, 8, "half on 4-GPU machines, half on 1-GPU machines")
    half = n // 2
    devs = [Device(name=f"q{i // 4}g{i % 4}", region=f"4gpu-{i // 4}") for i in range(half)]
    devs += [Device(name=f"s{i}", region=f"1gpu-{i}") for i in range(n - half)]
    return _build("dtfm_spot", devs, lambda i, j: (1e-5, 100 * GBIT) if devs[i].region == devs[j].region
                  else (5e-5, 10 * GBIT), seed, jitter,
                  "DT-FM case 2; the paper's text says 4x4 + 32x1 = 48 GPUs for its 64-GPU runs, "
                  "we use N/2 on 4-GPU and N/2 on 1-GPU machines; latency assumed as case 1")


def dtfm_multidc(n: int = 64, seed: int = 0, jitter: float = 0.05) -> NetworkScenario:
    """Case 3: two organizations (Ohio, Virginia), 10 Gbps inside; 10 ms and 1.12 Gbps across."""
    _need("dtfm_multidc", n, 2, 2, "half in Ohio, half in Virginia")
    devs = [Device(name=f"{r[:3].lower()}{k}", region=r) for r in ("Ohio", "Virginia") for k in range(n // 2)]
    return _build("dtfm_multidc", devs, lambda i, j: (1e-4, 10 * GBIT) if devs[i].region == devs[j].region
                  else (10e-3, 1.12 * GBIT), seed, jitter,
                  "DT-FM case 3; delay inside an organization not given: 0.1 ms (assumed)")


def dtfm_regional(n: int = 64, seed: int = 0, jitter: float = 0.05) -> NetworkScenario:
    """Case 4: four US regions; 5 ms and 2 Gbps inside; 10-70 ms and 1.0-1.3 Gbps across."""
    _need("dtfm_regional", n, 4, 4, "one quarter per region")
    return _regions("dtfm_regional", REGIONAL, REGIONAL_MS, n, seed, jitter, (5e-3, 2 * GBIT),
                    lambda ms: 1.3 - 0.3 * (ms - 10) / 60,
                    "DT-FM case 4; per-pair delays assumed inside 10-70 ms, bandwidth falls linearly with delay")


def dtfm_world(n: int = 64, seed: int = 0, jitter: float = 0.05) -> NetworkScenario:
    """Case 5: eight regions on three continents; 5 ms / 2 Gbps inside; 10-250 ms / 0.3-1.3 Gbps across."""
    _need("dtfm_world", n, 8, 8, "one eighth per region")
    return _regions("dtfm_world", WORLD, WORLD_MS, n, seed, jitter, (5e-3, 2 * GBIT),
                    lambda ms: max(0.3, 1.3 - (ms - 10) / 240),
                    "DT-FM case 5; delays near DT-FM Figure 1, bandwidth falls linearly from 1.3 Gbps "
                    "at 10 ms to 0.3 Gbps at 250 ms (assumed)")


def _hpcs(count: int, per: int) -> list[Device]:
    return [Device(name=f"hpc{h}g{g}", region=f"HPC{h}") for h in range(count) for g in range(per)]


def ps_case(case: int, n: int = 16, seed: int = 0, jitter: float = 0.05) -> NetworkScenario:
    """The task pool paper's cases 1-4: 1 data center (2 GB/s between nodes), 2 heterogeneous network
    (1-3 GB/s, 10-100 ms between HPCs), 3 plus standalone RTX 2080s (50-300 Mb/s, 100-150 ms),
    4 = case 3 with the 2080s unreliable."""
    name = f"ps_case{case}"
    if case not in (1, 2, 3, 4):
        raise ConfigError("ps_case", "case", case, "1, 2, 3 or 4")
    _need(name, n, 8 if case >= 3 else 4, 8 if case >= 3 else 4, "4 GPUs per HPC" + (", half standalone" if case >= 3 else ""))
    rng = np.random.default_rng(seed + 1000)
    hpc_n = n // 4 if case <= 2 else n // 8
    devs = _hpcs(hpc_n, 4)
    devs += [Device(name=f"gpu{k}", kind="RTX2080", region=f"standalone{k}", reliable=case != 4)
             for k in range(n - 4 * hpc_n)]
    regions = sorted({d.region for d in devs})
    pair = {(a, b): (rng.uniform(10e-3, 100e-3), rng.uniform(1e9, 3e9)) if case >= 2 else (1e-4, 2e9)
            for a in regions for b in regions if a < b}
    slow = {(a, b): (rng.uniform(100e-3, 150e-3), rng.uniform(50, 300) * MBIT)
            for a in regions for b in regions if a < b}

    def link(i: int, j: int) -> tuple[float, float]:
        a, b = sorted((devs[i].region, devs[j].region))
        if a == b:
            return 1e-5, 10e9
        if a.startswith("HPC") and b.startswith("HPC"):
            return pair[(a, b)]
        return slow[(a, b)]

    return _build(name, devs, link, seed, jitter,
                  f"the task pool paper's case {case}; 10 GB/s / 10 us inside an HPC node (assumed); "
                  "random ranges as the paper states, drawn once per seed")


def ps_realworld(n: int = 12, seed: int = 0, jitter: float = 0.05) -> NetworkScenario:
    """The task pool paper's §4.4: cloud HPC (3x RTX 4090), campus HPC (3x RTX 4090), six RTX 3080 on a local ISP
    (two reliable, four unreliable). The run used double precision, so speeds are FP64 peaks and
    `extra["bytes_per_value"]` is 8. The paper's matrices are a figure; the numbers are assumed."""
    if n != 12:
        raise ConfigError("ps_realworld", "n", n, "12 (the paper's fixed set of devices)")
    devs = [Device(name=f"cloud{k}", kind="RTX4090", flops=1.29e12, region="cloud") for k in range(3)]
    devs += [Device(name=f"campus{k}", kind="RTX4090", flops=1.29e12, region="campus") for k in range(3)]
    devs += [Device(name=f"isp{k}", kind="RTX3080", flops=0.465e12, region="isp", reliable=k < 2) for k in range(6)]
    table = {("cloud", "campus"): (20e-3, 200 * MBIT), ("campus", "isp"): (15e-3, 200 * MBIT),
             ("cloud", "isp"): (35e-3, 60 * MBIT), ("isp", "isp"): (5e-3, 300 * MBIT)}

    def link(i: int, j: int) -> tuple[float, float]:
        a, b = devs[i].region, devs[j].region
        if a == b and a != "isp":
            return 1e-5, 10e9
        return table.get((a, b)) or table[(b, a)]

    scenario = _build("ps_realworld", devs, link, seed, jitter,
                      "the task pool paper's §4.4; its Figure 3 matrices are not in the text: intra-HPC 10 GB/s, "
                      "cloud-campus 20 ms / 200 Mb/s, campus-ISP 15 ms / 200 Mb/s, cloud-ISP 35 ms / 60 Mb/s, "
                      "ISP-ISP 5 ms / 300 Mb/s (assumed); FP64 peaks 1.29 (4090) and 0.465 (3080) TFLOP/s")
    scenario.extra["bytes_per_value"] = 8
    return scenario


DTFM_CASES = ("dtfm_ondemand", "dtfm_spot", "dtfm_multidc", "dtfm_regional", "dtfm_world")
NETWORK_PRESETS: dict[str, Callable[..., NetworkScenario]] = {
    "dtfm_ondemand": dtfm_ondemand, "dtfm_spot": dtfm_spot, "dtfm_multidc": dtfm_multidc,
    "dtfm_regional": dtfm_regional, "dtfm_world": dtfm_world,
    "ps_case1": lambda **kw: ps_case(1, **kw), "ps_case2": lambda **kw: ps_case(2, **kw),
    "ps_case3": lambda **kw: ps_case(3, **kw), "ps_case4": lambda **kw: ps_case(4, **kw),
    "ps_realworld": ps_realworld,
}


# Message sizes (GB) DT-FM's released scheduler prices its five cases with: (gradients c_DP,
# activations c_PP of one macro-batch). The paper gives only the model (GPT3-XL).
DTFM_MESSAGE_GB = {"dtfm_ondemand": (1.0, 0.28125), "dtfm_spot": (1.0, 0.28125), "dtfm_multidc": (1.0, 0.28125),
                   "dtfm_regional": (0.7, 0.4), "dtfm_world": (0.9, 0.5)}


def dtfm_paper_case(name: str, n: int = 64) -> tuple[NetworkScenario, Workload]:
    """One of DT-FM's five cases as its paper describes it: the preset with no jitter (every link of
    a kind equal, as in the paper's tables) and DT-FM's own message sizes."""
    if name not in DTFM_MESSAGE_GB:
        raise ConfigError("dtfm_paper_case", "name", name, f"one of {list(DTFM_CASES)}")
    dp_gb, pp_gb = DTFM_MESSAGE_GB[name]
    return preset(name, n=n, jitter=0.0), Workload(c_dp_given=dp_gb * 1e9, c_pp_given=pp_gb * 1e9)


def preset(name: str, **kwargs: float) -> NetworkScenario:
    """Build a named scenario; `n`, `seed`, `jitter` are passed to its generator."""
    if name not in NETWORK_PRESETS:
        raise ConfigError("preset", "name", name, f"one of {sorted(NETWORK_PRESETS)}")
    return NETWORK_PRESETS[name](**kwargs)
