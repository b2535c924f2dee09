"""Callbacks that keep a run's files consistent with its resume state."""

import csv

from kmt.callbacks import HistoryCSV


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
