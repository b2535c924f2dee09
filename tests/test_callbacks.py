"""Callbacks that keep a run's files consistent with its resume state."""

import csv
import os

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


def test_a_run_directory_admits_one_training_at_a_time(tmp_path):
    import pytest

    from kmt.callbacks import RunLock
    from kmt.errors import KmtError

    with RunLock(tmp_path):
        with pytest.raises(KmtError, match=f"{tmp_path} is in use by another kmt-train \\(pid {os.getpid()}\\)"):
            RunLock(tmp_path).__enter__()
    with RunLock(tmp_path):  # released on exit
        pass


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path):
    import numpy as np
    import pytest

    from kmt.callbacks import save_weights_atomically
    from kmt.model import build_transformer

    model = build_transformer(vocab_size=11, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16)
    path = tmp_path / "last.weights.h5"
    save_weights_atomically(model, path)
    before = path.read_bytes()
    original = [w.copy() for w in model.get_weights()]

    class Crash(Exception):
        pass

    def dies_mid_write(target, overwrite=True):
        with open(target, "wb") as f:
            f.write(b"half a file")
        raise Crash

    model.set_weights([w + 1 for w in original])
    model.save_weights = dies_mid_write
    with pytest.raises(Crash):
        save_weights_atomically(model, path)
    assert path.read_bytes() == before
    del model.save_weights
    model.load_weights(path)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), original))


def _budget_run(budget, first_epoch, seconds):
    """Drives `budget` from `first_epoch` with epochs of `seconds` each; returns the epochs run until it stops."""
    import keras

    model = keras.Sequential([keras.layers.Dense(1)])
    model.stop_training = False  # what fit sets before the first epoch
    budget.set_model(model)
    epoch = first_epoch
    while True:
        budget.on_epoch_begin(epoch)
        budget.on_epoch_end(epoch, {"epoch_seconds": seconds})
        epoch += 1
        if budget.model.stop_training:
            return list(range(first_epoch, epoch))


def test_time_budget_stops_before_an_epoch_would_overrun_it(tmp_path):
    from kmt.callbacks import TimeBudget

    # 30-second epochs in 100 seconds: after 3 epochs (90 s) a fourth would end at 120 s.
    assert _budget_run(TimeBudget(100, tmp_path / "history.csv"), 0, 30.0) == [0, 1, 2]


def test_time_budget_counts_the_epochs_of_earlier_invocations(tmp_path):
    from kmt.callbacks import TimeBudget

    path = tmp_path / "history.csv"
    with open(path, "w", newline="") as f:  # epochs 0 and 1 covered by the resume state, epoch 2 written after it
        csv.writer(f).writerows([["epoch", "epoch_seconds", "loss"], [0, 30, 3.0], [1, 30, 2.0], [2, 30, 1.0]])
    assert _budget_run(TimeBudget(100, path), 2, 30.0) == [2]
