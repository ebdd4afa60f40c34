"""The closed-form traffic model counts exactly what a run's hop and sync events measure."""

from __future__ import annotations

import pytest

import labkit
from labkit.config import RunConfig, SyncConfig
from labkit.swarm.traffic import dp_bytes_per_step, pipeline_bytes_per_step


@pytest.mark.parametrize(("stages", "peers", "sync"), [
    (2, 2, SyncConfig()),
    (3, (1, 2, 1), SyncConfig()),
    (2, 2, SyncConfig(mode="diloco", inner_steps=2)),
])
def test_measured_traffic_matches_the_formula(small_run: RunConfig, stages: int, peers: int, sync: SyncConfig) -> None:
    cfg = small_run.replace(stages=stages, peers=peers, steps=4, sync=sync)
    summary = labkit.launch(cfg).wait(120)
    assert summary["status"] == "finished"
    assert summary["pipeline_bytes"] == [b * cfg.steps for b in pipeline_bytes_per_step(cfg)]
    assert summary["dp_bytes"] == [b * cfg.steps for b in dp_bytes_per_step(cfg)]
    assert summary["pipeline_bytes_total"] > 0 and summary["dp_bytes_total"] > 0


def test_int8_codec_cuts_pipeline_bytes_about_fourfold(small_run: RunConfig) -> None:
    from labkit.config import CompressionConfig

    cfg = small_run.replace(stages=2, peers=1, steps=3)
    fp32 = labkit.launch(cfg).wait(120)
    int8 = labkit.launch(cfg.replace(compression=CompressionConfig(codec="int8"))).wait(120)
    assert int8["status"] == "finished" and int8["val_loss_after"] < int8["val_loss_before"]
    tokens = cfg.global_batch * cfg.model.seq_len * 8 * cfg.steps * 2  # int64 ids and targets, never coded
    ratio = (fp32["pipeline_bytes_total"] - tokens) / (int8["pipeline_bytes_total"] - tokens)
    assert 3.5 < ratio < 4.0, ratio


def test_set_compression_mid_run_changes_hop_bytes(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=1, steps=12))
    run.wait_for(step=3)
    run.set_compression("fp16")
    summary = run.wait(120)
    assert summary["status"] == "finished"
    switched = [e for e in run.events.history("setting") if e["name"] == "codec"][0]["t"]
    stage1 = [h for h in run.events.history("hop") if h["stage"] == 1]
    before = {h["bytes"] for h in stage1 if h["t"] < switched}
    after = {h["bytes"] for h in stage1 if h["t"] > switched + 0.1}
    assert max(after) < min(before), (before, after)
    with pytest.raises(ValueError, match="codec='zstd' is not allowed"):
        run.set_compression("zstd")


def test_boundary_layers_train(small_run: RunConfig) -> None:
    from labkit.config import CompressionConfig

    for boundary in ("bottleneck", "maxout"):
        cfg = small_run.replace(stages=2, peers=1, steps=6, compression=CompressionConfig(boundary=boundary, factor=2, codec="int8"))
        summary = labkit.launch(cfg).wait(120)
        assert summary["status"] == "finished" and summary["val_loss_after"] < summary["val_loss_before"] - 0.3, summary
