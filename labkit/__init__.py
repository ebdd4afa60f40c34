"""labkit: a lab for decentralized training of large models on unreliable machines.

>>> import labkit
>>> run = labkit.launch(labkit.RunConfig(stages=2, peers=2, steps=20))
>>> run.wait()["val_loss_after"]  # doctest: +SKIP
"""

from labkit.config import ConfigError, DataConfig, ModelConfig, RunConfig, SyncConfig
from labkit.executors.atom.config import AtomConfig
from labkit.executors.pipeline.config import PipelineConfig
from labkit.executors.taskpool.config import TaskPoolConfig

__version__ = "0.1.0"
__all__ = ["AtomConfig", "ConfigError", "DataConfig", "ModelConfig", "PipelineConfig", "RunConfig", "RunHandle",
           "SyncConfig", "TaskPoolConfig", "launch"]


def __getattr__(name: str):
    """Import the torch-backed runtime only when it is used, so configs stay light."""
    if name == "launch":
        from labkit.runtime.launch import launch

        return launch
    if name == "RunHandle":
        from labkit.runtime.handle import RunHandle

        return RunHandle
    if name == "lab":
        import labkit.lab

        return labkit.lab
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")
