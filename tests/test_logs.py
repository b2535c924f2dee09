"""Each epoch's logs: history.csv consistent with the resume state, and validation BLEU."""

import csv

import keras
import numpy as np
import pytest

from kmt.training.logs import HistoryCSV


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_history_rows_are_appended_and_stale_ones_dropped_on_resume(tmp_path):
    path = tmp_path / "history.csv"
    history = HistoryCSV(path)
    history.on_train_begin()
    for epoch in range(3):
        history.on_epoch_begin(epoch)
        history.on_epoch_end(epoch, {"loss": 3.0 - epoch, "accuracy": 0.1 * epoch})
    assert _rows(path)[0] == ["epoch", "accuracy", "loss"] and len(_rows(path)) == 4

    resumed = HistoryCSV(path)  # killed after writing epoch 2's row but before its backup: resume at epoch 2
    resumed.on_train_begin()
    resumed.on_epoch_begin(2)
    resumed.on_epoch_end(2, {"loss": 0.5, "accuracy": 0.9})
    rows = _rows(path)
    assert [row[0] for row in rows[1:]] == ["0", "1", "2"] and rows[3] == ["2", "0.9", "0.5"]


def test_a_resume_that_logs_a_new_key_adds_its_column(tmp_path):
    path = tmp_path / "history.csv"
    first = HistoryCSV(path)
    first.on_train_begin()
    first.on_epoch_begin(0)
    first.on_epoch_end(0, {"loss": 3.0, "val_loss": 3.5})
    resumed = HistoryCSV(path)  # e.g. resumed with trainer.val_bleu=true
    resumed.on_train_begin()
    resumed.on_epoch_begin(1)
    resumed.on_epoch_end(1, {"loss": 2.0, "val_bleu": 12.5, "val_loss": 2.5})
    resumed.on_epoch_end(2, {"loss": 1.0, "val_loss": 1.5})  # and a key missing from a row stays blank
    assert _rows(path) == [
        ["epoch", "loss", "val_loss", "val_bleu"],
        ["0", "3.0", "3.5", ""],
        ["1", "2.0", "2.5", "12.5"],
        ["2", "1.0", "1.5", ""],
    ]
    assert not list(tmp_path.glob(".partial-*"))  # no temporary left behind


def test_validation_bleu_scores_the_trained_weights_in_the_decoding_copy(tmp_path):
    from kmt.training.logs import ValidationBLEU

    trained = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    decoder = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    references = ["a small dog runs", "two people sit on a bench"]

    def translate(lines):  # right only once the decoder holds the trained weights
        same = all(np.array_equal(a, b) for a, b in zip(decoder.get_weights(), trained.get_weights()))
        return references if same else ["x"] * len(lines)

    callback = ValidationBLEU(translate, ["source one", "source two"], references, decoder=decoder)
    callback.set_model(trained)
    logs = {"loss": 1.0}
    callback.on_epoch_end(0, logs)
    assert logs["val_bleu"] == pytest.approx(100.0)
    diverged = {"loss": float("nan")}
    callback.on_epoch_end(1, diverged)
    assert "val_bleu" not in diverged
