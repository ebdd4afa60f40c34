"""A notebook's "interrupt kernel" with a Dask run live: Jupyter signals the kernel's whole process
group (jupyter_client's LocalProvisioner.send_signal), the embedded cluster's workers included.
The interrupted cell stops; the run, its workers and its handle go on."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import pytest
from jupyter_client.manager import KernelManager

pytestmark = pytest.mark.slow

LAUNCH = """
import labkit
from labkit.config import DataConfig, ModelConfig, RunConfig
cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=2_000_000), global_batch=8,
                microbatch=4, steps=100_000, eval_every=0)
run = labkit.launch(cfg, backend="dask")
run.wait_for(step=2, timeout=300)
"""
BUSY = "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.1)\n"
AFTER = """
step = run.state()["step"]
run.wait_for(step=step + 3, timeout=120)
print("status", run.state()["status"], "killed", len([e for e in run.events.history("peer") if e["state"] == "killed"]))
run.stop()
print("ended", run.wait(120)["status"])
"""


@pytest.fixture
def kernel() -> Iterator[KernelManager]:
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    try:
        yield manager
    finally:
        manager.shutdown_kernel(now=True)


def _execute(client, code: str, timeout: float, *, interrupt: KernelManager | None = None) -> tuple[str, str]:
    """Run `code`; its stdout and the reply's status (interrupting once it prints, if asked)."""
    msg_id = client.execute(code)
    out, interrupted = [], False
    while True:
        try:
            msg = client.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output within {timeout} s; so far {''.join(out)!r}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
            if interrupt is not None and not interrupted:
                interrupt.interrupt_kernel()
                interrupted = True
        elif kind == "status" and content["execution_state"] == "idle":
            break
    reply = client.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:  # wait_for_ready's kernel_info reply comes first
        reply = client.get_shell_msg(timeout=timeout)
    return "".join(out), reply["content"]["status"]


def test_interrupting_the_kernel_leaves_a_dask_run_running(kernel: KernelManager) -> None:
    client = kernel.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    try:
        _, status = _execute(client, LAUNCH, 400)
        assert status == "ok"
        _, status = _execute(client, BUSY, 60, interrupt=kernel)
        assert status == "error"  # the cell got its KeyboardInterrupt
        out, status = _execute(client, AFTER, 300)
        assert status == "ok", out
        assert "status running killed 0" in out and "ended stopped" in out, out
    finally:
        client.stop_channels()
