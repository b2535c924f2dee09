"""The resume state: Keras's `BackupAndRestore` written atomically, with what kmt needs to go on exactly (the dropout
layers' random state, the gradient accumulation it was trained with)."""

import json
import logging
from pathlib import Path

import keras

from kmt._keras_private import BackupAndRestore, initial_epoch
from kmt.errors import KmtError
from kmt.run_dir import Checkpoints, write_atomically
from kmt.training.checkpointing import finite_loss, optimizer_step

logger = logging.getLogger(__name__)


def seed_states(model):
    """The model's random-state variables (a `SeedGenerator` each, in every Dropout layer), in a fixed order. Keras's
    weights files leave them out, so a resumed run would draw its first epochs' dropout masks again."""
    return [variable for variable in model.variables if variable.name == "seed_generator_state"]


class AtomicBackupAndRestore(BackupAndRestore):
    """Keras's `BackupAndRestore` (model weights, optimizer state and epoch, restored when `fit` starts again)
    with every file written atomically, at every epoch's end and every `every_updates` updates within one, and
    the backup kept after training so a later run on the same run dir with more epochs continues instead of
    starting over. It also keeps the dropout layers' random state
    (`seed_states`), so a resumed run draws the masks the uninterrupted run would have drawn.

    Args:
        backup_dir: the run's `checkpoints/backup/` (`RunDir(root).checkpoints.backup`).
        batches_per_update: int. `optim.gradient_accumulation_steps`, recorded with the state: a resume with
            another value is refused. Defaults to 1.
        save_to: a path or None. For a worker other than the chief of a distributed run: it resumes from the
            state the chief writes in `backup_dir`, and saves its weights here instead (see `fit.build_callbacks`).
        every_updates: int. `trainer.save_every_updates`: also save after every so many updates within an epoch,
            recording the batches of the epoch done and its running metrics, so a resumed run (see `fit.fit`) goes
            on from that batch exactly. Defaults to 0 (at epoch ends only).
        steps_per_epoch: int. Batches an epoch, to tell where in its epoch an update falls. Defaults to 1.
    """

    def __init__(self, backup_dir, batches_per_update=1, save_to=None, every_updates=0, steps_per_epoch=1):
        super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=False)
        self.batches_per_update = batches_per_update
        self.save_to = save_to
        self.every_updates, self.steps_per_epoch = every_updates, steps_per_epoch
        self._batches, self._epoch, self._metrics = None, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        if self._batches is None:  # once the resume has restored the optimizer, before the first batch
            self._batches = optimizer_step(self.model) * self.batches_per_update

    def on_train_batch_end(self, batch, logs=None):
        if self._metrics is not None:
            self._add_saved_metrics()
        self._batches += 1
        done = self._batches - self._epoch * self.steps_per_epoch  # batches of the epoch in progress
        every = self.every_updates * self.batches_per_update
        # the epoch's last update saves at the epoch's end, after its checkpoint and history row
        if every and self._batches % every == 0 and done < self.steps_per_epoch and finite_loss(logs):
            self._write(self._epoch, done)

    def _add_saved_metrics(self):
        """Resumed mid-epoch: adds the epoch's running sums saved with the state (every metric here is a sum over
        batches and a count) to those of the first batch, so the epoch's means are the uninterrupted run's. After
        that batch, not before it: the compiled metrics' variables are built by the first train step."""
        variables = self.model.metrics_variables  # under JAX, `self.model` brings the train step's state back first
        if len(variables) == len(self._metrics):
            for variable, saved in zip(variables, self._metrics):
                variable.assign(variable + keras.ops.convert_to_tensor(saved, dtype=variable.dtype))
        else:
            logger.warning("the resume state's running metrics do not fit this model's: the epoch's means start afresh")
        self._metrics = None

    def on_epoch_end(self, epoch, logs=None):
        if finite_loss(logs):
            super().on_epoch_end(epoch, logs)

    def save_backup(self):
        self._write(self.current_epoch, 0)

    def _write(self, epochs, batches):
        """Saves the state after `epochs` whole epochs and `batches` batches of the next."""
        if self.save_to is not None:
            write_atomically(self.save_to, self.model.save_weights)
            return
        write_atomically(self.weights_path, self.model.save_weights)
        record = {
            "epoch": epochs,
            "batch": batches,
            "update": self._batches // self.batches_per_update if self._batches is not None else None,
            "batches_per_update": self.batches_per_update,
            "seed_states": [keras.ops.convert_to_numpy(v).tolist() for v in seed_states(self.model)],
        }
        if batches:
            record["metrics"] = [keras.ops.convert_to_numpy(v).tolist() for v in self.model.metrics_variables]
        write_atomically(self.metadata_path, json.dumps(record, indent=2) + "\n")

    def on_train_begin(self, logs=None):
        resume_state = Checkpoints(Path(self.backup_dir).parent).resume_state()  # one line if it does not read
        saved = resume_state.get("batches_per_update", 1) if resume_state else None
        if saved is not None and saved != self.batches_per_update:
            # The optimizer counts batches; the schedule's update is batches // this, so it must not change.
            raise KmtError(
                f"the resume state in {self.backup_dir} was trained with optim.gradient_accumulation_steps={saved}, "
                f"not {self.batches_per_update}; resume with the same value or use a new hydra.run.dir"
            )
        try:
            super().on_train_begin(logs)
        except ValueError as error:  # weights of another shape: the model config changed since the backup
            raise KmtError(
                f"the resume state in {self.backup_dir} does not fit this model ({str(error).splitlines()[0]}); "
                "resume with the run's original model.* settings or use a new hydra.run.dir"
            ) from None
        self._batches = None
        epoch = initial_epoch(self.model)
        if epoch or (resume_state and resume_state.get("batch")):
            self._check_optimizer_restored()
            self._metrics = resume_state.get("metrics")
            within = f", {resume_state['batch']} batches into epoch {epoch + 1}," if resume_state.get("batch") else ""
            logger.info("resuming after epoch %d%s at optimizer step %d", epoch, within, optimizer_step(self.model))
            self._restore_seed_states(resume_state.get("seed_states"))

    def _check_optimizer_restored(self):
        if not optimizer_step(self.model):  # Keras skips variables it cannot match, warning only
            raise KmtError(
                f"the optimizer state in {self.backup_dir} did not load into this optimizer, so the learning rate "
                "would restart; resume with the run's original optim.* settings or use a new hydra.run.dir"
            )

    def _restore_seed_states(self, states):
        variables = seed_states(self.model)
        if states is None or len(states) != len(variables):
            # a backup from before kmt kept them, or a model with other dropout layers (model.*_word_dropout)
            logger.warning("the resume state holds no random state for these dropout layers: their masks start afresh")
            return
        for variable, state in zip(variables, states):
            variable.assign(keras.ops.convert_to_tensor(state, dtype=variable.dtype))
