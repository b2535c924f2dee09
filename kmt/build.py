"""`build_*` factories: the model, its learning-rate schedule and optimizer, and the compiled model, from the config's
`model` and `optim` groups (`kmt.inference.settings.SearchSettings.from_config` reads `decode`)."""

import keras

from kmt.losses import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity
from kmt.models import model_class
from kmt.schedule import NoamSchedule


def build_model(model_cfg, source_vocab_size, target_vocab_size, dtype_policy=None, guided_alignment_weight=0.0):
    """The model of `cfg.model`, of the class `model.arch` names (`kmt.models.model_class`), for the run's
    vocabulary sizes; with a positive `guided_alignment_weight` (`optim.guided_alignment_weight`, a run that trains
    on `data.train.alignments`), the graph that trains on alignments (`kmt.models.Transformer`).

    `dtype_policy` (e.g. `"float32"`) builds this model under that policy instead of the global one, which is left
    as it was. Decoding and export use float32 whatever the training precision: a mixed-precision SavedModel would
    run bfloat16 matmuls, slow on CPUs without AVX512-BF16 or AMX, and round the logits that beam scores come from.
    Mixed precision keeps its variables in float32, so a float32 model takes a mixed one's weights exactly.
    """
    previous = keras.config.dtype_policy()
    if dtype_policy is not None:
        keras.config.set_dtype_policy(dtype_policy)
    try:
        guided = {"guided_alignment_weight": guided_alignment_weight} if guided_alignment_weight else {}
        return model_class(model_cfg.arch).from_model_config(model_cfg, source_vocab_size, target_vocab_size, **guided)
    finally:
        keras.config.set_dtype_policy(previous)


def build_schedule(optim_cfg, hidden_dim, total_steps):
    """The Noam schedule of `optim_cfg` for a run of `total_steps` updates, cooled down over the last
    `optim.cooldown` of them when that is set, counting updates of `optim.gradient_accumulation_steps` batches."""
    cooldown_steps = max(1, round(optim_cfg.cooldown * total_steps)) if optim_cfg.cooldown else 0
    return NoamSchedule(
        hidden_dim,
        warmup_steps=optim_cfg.warmup_steps,
        scale=optim_cfg.lr_scale,
        total_steps=total_steps,
        cooldown_steps=cooldown_steps,
        gradient_accumulation_steps=optim_cfg.gradient_accumulation_steps,
    )


def build_optimizer(optim_cfg, schedule):
    """Adam with the paper's betas and epsilon, driven by `schedule` (see `build_schedule`), updating the weights
    with the mean gradient of every `optim.gradient_accumulation_steps` batches. Its `iterations` count updates.
    With `optim.weight_decay`, it is AdamW: kernels and embeddings decay, biases and LayerNorm weights do not."""
    optimizer = keras.optimizers.Adam(
        learning_rate=schedule,
        beta_1=optim_cfg.beta_1,
        beta_2=optim_cfg.beta_2,
        epsilon=optim_cfg.epsilon,
        global_clipnorm=optim_cfg.clipnorm,
        gradient_accumulation_steps=optim_cfg.gradient_accumulation_steps
        if optim_cfg.gradient_accumulation_steps > 1
        else None,
        weight_decay=optim_cfg.weight_decay or None,
    )
    if optim_cfg.weight_decay:
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def compile_model(model, optim_cfg, schedule, jit_compile):
    """Compiles `model` for training with the optimizer and loss of `optim_cfg` (the config's `optim`), kmt's
    metrics and the XLA choice `jit_compile` (`trainer.jit_compile`), at the learning rate `schedule`
    (`build_schedule`).

    The optimizer's slots are created here, not in the first training step: under TensorFlow, Keras otherwise
    builds the optimizer inside the first trace of the train step, and a `tf.function` that creates variables is
    traced a second time, which costs seconds at the start of every run (more the larger the model).
    """
    model.compile(
        optimizer=build_optimizer(optim_cfg, schedule),
        loss=MaskedCrossEntropy(label_smoothing=optim_cfg.label_smoothing),
        metrics=[MaskedAccuracy(), MaskedPerplexity()],
        jit_compile=jit_compile,
    )
    model.optimizer.build(model.trainable_variables)
    return model
