"""Training, step 3: the trained model saved, its last checkpoints averaged, val and test scored, the translator
exported, and `metrics.json` written last."""

import importlib.util
import json
import logging
import os
from dataclasses import replace

import keras

from kmt.checkpoints import average_checkpoints, early_averaging_warning
from kmt.inference.keras_translator import KerasTranslator
from kmt.inference.settings import SearchSettings
from kmt.metrics import translation_scores
from kmt.run_dir import write_atomically
from kmt.training.distribute import fingerprint, local_copy
from kmt.training.resume import optimizer_step

logger = logging.getLogger(__name__)


def finish(cfg, prepared, fitted):
    """Saves `model.keras`, averages the last `trainer.average_last` checkpoints (`Checkpoints.averageable`: the
    update checkpoints of a run that saves by updates, else the epoch ones) into the model, scores val
    and test with the decoder, exports it (`trainer.export`) and writes `metrics.json`; returns the metrics.

    A distributed run's chief does it all on a copy of the model on its own devices (`distribute.local_copy`), and
    its other workers nothing: they return None."""
    p, run = prepared, prepared.run
    steps = optimizer_step(p.model)
    evaluation_data = p.evaluation_data
    if p.placement.distributed:
        # Every worker reads the weights (under JAX, reading weights spread over processes takes them all), and
        # logs their fingerprint, the same on every worker: they trained one model.
        weights = p.model.get_weights()
        logger.info("trained weights: sha256 %s", fingerprint(weights))
        if not p.placement.chief:
            return None
        evaluation_data = lambda name: p.evaluation_data(name, local=True)  # noqa: E731
        p = replace(p, model=local_copy(weights, p.build))
    saved = p.model
    if getattr(p.model, "guided_alignment_weight", 0.0):  # a graph that takes the alignments too: model.keras holds
        p.decoder.set_weights(p.model.get_weights())  # the plain one that translates and scores, with its weights
        saved = p.decoder
    write_atomically(run.model, saved.save)
    if cfg.trainer.average_last > 1:
        paths = run.checkpoints.averageable()[-cfg.trainer.average_last :]
        every = cfg.trainer.save_every_updates
        saved = steps // (every or p.updates_per_epoch)  # checkpoints the run has saved
        if warning := early_averaging_warning(len(paths), saved, run.root, "update checkpoint" if every else "epoch"):
            logger.warning(warning)
        average_checkpoints(p.model, paths)
        write_atomically(run.checkpoints.averaged(len(paths)), p.model.save_weights)
    if p.decoder is not p.model:
        p.decoder.set_weights(p.model.get_weights())
    translator = KerasTranslator(
        p.decoder, p.vocabularies, SearchSettings.from_config(cfg.decode), batch_size=cfg.decode.batch_size
    )

    train = train_stats(p.epoch, fitted, p.updates_per_epoch, p.model, steps)
    train["averaged_checkpoints"] = max(1, min(cfg.trainer.average_last, len(run.checkpoints.averageable())))
    train["best"] = run.checkpoints.best_epoch(cfg.trainer.monitor)
    metrics = {"train": train}
    for name in ("val", "test"):
        if name in p.texts:
            metrics[name] = evaluate_split(
                p.model, translator, evaluation_data(name), p.texts[name], tokenized=cfg.data.tokenized
            )
            logger.info(
                "%s: %s", name, ", ".join(f"{k} {v:.4g}" for k, v in metrics[name].items() if isinstance(v, float))
            )
    average = cfg.trainer.average_last if cfg.trainer.average_last > 1 else None
    if cfg.trainer.export and (size := export(run, p.decoder, p.vocabularies, cfg.decode, average)) is not None:
        metrics["export"] = {"path": run.export.name, "bytes": size}
    write_atomically(run.metrics, json.dumps(metrics, indent=2) + "\n")
    return metrics


def train_stats(split, fitted, updates_per_epoch, model, steps):
    """Throughput of this invocation: target tokens per second of training, leaving out the first epoch (which
    pays for tracing and compilation) when there are more. `wall_seconds` is this invocation's `model.fit`;
    `run_seconds`, `epochs` and `steps` (updates) count the whole run, earlier invocations of a resumed run included
    (`run_seconds` sums history.csv's `epoch_seconds`, training and validation, the time trainer.max_minutes counts);
    `steps` is the optimizer's update count."""
    seconds = fitted.stats.epoch_seconds[1:] or fitted.stats.epoch_seconds
    return {
        "tokens_per_second": split.target_tokens * len(seconds) / sum(seconds) if seconds else None,
        "wall_seconds": fitted.wall_seconds,
        "run_seconds": fitted.run_seconds,
        "epochs": steps // updates_per_epoch,
        "steps": steps,
        "parameters": model.count_params(),
    }


def export(run, decoder, vocabularies, decode_cfg, average=None):
    """Writes the SavedModel of the scored weights to `run.export`, searching as `decode_cfg` (the config's `decode`)
    says; returns its size in bytes, or None when this machine cannot make it. Under TensorFlow it exports `decoder`
    (with `vocabularies`) here. Under JAX and PyTorch the SavedModel is a TensorFlow graph all the same, so
    `kmt.export` makes it from the run's checkpoints (the last `average` averaged, when given) in a TensorFlow process
    of its own (this process never imports TensorFlow); without TensorFlow the run says how to make it elsewhere."""
    from kmt.inference.exporters import exporter, search_settings

    if keras.backend.backend() == "tensorflow":
        exporter("savedmodel").export([decoder], vocabularies, search_settings(decode_cfg), run.export)
        return _size(run.export)
    command = f"kmt-export {run.root}" + (f" --average {average}" if average else "")
    if importlib.util.find_spec("tensorflow") is None:
        logger.warning(
            "no SavedModel: it needs TensorFlow, which is not installed here; run `%s` where TensorFlow "
            "is installed to make it",
            command,
        )
        return None
    try:
        in_tensorflow_process(_export_run, str(run.root), average)
    except Exception as error:  # noqa: BLE001 (any failure there leaves the run as it is, saying what to run)
        lines = str(error).strip().splitlines()
        logger.warning(
            "no SavedModel: exporting under TensorFlow failed (%s); run `%s` where TensorFlow works",
            lines[-1] if lines else type(error).__name__,
            command,
        )
        return None
    logger.info("exported the SavedModel to %s (under TensorFlow, in a process of its own)", run.export)
    return _size(run.export)


def _export_run(run_dir, average):
    from kmt.inference.exporters import export

    export(run_dir, average=average)


def in_tensorflow_process(fn, *args):
    """`fn(*args)` in a fresh process (`spawn`) whose Keras backend is TensorFlow, on the CPU (the accelerator stays
    with this process, and TensorFlow might find another stack's CUDA); its exception is raised here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    saved = {key: os.environ.get(key) for key in ("KERAS_BACKEND", "CUDA_VISIBLE_DEVICES")}
    os.environ.update(KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="")  # what the spawned process starts with
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(fn, *args).result()
    finally:
        os.environ.update({key: value for key, value in saved.items() if value is not None})
        for key in (key for key, value in saved.items() if value is None):
            os.environ.pop(key, None)


def _size(directory):
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def evaluate_split(model, translator, data, text, tokenized=False):
    """Loss, token accuracy and perplexity on the kept pairs (`data`: one pass over their batches); BLEU, chrF and
    exact match of decoded translations of every source sentence against its reference (BLEU without further
    tokenization when the text is `tokenized`)."""
    scores = model.evaluate(data, verbose=0, return_dict=True)
    translations = translator.translate(text.source)
    kept = {name: scores[name] for name in ("loss", "accuracy", "ppl")}
    return kept | {"pairs": len(text)} | translation_scores(translations, text.target, tokenized)
