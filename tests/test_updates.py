"""Work counted in updates: checkpoints and validation every N updates, averaging the update checkpoints, patience
and the time budget between them (a run killed mid-epoch resuming exactly: tests/test_reliability.py)."""

import csv
import json
import os
import time

import pytest

from kmt.config import validate
from kmt.errors import ConfigError
from kmt.run_dir import Checkpoints
from kmt.training import train
from tests.helpers import compose_config


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_find_last_is_the_newest_of_either_kind_and_last_averages_update_checkpoints(tmp_path):
    checkpoints = Checkpoints(tmp_path)
    for path in (checkpoints.epoch(1), checkpoints.update(20), checkpoints.update(40), checkpoints.epoch(2)):
        path.write_bytes(b"")
        time.sleep(0.01)
    now = time.time()
    os.utime(checkpoints.update(40), (now + 5, now + 5))  # saved after the epoch's end
    assert checkpoints.find("last") == checkpoints.update(40)
    assert checkpoints.last(2) == [checkpoints.update(20), checkpoints.update(40)]
    with pytest.raises(Exception, match="--average 3 needs 3 update checkpoints"):
        checkpoints.last(3)
    assert checkpoints.update(40).name == "update_0000040.weights.h5"


@pytest.mark.parametrize("key", ["save_every_updates", "validate_every_updates"])
def test_config_refuses_a_negative_interval(key):
    with pytest.raises(ConfigError, match=f"trainer.{key} must be 0"):
        validate(compose_config(f"trainer.{key}=-1", "output_dir=null"))


@pytest.mark.e2e
def test_run_by_updates_checkpoints_validates_stops_on_patience_and_averages(tmp_path, caplog):
    caplog.set_level("INFO", logger="kmt")
    train(
        compose_config(
            "trainer.epochs=4",
            "trainer.save_every_updates=2",
            "trainer.validate_every_updates=2",
            "trainer.keep_checkpoints=3",
            "trainer.average_last=2",
            "trainer.val_bleu=true",
            "trainer.monitor=val_bleu",
            "trainer.patience=1",
        ),
        tmp_path,
    )
    rows = _rows(tmp_path / "logs" / "validations.csv")
    updates = [int(row["update"]) for row in rows]
    assert updates == list(range(2, 2 * len(rows) + 1, 2)) and {"val_loss", "val_bleu"} <= rows[0].keys()
    # patience counts validations: it stops at the first one that is no better than the best before it
    bleu = [float(row["val_bleu"]) for row in rows]
    assert bleu[-1] <= max(bleu[:-1]) and all(b > max(bleu[:i]) for i, b in enumerate(bleu[1:-1], 1))
    assert f"early stopping at update {updates[-1]}" in caplog.text
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("update_*.weights.h5"))
    assert kept == [f"update_{n:07d}.weights.h5" for n in updates[-3:]]  # the newest keep_checkpoints
    assert f"averaged 2 checkpoints: {kept[-2]}, {kept[-1]}" in caplog.text
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["train"]["averaged_checkpoints"] == 2 and (tmp_path / "export" / "saved_model.pb").exists()
    state = json.loads((tmp_path / "checkpoints" / "backup" / "training_metadata.json").read_text())
    assert state["update"] == updates[-1] - updates[-1] % 2


@pytest.mark.e2e
def test_time_budget_stops_at_an_update_checkpoint_within_the_epoch(tmp_path, caplog):
    # A budget of a few nanoseconds is spent by the first check, at update 2, on any machine: the run stops there,
    # within its first epoch of 6 batches, instead of at an epoch's end.
    caplog.set_level("INFO", logger="kmt")
    train(compose_config("trainer.epochs=3", "trainer.save_every_updates=2", "trainer.max_minutes=1e-10"), tmp_path)
    assert "time budget: stopping within epoch 1" in caplog.text
    state = json.loads((tmp_path / "checkpoints" / "backup" / "training_metadata.json").read_text())
    assert (state["epoch"], state["batch"], state["update"]) == (0, 2, 2)  # resumable exactly from there
    assert (tmp_path / "checkpoints" / "update_0000002.weights.h5").exists()
    assert (tmp_path / "export" / "saved_model.pb").exists() and (tmp_path / "metrics.json").exists()


def test_config_refuses_a_negative_max_updates():
    with pytest.raises(ConfigError, match=r"trainer.max_updates must be >= 0. Received: -1"):
        validate(compose_config("trainer.max_updates=-1", "output_dir=null"))


@pytest.mark.e2e
def test_max_updates_stops_within_an_epoch_plans_the_schedule_for_it_and_a_resume_trains_no_more(tmp_path, caplog):
    # 6 batches an epoch, 2 an update: 3 updates an epoch, so update 4 is the second epoch's first
    args = ["trainer.epochs=3", "trainer.max_updates=4", "trainer.save_every_updates=2"]
    args.append("optim.gradient_accumulation_steps=2")
    caplog.set_level("INFO", logger="kmt")
    train(compose_config(*args), tmp_path)
    assert "at update 4 (trainer.max_updates)" in caplog.text
    assert "stopping at update 4: trainer.max_updates reached" in caplog.text
    state = json.loads((tmp_path / "checkpoints" / "backup" / "training_metadata.json").read_text())
    assert (state["epoch"], state["batch"], state["update"]) == (1, 2, 4)  # resumable exactly from there
    assert (tmp_path / "checkpoints" / "update_0000004.weights.h5").exists()
    assert (tmp_path / "export" / "saved_model.pb").exists() and (tmp_path / "metrics.json").exists()
    # Run again (say, after a kill while it scored): nothing more is trained, and it finishes once more.
    (tmp_path / "metrics.json").unlink()
    caplog.clear()
    train(compose_config(*args), tmp_path)
    assert "trainer.max_updates=4 reached (4 updates): nothing more to train" in caplog.text
    assert json.loads((tmp_path / "checkpoints" / "backup" / "training_metadata.json").read_text()) == state
    assert (tmp_path / "metrics.json").exists()


@pytest.mark.e2e
def test_late_dropout_switches_after_a_number_of_updates(tmp_path, caplog):
    caplog.set_level("INFO", logger="kmt")
    train(compose_config("trainer.epochs=2", "model.late_dropout=0.3", "model.late_dropout_after_updates=3"), tmp_path)
    assert "residual and embedding dropout 0.1 -> 0.3 from update 4" in caplog.text
    assert (tmp_path / "export" / "saved_model.pb").exists()
