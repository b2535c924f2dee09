"""The learning-rate schedule of the paper (Vaswani et al., 2017, section 5.3), often called "Noam"."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kmt")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then decay with the inverse square root of the step.

    `lrate = scale * hidden_dim**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)`, with `step` counted from 1
    (the optimizer's `iterations` + 1). The rate rises linearly for `warmup_steps` steps, peaks at step
    `warmup_steps` at `scale * (hidden_dim * warmup_steps)**-0.5`, then falls as `step**-0.5`.

    With `total_steps` and `cooldown_steps`, the last `cooldown_steps` of `total_steps` updates also scale the rate
    down linearly, to `1 / cooldown_steps` of Noam's at the final update: a cool-down, as in warmup-stable-decay
    schedules (Hägele et al., 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"),
    for runs whose length is fixed in advance. Steps past `total_steps` (a run trained further) keep the final
    update's factor.

    Keras calls a schedule with the optimizer's batch counter. With gradient accumulation an update takes
    `gradient_accumulation_steps` batches, so `step` above is the update, `batch // gradient_accumulation_steps`,
    and `warmup_steps`, `total_steps` and `cooldown_steps` all count updates, as in fairseq with `--update-freq`.

    Args:
        hidden_dim: int. Model size d_model.
        warmup_steps: int. Steps of linear warm-up. Defaults to `4000`, the paper's.
        scale: float. Multiplies the whole schedule (fairseq's and OpenNMT's "learning rate" knob for small
            data). Defaults to `1.0`.
        total_steps: int or None. The run's number of updates; needed with `cooldown_steps`. Defaults to `None`.
        cooldown_steps: int. Final updates of the linear cool-down; `0` (the default) is the paper's schedule.
        gradient_accumulation_steps: int. Batches per update, the optimizer's `gradient_accumulation_steps`.
            Defaults to `1`.

    Example:
    >>> schedule = NoamSchedule(hidden_dim=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # the peak, at step 4000
    0.000699
    >>> cooled = NoamSchedule(hidden_dim=512, warmup_steps=4000, total_steps=10000, cooldown_steps=2000)
    >>> round(float(cooled(8999)) / float(schedule(8999)), 4)  # halfway through the cool-down
    0.5005
    """

    def __init__(
        self,
        hidden_dim,
        warmup_steps=4000,
        scale=1.0,
        total_steps=None,
        cooldown_steps=0,
        gradient_accumulation_steps=1,
    ):
        if hidden_dim <= 0 or warmup_steps <= 0 or scale <= 0 or gradient_accumulation_steps <= 0:
            raise ValueError(
                "hidden_dim, warmup_steps, scale and gradient_accumulation_steps must be positive. "
                f"Received: hidden_dim={hidden_dim}, warmup_steps={warmup_steps}, scale={scale}, "
                f"gradient_accumulation_steps={gradient_accumulation_steps}"
            )
        if cooldown_steps < 0 or (cooldown_steps and (total_steps is None or not 0 < cooldown_steps <= total_steps)):
            raise ValueError(
                "cooldown_steps must be 0, or between 1 and total_steps. "
                f"Received: cooldown_steps={cooldown_steps}, total_steps={total_steps}"
            )
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.total_steps = total_steps
        self.cooldown_steps = cooldown_steps
        self.gradient_accumulation_steps = gradient_accumulation_steps

    def __call__(self, batch):
        step = ops.floor(ops.cast(batch, "float32") / self.gradient_accumulation_steps) + 1.0  # the update, from 1
        decay = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        rate = self.scale * self.hidden_dim**-0.5 * decay
        if self.cooldown_steps:
            remaining = ops.maximum(self.total_steps + 1.0 - step, 1.0)  # cooldown_steps .. 1 over the last updates
            rate = rate * ops.minimum(remaining / self.cooldown_steps, 1.0)
        return rate

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "total_steps": self.total_steps,
            "cooldown_steps": self.cooldown_steps,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }
