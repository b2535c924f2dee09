"""Run by tests/test_distribute.py in a fresh process (devices are fixed when the backend starts): 3 training steps
on one device and on two (TensorFlow: two logical CPU devices; JAX: two host devices from XLA_FLAGS), with the same
global batch, then prints the largest weight difference as JSON.

    python -m tests.distributed_steps PREPARED_DIR WORK_DIR
"""

import json
import os
import sys

import numpy as np

STEPS = 3


def main(prepared, work):
    import keras

    if keras.backend.backend() == "tensorflow":
        from tests.logical_devices import split_cpu

        split_cpu(2)

    from kmt.training.prepare import prepare
    from tests.helpers import compose_config

    weights = {}
    for mode, batch_size in (("none", 16), ("mirrored", 8)):  # one device's batch is both devices' together
        cfg = compose_config(
            "data=prepared",
            f"data.path={prepared}",
            "data.max_tokens=0",
            f"data.batch_size={batch_size}",
            f"trainer.distribute={mode}",
            "trainer.precision=float32",
            "model.dropout=0",
            "model.attention_dropout=0",
            "model.activation_dropout=0",
            "optim.warmup_steps=2",
            "optim.epsilon=1e-3",
        )
        p = prepare(cfg, os.path.join(work, mode))
        assert p.placement.replicas == (1 if mode == "none" else 2), p.placement
        initial = [np.asarray(w) for w in p.model.get_weights()]
        with p.placement.scope():
            p.model.fit(p.train_data, epochs=1, steps_per_epoch=STEPS, verbose=0, shuffle=False)
        weights[mode] = [np.asarray(w) for w in p.model.get_weights()]
        steps = int(keras.ops.convert_to_numpy(p.model.optimizer.iterations))
        assert steps == STEPS, steps
    apart = max(float(np.abs(a - b).max()) for a, b in zip(weights["none"], weights["mirrored"]))
    moved = max(float(np.abs(a - b).max()) for a, b in zip(weights["none"], initial))
    print(json.dumps({"max_difference": apart, "moved": moved, "backend": keras.backend.backend()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
