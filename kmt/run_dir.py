"""A run directory: every path of a run named once, the one atomic write, the run lock, finding checkpoints, and
reading a run's files back (a truncated or corrupt file stops the command with one line naming it and the way out).

Layout of `RunDir(root)`, as kmt-train leaves it:

    config.yaml               the resolved config, what kmt-export rebuilds the model from
    train.log                 the run's log (Hydra's job log, named after the job)
    .hydra/                   Hydra's record of the command: config.yaml (unresolved), overrides.yaml
    .lock                     the run lock (`RunLock`)
    tokenizer/                joint.model, or source.model and target.model (each with a readable .vocab)
    data/                     the corpus prepared for training (`kmt.data.shards`), unless it trained on data=prepared
    checkpoints/              epoch_NNN.weights.h5 and update_NNNNNNN.weights.h5 (trainer.save_every_updates; the
                              newest trainer.keep_checkpoints of each), best.weights.h5 and best.json,
                              average_lastN.weights.h5, interrupted.weights.h5
    checkpoints/backup/       the resume state: Keras's BackupAndRestore files (weights with the optimizer state,
                              and training_metadata.json: the epoch, the batches of the next one done, kmt's
                              dropout random state and the epoch's running metrics)
    logs/                     history.csv, validations.csv (trainer.validate_every_updates), curves.png,
                              TensorBoard's train/ and validation/
    model.keras               the trained model (`keras.saving.load_model` after `from kmt.models import Transformer`)
    export/                   the SavedModel
    metrics.json              the run's scores, written last
"""

import fcntl
import json
import os
import secrets
import shutil
from pathlib import Path

from kmt.errors import KmtError

# Keras's BackupAndRestore names its files itself; kmt reads them to tell whether and where a run resumes.
_BACKUP_WEIGHTS, _BACKUP_METADATA = "latest.weights.h5", "training_metadata.json"


def write_atomically(path, content):
    """Writes `path` so that a kill or a full disk leaves the old file (or nothing) there, never half a new one: the
    content goes to a temporary name in the same directory, is flushed to disk (fsync), then renamed over `path`; the
    temporary is removed when anything fails.

    Args:
        path: the file (or directory) to write.
        content: str (written as UTF-8), bytes, or a function that writes to the path it is given (a file or a
            directory, e.g. `model.save_weights` or `tf.saved_model.save`); the temporary keeps `path`'s name as a
            suffix, so such writers see the file ending they expect (`.weights.h5`, `.keras`).

    Raises:
        KmtError: the file cannot be written (no space, no permission, a read-only mount); `path` is unchanged.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".partial-{secrets.token_hex(4)}.{path.name}")
    try:
        if callable(content):
            content(temporary)
        else:
            with open(temporary, "wb") as f:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
        for file in [temporary] if temporary.is_file() else sorted(temporary.rglob("*")):
            if file.is_file():
                with open(file, "rb+") as f:
                    os.fsync(f.fileno())
        if temporary.is_dir() and path.is_dir():  # a directory cannot be renamed over a full one
            shutil.rmtree(path)
        os.replace(temporary, path)
        _fsync_directory(path.parent)
    except OSError as error:
        raise KmtError(f"cannot write {path}: {error.strerror or error}; {path} is unchanged") from None
    finally:
        if temporary.is_dir():
            shutil.rmtree(temporary, ignore_errors=True)
        else:
            temporary.unlink(missing_ok=True)


def append_durably(path, text):
    """Appends `text` to `path` and flushes it to disk, so a kill right after keeps it (history.csv's rows)."""
    with open(path, "a", newline="", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_directory(directory):
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def unreadable(path, error, way_out):
    """A `KmtError` for a run file that does not read: the file, what went wrong, and `way_out`."""
    reason = " ".join(str(error).split()) or type(error).__name__
    return KmtError(f"{path} is unreadable (truncated or corrupt: {reason}); {way_out}")


class RunLock:
    """An exclusive lock on a run directory (`<run>/.lock`, flock), so two trainings never write into one run.

    Use as a context manager; a second process gets a `KmtError` naming the run directory and the holder's pid.
    The operating system drops the lock when its process dies, even by SIGKILL, so no stale lock survives a crash.
    """

    def __init__(self, run_dir):
        self.path = RunDir(run_dir).lock

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "unknown"
            self._file.close()
            raise KmtError(
                f"{self.path.parent} is in use by another kmt-train (pid {holder}); wait for it or "
                "choose another hydra.run.dir"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()))
        self._file.flush()
        return self

    def __exit__(self, *exc_info):
        self._file.close()


class Checkpoints:
    """A run's `checkpoints/` folder: epoch, update, best, averaged and interrupted weights, and the resume state."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.best = self.directory / "best.weights.h5"
        self.best_record = self.directory / "best.json"
        self.interrupted = self.directory / "interrupted.weights.h5"
        self.backup = self.directory / "backup"

    def epoch(self, number):
        """`epoch_NNN.weights.h5`, epochs counted from 1."""
        return self.directory / f"epoch_{number:03d}.weights.h5"

    def epochs(self):
        """The epoch checkpoints on disk, oldest first."""
        return sorted(self.directory.glob("epoch_*.weights.h5"))

    def update(self, number):
        """`update_NNNNNNN.weights.h5`: the weights after `number` optimizer updates (`trainer.save_every_updates`)."""
        return self.directory / f"update_{number:07d}.weights.h5"

    def updates(self):
        """The update checkpoints on disk, oldest first."""
        return sorted(self.directory.glob("update_*.weights.h5"))

    def averageable(self):
        """What "the last N checkpoints" are, oldest first: the update checkpoints of a run that saves by updates
        (`trainer.save_every_updates`, the paper's checkpoints at 10-minute intervals), else the epoch checkpoints."""
        return self.updates() or self.epochs()

    def averaged(self, count):
        return self.directory / f"average_last{count}.weights.h5"

    def find(self, which):
        """`"last"` (the newest epoch or update checkpoint), `"best"` (the best `trainer.monitor`: lowest val loss by
        default) or a path -> an existing `.weights.h5` path."""
        if which == "best":
            path = self.best
        elif which == "last":
            saved = self._newest_first()
            path = saved[0] if saved else self.directory / "epoch_NNN.weights.h5"
        else:
            path = Path(which)
        if not path.is_file():
            raise KmtError(f"no checkpoint at {path}")
        return path

    def last(self, count):
        """The last `count` checkpoints (`averageable`), oldest first; a `KmtError` when there are fewer."""
        paths = self.averageable()
        if len(paths) < count:
            kind = "update" if self.updates() else "epoch"
            raise KmtError(f"--average {count} needs {count} {kind} checkpoints; {self.directory} has {len(paths)}")
        return paths[-count:]

    def _newest_first(self):
        """Epoch and update checkpoints together, the newest written first."""
        return sorted(self.epochs() + self.updates(), key=lambda path: path.stat().st_mtime_ns, reverse=True)

    def best_epoch(self, monitor):
        """`{"epoch": E, "monitor": NAME, "value": V}` from `best.json`: the best epoch so far by `monitor` (epochs
        counted from 1), or None. A best recorded for another metric (the run was resumed with a new
        trainer.monitor) does not count."""
        if not self.best_record.exists():
            return None
        best = read_json(self.best_record, f"delete it and {self.best.name} to start the record afresh")
        return best if best.get("monitor", "val_loss") == monitor else None

    @property
    def resumable(self):
        """Whether the run has a resume state (Keras's backup weights)."""
        return (self.backup / _BACKUP_WEIGHTS).is_file()

    def resume_state(self):
        """The resume state's record (`epoch`: epochs finished, ...), or None when there is none. The backup weights
        are checked to read too: when either file does not, the `KmtError` names it, and the newest epoch checkpoint
        that reads with the command that starts from it."""
        metadata, weights = self.backup / _BACKUP_METADATA, self.backup / _BACKUP_WEIGHTS
        state = None
        if metadata.exists():
            try:
                state = json.loads(metadata.read_text(encoding="utf-8"))
                int(state["epoch"])
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise unreadable(metadata, error, self._restart_advice()) from None
        if self.resumable:
            check_weights(weights, self._restart_advice)
        return state

    def epochs_in_backup(self):
        """Epochs the resume state has finished (0 when there is none)."""
        state = self.resume_state()
        return state["epoch"] if state else 0

    def resume_point(self):
        """Where the resume state stands, in words: `"epoch 3"`, or `"update 120 (epoch 4)"` mid-epoch."""
        state = self.resume_state() or {"epoch": 0}
        if state.get("batch"):
            return f"update {state['update']} (epoch {state['epoch'] + 1})"
        return f"epoch {state['epoch']}"

    def _restart_advice(self):
        """The way out of a broken resume state. An epoch checkpoint holds the weights only, not the optimizer state
        or the stream position, so the run cannot go on exactly: it can start afresh from those weights."""
        for path in self._newest_first():
            if weights_error(path) is not None:
                continue
            return (
                f"the run cannot resume exactly (an epoch checkpoint holds no optimizer state); start a new run "
                f"from its newest readable weights with your command plus trainer.init_from={path} and a new "
                "hydra.run.dir"
            )
        return f"no epoch checkpoint in {self.directory} reads either; train the run again in a new hydra.run.dir"


class RunDir:
    """The paths of one run directory (see the module docstring for the layout)."""

    def __init__(self, root):
        self.root = Path(root)
        self.config = self.root / "config.yaml"
        self.lock = self.root / ".lock"
        self.tokenizer = self.root / "tokenizer"
        self.data = self.root / "data"  # the prepared data of a run on raw text (kmt.data.shards)
        self.checkpoints = Checkpoints(self.root / "checkpoints")
        self.logs = self.root / "logs"
        self.history = self.logs / "history.csv"
        self.curves = self.logs / "curves.png"
        self.validations = self.logs / "validations.csv"
        self.model = self.root / "model.keras"
        self.export = self.root / "export"
        self.metrics = self.root / "metrics.json"
        self.hydra_config = self.root / ".hydra" / "config.yaml"
        self.hydra_overrides = self.root / ".hydra" / "overrides.yaml"

    def read_config(self):
        """The run's resolved `config.yaml` on the schema (a run saved before an option existed gets its default);
        a `KmtError` when the run has none or it does not read."""
        from omegaconf import OmegaConf

        from kmt.config import onto_schema

        if not self.config.is_file():
            raise KmtError(f"{self.root} is not a kmt run directory (no config.yaml)")
        try:
            loaded = OmegaConf.load(self.config)
            if not OmegaConf.is_dict(loaded):
                raise ValueError("not a mapping of settings")
            return onto_schema(loaded)
        except KmtError:
            raise
        except Exception as error:  # YAML that does not parse, or values that do not fit the schema
            raise unreadable(
                self.config,
                error,
                f"restore it (Hydra's copy of the command's config is in {self.hydra_config}) or train the run again",
            ) from None

    def read_metrics(self):
        """`metrics.json`, or None when the run has not finished."""
        if not self.metrics.is_file():
            return None
        return read_json(
            self.metrics,
            f"rewrite it by running the run's kmt-train command again "
            f"(hydra.run.dir={self.root}): it only evaluates and exports",
        )


def languages_of_run(path):
    """`(source, target)`, the language codes of the kmt-train run holding `path` (a run directory, or its export/ or
    ctranslate2 directory), its `data.source_lang` and `data.target_lang`; None where `path` is in no run or the run
    names no languages."""
    from omegaconf import OmegaConf

    path = Path(path).resolve()
    for directory in (path, path.parent):
        if (directory / "config.yaml").is_file():
            data = OmegaConf.load(directory / "config.yaml").get("data", {})
            if data.get("source_lang") and data.get("target_lang"):
                return str(data.source_lang), str(data.target_lang)
    return None


def read_json(path, way_out):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise unreadable(path, error, way_out) from None


def weights_error(path):
    """What is wrong with the Keras weights file `path` (truncated, corrupt), or None when every array reads."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, item: item[()] if isinstance(item, h5py.Dataset) else None)
    except Exception as error:  # h5py raises OSError, KeyError or RuntimeError, depending on the damage
        return error
    return None


def check_weights(path, way_out=None):
    """Raises a one-line `KmtError` when `path` is not a readable weights file; `way_out()` says what to do, by
    default pick another checkpoint (or average again)."""
    error = weights_error(path)
    if error is not None:
        if way_out is not None:
            advice = way_out()
        elif Path(path).name.startswith("average_last"):
            advice = "average again with kmt-export RUN_DIR --average N"
        else:
            advice = "pick another checkpoint (--checkpoint best, last, or an earlier epoch_NNN.weights.h5)"
        raise unreadable(path, error, advice)
