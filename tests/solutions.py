"""The answers to the tutorials' exercises: for teachers, and for the test suite.

Every tutorial's exercise cell starts unanswered (`answer = None`), so Run All prints "Not answered
yet" in its check cell. When the suite runs a tutorial (nbmake), that exercise cell's metadata
`nbmake.post_cell_execute` reads `SOLUTIONS[<notebook name>]` from this file into `answer` (the
same metadata block whose `nbmake.mock` shrinks the `parameters` cell), so the check cell runs on
the answer below and fails the test when it is wrong. Kept here, not in notebooks/, so that a
student does not come across it. The why is for the teacher; the check cells explain it too.
"""

from __future__ import annotations

SOLUTIONS: dict[str, object] = {
    # the notebook kills s1p0, so stage 1's other peer serves all of its microbatches
    "00-quickstart": "s1p1",
    # the widest layer computes most per byte sent, so a 200 ms round trip costs it the least
    "01-square-cube-law": "gpt3",
    # IWRR picks in proportion to 1 / response time: 0.1 s vs 0.3 s is 3 picks to 1
    "02-stochastic-wiring": 0.75,
    # the global batch (16): recomputed microbatches accumulate only at the stage that lost them
    "03-fault-tolerance": 16,
    # stage 0 starts with three peers, stage 1 with one slow one: stage 0 gives a peer to stage 1
    "04-adaptive-rebalancing": (0, 1),
    # one block of the nano model (d = 64): 12 d^2 + 13 d
    "05-resizing-stages": 12 * 64**2 + 13 * 64,
    # 4x on activations, less overall: the int64 token ids and targets are not quantized
    "06-compression": 3.8,
    # (1 - 1/50) x the large model's data-parallel share of all bytes with all-reduce
    "07-diloco-swarm": 0.38,
    # two organizations joined by one slow link: random groups put it in almost every all-reduce
    "08-planning-a-heterogeneous-world": "dtfm_multidc",
    # 3 peers + 1 trainer + 1 spare worker (the coordinator runs in the notebook's kernel)
    "09-a-dask-cluster": 5,
    # with 4 GB the sub-models are small: two microbatches' forward do not hide the next load
    "10-atom-swapping": 3,
    # the servers know who held which slice: nothing beyond the lost slices is computed again
    "11-task-pool": 0,
    # 1F1B: stage 0 runs 3 warm-up forwards and one more before its first backward, then one in, one out
    "12-swarm-vs-a-synchronous-pipeline": 4,
    # int8 shortens a far hop's 200 Mb/s transfer the most: its response time falls, IWRR picks it more
    "13-simulated-vs-real": "up",
}
