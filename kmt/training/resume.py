"""The resume state: Keras's `BackupAndRestore` written atomically, with what kmt needs to go on exactly (the dropout
layers' random state, the gradient accumulation it was trained with)."""

import json
import logging
from pathlib import Path

import keras

from kmt._keras_private import BackupAndRestore, initial_epoch
from kmt.errors import KmtError
from kmt.run_dir import Checkpoints, write_atomically
from kmt.training.checkpointing import finite_loss

logger = logging.getLogger(__name__)


def optimizer_step(model):
    """The number of updates `model`'s optimizer has made, as a Python int, whatever holds it (a `MirroredVariable`
    under `tf.distribute`, an array spread over devices under JAX)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def seed_states(model):
    """The model's random-state variables (a `SeedGenerator` each, in every Dropout layer), in a fixed order. Keras's
    weights files leave them out, so a resumed run would draw its first epochs' dropout masks again."""
    return [variable for variable in model.variables if variable.name == "seed_generator_state"]


class AtomicBackupAndRestore(BackupAndRestore):
    """Keras's `BackupAndRestore` (model weights, optimizer state and epoch, restored when `fit` starts again)
    with every file written atomically, and the backup kept after training so a later run on the same run dir
    with more epochs continues instead of starting over. It also keeps the dropout layers' random state
    (`seed_states`), so a resumed run draws the masks the uninterrupted run would have drawn.

    Args:
        backup_dir: the run's `checkpoints/backup/` (`RunDir(root).checkpoints.backup`).
        batches_per_update: int. `optim.gradient_accumulation_steps`, recorded with the state: a resume with
            another value is refused. Defaults to 1.
        save_to: a path or None. For a worker other than the chief of a distributed run: it resumes from the
            state the chief writes in `backup_dir`, and saves its weights here instead (see `fit.build_callbacks`).
    """

    def __init__(self, backup_dir, batches_per_update=1, save_to=None):
        super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=False)
        self.batches_per_update = batches_per_update
        self.save_to = save_to

    def on_epoch_end(self, epoch, logs=None):
        if finite_loss(logs):
            super().on_epoch_end(epoch, logs)

    def save_backup(self):
        if self.save_to is not None:
            write_atomically(self.save_to, self.model.save_weights)
            return
        write_atomically(self.weights_path, self.model.save_weights)
        write_atomically(
            self.metadata_path,
            json.dumps(
                {
                    "epoch": self.current_epoch,
                    "batch": 0,
                    "batches_per_update": self.batches_per_update,
                    "seed_states": [keras.ops.convert_to_numpy(v).tolist() for v in seed_states(self.model)],
                },
                indent=2,
            )
            + "\n",
        )

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
        epoch = initial_epoch(self.model)
        if epoch:
            self._check_optimizer_restored()
            logger.info("resuming after epoch %d at optimizer step %d", epoch, optimizer_step(self.model))
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
