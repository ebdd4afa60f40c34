"""The queue lengths Algorithm 2 reads in the runtime, drawn around the fluid model's means.

The runtime's peers publish their instantaneous queue length (requests waiting plus the one
running, `RequestQueue.queue_length`) every announce period; the coordinator reads those records
once a period too, so a round sees each peer's count as it was up to two periods ago. Here a peer's
published count is one draw of a geometric law (M/M/1's number in system) with the fluid mean of
the membership its announcement saw: the present one, or the one before the last change if that
change is younger than the record. Randomness comes from `draws`, uniforms in [0, 1) used in turn
from position k, so the numba kernel and its plain-Python twin draw the same numbers.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def geometric_draw(mean: float, u: float) -> float:
    """An instantaneous queue length with this mean: geometric on 0, 1, ... (P(N >= n) = r^n,
    r = mean / (1 + mean)), by inversion of the uniform `u` in [0, 1)."""
    if mean <= 0.0:
        return 0.0
    return np.floor(np.log(1.0 - u) / np.log(mean / (1.0 + mean)))


@njit(cache=True)
def measured_queues(stage: np.ndarray, q_now: np.ndarray, q_before: np.ndarray, since_change: float,
                    announce: float, draws: np.ndarray, k: int) -> tuple[np.ndarray, int]:
    """(published queue length of every peer with a stage, next draw position).

    q_now / q_before: fluid mean queues of the present membership and of the one before the last
    change, `since_change` seconds ago. A record's age is the coordinator's read (one draw per
    round) plus the peer's own announce phase, each uniform over `announce` seconds.
    """
    n = draws.shape[0]
    q = np.zeros(stage.shape[0])
    read_age = draws[k % n] * announce
    k += 1
    for i in range(stage.shape[0]):
        if stage[i] >= 0:
            age = read_age + draws[k % n] * announce
            mean = q_before[i] if age > since_change else q_now[i]
            q[i] = geometric_draw(mean, draws[(k + 1) % n])
            k += 2
    return q, k
