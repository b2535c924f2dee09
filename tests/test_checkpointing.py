"""Epoch checkpoints: the best one follows trainer.monitor in its direction, and an epoch's checkpoint is on disk
before the resume state says the epoch is done."""

import keras


def test_the_best_checkpoint_follows_the_monitor_in_its_direction(tmp_path):
    from kmt.run_dir import Checkpoints
    from kmt.training.checkpointing import EpochCheckpoint

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


def test_an_epochs_checkpoint_is_written_before_the_resume_state_holds_the_epoch(smoke_run):
    # A kill between the two would resume after an epoch whose checkpoint is missing, so trainer.average_last would
    # average one checkpoint fewer than it names.
    checkpoints = smoke_run / "checkpoints"
    written = (checkpoints / "epoch_002.weights.h5").stat().st_mtime_ns
    assert written <= (checkpoints / "backup" / "training_metadata.json").stat().st_mtime_ns
