import keras
import numpy as np
import pytest

from kmt.schedule import NoamSchedule


def formula(step, hidden_dim, warmup_steps, scale=1.0):
    return scale * hidden_dim**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def rate(schedule, step):
    """The rate at 1-based `step`; Keras passes the optimizer's 0-based `iterations`."""
    return float(schedule(step - 1))


@pytest.mark.parametrize("step", [1, 4000, 40000])
def test_matches_the_formula(step):
    schedule = NoamSchedule(hidden_dim=512, warmup_steps=4000, scale=2.0)
    assert rate(schedule, step) == pytest.approx(formula(step, 512, 4000, 2.0), rel=1e-5)


def test_peaks_at_warmup_steps():
    schedule = NoamSchedule(hidden_dim=256, warmup_steps=50)
    rates = [rate(schedule, step) for step in range(1, 301)]
    assert int(np.argmax(rates)) + 1 == 50
    assert rates[0] < rates[24] < rates[49] > rates[99] > rates[299]


def test_serializes_and_drives_adam():
    schedule = NoamSchedule(hidden_dim=64, warmup_steps=10, scale=0.5)
    clone = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert clone.get_config() == schedule.get_config()
    optimizer = keras.optimizers.Adam(learning_rate=schedule)
    assert float(optimizer.learning_rate) == pytest.approx(formula(1, 64, 10, 0.5), rel=1e-5)


def test_rejects_non_positive_values():
    with pytest.raises(ValueError, match="warmup_steps=0"):
        NoamSchedule(hidden_dim=64, warmup_steps=0)


def test_cooldown_scales_the_last_updates_down_linearly():
    noam = NoamSchedule(hidden_dim=64, warmup_steps=10)
    cooled = NoamSchedule(hidden_dim=64, warmup_steps=10, total_steps=100, cooldown_steps=40)
    factors = [rate(cooled, step) / rate(noam, step) for step in range(1, 121)]
    assert factors[:61] == pytest.approx([1.0] * 61)  # steps 1-61: the paper's schedule
    assert factors[60:100] == pytest.approx([k / 40 for k in range(40, 0, -1)])  # steps 61-100: 40/40 ... 1/40
    assert factors[100:] == pytest.approx([1 / 40] * 20)  # trained further: the final update's factor
    clone = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(cooled))
    assert clone.get_config() == cooled.get_config()
    assert float(clone(79)) == pytest.approx(float(cooled(79)))


@pytest.mark.parametrize("total_steps, cooldown_steps", [(None, 5), (10, 11), (10, -1)])
def test_rejects_a_cooldown_it_cannot_place(total_steps, cooldown_steps):
    with pytest.raises(ValueError, match=f"cooldown_steps={cooldown_steps}, total_steps={total_steps}"):
        NoamSchedule(hidden_dim=64, warmup_steps=10, total_steps=total_steps, cooldown_steps=cooldown_steps)


def test_counts_updates_of_accumulated_batches():
    plain = NoamSchedule(hidden_dim=64, warmup_steps=10, total_steps=50, cooldown_steps=10)
    accumulated = NoamSchedule(
        hidden_dim=64, warmup_steps=10, total_steps=50, cooldown_steps=10, gradient_accumulation_steps=4
    )
    # Keras passes the batch counter: batches 4u .. 4u + 3 make update u and share its rate.
    assert [float(accumulated(batch)) for batch in range(220)] == pytest.approx(
        [float(plain(batch // 4)) for batch in range(220)]
    )
    clone = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(accumulated))
    assert clone.get_config() == accumulated.get_config()
    with pytest.raises(ValueError, match="gradient_accumulation_steps=0"):
        NoamSchedule(hidden_dim=64, gradient_accumulation_steps=0)


@pytest.mark.parametrize("weight_decay", [0.0, 0.5])
def test_weight_decay_shrinks_kernels_and_embeddings_only(weight_decay):
    """optim.weight_decay makes the optimizer AdamW: with a zero gradient (Adam's step is then zero) every kernel and
    embedding shrinks by rate x decay in one update, and biases and LayerNorm weights stay as they were."""
    from omegaconf import OmegaConf

    from kmt.build import build_model, build_optimizer
    from kmt.config import ModelConfig, OptimConfig

    model_cfg = OmegaConf.structured(ModelConfig(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32))
    model = build_model(model_cfg, 20, 20)
    for variable in model.trainable_variables:  # LayerNorm starts at 1 and 0, biases at 0: make them all non-zero
        variable.assign(keras.random.uniform(variable.shape, 0.5, 1.5, seed=1))
    optimizer = build_optimizer(OmegaConf.structured(OptimConfig(weight_decay=weight_decay)), 0.1)
    before = {v.path: keras.ops.convert_to_numpy(v) for v in model.trainable_variables}
    optimizer.apply([keras.ops.zeros(v.shape) for v in model.trainable_variables], model.trainable_variables)
    decayed = set()
    for variable in model.trainable_variables:
        after = keras.ops.convert_to_numpy(variable)
        if not np.allclose(after, before[variable.path]):
            np.testing.assert_allclose(after, before[variable.path] * (1 - 0.1 * weight_decay), rtol=1e-5)
            decayed.add(variable.name)
    assert decayed == ({"kernel", "embeddings"} if weight_decay else set())
