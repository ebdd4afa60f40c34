"""Invalid configurations raise one ConfigError naming the field, the value and what is allowed."""

from __future__ import annotations

import math

import pytest

from labkit.config import ConfigError, DataConfig, ModelConfig, RunConfig

BAD_RUNS = [
    ("stages", {"stages": 0}, "an integer >= 1"),
    ("stages", {"stages": 5}, "at most the model's 4 layers"),
    ("stages", {"stages": 2.0}, "an integer >= 1"),
    ("peers", {"peers": 0}, "an integer >= 1"),
    ("peers", {"peers": (1, 2, 3)}, "2 integers >= 1"),
    ("layer_split", {"layer_split": (3, 2)}, "summing to the model's 4 layers"),
    ("layer_split", {"layer_split": (4, 0)}, "2 integers >= 1"),
    ("layer_split", {"layer_split": (4,)}, "2 integers >= 1"),
    ("lr", {"lr": -1e-3}, "a finite number > 0"),
    ("lr", {"lr": math.nan}, "a finite number > 0"),
    ("global_batch", {"global_batch": 30, "microbatch": 8}, "a multiple of microbatch=8"),
    ("global_batch", {"global_batch": 0}, "an integer >= 1"),
    ("microbatch", {"microbatch": -4}, "an integer >= 1"),
    ("trainers", {"trainers": 0}, "an integer >= 1"),
    ("steps", {"steps": 0}, "an integer >= 1"),
    ("optimizer", {"optimizer": "lamb"}, "one of ['adamw', 'sgd']"),
    ("gamma", {"gamma": 0.0}, "a number in (0, 1]"),
    ("peer_timeout", {"peer_timeout": 0}, "seconds > 0"),
    ("weight_decay", {"weight_decay": -0.1}, ">= 0"),
    ("warmup_steps", {"warmup_steps": -1}, "an integer >= 0"),
    ("delayed_updates", {"delayed_updates": "yes"}, "True or False"),
    ("seed", {"seed": -3}, "an integer >= 0"),
    ("model", {"model": "nano"}, "a ModelConfig"),
]


@pytest.mark.parametrize(("field", "kwargs", "allowed"), BAD_RUNS, ids=[f"{f}-{i}" for i, (f, *_) in enumerate(BAD_RUNS)])
def test_bad_run_config_names_the_field(field: str, kwargs: dict, allowed: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunConfig(**kwargs)
    message = str(info.value)
    assert message.startswith(f"RunConfig.{field}="), message
    assert allowed in message, message
    assert info.value.field == field


@pytest.mark.parametrize(("field", "kwargs"), [
    ("size", {"size": "huge"}),
    ("positions", {"positions": "alibi"}),
    ("seq_len", {"seq_len": 1}),
    ("dtype", {"dtype": "float8"}),
])
def test_bad_model_config_names_the_field(field: str, kwargs: dict) -> None:
    with pytest.raises(ConfigError, match=rf"^ModelConfig\.{field}=.* is not allowed: "):
        ModelConfig(**kwargs)


def test_bad_data_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"DataConfig\.val_fraction=1\.5 is not allowed"):
        DataConfig(val_fraction=1.5)


def test_unknown_size_lists_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="large.*medium.*nano.*small.*tiny"):
        ModelConfig(size="xl")


def test_config_is_frozen_and_keyword_only() -> None:
    cfg = RunConfig()
    with pytest.raises(AttributeError):
        cfg.steps = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunConfig(2)  # type: ignore[misc]


def test_round_trip_and_defaults() -> None:
    cfg = RunConfig(stages=3, peers=(1, 2, 1), layer_split=[2, 1, 1], model=ModelConfig(positions="rotary"))
    assert cfg.layer_split == (2, 1, 1) and cfg.peers_per_stage == (1, 2, 1)
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    assert RunConfig(stages=3).layer_split == (2, 1, 1)
    assert RunConfig(stages=3).replace(stages=2).layer_split == (2, 2)


def test_gpt2_family_sizes() -> None:
    sizes = {s: ModelConfig(size=s, seq_len=1024, vocab_size=50257).num_params() / 1e6 for s in ("tiny", "small", "medium", "large")}
    assert 13 < sizes["tiny"] < 15 and 150 < sizes["small"] < 190
    assert 380 < sizes["medium"] < 420 and 780 < sizes["large"] < 860
