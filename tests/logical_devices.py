"""Runs a kmt command's module in this process with its CPU split into N logical TensorFlow devices, which
`trainer.distribute=mirrored` then trains on (TensorFlow has no variable for it; XLA_FLAGS's
`--xla_force_host_platform_device_count=N` does the same for JAX):

    python -m tests.logical_devices N kmt.cli.train debug=smoke trainer.distribute=mirrored ...
"""

import runpy
import sys


def split_cpu(count):
    """Splits the CPU into `count` logical TensorFlow devices (before TensorFlow runs anything)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)


if __name__ == "__main__":
    count, module, *args = sys.argv[1:]
    split_cpu(int(count))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
