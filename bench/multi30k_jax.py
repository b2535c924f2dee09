"""Multi30k on an accelerator without TensorFlow: a recipe of bench/multi30k.py trained under Keras's JAX backend on
token ids made here, then exported, decoded and scored here like any kmt run.

The lent GPU machines have JAX but no TensorFlow, and kmt's tokenizers and tf.data pipeline are TensorFlow ops. So
the work splits in three, the first and last where kmt is installed, the middle where keras, JAX and omegaconf are:

    python bench/multi30k_jax.py prepare en_de --out .gpu/en_de  # config, vocabulary, ids (and sampled draws)
    KERAS_BACKEND=jax python bench/multi30k_jax.py train .gpu/en_de --out OUT --deadline 540 \\
        --job long:trainer.epochs=130,trainer.max_minutes=3.5 --job d03:trainer.epochs=130,model.dropout=0.3 --keep long
    python bench/multi30k_jax.py finish .gpu/en_de OUT --job long       # run dir, SavedModel, val and test rows
    python bench/multi30k_jax.py score .gpu/en_de OUT                   # val BLEU of every job (train --decode)

`prepare` composes `experiment=multi30k_<direction>` with any Hydra overrides, trains the vocabulary on the training
split (as kmt-train does) and writes every split's ids. Subword regularization (`data.subword_sampling`, which the
En->De recipe uses) draws a new segmentation of the training pairs on every pass, with TensorFlow ops; here `prepare`
makes `--draws` seeded draws instead (`kmt.data.pipeline.resample`; the first is the draw kmt-train sizes its epochs
by), and training cycles through them, one a pass. `train` runs each `--job` (a name, then overrides of that config as
`key=value,key=value`) in turn (with `--parallel`, all at once, a process each) with `model.fit`, for `trainer.epochs`
or until `trainer.max_minutes` or `--deadline`, whichever ends first; it averages the last `trainer.average_last`
epochs, measures the average on val, and writes the averaged weights of each `--keep` job (float32, in files of under
16 MiB) with a `results.json` of every job's history and throughput. `finish` makes a run directory of a kept job
under runs/bench/multi30k_<direction>_jax/ (config.yaml, tokenizer/, checkpoints/average_lastN.weights.h5), exports it
with kmt-export, scores val and test_2016_flickr through the SavedModel with kmt-evaluate and prints the results row.
Only a few jobs' weights fit what a call can bring back, so `train --decode` also translates val and test there
with every job's averaged weights, searching as the SavedModel does (beam, length penalty, float32), and keeps the
token ids in results.json; `score` detokenizes and scores them here (`--split test` to report once), every job in
one table.

Batches are the ones kmt-train makes (`kmt.data.pipeline`): sentences grouped by length (the longer of source and
target + 1) into the recipe's buckets, `data.max_tokens // bucket edge` sentences each, shuffled sentences, then a
256-batch shuffle. On the accelerator each batch is then padded, in sentences and in length, to one of a few fixed
shapes, so XLA compiles the step once per shape rather than once per length: padded rows and positions are pad
tokens, which the masks and the loss ignore, so an update is the one the unpadded batch would make.
"""

import argparse
import collections
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "val", "test")
DECODED = ("val", "test")  # the splits `train --decode` translates
# Lengths the padded batches come in by default: one XLA compilation of the train step (and one of the eval step) per
# edge used. On Multi30k these make 5 shapes, and the first epoch on an H200 took 91 s; kmt's own bucket edges
# (kmt.data.buckets.BUCKET_EDGES) made 12, 192 s.
SHAPE_EDGES = (12, 16, 24, 32, 64, 128, 256, 512, 1024)
# kmt-train's subword regularization tokenizes the training text afresh on every pass, with TensorFlow ops; here
# `prepare` draws `--draws` segmentations at its alpha, so a job can sample at that alpha or not at all (0).
DRAWS = 10
SHUFFLE_BATCHES = 256  # kmt.data.pipeline.make_dataset's batch shuffle buffer
MAX_FILE_BYTES = 15 * 2**20  # each weights file stays under the 16 MiB a file that the device tool brings back
# `train --decode`: sentences a search batch holds. Multi30k's val (1,014) and test (1,000) go in one batch each, so in
# one compilation each; at beam 10 that is 10,240 rows a step, a few GB of key/value cache.
DECODE_BATCH = 1024


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="here: config, vocabulary and token ids for `train`")
    prepare.add_argument("direction", choices=("en_de", "de_en"))
    prepare.add_argument("overrides", nargs="*",
                         help="Hydra overrides of the recipe, e.g. data.tokenizer.vocab_size=8000")
    prepare.add_argument("--out", type=Path, required=True, help="directory to write (carried to the accelerator)")
    prepare.add_argument("--draws", type=int, default=DRAWS, metavar="N",
                         help="with data.subword_sampling: segmentations of the training split to draw, which "
                              "training cycles through, one a pass (default: %(default)s)")
    train = commands.add_parser("train", help="on the accelerator (KERAS_BACKEND=jax): train the jobs")
    train.add_argument("prepared", type=Path, help="a `prepare` directory")
    train.add_argument("--out", type=Path, required=True, help="where results.json and kept weights go")
    train.add_argument("--job", action="append", required=True, metavar="NAME[:KEY=VALUE,...]",
                       help="a run of the prepared recipe with these overrides (repeatable; run in order)")
    train.add_argument("--keep", action="append", default=[], metavar="NAME",
                       help="write this job's averaged weights (repeatable)")
    train.add_argument("--shape-edges", default=",".join(map(str, SHAPE_EDGES)), metavar="N,N,...",
                       help="the lengths batches are padded to: fewer edges, fewer compilations, more padding "
                            "(default: %(default)s)")
    train.add_argument("--deadline", type=float, default=0, metavar="SECONDS",
                       help="stop training (and start no job) this long after the start, keeping time to save")
    train.add_argument("--parallel", action="store_true",
                       help="run the jobs at once, one process each, sharing the accelerator (each gets an equal "
                            "share of its memory unless XLA_PYTHON_CLIENT_MEM_FRACTION is set): their compilations "
                            "overlap, and small models leave one job's accelerator mostly idle")
    train.add_argument("--decode", action="store_true",
                       help="after training, also translate val and test_2016_flickr there with each job's averaged "
                            "weights (its decode.beam_size and decode.length_penalty, float32, as kmt-export "
                            "decodes) and keep the token ids in results.json, for `score`: every job's BLEU, kept or "
                            "not")
    finish = commands.add_parser("finish", help="here: run directory, SavedModel, val and test scores of a kept job")
    finish.add_argument("prepared", type=Path, help="the `prepare` directory the job trained on")
    finish.add_argument("trained", type=Path, help="the `train --out` directory")
    finish.add_argument("--job", required=True, help="a kept job's name")
    finish.add_argument("--run-dir", type=Path, help="default: runs/bench/multi30k_<direction>_jax/<job>_<time>")
    score = commands.add_parser("score", help="here: BLEU and chrF of every job's translations made by `train "
                                              "--decode`, no weights needed")
    score.add_argument("prepared", type=Path, help="the `prepare` directory the jobs trained on")
    score.add_argument("trained", type=Path, help="the `train --out` directory")
    score.add_argument("--split", choices=("val", "test"), default="val",
                       help="val (choose on it) or test (test_2016_flickr: report once) (default: %(default)s)")
    score.add_argument("--job", action="append", default=[], metavar="NAME",
                       help="score only this job (repeatable; default: every job with translations)")
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------------------------- prepare

def prepare(args):
    """Composes the recipe, trains its vocabulary and writes `config.yaml`, `tokenizer/` and `ids.npz`."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from kmt import config as config_lib
    from kmt.cli.errors import exit_on_user_error, fail, one_line
    from kmt.data import load_corpus
    from kmt.data.pipeline import encode_split, resample
    from kmt.training.prepare import prepare_vocabularies

    config_lib.register_configs()
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[f"experiment=multi30k_{args.direction}", *args.overrides])
    except (HydraException, OmegaConfBaseException) as error:
        fail(one_line(error))
    with exit_on_user_error():  # a bad setting, a missing corpus: one line
        config_lib.validate(cfg)
        if args.draws < 1:
            fail(f"--draws must be at least 1. Received: {args.draws}")
        corpus = load_corpus(cfg.data)
        args.out.mkdir(parents=True, exist_ok=True)
        vocabularies = prepare_vocabularies(cfg, corpus, args.out / "tokenizer")
        splits = {name: encode_split(name, corpus[name], vocabularies, cfg.model.max_length) for name in SPLITS}
        alpha, draws = cfg.data.subword_sampling, 0
        if alpha:  # the seeds kmt-train's first draw uses (cfg.seed, cfg.seed + 1), then two more a draw
            draws = args.draws
            for k in range(draws):
                splits[f"train_draw{k}"] = resample(splits["train"], vocabularies, cfg.model.max_length, alpha,
                                                    cfg.seed + 2 * k)
            extra = [splits[f"train_draw{k}"].target_tokens / splits["train"].target_tokens - 1 for k in range(draws)]
            print(f"subword sampling (alpha {alpha:g}): {draws} draws of the training split, "
                  f"{100 * min(extra):.1f}-{100 * max(extra):.1f}% more target tokens than the best segmentation")
    arrays = {}
    for name, split in splits.items():
        for side in ("source", "target"):
            arrays[f"{name}_{side}"] = getattr(split, side).flat_values.numpy().astype(np.int32)
            arrays[f"{name}_{side}_lengths"] = getattr(split, side).row_lengths().numpy().astype(np.int32)
    # For `train --decode`: every source line of val and test, as the SavedModel reads it (cut to model.max_length;
    # an empty line translates to an empty line), where the splits above drop pairs too long or empty to train on.
    for name in DECODED:
        ids = vocabularies.source.tokenize(corpus[name].source)[:, : cfg.model.max_length]
        arrays[f"{name}_all_source"] = ids.flat_values.numpy().astype(np.int32)
        arrays[f"{name}_all_source_lengths"] = ids.row_lengths().numpy().astype(np.int32)
    np.savez_compressed(args.out / "ids.npz", **arrays)
    meta = {"direction": args.direction, "overrides": args.overrides,
            "source_vocab_size": vocabularies.source.vocab_size, "target_vocab_size": vocabularies.target.vocab_size,
            "subword_sampling": alpha, "draws": draws}
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    (args.out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    sizes = ", ".join(f"{path.name} {path.stat().st_size / 2**20:.1f} MiB"
                      for path in sorted(args.out.iterdir()) if path.is_file())
    print(f"{args.out}: {len(arrays['train_source_lengths'])} training pairs, vocabulary "
          f"{vocabularies.target.vocab_size}; {sizes}")


# ------------------------------------------------------------------------------------------------------------ train

def read_prepared(directory):
    """The `meta.json` of a `prepare` directory; exits with one line when `directory` is not one."""
    missing = [name for name in ("meta.json", "config.yaml", "ids.npz", "tokenizer") if not (directory / name).exists()]
    if missing:
        sys.exit(f"error: {directory} is not a `prepare` directory (no {', '.join(missing)}); make one with "
                 "python bench/multi30k_jax.py prepare DIRECTION --out DIR")
    return json.loads((directory / "meta.json").read_text())


def ragged(arrays, name, side):
    """`(N,)` list of int32 id arrays of one side of a split."""
    lengths = arrays[f"{name}_{side}_lengths"]
    return np.split(arrays[f"{name}_{side}"], np.cumsum(lengths)[:-1])


class Batches:
    """kmt-train's batches of one split as numpy arrays, each padded to a fixed shape.

    The buckets, their sizes and the steps in an epoch come from `kmt.data.buckets`, as kmt-train's tf.data
    batches do (`kmt.data.pipeline` itself needs TensorFlow). With `draws` (segmentations of the same pairs drawn
    by subword sampling) the training stream's pass p is draw p mod len(draws), and an epoch holds the first draw's
    batches, as kmt-train sizes its epochs by its first draw; `one_pass` stays on `source` and `target`.
    """

    def __init__(self, source, target, max_length, max_tokens, batch_size, bucket_width, shape_edges=SHAPE_EDGES,
                 draws=()):
        from kmt.data.buckets import batches_per_pass, bucket_lengths, bucket_of, bucket_sizes

        segmentations = [(source, target), *draws]
        # Every segmentation's pairs in one list, so a batch is a list of indices whichever pass it comes from.
        self.source = [s for pairs, _ in segmentations for s in pairs]
        self.target = [t for _, pairs in segmentations for t in pairs]
        bounds = np.cumsum([0, *(len(pairs) for pairs, _ in segmentations)])
        ranges = [np.arange(start, stop) for start, stop in zip(bounds[:-1], bounds[1:])]
        self.best, self.draws = ranges[0], ranges[1:] or ranges[:1]  # without draws, training passes the best one
        edges, self.sizes = bucket_sizes(max_length, max_tokens, batch_size, bucket_width)
        self.bucket = bucket_of(bucket_lengths([len(s) for s in self.source], [len(t) for t in self.target]), edges)
        # The padded shape of each bucket: its longest length rounded up to one of `shape_edges`, and the most
        # sentences any bucket padded to that length holds, over every segmentation, so that no draw makes a
        # shape (an XLA compilation) the others do not.
        longest = [min(edge - 1, max_length) for edge in edges] + [max_length]
        self.width = [next((e for e in shape_edges if e >= n), n) for n in longest]
        counts = np.bincount(self.bucket, minlength=len(self.sizes))
        rows = collections.defaultdict(int)
        for width, size, count in zip(self.width, self.sizes, counts):
            if count:  # an empty bucket makes no batch to pad for
                rows[width] = max(rows[width], size)
        self.rows = [rows[width] for width in self.width]
        self.steps_per_epoch = batches_per_pass(self.bucket[self.draws[0]], self.sizes, repeated=True)

    def pad(self, indices, bucket):
        rows, width = self.rows[bucket], self.width[bucket]
        source = np.zeros((rows, width), np.int32)
        target_in = np.zeros((rows, width), np.int32)
        target_out = np.zeros((rows, width), np.int32)
        for row, i in enumerate(indices):
            s, t = self.source[i], self.target[i]
            source[row, : len(s)] = s
            target_in[row, 0], target_in[row, 1 : len(t) + 1] = 2, t  # start token, then the target
            target_out[row, : len(t)], target_out[row, len(t)] = t, 3  # the target, then the end token
        return {"source": source, "target_in": target_in}, target_out

    def one_pass(self):
        """Every pair once in its best segmentation, bucket by bucket, each bucket ending with a partial batch (for
        validation)."""
        for bucket in np.unique(self.bucket[self.best]):
            members = self.best[self.bucket[self.best] == bucket]
            for start in range(0, len(members), self.sizes[bucket]):
                yield self.pad(members[start : start + self.sizes[bucket]], bucket)

    def stream(self, seed):
        """The repeated training stream: sentences reshuffled every pass (each pass the next draw, with `draws`), a
        batch out as soon as its bucket holds its size (leftovers go on into the next pass), then a shuffle buffer of
        256 batches."""
        rng = np.random.default_rng(seed)
        pending, buffer = collections.defaultdict(list), []
        for n in itertools.count():  # the n-th pass over the training pairs
            members = self.draws[n % len(self.draws)]
            for i in members[rng.permutation(len(members))]:
                bucket = self.bucket[i]
                pending[bucket].append(i)
                if len(pending[bucket]) == self.sizes[bucket]:
                    buffer.append((pending.pop(bucket), bucket))
                    if len(buffer) == SHUFFLE_BATCHES:
                        yield self.pad(*buffer.pop(rng.integers(len(buffer))))


def train(args):
    """Runs each `--job` in turn; writes `results.json` after each, and the averaged weights of `--keep` jobs."""
    import keras
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from kmt.config import onto_schema, validate
    from kmt.errors import ConfigError

    started = time.perf_counter()
    if keras.backend.backend() != "jax":
        sys.exit(f"error: train runs under Keras's JAX backend; set KERAS_BACKEND=jax (it is "
                 f"{keras.backend.backend()})")
    meta = read_prepared(args.prepared)
    try:
        shape_edges = sorted(int(edge) for edge in args.shape_edges.split(","))
    except ValueError:
        sys.exit(f"error: --shape-edges takes lengths like 12,16,24,32,64. Received: {args.shape_edges}")
    jobs = {}
    base = onto_schema(OmegaConf.load(args.prepared / "config.yaml"))  # an option added since `prepare` gets its
    # default; a misspelt key is an error, not a new setting
    for spec in args.job:
        name, _, overrides = spec.partition(":")
        try:
            jobs[name] = OmegaConf.merge(base, OmegaConf.from_dotlist([item for item in overrides.split(",") if item]))
            validate(jobs[name])  # as kmt-train checks its config: trainer.epochs=0 is an error, not a traceback
        except (OmegaConfBaseException, ConfigError) as error:
            sys.exit(f"error: --job {spec}: {str(error).splitlines()[0]}")
        alpha, prepared_alpha = jobs[name].data.subword_sampling, meta.get("subword_sampling", 0)
        if alpha and alpha != prepared_alpha:  # the draws are made by `prepare`, at its alpha
            made = f"draws at alpha {prepared_alpha:g}" if prepared_alpha else "none"
            sys.exit(f"error: --job {spec}: data.subword_sampling={alpha:g} needs `prepare`'s draws at that alpha, "
                     f"and {args.prepared} holds {made}; prepare with data.subword_sampling={alpha:g}, or set 0 to "
                     "train on the best segmentation")
    if len(jobs) < len(args.job):
        sys.exit("error: --job names must differ: each job writes its results under its name")
    if unknown := sorted(set(args.keep) - set(jobs)):
        sys.exit(f"error: --keep {' '.join(unknown)}: no --job of that name")
    if args.parallel and len(jobs) > 1:  # before `import jax` below: this process holds no accelerator memory
        return train_in_parallel(args, list(jobs), started)
    args.out.mkdir(parents=True, exist_ok=True)
    arrays = dict(np.load(args.prepared / "ids.npz"))
    names = ["train", "val", *(f"train_draw{k}" for k in range(meta.get("draws", 0)))]
    data = {name: (ragged(arrays, name, "source"), ragged(arrays, name, "target")) for name in names}
    if args.decode:
        if missing := [name for name in DECODED if f"{name}_all_source" not in arrays]:
            sys.exit(f"error: --decode needs every {' and '.join(missing)} source line, which {args.prepared} (made "
                     "before --decode) lacks; run `prepare` again")
        data |= {f"{name}_all": (ragged(arrays, f"{name}_all", "source"), None) for name in DECODED}
    import jax

    results = {"backend": keras.backend.backend(), "devices": [str(d) for d in jax.devices()],
               "device_kind": jax.devices()[0].device_kind, "jobs": {}}
    print(f"keras {keras.__version__}, jax {jax.__version__}, {results['devices']}", flush=True)
    for name, cfg in jobs.items():
        remaining = args.deadline - (time.perf_counter() - started) if args.deadline else None
        if remaining is not None and remaining < 60:
            print(f"{name}: not started, {remaining:.0f} s left before --deadline", flush=True)
            continue
        results["jobs"][name] = run_job(name, cfg, meta, data, args.out if name in args.keep else None, remaining,
                                        shape_edges, args.decode)
        (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)


def train_in_parallel(args, names, started):
    """`train --parallel`: each job in a process of its own (this script, `train` with that one `--job`), all at
    once; their output interleaves line by line, each line named by its job. Then `results.json` holds every job, as
    when they run in turn, and the kept jobs' weights are moved to where `train` keeps them."""
    made_out = not args.out.exists()
    args.out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".jobs-", dir=args.out))  # a name no job will have: a job named "jobs"
    # would otherwise move its weights onto the staging directory itself
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / len(names):.3f}")
    processes = {}
    for name, spec in zip(names, args.job):
        command = [sys.executable, __file__, "train", str(args.prepared), "--out", str(staging / name), "--job", spec,
                   "--shape-edges", args.shape_edges]
        if args.deadline:
            command += ["--deadline", str(args.deadline - (time.perf_counter() - started))]
        if name in args.keep:
            command += ["--keep", name]
        if args.decode:
            command += ["--decode"]
        processes[name] = subprocess.Popen(command, env=env)
    codes = {name: process.wait() for name, process in processes.items()}  # Ctrl-C reaches them all
    results = None
    for name in names:
        path = staging / name / "results.json"
        if not path.is_file():
            continue
        finished = json.loads(path.read_text())
        results = results or {key: value for key, value in finished.items() if key != "jobs"} | {"jobs": {}}
        results["jobs"].update(finished["jobs"])
        if (staging / name / name).is_dir():
            shutil.rmtree(args.out / name, ignore_errors=True)
            shutil.move(staging / name / name, args.out / name)
    shutil.rmtree(staging, ignore_errors=True)
    if results is not None:
        (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    elif made_out and not any(args.out.iterdir()):
        args.out.rmdir()  # nothing finished: leave nothing behind
    if failed := [f"{name} (exit {code})" for name, code in codes.items() if code]:
        rest = f"the others are in {args.out / 'results.json'}" if results else "no job finished"
        sys.exit(f"error: jobs failed: {', '.join(failed)}; {rest}")
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)


def run_job(name, cfg, meta, data, weights_dir, seconds_left, shape_edges=SHAPE_EDGES, decode=False):
    """Trains one job; returns its record for results.json (and writes its averaged weights to `weights_dir`). With
    `decode`, the record also holds the averaged weights' translations of val and test (`translate_splits`)."""
    import keras
    from omegaconf import OmegaConf

    from kmt.build import build_model, build_schedule, compile_model
    from kmt.training.control import LateDropout

    keras.utils.set_random_seed(cfg.seed)
    keras.config.set_dtype_policy(cfg.trainer.precision)
    cfg.trainer.jit_compile = True  # under JAX, False would run every op eagerly
    batching = dict(max_length=cfg.model.max_length, max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size,
                    bucket_width=cfg.data.bucket_width, shape_edges=shape_edges)
    draws = [data[f"train_draw{k}"] for k in range(meta.get("draws", 0))] if cfg.data.subword_sampling else []
    train_batches = Batches(*data["train"], **batching, draws=draws)
    val = list(Batches(*data["val"], **batching).one_pass())
    steps = train_batches.steps_per_epoch
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, cfg.trainer.epochs * steps)
    model = compile_model(build_model(cfg.model, meta["source_vocab_size"], meta["target_vocab_size"]), cfg, schedule)
    _, epoch_targets = draws[0] if draws else data["train"]  # kmt-train sizes an epoch by its first draw
    tokens_per_epoch = sum(len(t) + 1 for t in epoch_targets)
    limits = [limit for limit in (cfg.trainer.max_minutes * 60, seconds_left) if limit]
    budget = min(limits) if limits else None
    print(f"{name}: {model.count_params():,} parameters, {steps} steps an epoch, {tokens_per_epoch:,} target "
          f"tokens an epoch, shapes {sorted({(r, w) for r, w in zip(train_batches.rows, train_batches.width) if r})}, "
          f"budget {budget and round(budget)} s, "
          + (f"{len(draws)} sampled segmentations (alpha {cfg.data.subword_sampling:g}) in turn, "
             if draws else "") + f"overrides {OmegaConf.to_container(cfg.model)}", flush=True)
    recorder = epoch_recorder(name, cfg.trainer.average_last, budget)
    late = [] if cfg.model.late_dropout is None else [LateDropout(cfg.model.late_dropout, cfg.model.late_dropout_after)]
    model.fit(train_batches.stream(cfg.seed), epochs=cfg.trainer.epochs, steps_per_epoch=steps,
              validation_data=fixed_batches(val), callbacks=[*late, recorder], verbose=0, shuffle=False)
    model.set_weights(recorder.average())
    averaged = model.evaluate(fixed_batches(val), verbose=0, return_dict=True)
    seconds = recorder.seconds[1:] or recorder.seconds
    job = {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "parameters": model.count_params(),
        "epochs": len(recorder.seconds),
        "steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "run_seconds": sum(recorder.seconds),
        "first_epoch_seconds": recorder.seconds[0],
        "tokens_per_second": tokens_per_epoch * len(seconds) / sum(seconds),
        "averaged_checkpoints": len(recorder.kept),
        "sampled_draws": len(draws),
        "averaged_val": {key: float(value) for key, value in averaged.items()},
        "history": recorder.history,
    }
    print(f"{name}: {job['epochs']} epochs, {job['steps']} updates in {job['run_seconds']:.0f} s "
          f"({job['tokens_per_second']:,.0f} target tokens/s); average of {job['averaged_checkpoints']} on val: "
          + ", ".join(f"{k} {v:.4f}" for k, v in job["averaged_val"].items()), flush=True)
    if decode:
        job["decoded"] = translate_splits(cfg, meta, model.get_weights(),
                                          {split: data[f"{split}_all"][0] for split in DECODED})
        print(f"{name}: translated " + ", ".join(f"{split} in {seconds:.0f} s" for split, seconds in
                                                 job["decoded"]["seconds"].items())
              + f" (beam {cfg.decode.beam_size}, alpha {cfg.decode.length_penalty:g})", flush=True)
    if weights_dir is not None:
        job["weights"] = save_weights(model.get_weights(), weights_dir / name)
    return job


def translate_splits(cfg, meta, weights, sources, batch_size=DECODE_BATCH):
    """Token ids of the translations of each split's `sources` (lists of id arrays) by a float32 model holding
    `weights`, searched as kmt-export's SavedModel searches (`kmt.inference.decoding.search_ids` with
    `cfg.decode`'s beam, length penalty and output limit): `{"hypotheses": {split: ["id id ...", ...]}, "seconds":
    {split: s}, ...}`, each translation's ids up to its end token, space-separated (a line each in results.json, not
    a line an id). A sentence's search does not depend on its batch-mates (each has its own output limit, pad is
    masked), so sentences go in batches of up to `batch_size`, sorted by length
    (`kmt.inference.translate.map_sorted`). An empty source translates to nothing, as the SavedModel's does."""
    import keras

    from kmt.build import build_model
    from kmt.inference.decoding import search_ids
    from kmt.special_ids import END_ID, PAD_ID
    from kmt.inference.translate import map_sorted

    model = build_model(cfg.model, meta["source_vocab_size"], meta["target_vocab_size"], "float32")
    model.set_weights(weights)
    search = {key: cfg.decode[key] for key in ("beam_size", "length_penalty", "max_length_a", "max_length_b")}

    def translate_batch(rows):
        source = np.zeros((len(rows), max(1, *map(len, rows))), np.int32)
        for i, row in enumerate(rows):
            source[i, : len(row)] = row
        tokens, _ = search_ids(model, source, max_length=cfg.model.max_length, **search)
        hypotheses = []
        for row, tokens_row in zip(rows, keras.ops.convert_to_numpy(tokens)):
            # the end, or pad after a cut-off one
            stop = np.flatnonzero((tokens_row == END_ID) | (tokens_row == PAD_ID))
            hypotheses.append(" ".join(map(str, tokens_row[: stop[0] if len(stop) else None])) if len(row) else "")
        return hypotheses

    decoded = {"hypotheses": {}, "seconds": {}, **search}
    for split, rows in sources.items():
        started = time.perf_counter()
        decoded["hypotheses"][split] = map_sorted(translate_batch, rows, batch_size)
        decoded["seconds"][split] = time.perf_counter() - started
    return decoded


def epoch_recorder(name, keep, budget):
    """A Keras callback that times and prints epochs, keeps the last `keep` epochs' weights (`average()` is their
    mean) and stops training before an epoch that would end past `budget` seconds."""
    import keras

    class EpochRecorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.kept = collections.deque(maxlen=max(1, keep))
            self.seconds, self.history = [], []

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch_started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.epoch_started)
            self.kept.append([np.array(w) for w in self.model.get_weights()])
            row = {"epoch": epoch + 1, "seconds": self.seconds[-1]} | {k: float(v) for k, v in logs.items()}
            self.history.append(row)
            print(f"{name} epoch {epoch + 1}: " + ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "epoch"),
                  flush=True)
            # The first epoch pays for compilation, so the next epoch is estimated from the later ones.
            estimate = float(np.median(self.seconds[1:])) if len(self.seconds) > 1 else 0.0
            if budget and sum(self.seconds) + estimate > budget:
                self.model.stop_training = True  # the next epoch would end past the budget

        def average(self):
            return [np.mean([weights[i].astype(np.float64) for weights in self.kept], axis=0).astype(array.dtype)
                    for i, array in enumerate(self.kept[0])]

    return EpochRecorder()


def fixed_batches(batches):
    """A `keras.utils.PyDataset` over a list of `(inputs, targets)` batches (validation data)."""
    import keras

    class Fixed(keras.utils.PyDataset):
        def __len__(self):
            return len(batches)

        def __getitem__(self, index):
            return batches[index]

    return Fixed()


def save_weights(weights, directory):
    """`weights` (a model's `get_weights()` list) as `weights_K.npz` files of under MAX_FILE_BYTES each."""
    directory.mkdir(parents=True, exist_ok=True)
    files, chunk, size = [], [], 0
    for index, array in enumerate(weights):
        if chunk and size + array.nbytes > MAX_FILE_BYTES:
            files.append(chunk)
            chunk, size = [], 0
        chunk.append(index)
        size += array.nbytes
    files.append(chunk)
    names = []
    for k, indices in enumerate(files):
        np.savez(directory / f"weights_{k}.npz", **{str(i): weights[i] for i in indices})
        names.append(f"weights_{k}.npz")
    return {"files": names, "arrays": len(weights)}


def load_weights(directory, count):
    arrays = {}
    for path in sorted(Path(directory).glob("weights_*.npz")):
        with np.load(path) as stored:
            arrays.update({int(key): stored[key] for key in stored.files})
    if sorted(arrays) != list(range(count)):
        sys.exit(f"error: {directory} holds {len(arrays)} of the {count} weight arrays")
    return [arrays[i] for i in range(count)]


# ----------------------------------------------------------------------------------------------------------- finish

def finish(args):
    """A run directory of a kept job, its SavedModel, and its val and test scores through that SavedModel."""
    import datetime

    from omegaconf import OmegaConf

    from kmt.build import build_model
    from kmt.config import onto_schema
    from kmt.run_dir import RunDir

    meta = read_prepared(args.prepared)
    if not (args.trained / "results.json").is_file():
        sys.exit(f"error: {args.trained} holds no results.json; pass the directory `train --out` wrote")
    results = json.loads((args.trained / "results.json").read_text())
    job = results["jobs"].get(args.job)
    if job is None or "weights" not in job:
        sys.exit(f"error: {args.trained / 'results.json'} has no kept job {args.job!r}")
    direction = meta["direction"]
    source, target = direction.split("_")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = args.run_dir or ROOT / "runs" / "bench" / f"multi30k_{direction}_jax" / f"{args.job}_{stamp}"
    cfg = onto_schema(OmegaConf.create(job["config"]))  # a job trained before an option existed gets its default
    run = RunDir(run_dir)
    run.checkpoints.directory.mkdir(parents=True, exist_ok=True)
    shutil.copytree(args.prepared / "tokenizer", run.tokenizer, dirs_exist_ok=True)
    run.config.write_text(OmegaConf.to_yaml(cfg))
    model = build_model(cfg.model, meta["source_vocab_size"], meta["target_vocab_size"], "float32")
    model.set_weights(load_weights(args.trained / args.job, job["weights"]["arrays"]))
    checkpoint = run.checkpoints.averaged(job['averaged_checkpoints'])
    model.save_weights(checkpoint)
    val_here = val_scores_here(cfg, run.tokenizer, model)
    # Perplexity and accuracy are token means, so they compare; the loss Keras logs weights each batch by its
    # rows, which padding changes on the accelerator.
    print(f"val perplexity of the averaged weights: {val_here['ppl']:.3f} here (TensorFlow, float32), "
          f"{job['averaged_val']['ppl']:.3f} on the accelerator ({cfg.trainer.precision})")
    hardware = f"1 x {results['device_kind']} (JAX)"
    write_history(run_dir, cfg, job, args.prepared)
    (run_dir / "train_results.json").write_text(json.dumps(job | {"hardware": hardware}, indent=2) + "\n")
    subprocess.run([sys.executable, "-m", "kmt.cli.export", str(run_dir), "--checkpoint", str(checkpoint)],
                   check=True, capture_output=True)
    data = Path(os.environ.get("KMT_DATA_DIR", "data")) / "multi30k"
    scores = {}
    for split in ("val", "test_2016_flickr"):
        evaluation = subprocess.run(
            [sys.executable, "-m", "kmt.cli.evaluate", str(run.export),
             "--source", str(data / f"{split}.{source}"), "--reference", str(data / f"{split}.{target}"),
             "--tokenized-reference", str(data / "tok" / f"{split}.lc.norm.tok.{target}"), "--lang", target,
             "--hypotheses", str(run_dir / f"{split}.hyp.{target}"), "--json"],
            capture_output=True, text=True,
        )
        if evaluation.returncode:
            sys.exit(f"error: kmt-evaluate on {split} failed: {evaluation.stderr.strip().splitlines()[-1:]}")
        scores[split] = json.loads(evaluation.stdout.strip().splitlines()[-1])
    test, val = scores["test_2016_flickr"], scores["val"]
    row = {
        "direction": direction.replace("_", "->"),
        "tokenized_bleu": round(test["tokenized_bleu"], 2),
        "sacrebleu": round(test["bleu"], 2),
        "chrf": round(test["chrf"], 2),
        "val_sacrebleu": round(val["bleu"], 2),
        "val_tokenized_bleu": round(val["tokenized_bleu"], 2),
        "val_loss": round(val_here["loss"], 4),
        "val_ppl": round(val_here["ppl"], 3),
        "parameters": job["parameters"],
        "epochs": job["epochs"],
        "train_minutes": round(job["run_seconds"] / 60, 1),
        "tokens_per_second": round(job["tokens_per_second"]),
        "hardware": hardware,
        "run_dir": str(run_dir),
        "job": args.job,
        "bleu_signature": test["bleu_signature"],
    }
    (run_dir / "bench.json").write_text(json.dumps(row, indent=2) + "\n")
    print("| direction | tok. BLEU | sacreBLEU | chrF | params | train min | tokens/s | hardware |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {row['direction']} | {row['tokenized_bleu']} | {row['sacrebleu']} | {row['chrf']} | "
          f"{row['parameters'] / 1e6:.1f}M | {row['train_minutes']} | {row['tokens_per_second']} | {hardware} |")
    print(f"val: sacreBLEU {row['val_sacrebleu']}, tokenized BLEU {row['val_tokenized_bleu']}")
    print(json.dumps(row))


def write_history(run_dir, cfg, job, prepared):
    """The job's epochs as kmt-train's `logs/history.csv` (epochs from 0, the rate at each epoch's end) and its
    `logs/curves.png`, so `kmt-plot` draws the run beside CPU runs. The loss columns stay blank: Keras averages batch
    losses weighted by rows, and padded rows would weight short sentences' batches more than kmt-train's do, so only
    `ppl` and `accuracy` (token means) compare with a CPU run's."""
    import csv

    from kmt.build import build_schedule
    from kmt.plots import plot_curves, read_history
    from kmt.run_dir import RunDir

    updates_per_epoch = job["steps"] // job["epochs"]
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, cfg.trainer.epochs * updates_per_epoch)
    with np.load(prepared / "ids.npz") as arrays:
        tokens_per_epoch = int(np.sum(arrays["train_target_lengths"] + 1))  # each target and its end token
    columns = ["epoch", "accuracy", "epoch_seconds", "learning_rate", "loss", "ppl", "tokens_per_second",
               "val_accuracy", "val_loss", "val_ppl"]
    run = RunDir(run_dir)
    run.logs.mkdir(parents=True, exist_ok=True)
    with open(run.history, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in job["history"]:
            writer.writerow({
                "epoch": row["epoch"] - 1, "epoch_seconds": row["seconds"],
                "learning_rate": float(schedule(row["epoch"] * updates_per_epoch)),
                "tokens_per_second": tokens_per_epoch / row["seconds"],
            } | {key: row[key] for key in columns[1:] if key in row and not key.endswith("loss")})
    plot_curves({run_dir.name: read_history(run_dir)}, run.curves,
                title=f"{cfg.name} ({job['config']['trainer']['precision']}, JAX): {run_dir.name}")


def score(args):
    """BLEU and chrF here of the translations `train --decode` made there: every such job, with its averaged val
    perplexity, as one table (and a JSON line); each job's translations also go to `<trained>/<job>.<split>.hyp.<lang>`.
    The ids are detokenized with the prepared vocabulary and scored as `kmt-evaluate` scores a SavedModel's output."""
    read_prepared(args.prepared)  # the arguments first: a mistake in them is told before TensorFlow loads
    if not (args.trained / "results.json").is_file():
        sys.exit(f"error: {args.trained} holds no results.json; pass the directory `train --out` wrote")
    jobs = json.loads((args.trained / "results.json").read_text())["jobs"]
    decoded = {name: job for name, job in jobs.items() if "decoded" in job}
    if unknown := [name for name in args.job if name not in decoded]:
        sys.exit(f"error: --job {' '.join(unknown)}: no job of that name translated (train with --decode); "
                 f"{args.trained / 'results.json'} has translations of {', '.join(decoded) or 'no job'}")
    if not decoded:
        sys.exit(f"error: no job in {args.trained / 'results.json'} has translations; train with --decode")

    import tensorflow as tf
    from omegaconf import OmegaConf

    from common import markdown_table, print_json
    from kmt.cli.errors import exit_on_user_error
    from kmt.data import load_corpus
    from kmt.data.sources import multi30k_file
    from kmt.metrics import tokenized_bleu, translation_scores
    from kmt.tokenizer import Vocabularies

    cfg = OmegaConf.load(args.prepared / "config.yaml")
    cfg.data.download = False
    with exit_on_user_error():  # the corpus moved or went missing since `prepare`: one line
        references = list(load_corpus(cfg.data)[args.split].target)
    tokenized_path = multi30k_file(cfg.data.dir, args.split, cfg.data.target_lang, tokenized=True)
    if not tokenized_path.is_file():
        sys.exit(f"error: {tokenized_path} is missing: the tokenized references of {args.split}")
    tokenized = tokenized_path.read_text(encoding="utf-8").splitlines()[: len(references)]
    target = Vocabularies.load(args.prepared / "tokenizer").target
    rows = []
    for name in args.job or decoded:
        job = decoded[name]
        lines = job["decoded"]["hypotheses"][args.split]
        if len(lines) != len(references):  # a corpus changed since `prepare`: lines would not align
            sys.exit(f"error: {name}: {len(lines)} translations of {args.split}, which has {len(references)} lines "
                     f"now; prepare and train again")
        ids = tf.strings.to_number(tf.strings.split(lines), out_type=tf.int32)  # (N, None): "" is no ids
        hypotheses = [line.decode("utf-8") for line in target.detokenize(ids).numpy()]
        (args.trained / f"{name}.{args.split}.hyp.{cfg.data.target_lang}").write_text(
            "".join(f"{line}\n" for line in hypotheses), encoding="utf-8")
        scores = translation_scores(hypotheses, references) | tokenized_bleu(hypotheses, tokenized,
                                                                             cfg.data.target_lang)
        rows.append({"job": name, "epochs": job["epochs"], "val_ppl": round(job["averaged_val"]["ppl"], 3),
                     "bleu": round(scores["bleu"], 2), "tokenized_bleu": round(scores["tokenized_bleu"], 2),
                     "chrf": round(scores["chrf"], 2), "length_ratio": round(scores["length_ratio"], 3),
                     "beam": job["decoded"]["beam_size"], "alpha": job["decoded"]["length_penalty"]})
    columns = [("job", "job"), ("epochs", "epochs"), ("val_ppl", "averaged val ppl"),
               ("bleu", f"{args.split} sacreBLEU"), ("tokenized_bleu", "tok. BLEU"), ("chrf", "chrF"),
               ("length_ratio", "hyp/ref length"), ("beam", "beam"), ("alpha", "alpha")]
    print(markdown_table([{k: str(v) for k, v in row.items()} for row in rows], columns), end="")
    print_json("multi30k_jax_score", trained=str(args.trained), split=args.split, rows=rows,
               bleu_signature=scores["bleu_signature"])


def val_scores_here(cfg, tokenizer_dir, model):
    """Loss (label-smoothed, as trained), token accuracy and perplexity of `model` on val through kmt's own
    TensorFlow pipeline: the check that the weights came across whole."""
    from kmt.data import load_corpus
    from kmt.data.pipeline import encode_split, make_dataset
    from kmt.losses import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity
    from kmt.tokenizer import Vocabularies

    vocabularies = Vocabularies.load(tokenizer_dir)
    val = encode_split("val", load_corpus(cfg.data)["val"], vocabularies, cfg.model.max_length)
    model.compile(loss=MaskedCrossEntropy(label_smoothing=cfg.optim.label_smoothing),
                  metrics=[MaskedAccuracy(), MaskedPerplexity()])
    batches = make_dataset(val, cfg.model.max_length, max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size,
                           bucket_width=cfg.data.bucket_width)
    return model.evaluate(batches, verbose=0, return_dict=True)


def main():
    args = parse_args()
    {"prepare": prepare, "train": train, "finish": finish, "score": score}[args.command](args)


if __name__ == "__main__":
    main()
