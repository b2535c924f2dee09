"""What the Keras backend and its devices decide: the precision and XLA of `trainer.precision=auto` and
`trainer.jit_compile=null`, and whether TensorFlow (the SavedModel export) can be imported.

Each question is asked of the backend's own library, so a JAX or PyTorch process never imports TensorFlow here.
"""

import logging
import sys

import keras

logger = logging.getLogger(__name__)


def name():
    return keras.backend.backend()


def gpu_capability():
    """The compute capability `(major, minor)` of the backend's first GPU, or None without one."""
    backend = name()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "gpu":
            return None
        capability = getattr(device, "compute_capability", "0.0")
        return tuple(int(part) for part in str(capability).split(".")[:2])
    if backend == "torch":
        import torch

        return torch.cuda.get_device_capability(0) if torch.cuda.is_available() else None
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return None
        return tuple(tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0)))
    return None


def resolve_precision(precision):
    """`trainer.precision`, with `auto` made mixed_bfloat16 on a GPU with bfloat16 units (compute capability 8.0 and
    up: A100, H100, RTX 30xx and newer) and float32 elsewhere (CPUs, older GPUs)."""
    if precision != "auto":
        return precision
    capability = gpu_capability()
    return "mixed_bfloat16" if capability is not None and capability >= (8, 0) else "float32"


def resolve_jit_compile(jit_compile):
    """`trainer.jit_compile`, with null made what Keras's `"auto"` picks: XLA under JAX (which otherwise runs every op
    on its own), under TensorFlow on a GPU, never under PyTorch."""
    if jit_compile is not None:
        return bool(jit_compile)
    backend = name()
    return backend == "jax" or (backend == "tensorflow" and gpu_capability() is not None)


def keep_tensorflow_out():
    """Under JAX and PyTorch, while TensorFlow is not loaded: tells Keras it is not installed. Keras asks whether
    TensorFlow can be imported, importing it, wherever it might meet TensorFlow objects (serializing a layer's config,
    seeding), which costs seconds and memory, and on a GPU machine a second CUDA stack's start-up; kmt's batches under
    these backends are numpy, so nothing of TensorFlow's is met. The SavedModel export runs in a process of its own."""
    if name() == "tensorflow" or "tensorflow" in sys.modules:
        return
    from kmt._keras_private import disable_tensorflow_import

    disable_tensorflow_import()
