"""Microbatch-level discrete-event simulation of SWARM trainers and peers, as one numba loop.

Each of W trainer slots keeps one microbatch in flight: forward through stages 0..S-1 on peers that
an IWRR router picks (`iwrr_pick`, the router's kernel; one router for every slot, or one per
trainer that its slots share), then backward along the same peers. A hop is ARRIVE (the request's head reaches the peer after half a
round trip; its payload streams in `chunks` pieces and the peer computes each piece once it is in:
compute starts after the first piece and ends no sooner than the last piece's share after the last
byte, so with 1 chunk the hop is payload then compute, and with many the shorter of the two is
hidden), FINISH (the peer's FIFO queue served it) and RESPOND (the answer is back half a round trip
later; the trainer folds the response time into the peer's EMA with `ema_fold`). A microbatch whose
peer left or moved is recorded lost and redone from stage 0. The Python driver changes membership
between calls.
Twin: `run_until.py_func` (tests compare them with cv = 0).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from labkit.kernels.iwrr import ema_fold, iwrr_pick, iwrr_skip

ARRIVE, FINISH, RESPOND, RETRY = 0, 1, 2, 3
PARKED = -1  # `pos` of a slot waiting at the step barrier for the step's last microbatch
RETRY_SECONDS = 1.0  # a trainer finding a stage without peers tries again after this long


@njit(cache=True)
def _push(h_time, h_seq, h_slot, h_kind, size, seq, t, slot, kind):
    pos = size
    while pos > 0:
        parent = (pos - 1) // 2
        if h_time[parent] < t or (h_time[parent] == t and h_seq[parent] < seq):
            break
        h_time[pos], h_seq[pos], h_slot[pos], h_kind[pos] = h_time[parent], h_seq[parent], h_slot[parent], h_kind[parent]
        pos = parent
    h_time[pos], h_seq[pos], h_slot[pos], h_kind[pos] = t, seq, slot, kind
    return size + 1


@njit(cache=True)
def _pop(h_time, h_seq, h_slot, h_kind, size):
    size -= 1
    t, seq, slot, kind = h_time[size], h_seq[size], h_slot[size], h_kind[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and (h_time[child + 1] < h_time[child] or
                                 (h_time[child + 1] == h_time[child] and h_seq[child + 1] < h_seq[child])):
            child += 1
        if t < h_time[child] or (t == h_time[child] and seq < h_seq[child]):
            break
        h_time[pos], h_seq[pos], h_slot[pos], h_kind[pos] = h_time[child], h_seq[child], h_slot[child], h_kind[child]
        pos = child
    h_time[pos], h_seq[pos], h_slot[pos], h_kind[pos] = t, seq, slot, kind
    return size


@njit(cache=True)
def run_until(t_end: float, num_stages: int, peers: tuple, router: tuple, service: tuple, links: tuple,
              slots: tuple, heap: tuple, counters: np.ndarray, sync: tuple, out: tuple, hops: tuple) -> None:
    """Process every event before `t_end`; state lives in the arrays passed in and is updated.

    peers = (stage, free_at, qlen, epoch) per peer; router = (prio, ema, weight, order, banned,
    gamma, window, started): a router per row of prio, ema and weight, slot w routing with row
    w // window (one row: all share it), whose first pick of stage s (`started[row, s]` unset)
    skips row x window picks as the runtime's trainers do (`iwrr_skip`); service = (fwd, bwd, cv,
    cores) with fwd/bwd[i, s] seconds and `cores[c, k]` the (start, end) of core c's k-th booking on
    the one host every peer shares (no rows: a device each; k up to the slots, as each has one
    computation booked at a time): a computation also waits for a core free for its whole length
    (`_take_core`), so the host never computes more than its cores at once; links = (out, back,
    payload, chunks, relay): request and answer latency and payload seconds per peer, the pieces a
    payload streams in, and whether hops are the runtime's (trainers relay: a middle stage's answer
    carries a payload back, and the last stage's forward, loss and backward are its one loss request:
    one booking of the peer, answered once with the input's gradients, no backward hop of its own);
    slots = (pos, path, path_epoch, sent, mb_id);
    heap = (time, seq, slot, kind, size/seq box); counters[0..4] = entered, finished, lost, next
    microbatch id, entered this step; sync = (group, t_ar by stage count function table t_ar[n],
    boundary: with a global batch, < 0 for the paper's model (peers stop for the all-reduce,
    trainers go on), else a step barrier as the runtime keeps it (a slot whose step has all its
    microbatches waits for the step's last one, then for `boundary` seconds, and a lost microbatch
    is redone within its step)); out = (work per bin, busy[bin, stage] (compute seconds, split over
    bins, none past the last bin), bin_seconds, step times, step count box); hops = (t, slot, stage,
    peer, direction, seconds, mb, count box).
    """
    stage, free_at, qlen, epoch = peers
    prio, ema, weight, order, banned, gamma, window, started = router
    fwd, bwd, cv, cores = service
    hop_out, hop_back, payload, chunks, relay = links
    pos, path, path_epoch, sent, mb_id = slots
    h_time, h_seq, h_slot, h_kind, box = heap
    group, t_ar, boundary = sync
    work, busy, bin_seconds, step_t, step_box = out
    hop_t, hop_slot, hop_stage, hop_peer, hop_dir, hop_sec, hop_mb, hop_box = hops
    n_bins = work.shape[0]
    while box[0] > 0 and h_time[0] < t_end:
        t, w, kind = h_time[0], h_slot[0], h_kind[0]
        box[0] = _pop(h_time, h_seq, h_slot, h_kind, box[0])
        b = min(int(t / bin_seconds), n_bins - 1)
        forward = pos[w] < num_stages
        s = pos[w] if forward else 2 * num_stages - 1 - pos[w]
        p = path[w, s]
        if kind == RETRY:
            kind = -1  # fall through to issuing the hop below
        elif kind == ARRIVE:
            if epoch[p] != path_epoch[w, s]:
                kind = -2
            else:
                qlen[p] += 1
                seconds = fwd[p, s] if forward else bwd[p, s]
                if relay and forward and s == num_stages - 1:
                    seconds += bwd[p, s]  # the runtime's one loss request: forward and backward in one booking
                if cv > 0.0:
                    seconds *= np.random.gamma(1.0 / (cv * cv), cv * cv)
                start = max(t + payload[p] / chunks, free_at[p])
                if cores.shape[0] > 0:  # peers sharing a host: the computation waits for a core free long enough
                    start = _take_core(cores, t, start, seconds)
                free_at[p] = max(start + seconds, t + payload[p] + seconds / chunks)
                _book(busy, s, start, seconds, bin_seconds)
                box[1] += 1
                box[0] = _push(h_time, h_seq, h_slot, h_kind, box[0], box[1], free_at[p], w, FINISH)
                continue
        elif kind == FINISH:
            if epoch[p] == path_epoch[w, s]:
                qlen[p] -= 1
            box[1] += 1
            back = hop_back[p]
            if relay and (0 < s < num_stages - 1 or (s == num_stages - 1 and forward)):
                back += payload[p]  # the answer carries a payload back: activations, or their gradients
            box[0] = _push(h_time, h_seq, h_slot, h_kind, box[0], box[1], t + back, w, RESPOND)
            continue
        elif kind == RESPOND:
            if epoch[p] != path_epoch[w, s]:
                kind = -2
            else:
                ema_fold(ema[w // window], weight[w // window], p, t - sent[w], gamma)
                k = hop_box[0]
                if k < hop_t.shape[0]:
                    hop_t[k], hop_slot[k], hop_stage[k], hop_peer[k] = t, w, s, p
                    hop_dir[k], hop_sec[k], hop_mb[k] = 0 if forward else 1, t - sent[w], mb_id[w]
                hop_box[0] = k + 1
                pos[w] += 2 if relay and forward and s == num_stages - 1 else 1  # the loss request did its backward
                if pos[w] == 2 * num_stages:  # microbatch done: count it, maybe all-reduce, start the next
                    counters[1] += 1
                    work[b] += 1.0
                    if group > 0 and counters[1] % group == 0:
                        if boundary < 0.0:
                            _all_reduce(t, stage, free_at, t_ar, num_stages)
                        if step_box[0] < step_t.shape[0]:
                            step_t[step_box[0]] = t
                        step_box[0] += 1
                        if boundary >= 0.0:  # the step's last microbatch: every parked slot starts after the boundary
                            pos[w] = PARKED
                            _release(t + boundary, group, pos, counters, mb_id, h_time, h_seq, h_slot, h_kind, box)
                            continue
                    if boundary >= 0.0 and counters[4] >= group:  # the step has all its microbatches: wait
                        pos[w] = PARKED
                        continue
                    _new_microbatch(w, pos, counters, mb_id)
        if kind == -2:  # the peer left or moved: this microbatch is lost and redone from stage 0
            counters[2] += 1
            if boundary >= 0.0:
                pos[w] = 0  # with a step barrier, the same microbatch again (the step's count is kept)
            else:
                _new_microbatch(w, pos, counters, mb_id)
        r = w // window
        _issue(t, w, num_stages, stage, prio[r], ema[r], order, banned, started[r], r * window, epoch, pos, path,
               path_epoch, sent, hop_out, h_time, h_seq, h_slot, h_kind, box)


@njit(cache=True)
def _take_core(cores, t, ready, seconds):
    """Book the earliest stretch of `seconds` from `ready` on when one of the host's cores is free (the
    first such core), and return its start. A booking made ahead (a computation waiting for its
    payload) leaves the time before it to others; a booking that ended by `t` frees its row."""
    if seconds <= 0.0:
        return ready
    best, best_c = np.inf, 0
    for c in range(cores.shape[0]):
        start, moved = ready, True
        while moved:  # past every booking the stretch overlaps: no start before its end fits
            moved = False
            for k in range(cores.shape[1]):
                if cores[c, k, 1] > t and cores[c, k, 0] < start + seconds and cores[c, k, 1] > start:
                    start, moved = cores[c, k, 1], True
        if start < best:
            best, best_c = start, c
    for k in range(cores.shape[1]):
        if cores[best_c, k, 1] <= t:
            cores[best_c, k, 0], cores[best_c, k, 1] = best, best + seconds
            return best
    raise RuntimeError("more computations booked on one core than the simulation has slots")


@njit(cache=True)
def _book(busy, s, start, seconds, bin_seconds):
    """Add compute [start, start + seconds) of stage s to the bins it spans; time past the last bin
    (work queued beyond the end of the run) is not booked. A bin edge that `a / bin_seconds`
    rounds to just below its index counts in the next bin, so the loop always progresses."""
    a, end = start, start + seconds
    while a < end:
        b = int(a / bin_seconds)
        if (b + 1) * bin_seconds <= a:
            b += 1
        if b >= busy.shape[0]:
            return
        e = min(end, (b + 1) * bin_seconds)
        busy[b, s] += e - a
        a = e


@njit(cache=True)
def _new_microbatch(w, pos, counters, mb_id):
    counters[0] += 1
    mb_id[w] = counters[3]
    counters[3] += 1
    counters[4] += 1
    pos[w] = 0


@njit(cache=True)
def _release(t, group, pos, counters, mb_id, h_time, h_seq, h_slot, h_kind, box):
    """A step ended: up to `group` parked slots take the next step's microbatches at time t."""
    counters[4] = 0
    for v in range(pos.shape[0]):
        if pos[v] == PARKED and counters[4] < group:
            _new_microbatch(v, pos, counters, mb_id)
            box[1] += 1
            box[0] = _push(h_time, h_seq, h_slot, h_kind, box[0], box[1], t, v, RETRY)


@njit(cache=True)
def _issue(t, w, num_stages, stage, prio, ema, order, banned, started, phase, epoch, pos, path, path_epoch, sent,
           hop_out, h_time, h_seq, h_slot, h_kind, box):
    """Send slot w's microbatch on its next hop: IWRR forward (the router skipping `phase` picks at
    its first of a stage), the remembered peer backward."""
    forward = pos[w] < num_stages
    s = pos[w] if forward else 2 * num_stages - 1 - pos[w]
    if forward:
        if not started[s] and iwrr_skip(stage, prio, order, banned, s, phase):
            started[s] = True
        p = iwrr_pick(stage, prio, ema, order, banned, s)
        if p < 0:  # no live peer on this stage: the pipeline is paused for this trainer
            box[1] += 1
            box[0] = _push(h_time, h_seq, h_slot, h_kind, box[0], box[1], t + RETRY_SECONDS, w, RETRY)
            return
        path[w, s] = p
        path_epoch[w, s] = epoch[p]
    p = path[w, s]
    sent[w] = t
    box[1] += 1
    box[0] = _push(h_time, h_seq, h_slot, h_kind, box[0], box[1], t + hop_out[p], w, ARRIVE)


@njit(cache=True)
def _all_reduce(t, stage, free_at, t_ar, num_stages):
    """Every stage averages gradients: its peers stop for the all-reduce time of its size."""
    counts = np.zeros(num_stages, np.int64)
    for i in range(stage.shape[0]):
        if stage[i] >= 0:
            counts[stage[i]] += 1
    for i in range(stage.shape[0]):
        s = stage[i]
        if s >= 0:
            free_at[i] = max(free_at[i], t) + t_ar[s, min(counts[s], t_ar.shape[1] - 1)]


@njit(cache=True)
def seed_noise(seed: int) -> None:
    """Seed numba's generator, which draws the service-time noise inside `run_until`."""
    np.random.seed(seed)
