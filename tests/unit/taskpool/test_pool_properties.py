"""Property: whatever clients vanish, and whenever, every sample of every microbatch is computed
exactly once forward and once backward per pass, only lost slices are run again, and the pool
drains. A random driver plays the servers' other side: clients pull, finish, vanish (told, or
silent until a timeout), come back late with stale answers, join, and flush their gradients.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.taskpool import StagePool, Task
from labkit.taskpool.accounting import coverage


def _drive(pool: StagePool, rng: random.Random, microbatches: int, faults: int) -> None:
    """One pass: every microbatch enters, clients work until the stage is done; `faults` losses.
    A silent client is back, as a slow one, at the next pass unless the servers gave up on it."""
    now, held, silent, stale = 0.0, [], set(), []
    for mb in range(microbatches):
        pool.forward_ready(mb, now)
    waiting_grad = set()
    while not pool.ready():
        now += rng.random()
        live = [c for c in pool.clients() if c not in silent]
        roll = rng.random()
        if roll < 0.08 and faults and len(live) > 1:  # someone vanishes (never "anchor")
            faults -= 1
            victim = rng.choice([c for c in live if c != "anchor"])
            if rng.random() < 0.5:
                pool.client_lost(victim, now)
            else:
                silent.add(victim)
                stale += [t for t in held if t.client == victim]
            held = [t for t in held if t.client != victim]
        elif roll < 0.12:
            pool.client_joined(f"new{pool.passes}.{now}", rng.uniform(0.5, 3.0), now)
        elif roll < 0.16 and any(t.client not in pool.clients() for t in stale):
            late = next(t for t in stale if t.client not in pool.clients())
            stale.remove(late)
            assert not pool.client_done(late, now).credited  # an answer from a client given up on
        elif roll < 0.2 and live:
            pool.flush(rng.choice(live))
        elif roll < 0.6 and held:
            task: Task = held.pop(rng.randrange(len(held)))
            done = pool.client_done(task, now)
            assert done.credited
            if done.forward_complete:
                waiting_grad.add(task.microbatch)
        elif roll < 0.7 and waiting_grad:
            pool.backward_ready(waiting_grad.pop(), now)
        else:
            idle = [c for c in live if not any(t.client == c for t in held)]
            for client in idle:
                task = pool.next_task(client, now)
                if task is not None:
                    held.append(task)
            if not held and not waiting_grad:  # only silent clients hold work: let the deadline pass
                now = max(now, pool.next_deadline())
                pool.timeout(now)
                silent &= set(pool.clients())


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), samples=st.integers(1, 40), microbatches=st.integers(1, 4),
       clients=st.integers(0, 4), faults=st.integers(0, 6), passes=st.integers(1, 2))
def test_every_sample_once_per_pass_and_the_pool_drains(seed: int, samples: int, microbatches: int, clients: int,
                                                        faults: int, passes: int) -> None:
    rng = random.Random(seed)
    pool = StagePool(samples, ("f1", "f2"), ("b1", "b2", "b3"), slack=2.0, grace=0.5)
    pool.client_joined("anchor", 1.0, 0.0)  # a reliable server computing too: the stage always progresses
    for i in range(clients):
        pool.client_joined(f"c{i}", rng.uniform(0.2, 4.0), 0.0)
    lost_before = 0
    for _ in range(passes):
        _drive(pool, rng, microbatches, faults)
        assert pool.ready() and pool.pool_depth == 0 and pool.next_deadline() == float("inf")
        for mb in range(microbatches):
            assert list(coverage([(a, b) for _, a, b in pool.route(mb)], samples)) == [1] * samples
            assert list(coverage([(a, b) for _, a, b in pool.credits(mb)], samples)) == [1] * samples
        stats = pool.stats()
        assert stats["repeated_beyond_lost"] == 0
        lost_now = stats["lost_samples"] - lost_before
        runs = sum(sum(pool.forward_runs(mb)) for mb in range(microbatches))
        assert runs == microbatches * samples + lost_now  # one forward per sample plus one per loss
        lost_before = stats["lost_samples"]
        pool.advance()
