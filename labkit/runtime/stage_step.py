"""A stage peer's side of the step boundary: it checks its gradient sum against the ledger, reduces
it with its stage's other peers over the ring (labkit/runtime/ring.py), and applies the step.

The coordinator sends each peer a `StepPlan` (small: attempt keys and the ring's contacts, no
tensor). `prepare` answers with what the peer holds; the peer keeps the reduced sum until
`commit_step` applies it (so no peer steps unless every stage's reduce completed), or applies it at
once where the plan says so (`apply`: every stage has one peer, one round trip). DiLoCo's inner
step reduces nothing; its outer step averages the pseudo-gradients over the ring (`outer_reduce`,
then `outer_apply`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from labkit.config import SyncConfig
from labkit.runtime.links import LinkedHandle, Links
from labkit.runtime.ring import Mailbox, RingAborted, RingTimeout, ring_allreduce
from labkit.runtime.shards import save_shard, stage_state
from labkit.swarm.ledger import AttemptKey


@dataclass(frozen=True)
class StepPlan:
    """One peer's part of one boundary (what `prepare` does)."""

    tag: int  # the ring's tag (increasing over the run)
    step: int  # the step being taken (its number is step + 1)
    credited: dict[AttemptKey, int]  # the attempts the ledger credits this peer, with their samples
    ring: tuple[tuple[str, Any], ...]  # the stage's peers (name, contact), in ring order (this one at `rank`)
    rank: int
    local: bool  # DiLoCo's inner step: no reduce, the peer steps on its own sum
    apply: bool  # step at once once the sum is reduced (no `commit_step` will come)
    timeout: float  # seconds to wait for a neighbour's chunk


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One 1-D tensor holding `tensors` end to end (what a ring reduces)."""
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """`flat` cut back into tensors shaped as `like`."""
    return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in like]), like)]


def finite(t: torch.Tensor) -> bool:
    """Whether every element of `t` is finite, in one reduction and no tensor of its size (a norm
    that overflows counts as not finite: only diverged values come near)."""
    return bool(torch.isfinite(torch.linalg.vector_norm(t)))


class StepTaking:
    """The boundary's and the checkpoints' requests, for `StagePeer` (which provides `accum` and
    `flat_accum` (its sums, and the one flat buffer they are views of), `attempts`, `params`, `optimizer_step`, `local_step`, `outer`, `state`, `load_state`, `ensure_diloco`, `dial`)."""

    mailbox: Mailbox
    links: Links | None = None  # the emulated links to its stage's other peers (`RunConfig.links`), if any
    _prepared: tuple[int, bool, Any] | None = None  # (ring tag, DiLoCo inner step, the sum or (own sum, samples))
    _outer: tuple[int, list[torch.Tensor]] | None = None  # (ring tag, the stage's averaged pseudo-gradient)

    def prepare(self, plan: StepPlan) -> dict[str, Any]:
        """Check the held attempts against the plan's credits; if they match, reduce the sum over
        the ring and keep it (or apply it, `plan.apply`). Answers {"held": the attempts,
        "mismatch": whether they differ from the credits (no ring then), "ring": why the ring failed
        or None, "late": the rank of the left neighbour if it sent nothing in time, "nbytes": the
        sum's bytes, "sum_finite": whether the reduced sum is finite (a step on one that is not is
        never applied), "finite": whether the parameters are finite after a step applied here}."""
        held = dict(self.attempts)
        answer: dict[str, Any] = {"held": held, "mismatch": False, "ring": None, "late": None, "nbytes": 0,
                                  "sum_finite": None, "finite": None}
        self._prepared = None
        if held != plan.credited:  # the coordinator reconciles (drop, or the run stops loudly), and ends the ring
            return {**answer, "mismatch": True}
        if plan.local:
            self._prepared = plan.tag, True, (self.accum, sum(held.values()))
        else:
            try:
                flat = self._ring(plan, self.flat_accum)
            except RingAborted as exc:
                late = (plan.rank - 1) % len(plan.ring) if isinstance(exc, RingTimeout) else None
                return {**answer, "ring": str(exc), "late": late}
            self._prepared = plan.tag, False, unflatten(flat, self.accum)
            answer["nbytes"] = flat.numel() * flat.element_size()
        answer["sum_finite"] = finite(self.flat_accum if plan.local else flat)
        if plan.apply and answer["sum_finite"]:
            answer["finite"] = self.commit_step(plan.tag, plan.step)
        return answer

    def _ring(self, plan: StepPlan, flat: torch.Tensor) -> torch.Tensor:
        if len(plan.ring) == 1:
            return flat
        name, contact = plan.ring[(plan.rank + 1) % len(plan.ring)]
        if contact is None:
            raise RingAborted(f"ring {plan.tag}: the right neighbour {name} cannot be reached")
        right = self.dial(contact) if self.links is None else LinkedHandle(self.links.link(name), self.dial(contact))
        return ring_allreduce(flat, plan.rank, len(plan.ring), plan.tag,
                              lambda step, chunk: right.call("post", plan.tag, step, chunk), self.mailbox, plan.timeout)

    def commit_step(self, tag: int, step: int) -> bool:
        """Apply the sum `prepare` kept for ring `tag`; whether the parameters are finite after (with
        delayed updates, those the next batch runs on: the step before's)."""
        kept, self._prepared = self._prepared, None
        if kept is None or kept[0] != tag:
            raise RuntimeError(f"{self.name}: no prepared step for ring {tag} (holds {kept and kept[0]})")
        _, local, payload = kept
        if not local:
            self.optimizer_step(payload, step)
        elif payload[1]:  # DiLoCo's inner step, on this peer's own sum (a peer credited nothing skips it)
            self.local_step(*payload, step)
        return all(finite(p) for p in self.params)

    def outer_reduce(self, tag: int, ring: tuple[tuple[str, Any], ...], rank: int, timeout: float) -> dict[str, Any]:
        """DiLoCo's outer step, first half: the stage's pseudo-gradients averaged over the ring,
        weighted by the samples each peer processed this round; kept for `outer_apply`."""
        delta, samples = self.outer.pseudo_gradient(self.params), self.outer.round_samples
        plan = StepPlan(tag, 0, {}, ring, rank, False, False, timeout)
        flat = flatten(delta)
        try:
            summed = self._ring(plan, torch.cat([flat * samples, flat.new_tensor([samples])]))
            if not summed[-1]:  # no peer processed a sample this round: equal weights (`sample_weights`)
                summed = self._ring(replace(plan, tag=tag + 1), torch.cat([flat, flat.new_tensor([1])]))
        except RingAborted as exc:
            return {"ring": str(exc), "nbytes": 0}
        self._outer = tag, unflatten(summed[:-1] / summed[-1], delta)
        return {"ring": None, "nbytes": flat.numel() * flat.element_size()}

    def outer_apply(self, tag: int) -> None:
        """DiLoCo's outer step, second half: apply the average `outer_reduce` kept for ring `tag`."""
        kept, self._outer = self._outer, None
        if kept is None or kept[0] != tag:
            raise RuntimeError(f"{self.name}: no outer average for ring {tag}")
        self.outer_step(kept[1])

    # -- checkpoints and rollback ------------------------------------------------------------------
    def save_shard(self, path: str) -> None:
        """Write this stage's state to `path` (a periodic checkpoint's shard)."""
        save_shard(path, self.state())

    def restore(self, state: dict[str, Any] | str, sync: SyncConfig) -> None:
        """Go back to a checkpoint: this stage's state (or the shard file holding it), in the sync
        mode the run was in then; what the peer held of later steps (gradients, activations, a
        prepared step) is dropped."""
        self.clear_gradients()
        self.drop_stash()
        self._prepared = self._outer = None
        self.outer = None  # a shard written in DiLoCo carries its outer state
        self.load_state(stage_state(state))
        if sync.mode == "diloco":
            self.ensure_diloco(sync)

    def copy_from(self, contact: Any) -> None:
        """Adopt the state of a live peer of this stage (a joiner whose start outlasted a step)."""
        self.load_state(self.dial(contact).call("state").result(self.cfg.peer_timeout))
