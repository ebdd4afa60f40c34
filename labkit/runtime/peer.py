"""A stage server: one replica of one stage, served by its own request queue and thread.

Trainers submit forward / backward / loss requests and get futures back (the in-process
transport, labkit/runtime/request_queue.py). The peer runs them one at a time, keeps the stage
inputs (and autograd graph) of every microbatch attempt in flight so backward can retrace it, and
accumulates parameter gradients until the swarm's step, with the samples of each attempt its sum
holds (what the step boundary reconciles with the ledger's credits). Killing a peer drops its
queue, its stash and its accumulated gradients, as a crash would.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import torch.nn.functional as F

from labkit.config import RunConfig, SyncConfig
from labkit.model import Stage
from labkit.runtime.diloco import OuterState
from labkit.runtime.links import Links, load_links
from labkit.runtime.optim import apply_step, make_optimizer
from labkit.runtime.pacing import peer_pacing
from labkit.sim.seats import peer_region
from labkit.runtime.request_queue import RequestQueue
from labkit.runtime.ring import IMMEDIATE, Mailbox, deliver
from labkit.runtime.stage_step import StepTaking, unflatten
from labkit.swarm.ledger import AttemptKey
from labkit.wire import Codec, Encoded, get_codec


class PeerDied(RuntimeError):
    """The peer was killed; what it held is gone."""


class StagePeer(StepTaking, RequestQueue):
    """Serves stage `stage` with its own copy of the stage's parameters and optimizer. The peers of
    a stage reach each other through `dial(contact)` (a handle with `call`): here a neighbour's
    contact is the neighbour itself; a Dask peer dials its neighbours' data planes."""

    def __init__(self, name: str, stage: int, module: Stage, cfg: RunConfig, device: str = "cpu",
                 emulates: str | None = None) -> None:
        self.name, self.stage, self.cfg, self.device = name, stage, cfg, torch.device(device)
        self.module = module.to(self.device)
        self.params = [p for p in module.parameters()]
        # Delayed updates: the optimizer steps a shadow copy in the background, adopted one step later
        self.shadow = [torch.nn.Parameter(p.detach().clone()) for p in self.params] if cfg.delayed_updates else None
        self.optimizer = make_optimizer(self.shadow or self.params, cfg)
        self._updater = ThreadPoolExecutor(1, thread_name_prefix=f"dpu-{name}") if cfg.delayed_updates else None
        self._pending: Future | None = None
        self.outer: OuterState | None = None  # set while the stage syncs with DiLoCo
        self._codecs: dict[str, Codec] = {}
        self.clear_gradients()  # `accum` and `attempts`: the sums, and the attempts (with samples) they hold
        self.worker = "local"  # where the peer runs (a Dask worker's address for remote peers)
        self._stash: dict[AttemptKey, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self._killed = threading.Event()  # ends a held request at once
        self.mailbox = Mailbox()  # ring chunks from the left neighbour
        scenario, place = load_links(cfg), emulates or name  # whose region and device, in a world
        self.links = None if scenario is None else Links(scenario, peer_region(scenario, place))
        self.pacing = peer_pacing(cfg, scenario, place, self._killed, lambda: PeerDied(name))  # delay or device speed
        self.dial: Callable[[Any], Any] = lambda contact: contact
        super().__init__(f"peer-{name}", lambda: PeerDied(name), lambda: self.pacing.last)

    @property
    def contact(self) -> StagePeer:
        """How the stage's other peers reach this one (in-process: itself)."""
        return self

    def call(self, method: str, *args: Any) -> Future:
        """Queue `method(*args)`; ring traffic from a peer of this process is served at once instead."""
        if method not in IMMEDIATE:
            return super().call(method, *args)
        out: Future = Future()
        if self._killed.is_set():
            out.set_exception(PeerDied(self.name))
        else:
            deliver(self.mailbox, method, args, same_process=True)
            out.set_result(None)
        return out

    def kill(self) -> None:
        """Crash: stop answering, drop queued work, stashed activations and accumulated gradients."""
        self._killed.set()
        self.mailbox.close(f"{self.name} died")
        super().kill()
        self._stash.clear()
        self.accum, self.attempts = [], {}

    @property
    def samples(self) -> int:
        """Samples whose gradient is in `accum` (read from other threads: a copy, taken at once)."""
        return sum(self.attempts.copy().values())

    def close(self) -> None:
        """Stop after the queued requests; later ones, and one held on purpose (a delay: it held a
        run's end 10 s), fail at once (`PeerDied`): no caller waits."""
        self._killed.set()
        super().close()
        if self._updater is not None:
            self._updater.shutdown(wait=True)

    # -- requests (run on the worker thread) --------------------------------------------------
    @property
    def delay(self) -> float:
        """Extra seconds every data request waits (`set_delay`)."""
        return self.pacing.delay

    def set_delay(self, seconds: float) -> None:
        """Add `seconds` to every data request from now on (0 restores full speed)."""
        self.pacing.delay = float(seconds)

    def _decode(self, x: torch.Tensor | Encoded) -> torch.Tensor:
        """A tensor as received: decoded if it came through a wire codec (token ids come raw)."""
        return (self._codec(x.codec).decode(x.to(self.device)) if isinstance(x, Encoded) else x).to(self.device)

    def _encode(self, codec: str, x: torch.Tensor) -> Encoded:
        """`x` encoded for the wire, its payload in host memory (where sockets read it)."""
        return self._codec(codec).encode(x).to("cpu")

    def _codec(self, name: str) -> Codec:
        if name not in self._codecs:
            self._codecs[name] = get_codec(name)
        return self._codecs[name]

    def forward(self, attempt: AttemptKey, x: torch.Tensor | Encoded, keep: bool, codec: str) -> Encoded:
        """Run the stage on `x`; if backward will come (`keep`), remember what it needs."""
        with self.pacing.request("forward", self.stage):
            x = self._decode(x)
            if not keep:
                with torch.no_grad():
                    return self._encode(codec, self.module(x))
            if not self.module.is_first:
                x = x.detach().requires_grad_(True)
            if self.cfg.activation_checkpointing:
                with torch.no_grad():
                    out = self.module(x)
                self._stash[attempt] = (x, None)
            else:
                with torch.enable_grad():
                    out = self.module(x)
                self._stash[attempt] = (x, out)
            return self._encode(codec, out.detach())

    def backward(self, attempt: AttemptKey, grad_out: Encoded, accumulate: bool, samples: int,
                 codec: str) -> Encoded | None:
        """Backpropagate `grad_out` through the stashed microbatch; accumulate if asked."""
        with self.pacing.request("backward", self.stage):
            x, out = self._stash.pop(attempt)
            if out is None:  # activation checkpointing: recompute the forward with a graph
                with torch.enable_grad():
                    out = self.module(x)
            grad_x = self._grads(attempt, x, out, self._decode(grad_out), accumulate, samples)
            return None if grad_x is None else self._encode(codec, grad_x)

    def loss(self, attempt: AttemptKey, x: torch.Tensor | Encoded, targets: torch.Tensor, scale: float,
             accumulate: bool, samples: int, codec: str) -> tuple[float, Encoded | None]:
        """Last stage: forward, cross-entropy summed and scaled, backward at once."""
        with self.pacing.request("loss", self.stage):
            x = self._decode(x)
            if not self.module.is_first:
                x = x.detach().requires_grad_(True)
            with torch.enable_grad():
                logits = self.module(x)  # (B, T, vocab)
                loss = F.cross_entropy(logits.flatten(0, 1), targets.to(self.device).flatten(), reduction="sum") * scale
            grad_x = self._grads(attempt, x, loss, None, accumulate, samples)
            return float(loss.detach()), None if grad_x is None else self._encode(codec, grad_x)

    def _grads(self, attempt: AttemptKey, x: torch.Tensor, out: torch.Tensor, grad_out: torch.Tensor | None,
               accumulate: bool, samples: int) -> torch.Tensor | None:
        wrt = ([] if self.module.is_first else [x]) + (self.params if accumulate else [])
        if not wrt:
            return None
        grads = torch.autograd.grad(out, wrt, grad_out, allow_unused=True)
        grad_x = None if self.module.is_first else grads[0]
        if accumulate:
            for buf, g in zip(self.accum, grads[len(wrt) - len(self.params):]):
                if g is not None:
                    buf.add_(g)
            self.attempts[attempt] = self.attempts.get(attempt, 0) + samples
        return grad_x

    def echo(self, x: Encoded) -> Encoded:
        """Send `x` straight back: a round trip through the data plane without compute (ping)."""
        return x

    def drop_stash(self) -> None:
        """Forget activations of abandoned attempts (called between steps)."""
        self._stash.clear()

    def gradients(self) -> tuple[list[torch.Tensor], dict[AttemptKey, int]]:
        """The sums and the attempts they hold (the synchronous pipeline's core reduces them)."""
        return self.accum, dict(self.attempts)

    def clear_gradients(self) -> None:
        """Drop the accumulated gradients and their attempts (the parameters stay). The sums are
        views of one flat buffer: what the ring reduces, without a copy to gather them."""
        self.flat_accum = torch.zeros(sum(p.numel() for p in self.params), dtype=self.params[0].dtype,
                                      device=self.device)
        self.accum = unflatten(self.flat_accum, self.params)
        self.attempts = {}

    def optimizer_step(self, grads: list[torch.Tensor], step: int) -> None:
        """Apply the stage's summed gradient: every peer of a stage takes this identical step.

        With delayed updates, adopt the parameters the previous step produced, then start this
        step in the background, so the next batch is computed one update behind."""
        self.clear_gradients()
        if self.shadow is None:
            self._step(self.params, grads, step)
            return
        self._adopt_shadow()
        self._pending = self._updater.submit(self._step, self.shadow, grads, step)

    def _step(self, params: list[torch.Tensor], grads: list[torch.Tensor], step: int) -> None:
        for p, g in zip(params, grads):
            p.grad = g.to(p.device, copy=True)
        apply_step(self.optimizer, step, self.cfg)
        for p in params:
            p.grad = None

    def _finish_update(self) -> None:
        """Wait for the background update in flight (delayed updates), if there is one."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def _adopt_shadow(self) -> None:
        self._finish_update()
        with torch.no_grad():
            for p, s in zip(self.params, self.shadow):
                p.copy_(s)

    def ensure_diloco(self, sync: SyncConfig) -> None:
        """Start DiLoCo unless the state this peer loaded already carries its outer state."""
        if self.outer is None:
            self.enter_diloco(sync)

    def enter_diloco(self, sync: SyncConfig) -> None:
        """Start DiLoCo: the current parameters become the stage's global parameters."""
        self.outer = OuterState(self.params, sync)

    def leave_diloco(self) -> None:
        """Back to all-reduce: a fresh optimizer, identical on every peer of the stage."""
        self.outer = None
        self.optimizer = make_optimizer(self.params, self.cfg)

    def local_step(self, grads: list[torch.Tensor], samples: int, step: int) -> None:
        """DiLoCo inner step on this peer's own gradients, rescaled to a mean over its samples."""
        scale = self.cfg.global_batch / samples
        self.clear_gradients()
        self._step(self.params, [g * scale for g in grads], step)
        self.outer.round_samples += samples

    def outer_step(self, delta: list[torch.Tensor]) -> None:
        """Apply the stage's averaged pseudo-gradient; restart from the new global parameters."""
        self.outer.outer_step([d.to(self.device) for d in delta], self.params)
        if self.outer.cfg.inner_state == "reset":
            self.optimizer = make_optimizer(self.params, self.cfg)

    def state(self) -> dict[str, Any]:
        """Parameters and optimizer state, copied (what a joining neighbour downloads).

        "params" are the newest parameters; with delayed updates "compute" holds the ones the
        current batch runs on (one update behind)."""
        self._finish_update()  # a background update must finish before its state is copied
        params = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        names = [n for n, _ in self.module.named_parameters()]
        state = {"params": params, "optimizer": copy.deepcopy(self.optimizer.state_dict()), "param_names": names}
        if self.shadow is not None:
            state["compute"] = params
            state["params"] = {**params, **{n: s.detach().clone() for n, s in zip(names, self.shadow)}}
        if self.outer is not None:
            state["outer"] = self.outer.state()
            state["sync"] = self.outer.cfg
            state["global_params"] = {**params, **dict(zip(names, state["outer"]["global"]))}
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        """Adopt a neighbour's (or a checkpoint's) parameters and optimizer state; a state without
        optimizer state (the run's first checkpoint: no step taken) gets a fresh optimizer."""
        self._finish_update()  # a background update would write over what is loaded
        self.module.load_state_dict(state.get("compute", state["params"]))
        if self.shadow is not None:
            named = dict(self.module.named_parameters())
            with torch.no_grad():
                for (n, _), s in zip(named.items(), self.shadow):
                    s.copy_(state["params"][n])
        self.optimizer = make_optimizer(self.shadow or self.params, self.cfg)
        if state.get("optimizer") is not None:
            self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        if state.get("outer") is not None:  # a DiLoCo joiner adopts the global parameters and outer state
            self.outer = OuterState(self.params, state["sync"])
            self.outer.load(copy.deepcopy(state["outer"]))
            self.module.load_state_dict(state["global_params"])

