"""The resume state: a resumed run goes on at the update it stopped at, and refuses what would change its course."""

import csv
import json
import re

import pytest

from kmt.errors import KmtError
from kmt.training import train
from tests.helpers import compose_config


def _history(run_dir):
    with open(run_dir / "logs" / "history.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
def test_a_resumed_accumulating_run_continues_at_the_same_update(tmp_path, caplog):
    caplog.set_level("INFO")
    accumulating = ["optim.gradient_accumulation_steps=2", "trainer.export=false"]
    train(compose_config("trainer.epochs=2", *accumulating), tmp_path / "straight")
    train(compose_config("trainer.epochs=1", *accumulating), tmp_path / "resumed")
    train(compose_config("trainer.epochs=2", *accumulating), tmp_path / "resumed")
    assert re.search(r"\d+ steps an epoch \((\d+) updates of 2 batches each\)", caplog.text)
    updates = int(re.search(r"\((\d+) updates of 2 batches", caplog.text).group(1))
    assert f"resuming after epoch 1 at optimizer step {updates}" in caplog.text
    straight, resumed = (
        json.loads((tmp_path / run / "metrics.json").read_text())["train"] for run in ("straight", "resumed")
    )
    assert straight["steps"] == resumed["steps"] == 2 * updates and resumed["epochs"] == 2
    rates = [[float(row["learning_rate"]) for row in _history(tmp_path / run)] for run in ("straight", "resumed")]
    assert rates[0] == pytest.approx(rates[1]) and rates[0][0] < rates[0][1]
    # The run's time counts the epochs of both invocations (as trainer.max_minutes does), not only the last one.
    epoch_seconds = [float(row["epoch_seconds"]) for row in _history(tmp_path / "resumed")]
    assert len(epoch_seconds) == 2 and resumed["run_seconds"] == pytest.approx(sum(epoch_seconds))

    # Resuming with another accumulation would shift the schedule (the optimizer counts batches): refused, and
    # so is an optimizer state that does not load (Keras only warns), which would restart the learning rate.
    with pytest.raises(KmtError, match="was trained with optim.gradient_accumulation_steps=2, not 1; resume with"):
        train(compose_config("trainer.epochs=3", "trainer.export=false"), tmp_path / "resumed")
    metadata = tmp_path / "resumed" / "checkpoints" / "backup" / "training_metadata.json"
    metadata.write_text(json.dumps({"epoch": 2, "batch": 0}))  # as a backup written before the key existed
    with pytest.raises(KmtError, match="did not load into this optimizer, so the learning rate would restart"):
        train(compose_config("trainer.epochs=3", "trainer.export=false"), tmp_path / "resumed")
    assert len(_history(tmp_path / "resumed")) == 2  # nothing was trained or lost
    assert "gradient_accumulation_steps: 2" in (tmp_path / "resumed" / "config.yaml").read_text()  # still the run's
