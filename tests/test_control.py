"""Run control: the time budget, stop signals delivered between batches, and early stopping across a resume."""

import csv
import signal

import keras
import numpy as np
import pytest

from kmt.training.control import DeferredInterrupt


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
    from kmt.training.control import TimeBudget

    # 30-second epochs in 100 seconds: after 3 epochs (90 s) a fourth would end at 120 s.
    assert _budget_run(TimeBudget(100, tmp_path / "history.csv"), 0, 30.0) == [0, 1, 2]


def test_time_budget_counts_the_epochs_of_earlier_invocations(tmp_path):
    from kmt.training.control import TimeBudget

    path = tmp_path / "history.csv"
    with open(path, "w", newline="") as f:  # epochs 0 and 1 covered by the resume state, epoch 2 written after it
        csv.writer(f).writerows([["epoch", "epoch_seconds", "loss"], [0, 30, 3.0], [1, 30, 2.0], [2, 30, 1.0]])
    assert _budget_run(TimeBudget(100, path), 2, 30.0) == [2]


def test_a_resumed_run_whose_time_budget_is_spent_trains_no_more(tmp_path):
    import keras

    from kmt.training.control import StoppedEarly, TimeBudget

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
    from kmt.training.checkpointing import EpochCheckpoint
    from kmt.training.control import EarlyStopping
    from kmt.training.resume import AtomicBackupAndRestore

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(learning_rate=0.0), "mse")
    x, y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")
    ran = []
    counter = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: ran.append(epoch))
    callbacks = [
        AtomicBackupAndRestore(run_dir / "backup"),
        EpochCheckpoint(run_dir, monitor="val_loss"),
        EarlyStopping(run_dir, monitor="val_loss", patience=patience),
        counter,
    ]
    model.fit(x, y, validation_data=(x, y), batch_size=2, epochs=epochs, callbacks=callbacks, verbose=0)
    return ran


def test_patience_stops_training_and_a_resumed_run_trains_no_more(tmp_path):
    import json

    from kmt.training.control import StoppedEarly

    ran = _constant_fit(tmp_path, epochs=10, patience=2)
    assert ran == [0, 1, 2]  # best at epoch 1 (counted from 1); epochs 2 and 3 did not improve on it
    assert json.loads((tmp_path / "best.json").read_text())["epoch"] == 1
    with pytest.raises(StoppedEarly, match="val_loss has not improved for 2 epochs .*trainer.patience=2"):
        _constant_fit(tmp_path, epochs=10, patience=2)
    ran = _constant_fit(tmp_path, epochs=10, patience=3)  # more patience: training goes on from epoch 3
    assert ran == [3]
