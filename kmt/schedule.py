"""The learning-rate schedule of the paper (Vaswani et al., 2017, section 5.3), often called "Noam"."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kmt")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then decay with the inverse square root of the step.

    `lrate = scale * hidden_dim**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)`, with `step` counted from 1
    (the optimizer's `iterations` + 1). The rate rises linearly for `warmup_steps` steps, peaks at step
    `warmup_steps` at `scale * (hidden_dim * warmup_steps)**-0.5`, then falls as `step**-0.5`.

    Args:
        hidden_dim: int. Model size d_model.
        warmup_steps: int. Steps of linear warm-up. Defaults to `4000`, the paper's.
        scale: float. Multiplies the whole schedule (fairseq's and OpenNMT's "learning rate" knob for small
            data). Defaults to `1.0`.

    Example:
    >>> schedule = NoamSchedule(hidden_dim=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # the peak, at step 4000
    0.000699
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        if hidden_dim <= 0 or warmup_steps <= 0 or scale <= 0:
            raise ValueError(
                "hidden_dim, warmup_steps and scale must be positive. "
                f"Received: hidden_dim={hidden_dim}, warmup_steps={warmup_steps}, scale={scale}"
            )
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        decay = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        return self.scale * self.hidden_dim**-0.5 * decay

    def get_config(self):
        return {"hidden_dim": self.hidden_dim, "warmup_steps": self.warmup_steps, "scale": self.scale}
