"""LaunchForm: driven through its widgets' `.value` and `.click()` as a notebook would.

A bad value must show the config's own message (computed here by building the same config)
beside its field, stay as typed (nothing clamped) and keep Launch disabled; Launch on a valid
form starts a real in-process run.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import pytest

import labkit
from labkit import AtomConfig, TaskPoolConfig
from labkit.config import CompressionConfig, ConfigError, ModelConfig, RunConfig, SyncConfig
from labkit.config_checks import field_comments
from labkit.executors.registry import NAMES
from labkit.lab.form import LaunchForm


def shown(form: LaunchForm) -> dict[str, str]:
    """The error text beside every field that shows one."""
    return {key: html.unescape(error.value) for key, error in form.errors.items() if error.value}


def message(build: Callable[[], object]) -> str:
    with pytest.raises(ConfigError) as raised:
        build()
    return str(raised.value)


@dataclass
class _Commented:
    # a comment on a line of its own belongs to no field
    first: int = 1  # the first field
    second: str = "x"

    def method(self) -> None:
        local: int = 2  # not a field
        del local


def test_field_comments_are_read_from_the_source() -> None:
    assert field_comments(_Commented) == {"first": "the first field"}
    comments = field_comments(RunConfig)
    assert comments["lr"] == "peak learning rate, in (0, MAX_LR]"
    assert comments["stages"] == "pipeline stages S"
    assert "model" not in comments  # no comment after it
    assert field_comments(SyncConfig)["inner_steps"] == "H: local steps between outer steps (DiLoCo only)"
    form = LaunchForm(lambda cfg, options: None)
    assert form.fields["lr"].tooltip == "peak learning rate, in (0, MAX_LR = 10]"
    assert form.fields["sync.inner_steps"].tooltip == "H: local steps between outer steps (DiLoCo only)"


def choose_owner(form: LaunchForm, key: str) -> None:
    """Choose the executor whose own field `key` is ("atom.replicas": ATOM), if it is one's."""
    if key.split(".")[0] in NAMES:
        form.fields["executor"].value = key.split(".")[0]


def test_another_executors_field_is_not_checked_while_greyed_out(small_run: RunConfig) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    form.fields["atom.replicas"].value = "many"
    assert shown(form) == {} and form.config() == small_run  # the run has no ATOM config to hold it
    form.fields["executor"].value = "atom"
    assert shown(form) == {"atom.replicas": "AtomConfig.replicas='many' is not allowed: an integer"}


@pytest.mark.parametrize(("key", "typed", "build"), [
    ("lr", "20", lambda cfg: cfg.replace(lr=20.0)),
    ("stages", "9", lambda cfg: cfg.replace(stages=9)),
    ("peers", "2,2,2", lambda cfg: cfg.replace(peers=(2, 2, 2))),
    ("layer_split", "1,1", lambda cfg: cfg.replace(layer_split=(1, 1))),
    ("global_batch", "10", lambda cfg: cfg.replace(global_batch=10)),
    ("rebalance_period", "-1", lambda cfg: cfg.replace(rebalance_period=-1.0)),
    ("sync.outer_lr", "3", lambda cfg: SyncConfig(outer_lr=3.0)),
    ("compression.factor", "0", lambda cfg: CompressionConfig(factor=0)),
    ("atom.replicas", "0", lambda cfg: AtomConfig(replicas=0)),
    ("atom.budget_mb", "-1", lambda cfg: AtomConfig(budget_mb=-1.0)),
    ("atom.accumulation", "0", lambda cfg: AtomConfig(accumulation=0)),
    ("taskpool.frontal", "0", lambda cfg: TaskPoolConfig(frontal=0)),
    ("taskpool.slack", "0.5", lambda cfg: TaskPoolConfig(slack=0.5)),
    ("taskpool.grace", "-1", lambda cfg: TaskPoolConfig(grace=-1.0)),
])
def test_a_refused_value_shows_the_configs_error_beside_its_field(small_run: RunConfig, key: str, typed: str,
                                                                    build: Callable[[RunConfig], object]) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    choose_owner(form, key)
    before = form.fields[key].value
    assert shown(form) == {} and not form.launch_button.disabled
    form.fields[key].value = typed
    assert shown(form) == {key: message(lambda: build(small_run))}
    assert form.fields[key].value == typed  # kept as typed: nothing clamped
    assert form.launch_button.disabled
    with pytest.raises(ConfigError, match="is not allowed"):
        form.config()
    form.fields[key].value = before
    assert shown(form) == {} and not form.launch_button.disabled


@pytest.mark.parametrize(("key", "typed", "want"), [
    ("stages", "abc", "RunConfig.stages='abc' is not allowed: an integer"),
    ("lr", "fast", "RunConfig.lr='fast' is not allowed: a number"),
    ("sync.inner_steps", "2.5", "SyncConfig.inner_steps='2.5' is not allowed: an integer"),
    ("peers", "2,x", "RunConfig.peers='2,x' is not allowed: an integer, or a comma list of integers (one per stage)"),
    ("atom.budget_mb", "lots", "AtomConfig.budget_mb='lots' is not allowed: blank (the least that works) or a number"),
    ("taskpool.backward", "two", "TaskPoolConfig.backward='two' is not allowed: an integer, or a comma list of "
                                 "integers (one per stage)"),
])
def test_a_value_that_does_not_parse_says_what_is_allowed(small_run: RunConfig, key: str, typed: str, want: str) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    choose_owner(form, key)
    form.fields[key].value = typed
    assert shown(form) == {key: want}
    assert form.launch_button.disabled


def test_errors_across_configs_show_beside_the_field_to_change(small_run: RunConfig) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    form.fields["compression.boundary"].value = "maxout"
    form.fields["compression.factor"].value = "3"  # does not divide nano's d_model=64
    want = message(lambda: small_run.replace(compression=CompressionConfig(boundary="maxout", factor=3)))
    assert shown(form) == {"compression.factor": want}
    form.fields["compression.factor"].value = "4"
    assert shown(form) == {} and form.config().compression == CompressionConfig(boundary="maxout", factor=4)

    delayed = LaunchForm(lambda cfg, options: None, defaults=small_run.replace(delayed_updates=True))
    delayed.fields["sync.mode"].value = "diloco"
    want = message(lambda: small_run.replace(delayed_updates=True, sync=SyncConfig(mode="diloco")))
    assert shown(delayed) == {"sync.mode": want} and delayed.launch_button.disabled


def test_the_executor_choice_builds_an_atom_config_and_greys_out_the_other_executors_fields(
        small_run: RunConfig) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    assert form.fields["executor"].value == "swarm" and form.fields["atom.budget_mb"].value == ""  # None: blank
    atom_fields = [key for key in form.fields if key.startswith("atom.")]
    assert all(form.fields[key].disabled for key in atom_fields) and not form.fields["stages"].disabled
    form.fields["executor"].value = "atom"
    assert all(form.fields[key].disabled for key in ("stages", "peers", "trainers", "sync.mode", "compression.codec"))
    assert not any(form.fields[key].disabled for key in atom_fields)
    form.fields["atom.replicas"].value = "3"
    form.fields["atom.accumulation"].value = "4"
    form.fields["atom.budget_mb"].value = "1.5"
    form.fields["atom.prefetch"].value = False
    assert shown(form) == {} and not form.launch_button.disabled
    assert form.config() == small_run.replace(executor=AtomConfig(replicas=3, accumulation=4,
                                                                              budget_mb=1.5, prefetch=False))
    form.fields["atom.budget_mb"].value = ""
    assert form.config().executor.budget_mb is None

    form.fields["backend"].value = "dask"  # replicas as Dask actors: each uses its worker's GPU if it has one
    assert shown(form) == {} and form.launch_options() == {"backend": "dask"}
    form.fields["atom.device"].value = "cuda"
    with pytest.raises(ValueError) as refused:  # launch's own refusal: it starts nothing
        labkit.launch(small_run.replace(executor=AtomConfig(device="cuda")), backend="dask")
    assert shown(form) == {"backend": str(refused.value)} and form.launch_button.disabled
    assert str(refused.value).startswith("atom.device='cuda' is not allowed with backend='dask': 'cpu'")
    form.fields["atom.device"].value = "cpu"
    form.fields["executor"].value = "swarm"
    assert shown(form) == {} and form.config().executor.name == "swarm"

    shared = small_run.replace(model=ModelConfig(size="nano", seq_len=32, share_layers=True))
    form = LaunchForm(lambda cfg, options: None, defaults=shared)
    form.fields["executor"].value = "atom"
    assert shown(form) == {"executor": message(lambda: shared.replace(executor="atom"))}


def enabled(form: LaunchForm) -> set[str]:
    """The config fields the form lets one edit."""
    return {key for key, widget in form.fields.items() if not widget.disabled} - {"backend", "scheduler"}


def test_each_executor_greys_out_exactly_the_fields_only_other_executors_read(small_run: RunConfig) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    shared = {"executor", "model.size", "global_batch", "microbatch", "steps", "lr"}
    for executor, want in [("swarm", {"stages", "peers", "layer_split", "trainers", "rebalance_period", "world"}
                            | {key for key in form.fields if key.startswith(("compression.", "sync."))}),
                           ("atom", {"atom.replicas", "atom.budget_mb", "atom.accumulation", "atom.device",
                                     "atom.prefetch"}),
                           ("taskpool", {"stages", "peers", "layer_split", "taskpool.frontal", "taskpool.backward",
                                         "taskpool.slack", "taskpool.grace"})]:
        form.fields["executor"].value = executor
        assert enabled(form) == shared | want, executor
    assert set(form.fields["executor"].options) == set(NAMES)


def test_the_executor_choice_builds_a_task_pool_config_for_either_backend(small_run: RunConfig) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    assert form.fields["taskpool.slack"].tooltip == "times a task's expected compute time before it is overdue (>= 1)"
    assert form.fields["taskpool.frontal"].tooltip == field_comments(TaskPoolConfig)["frontal"]
    form.fields["executor"].value = "taskpool"
    form.fields["taskpool.backward"].value = "2"
    form.fields["taskpool.slack"].value = "1.5"
    form.fields["taskpool.grace"].value = "0"
    assert shown(form) == {} and not form.launch_button.disabled
    assert form.config() == small_run.replace(executor=TaskPoolConfig(backward=2, slack=1.5,
                                                                                            grace=0.0))
    form.fields["backend"].value = "dask"  # clients as Dask actors
    assert shown(form) == {} and form.launch_options() == {"backend": "dask"} and not form.launch_button.disabled
    form.fields["taskpool.slack"].value = "0.5"
    assert shown(form) == {"taskpool.slack": message(lambda: TaskPoolConfig(slack=0.5))} and form.launch_button.disabled


def test_backend_choices_give_launch_options(small_run: RunConfig) -> None:
    form = LaunchForm(lambda cfg, options: None, defaults=small_run)
    assert form.launch_options() == {"backend": "inprocess"} and form.fields["scheduler"].disabled
    form.fields["backend"].value = "dask"
    assert form.launch_options() == {"backend": "dask"}
    form.fields["backend"].value = "scheduler"
    assert shown(form) == {"scheduler": "launch.scheduler='' is not allowed: a Dask scheduler address, "
                                        "e.g. tcp://host:8786"}
    assert form.launch_button.disabled and not form.fields["scheduler"].disabled
    form.fields["scheduler"].value = " tcp://127.0.0.1:8786 "
    assert form.launch_options() == {"backend": "dask", "scheduler": "tcp://127.0.0.1:8786"}
    assert not form.launch_button.disabled


def test_a_failing_launch_shows_one_line(small_run: RunConfig) -> None:
    def refuse(cfg: RunConfig, options: dict) -> None:
        raise RuntimeError("no cluster at that address\nsecond line")

    form = LaunchForm(refuse, defaults=small_run)
    form.launch_button.click()
    assert html.unescape(form.message.value) == "launch: no cluster at that address"


def test_launch_starts_a_real_run_of_the_config_shown(small_run: RunConfig) -> None:
    launched: list[tuple[labkit.RunHandle, dict]] = []
    form = LaunchForm(lambda cfg, options: launched.append((labkit.launch(cfg, **options), options)),
                      defaults=small_run)
    assert form.fields["layer_split"].value == ""  # an even split reads "as even as possible"
    form.fields["peers"].value = "1,2"
    form.fields["trainers"].value = "2"
    form.fields["steps"].value = "3"
    form.fields["compression.codec"].value = "fp16"
    form.launch_button.click()
    [(run, options)] = launched
    assert options == {"backend": "inprocess"}
    assert run.config == small_run.replace(peers=(1, 2), trainers=2, steps=3, compression=CompressionConfig(codec="fp16"))
    run.wait_for(step=1)
    assert [len(stage["peers"]) for stage in run.state()["stages"]] == [1, 2]


def test_a_preset_world_sets_the_runs_shape_and_only_swarm_reads_it(small_run: RunConfig) -> None:
    form = LaunchForm(lambda cfg, options: None, small_run)
    assert form.fields["world"].value is None and form.config().world is None
    form.fields["world"].value = "world-16"
    cfg = form.config()
    assert (cfg.world, cfg.stages, cfg.peers, cfg.trainers, cfg.inflight) == ("world-16", 2, (8, 8), 4, 2)
    assert not form.launch_button.disabled and cfg.steps == small_run.steps  # the rest stays the form's
    form.fields["executor"].value = "pipeline"
    assert form.fields["world"].disabled and form.config().world is None
