"""Data parallelism (`trainer.distribute`): one model trained on several devices, or by several processes, through
each backend's own engine. kmt schedules nothing and reduces nothing itself.

- `mirrored`: every device of this machine. TensorFlow: `tf.distribute.MirroredStrategy` over its GPUs, else over
  its (logical) CPU devices. JAX: `keras.distribution.DataParallel` over `keras.distribution.list_devices()`.
- `multi_worker`: several processes, on one host or many. JAX: `keras.distribution.initialize` (the coordinator's
  address, the process count and this process's id, from `trainer.*` or Keras's `KERAS_DISTRIBUTION_*` variables),
  then `DataParallel` over every process's devices. TensorFlow is refused (see `check`).
- PyTorch: refused; Keras 3 has no distribution for it.

A batch is the global batch: the batcher gives each device the token budget (`kmt.data.batches.Batcher`'s
`replicas`), and each process pads the same global batch and keeps its own rows (`shard`). The loss is the mean over
every real target token of the global batch (`kmt.losses`), so N devices compute the update one device computes on
the same batch. Only the chief (process 0) writes the run directory; every process reads it to resume.
"""

import contextlib
import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from kmt.errors import ConfigError

logger = logging.getLogger(__name__)

MODES = ("none", "mirrored", "multi_worker")
# keras.distribution.initialize's own variables, read when trainer.coordinator/num_processes/process_id are unset
ENVIRONMENT = {
    "coordinator": "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "num_processes": "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "process_id": "KERAS_DISTRIBUTION_PROCESS_ID",
}


@dataclass
class Placement:
    """Where a run trains: `replicas` devices in all, `processes` processes of which this is `index`."""

    mode: str = "none"
    replicas: int = 1
    processes: int = 1
    index: int = 0
    engine: Any = None  # the tf.distribute strategy or the keras.distribution, None for one device

    @property
    def chief(self):
        """Whether this process writes the run directory (checkpoints, logs, the resume state, the export)."""
        return self.index == 0

    @property
    def distributed(self):
        return self.engine is not None

    def scope(self):
        """Where the model is built, compiled and fitted."""
        return self.engine.scope() if self.engine is not None else contextlib.nullcontext()


def cluster(trainer_cfg):
    """`(coordinator, num_processes, process_id)` of a multi_worker run, from `trainer_cfg` (the config's `trainer`)
    or the environment (None where neither sets it)."""
    values = []
    for key, variable in ENVIRONMENT.items():
        value = trainer_cfg[key]
        if value is None and os.environ.get(variable):
            value = os.environ[variable] if key == "coordinator" else int(os.environ[variable])
        values.append(value)
    return tuple(values)


def check(trainer_cfg, data_name):
    """Stops with one line on a `trainer.distribute` (of `trainer_cfg`, the config's `trainer`) this backend or config
    cannot run, before any data is read. `data_name` is the config's `data.name`."""
    mode, backend = trainer_cfg.distribute, keras.backend.backend()
    if mode not in MODES:
        raise ConfigError(f"trainer.distribute must be one of {', '.join(MODES)}. Received: {mode!r}")
    if mode == "none":
        return
    if backend not in ("tensorflow", "jax"):
        raise ConfigError(
            f"trainer.distribute={mode} is not available under the {backend} backend (Keras 3 "
            "distributes under TensorFlow and JAX); run with KERAS_BACKEND=jax"
        )
    if mode != "multi_worker":
        return
    if backend == "tensorflow":
        raise ConfigError(
            "trainer.distribute=multi_worker does not run under TensorFlow: Keras 3's model.fit fails "
            "under MultiWorkerMirroredStrategy (keras-team/keras#20585); run every worker with "
            "KERAS_BACKEND=jax (docs/scaling.md)"
        )
    coordinator, processes, index = cluster(trainer_cfg)
    if None in (coordinator, processes, index):
        raise ConfigError(
            "trainer.distribute=multi_worker needs its cluster: set trainer.coordinator=HOST:PORT, "
            "trainer.num_processes=N and trainer.process_id=I (or KERAS_DISTRIBUTION_JOB_ADDRESSES, "
            "KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID)"
        )
    if not 0 <= index < processes:
        raise ConfigError(f"trainer.process_id must be in [0, {processes}) (trainer.num_processes). Received: {index}")
    if data_name != "prepared":
        raise ConfigError(
            "trainer.distribute=multi_worker trains from prepared data: run kmt-prepare once and give "
            "every worker data=prepared data.path=DIR"
        )
    for key in ("patience", "max_minutes"):
        if trainer_cfg[key]:
            raise ConfigError(
                f"trainer.{key} is not available with trainer.distribute=multi_worker: each worker "
                "would decide alone when to stop"
            )


def place(trainer_cfg):
    """The run's `Placement` from `trainer_cfg` (the config's `trainer`); under `multi_worker`, joins the cluster
    first (call it before anything runs on JAX)."""
    mode = trainer_cfg.distribute
    if mode == "none":
        return Placement()
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        strategy = tf.distribute.MirroredStrategy([device.name for device in devices])
        placement = Placement(mode, strategy.num_replicas_in_sync, engine=strategy)
    else:
        import jax

        if mode == "multi_worker":
            keras.distribution.initialize(*cluster(trainer_cfg))
        devices = keras.distribution.list_devices()
        distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        placement = Placement(mode, len(devices), jax.process_count(), jax.process_index(), distribution)
    logger.info(
        "data parallel (trainer.distribute=%s): %d device%s in %d process%s%s",
        mode,
        placement.replicas,
        "s" if placement.replicas > 1 else "",
        placement.processes,
        "es" if placement.processes > 1 else "",
        f", this is process {placement.index}" if placement.processes > 1 else "",
    )
    if placement.replicas == 1:
        logger.warning("trainer.distribute=%s found one device: training as trainer.distribute=none would", mode)
    return placement


def quiet_worker():
    """A worker other than the chief writes no file: its log goes to stderr only (not the run's train.log) (and it
    shows no progress bar: `prepare(..., verbose=0)`)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
            handler.close()


def local_copy(weights, build):
    """A model of this process alone (`build()`, outside the distribution) holding the trained `weights`, compiled:
    what the chief saves, averages, scores and exports once training is over."""
    copy = build()
    copy.set_weights(weights)
    return copy


def worker(trainer_cfg):
    """Whether this process is a multi_worker run's worker other than the chief (known before `place`), from
    `trainer_cfg` (the config's `trainer`)."""
    return trainer_cfg.distribute == "multi_worker" and cluster(trainer_cfg)[2] not in (None, 0)


def fingerprint(weights):
    """The sha256 of a model's `weights`, which every worker of a distributed run logs when training ends."""
    digest = hashlib.sha256()
    for weight in weights:
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()
