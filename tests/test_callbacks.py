"""Callbacks that keep a run's files consistent with its resume state."""

import csv
import signal

import keras
import numpy as np
import pytest

from kmt.callbacks import DeferredInterrupt, HistoryCSV


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
    assert _rows(path) == [["epoch", "loss", "val_loss", "val_bleu"], ["0", "3.0", "3.5", ""],
                           ["1", "2.0", "2.5", "12.5"], ["2", "1.0", "1.5", ""]]
    assert not list(tmp_path.glob(".partial-*"))  # no temporary left behind


def _budget_run(budget, first_epoch, seconds):
    """Drives `budget` from `first_epoch` with epochs of `seconds` each; returns the epochs run until it stops."""
    import keras

    model = keras.Sequential([keras.layers.Dense(1)])
    model.stop_training = False  # what fit sets before the first epoch
    model._initial_epoch = first_epoch  # what BackupAndRestore sets on a resume
    budget.set_model(model)
    budget.on_train_begin()
    epoch = first_epoch
    while True:
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


def test_a_resumed_run_whose_time_budget_is_spent_trains_no_more(tmp_path):
    import keras

    from kmt.callbacks import StoppedEarly, TimeBudget

    path = tmp_path / "history.csv"
    with open(path, "w", newline="") as f:  # three 30-second epochs, all covered by the resume state
        csv.writer(f).writerows([["epoch", "epoch_seconds"], [0, 30], [1, 30], [2, 30]])
    model = keras.Sequential([keras.layers.Dense(1)])
    model._initial_epoch = 3  # what BackupAndRestore sets on a resume
    budget = TimeBudget(100, path)
    budget.set_model(model)
    with pytest.raises(StoppedEarly, match=r"time budget spent: 3 epochs took 1.5 of trainer.max_minutes=1.66667"):
        budget.on_train_begin()
    budget = TimeBudget(150, path)  # room for a fourth epoch: training goes on
    budget.set_model(model)
    budget.on_train_begin()


class _SwallowingCallback(keras.callbacks.Callback):
    """Delivers `signum` (SIGINT by default) at batch `at` inside a bare `except:`, the way some library code would
    swallow the KeyboardInterrupt of a Ctrl-C."""

    def __init__(self, at, signum=signal.SIGINT):
        super().__init__()
        self.at, self.signum, self.batches = at, signum, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.batches += 1
        if self.batches == self.at:
            try:
                signal.raise_signal(self.signum)
            except:  # noqa: E722  (the point of the test)
                pass


def _tiny_fit(callbacks, interrupt=None):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.zeros((8, 2), "float32"), np.zeros((8, 1), "float32")
    fit = lambda: model.fit(x, y, batch_size=1, epochs=3, callbacks=callbacks, verbose=0)  # noqa: E731
    if interrupt is None:
        return fit()
    with interrupt.installed():
        return fit()


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler for the test, whatever the runner inherited (a background job ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_swallowed_by_library_code_is_lost_without_the_deferred_interrupt(sigint_raises):
    swallowing = _SwallowingCallback(at=3)
    _tiny_fit([swallowing])  # the plain handler's KeyboardInterrupt dies in the bare except: fit runs on
    assert swallowing.batches == 24


def test_deferred_interrupt_stops_at_the_end_of_the_batch_it_arrived_in(sigint_raises):
    swallowing, interrupt = _SwallowingCallback(at=3), DeferredInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _tiny_fit([swallowing, interrupt], interrupt)
    assert swallowing.batches == 3 and interrupt.received is signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back


def test_sigterm_stops_at_the_end_of_its_batch_instead_of_ending_the_process():
    # At its default, SIGTERM (a job scheduler's stop) would end this very process, test runner and all.
    before = signal.getsignal(signal.SIGTERM)
    swallowing, interrupt = _SwallowingCallback(at=3, signum=signal.SIGTERM), DeferredInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _tiny_fit([swallowing, interrupt], interrupt)
    assert swallowing.batches == 3 and interrupt.received is signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_an_ignored_signal_stays_ignored(signum):
    # SIGINT in a background job of a non-interactive shell, SIGHUP under nohup.
    previous = signal.signal(signum, signal.SIG_IGN)
    try:
        interrupt = DeferredInterrupt()
        with interrupt.installed():
            assert signal.getsignal(signum) is signal.SIG_IGN
            signal.raise_signal(signum)
        assert interrupt.received is None
    finally:
        signal.signal(signum, previous)


def _constant_fit(run_dir, epochs, patience):
    """Fits a model that cannot learn (learning rate 0, so val_loss never improves) with kmt's resume state and
    checkpoints under `run_dir`; returns the epochs that ended, or raises what fit raises."""
    from kmt.callbacks import AtomicBackupAndRestore, EpochCheckpoint

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(learning_rate=0.0), "mse")
    x, y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")
    ran = []
    counter = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: ran.append(epoch))
    callbacks = [AtomicBackupAndRestore(run_dir / "backup"),
                 EpochCheckpoint(run_dir, monitor="val_loss", patience=patience), counter]
    model.fit(x, y, validation_data=(x, y), batch_size=2, epochs=epochs, callbacks=callbacks, verbose=0)
    return ran


def test_patience_stops_training_and_a_resumed_run_trains_no_more(tmp_path):
    import json

    from kmt.callbacks import StoppedEarly

    ran = _constant_fit(tmp_path, epochs=10, patience=2)
    assert ran == [0, 1, 2]  # best at epoch 1 (counted from 1); epochs 2 and 3 did not improve on it
    assert json.loads((tmp_path / "best.json").read_text())["epoch"] == 1
    with pytest.raises(StoppedEarly, match="val_loss has not improved for 2 epochs .*trainer.patience=2"):
        _constant_fit(tmp_path, epochs=10, patience=2)
    ran = _constant_fit(tmp_path, epochs=10, patience=3)  # more patience: training goes on from epoch 3
    assert ran == [3]


def test_the_best_checkpoint_follows_the_monitor_in_its_direction(tmp_path):
    from kmt.callbacks import EpochCheckpoint
    from kmt.run_dir import Checkpoints

    def best_epoch(directory, monitor):
        return Checkpoints(directory).best_epoch(monitor)

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    bleu = EpochCheckpoint(tmp_path, monitor="val_bleu")
    bleu.set_model(model)
    for epoch, value in enumerate([10.0, 12.0, 11.0]):
        bleu.on_epoch_end(epoch, {"loss": 1.0, "val_bleu": value, "val_loss": 3.0 - epoch})
    assert best_epoch(tmp_path, "val_bleu") == {"epoch": 2, "monitor": "val_bleu", "value": 12.0}
    assert best_epoch(tmp_path, "val_loss") is None  # a best by another metric does not count
    loss = EpochCheckpoint(tmp_path, monitor="val_loss")  # the run resumed with trainer.monitor=val_loss
    loss.set_model(model)
    loss.on_epoch_end(3, {"loss": 1.0, "val_loss": 5.0})
    loss.on_epoch_end(4, {"loss": 1.0, "val_loss": 4.0})
    assert best_epoch(tmp_path, "val_loss")["epoch"] == 5
    perplexity = EpochCheckpoint(tmp_path / "ppl", monitor="val_ppl")  # lower is better, as for losses
    perplexity.set_model(model)
    for epoch, value in enumerate([9.0, 7.0, 8.0]):
        perplexity.on_epoch_end(epoch, {"loss": 1.0, "val_ppl": value})
    assert best_epoch(tmp_path / "ppl", "val_ppl") == {"epoch": 2, "monitor": "val_ppl", "value": 7.0}


def test_validation_bleu_scores_the_trained_weights_in_the_decoding_copy(tmp_path):
    from kmt.callbacks import ValidationBLEU

    trained = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    decoder = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    references = ["a small dog runs", "two people sit on a bench"]

    def translate(lines):  # right only once the decoder holds the trained weights
        same = all(np.array_equal(a, b) for a, b in zip(decoder.get_weights(), trained.get_weights()))
        return (references if same else ["x"] * len(lines)), [0.0] * len(lines)

    callback = ValidationBLEU(translate, ["source one", "source two"], references, decoder=decoder)
    callback.set_model(trained)
    logs = {"loss": 1.0}
    callback.on_epoch_end(0, logs)
    assert logs["val_bleu"] == pytest.approx(100.0)
    diverged = {"loss": float("nan")}
    callback.on_epoch_end(1, diverged)
    assert "val_bleu" not in diverged
