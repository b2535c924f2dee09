"""Training throughput: target tokens/s, step time, model FLOP/s and MFU of one `model.fit` epoch for kmt, a
keras-hub reference and PyTorch's `nn.Transformer`, on the same synthetic batches, in one process.

    python bench/train_throughput.py                                  # small preset, float32, every framework
    python bench/train_throughput.py --preset base --steps 20
    python bench/train_throughput.py --preset base --vocab 37000 --batch-size 128 --length 32 --accumulate 8 \\
        --frameworks kmt,torch --steps 3 --repeats 3    # experiment=wmt14_en_de_base's batch shape on one device
    python bench/train_throughput.py --frameworks kmt --kmt-variants xla,bf16   # what the stack offers, side by side
    KERAS_BACKEND=jax python bench/train_throughput.py --preset base --frameworks kmt,keras_hub \\
        --precision mixed_bfloat16 --peak-tflops 990                  # an H100: MFU against dense bf16

The three models share sizes, dropout, sinusoidal positions and post-norm, and train with Adam(0.9, 0.98, 1e-9)
under the Noam schedule on label-smoothed (0.1) cross-entropy that ignores pad id 0. They differ where their
libraries do: kmt ties its output projection to the embedding (the paper's section 3.4); the references use an
untied one. After one warm-up epoch each (traces and compiles), every repeat runs each framework once in turn,
rotating the order; figures are medians over repeats. A Keras epoch is timed as kmt-train times an epoch's training
(`common.fit_seconds`), leaving out the teardown of its dataset iterator, which can stall. Ratios are kmt's
tokens/s over the other's. Targets, not asserted: kmt >= 1.0x keras-hub and >= 1.0x PyTorch.

MFU is model FLOP/s (`training_flops` per step over the median step time) as a fraction of the float32 matmul
peak measured here on the same machine (the best of the Keras backend and torch), or of `--peak-tflops`.

`--kmt-variants` adds more kmt runners to the same rotation, each the plain kmt model with one switch changed:
`xla` compiles its train step with XLA (`trainer.jit_compile=true`), `bf16` builds it under the `mixed_bfloat16`
dtype policy (`trainer.precision=mixed_bfloat16`), `xla+bf16` does both, `noppl` leaves out the perplexity metric
(what `MaskedPerplexity` costs a step). Their ratios are over plain kmt. `lstm` is not a switch but the other
model kmt-train builds (`model=lstm`: a 2-layer bidirectional LSTM encoder and a 2-layer LSTM decoder with Luong
attention, at the preset's width), on the same batches, schedule and loss; its FLOPs are counted by `lstm_flops`.
"""

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from common import cores, fit_seconds, median, print_json, print_table, require_positive, timed

FRAMEWORKS = ("kmt", "keras_hub", "torch")
KMT_VARIANTS = ("xla", "bf16", "xla+bf16", "noppl", "lstm")
LSTM_LAYERS = 2  # the recurrent baseline's depth (conf/model/lstm.yaml)
PRESETS = {
    "small": dict(num_layers=3, hidden_dim=256, num_heads=4, intermediate_dim=1024),
    "base": dict(num_layers=6, hidden_dim=512, num_heads=8, intermediate_dim=2048),
}
WARMUP_STEPS = 4000  # Noam warm-up, kmt's default; the rate is on its rising slope throughout the benchmark
LABEL_SMOOTHING = 0.1
MATMUL_SIZE = 2048  # side of the square float32 matmul that measures the peak
MATMUL_REPEATS = 5


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--preset",
        choices=PRESETS,
        default="small",
        help="small: d=256, 3+3 layers, 4 heads, ffn 1024; base: d=512, 6+6, 8 heads, ffn 2048 (default: small)",
    )
    parser.add_argument("--vocab", type=int, default=8000, help="vocabulary size V (default: 8000)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch B (default: 64)")
    parser.add_argument(
        "--length", type=int, default=32, help="source and target length S = T in tokens, no padding (default: 32)"
    )
    parser.add_argument(
        "--accumulate",
        type=int,
        default=1,
        help="batches an update takes (optim.gradient_accumulation_steps): updates/s is steps/s over this; the "
        "accumulation itself is not run (default: 1)",
    )
    parser.add_argument("--steps", type=int, default=30, help="training steps per timed epoch (default: 30)")
    parser.add_argument(
        "--warmup", type=int, default=3, help="steps of the untimed warm-up epoch that traces and compiles (default: 3)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs per framework (default: 3)")
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help=f"comma-separated subset of {','.join(FRAMEWORKS)} (default: all)",
    )
    parser.add_argument(
        "--precision",
        choices=("float32", "mixed_bfloat16"),
        default="float32",
        help="Keras dtype policy; torch runs under autocast(bfloat16) when mixed (default: float32)",
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="XLA-compile the Keras train steps (kmt's trainer.jit_compile). Always on under "
        "KERAS_BACKEND=jax, where without it fit runs op by op",
    )
    parser.add_argument(
        "--kmt-variants",
        default="",
        help=f"comma-separated kmt variants to time beside plain kmt, of {','.join(KMT_VARIANTS)}: "
        "XLA-compiled train step, mixed_bfloat16 policy, both, no perplexity metric, or "
        "the LSTM baseline (default: none)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="MFU against this peak instead of the measured float32 matmul peak, e.g. 990 for an H100's dense bfloat16",
    )
    parser.add_argument("--dropout", type=float, default=0.1, help="dropout rate P_drop (default: 0.1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic ids and the weights (default: 0)")
    args = parser.parse_args(argv)
    args.frameworks = [name.strip() for name in args.frameworks.split(",") if name.strip()]
    unknown = [name for name in args.frameworks if name not in FRAMEWORKS]
    if unknown or not args.frameworks:
        parser.error(f"--frameworks must name some of {', '.join(FRAMEWORKS)}. Received: {','.join(unknown)}")
    args.kmt_variants = [name.strip() for name in args.kmt_variants.split(",") if name.strip()]
    unknown = [name for name in args.kmt_variants if name not in KMT_VARIANTS]
    if unknown:
        parser.error(f"--kmt-variants must name some of {', '.join(KMT_VARIANTS)}. Received: {','.join(unknown)}")
    if args.kmt_variants and "kmt" not in args.frameworks:
        parser.error("--kmt-variants needs kmt in --frameworks: variants are compared with plain kmt")
    require_positive(parser, args, "vocab", "batch_size", "length", "accumulate", "steps", "warmup", "repeats")
    if args.vocab <= 4:
        parser.error(f"--vocab must exceed the 4 reserved ids. Received: {args.vocab}")
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1). Received: {args.dropout}")
    return args


def training_flops(batch_size, source_length, target_length, num_layers, hidden_dim, intermediate_dim, vocab_size):
    """Model FLOPs of one training step: 3 x forward (backward costs twice the forward), counting 2 FLOPs per
    multiply-accumulate of every matmul and nothing else (no LayerNorm, softmax, embedding lookup or optimizer).

    With B batch, S source and T target length, D hidden, F feed-forward, V vocabulary and N layers a stack:

        encoder layer   = 8*B*S*D^2 (Q, K, V, O) + 4*B*S^2*D (QK^T, AV) + 4*B*S*D*F (FFN)
        decoder layer   = 8*B*T*D^2 + 4*B*T^2*D                          (causal self-attention, full T x T)
                        + 4*B*T*D^2 (Q, O) + 4*B*S*D^2 (K, V) + 4*B*T*S*D (cross-attention)
                        + 4*B*T*D*F                                      (FFN)
        output          = 2*B*T*D*V                                      (projection to the vocabulary)
        training_flops  = 3 * (N * encoder layer + N * decoder layer + output)

    Example:
    >>> training_flops(1, 1, 1, num_layers=1, hidden_dim=1, intermediate_dim=1, vocab_size=1)  # 3 * (16 + 28 + 2)
    138
    """
    b, s, t, d, f, v = batch_size, source_length, target_length, hidden_dim, intermediate_dim, vocab_size
    encoder_layer = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f
    self_attention = 8 * b * t * d * d + 4 * b * t * t * d
    cross_attention = 4 * b * t * d * d + 4 * b * s * d * d + 4 * b * t * s * d
    decoder_layer = self_attention + cross_attention + 4 * b * t * d * f
    output = 2 * b * t * d * v
    return 3 * (num_layers * (encoder_layer + decoder_layer) + output)


def lstm_flops(batch_size, source_length, target_length, num_layers, hidden_dim, vocab_size):
    """`training_flops` for `kmt.models.LSTM` (2 FLOPs a multiply-accumulate, 3 x forward). Per source token, each
    bidirectional layer's two LSTMs of D/2 units read D features (4 gates: 2 * 4 * D/2 * (D + D/2) = 6*D^2 MACs) and
    the "general" score's W_a e_s adds D^2; per target token the first decoder LSTM reads [y; h~] (12*D^2), the others
    h (8*D^2 each), attention scores and context take 2*S*D, the combination W_c [c; h] 2*D^2 and the output D*V.

    Example:
    >>> lstm_flops(1, 1, 1, num_layers=1, hidden_dim=1, vocab_size=1)  # 6 * ((6 + 1) + (12 + 2 + 2 + 1))
    144
    """
    b, s, t, d, v, n = batch_size, source_length, target_length, hidden_dim, vocab_size, num_layers
    source = s * (6 * d * d * n + d * d)
    target = t * (12 * d * d + 8 * d * d * (n - 1) + 2 * s * d + 2 * d * d + d * v)
    return 6 * b * (source + target)


def synthetic_batches(steps, batch_size, length, vocab_size, seed):
    """`steps` batches of `(source (B, S), target_in (B, T), target_out (B, T))` int32 ids, uniform in
    [4, vocab_size), no padding; target_in and target_out are one sequence shifted by one token."""
    import numpy as np

    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, size=(steps, batch_size, length), dtype=np.int32)  # (N, B, S)
    target = rng.integers(4, vocab_size, size=(steps, batch_size, length + 1), dtype=np.int32)  # (N, B, T+1)
    return [(source[i], target[i, :, :-1], target[i, :, 1:]) for i in range(steps)]


def keras_dataset(batches):
    """A repeating `tf.data.Dataset` of the batches when TensorFlow is installed, else a Keras `PyDataset` of the
    numpy arrays (for backends without TensorFlow: JAX on a GPU box)."""
    import keras
    import numpy as np

    try:
        import tensorflow as tf
    except ImportError:

        class SyntheticBatches(keras.utils.PyDataset):
            def __init__(self, batches):
                super().__init__()
                self.batches = batches

            def __len__(self):
                return len(self.batches)

            def __getitem__(self, index):
                source, target_in, target_out = self.batches[index]
                return {"source": source, "target_in": target_in}, target_out

        return SyntheticBatches(batches)
    if keras.backend.backend() != "tensorflow":
        tf.config.set_visible_devices([], "GPU")  # tf.data only feeds; the accelerator belongs to the backend
    source, target_in, target_out = (np.concatenate(arrays) for arrays in zip(*batches))  # (N*B, L) each
    from kmt.data.batches import without_autotune  # each fit would otherwise idle on release (common.fit_seconds)

    batch_size = len(batches[0][0])
    dataset = tf.data.Dataset.from_tensor_slices(({"source": source, "target_in": target_in}, target_out))
    dataset = dataset.batch(batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
    return dataset.with_options(without_autotune())


@dataclass
class Runner:
    """One framework under test: `epoch(steps)` trains that many steps and returns the seconds they took; `tied`
    says whether the output projection is the embedding transposed."""

    name: str
    epoch: Callable[[int], float]
    parameters: int
    tied: bool
    flops: int = 0  # a training step's, when not the Transformer's `training_flops`


def keras_runner(name, model, data, hidden_dim, jit_compile, tied, perplexity=True, flops=0):
    """Compiles `model` as kmt's `compile_model` does (Adam(0.9, 0.98, 1e-9) on `NoamSchedule`,
    `MaskedCrossEntropy(0.1)`, `MaskedAccuracy`, and `MaskedPerplexity` unless not `perplexity`); each epoch is one
    `model.fit` of `steps` steps on `data`."""
    import keras

    from kmt.losses import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity
    from kmt.schedule import NoamSchedule

    model.compile(
        optimizer=keras.optimizers.Adam(
            learning_rate=NoamSchedule(hidden_dim, warmup_steps=WARMUP_STEPS), beta_1=0.9, beta_2=0.98, epsilon=1e-9
        ),
        loss=MaskedCrossEntropy(label_smoothing=LABEL_SMOOTHING),
        metrics=[MaskedAccuracy(), MaskedPerplexity()] if perplexity else [MaskedAccuracy()],
        jit_compile=jit_compile,
    )
    model.optimizer.build(model.trainable_variables)

    def epoch(steps):
        return fit_seconds(model, data, steps)

    return Runner(name, epoch, model.count_params(), tied, flops)


def build_runners(args, sizes, batches):
    """One runner per available framework, in `args.frameworks` order; prints why torch is skipped if it is."""
    import keras

    runners = []
    keras.utils.set_random_seed(args.seed)
    keras.config.set_dtype_policy(args.precision)
    max_length = args.length + 1
    if "kmt" in args.frameworks or "keras_hub" in args.frameworks:
        data = keras_dataset(batches)
    if "kmt" in args.frameworks:
        from kmt.models import LSTM, Transformer

        for variant in [""] + args.kmt_variants:
            switches = variant.split("+")
            if variant == "lstm":
                keras.config.set_dtype_policy(args.precision)
                model = LSTM(
                    args.vocab,
                    num_layers=LSTM_LAYERS,
                    hidden_dim=sizes["hidden_dim"],
                    dropout=args.dropout,
                    max_length=max_length,
                    name="kmt_lstm",
                )
                flops = lstm_flops(
                    args.batch_size, args.length, args.length, LSTM_LAYERS, sizes["hidden_dim"], args.vocab
                )
                runners.append(
                    keras_runner("kmt+lstm", model, data, sizes["hidden_dim"], args.jit_compile, tied=True, flops=flops)
                )
                continue
            keras.config.set_dtype_policy("mixed_bfloat16" if "bf16" in switches else args.precision)
            # Attention-weight dropout as in the references; no dropout after the feed-forward ReLU, as in keras-hub.
            model = Transformer(
                args.vocab,
                **sizes,
                dropout=args.dropout,
                attention_dropout=args.dropout,
                max_length=max_length,
                name="kmt_transformer",
            )
            name = f"kmt+{variant}" if variant else "kmt"
            jit_compile = args.jit_compile or "xla" in switches
            runners.append(
                keras_runner(
                    name, model, data, sizes["hidden_dim"], jit_compile, tied=True, perplexity="noppl" not in switches
                )
            )
        keras.config.set_dtype_policy(args.precision)
    if "keras_hub" in args.frameworks:
        from keras_hub_transformer import build_keras_hub_transformer

        model = build_keras_hub_transformer(args.vocab, **sizes, dropout=args.dropout)
        runners.append(keras_runner("keras_hub", model, data, sizes["hidden_dim"], args.jit_compile, tied=False))
    if "torch" in args.frameworks:
        try:
            import torch

            import torch_transformer
        except ImportError as error:
            print(f"torch: skipped ({error}; install it with `pip install torch==2.13.0`)")
            return runners
        torch.manual_seed(args.seed)
        torch.set_num_threads(cores())
        model = torch_transformer.TorchTransformer(args.vocab, **sizes, dropout=args.dropout, max_length=max_length)
        trainer = torch_transformer.TorchTrainer(
            model,
            batches,
            sizes["hidden_dim"],
            warmup_steps=WARMUP_STEPS,
            label_smoothing=LABEL_SMOOTHING,
            bfloat16=args.precision == "mixed_bfloat16",
        )
        runners.append(
            Runner(
                "torch",
                lambda steps: timed(trainer.epoch, steps)[1],
                torch_transformer.count_parameters(model),
                tied=False,
            )
        )
    return runners


def keras_matmul_tflops(size=MATMUL_SIZE, repeats=MATMUL_REPEATS):
    """Median float32 TFLOP/s of one `(size, size)` matmul with `keras.ops.matmul`, compiled by the backend
    (`tf.function` or `jax.jit`)."""
    import keras
    from keras import ops

    backend = keras.backend.backend()
    matmul = ops.matmul
    if backend == "tensorflow":
        import tensorflow as tf

        matmul = tf.function(ops.matmul)
    elif backend == "jax":
        import jax

        matmul = jax.jit(ops.matmul)
    a = keras.random.normal((size, size), dtype="float32", seed=1)
    b = keras.random.normal((size, size), dtype="float32", seed=2)

    def run():
        return ops.convert_to_numpy(matmul(a, b)[0, 0])  # the copy to the host waits for the device

    run()  # warm-up: traces and compiles
    return 2 * size**3 / median([timed(run)[1] for _ in range(repeats)]) / 1e12


def measure_peaks(runners):
    """The float32 matmul TFLOP/s of the Keras backend, and of torch when a torch runner is present."""
    import keras

    peaks = {keras.backend.backend(): keras_matmul_tflops()}
    if any(runner.name == "torch" for runner in runners):
        import torch_transformer

        peaks["torch"] = torch_transformer.matmul_tflops(MATMUL_SIZE, MATMUL_REPEATS)
    return peaks


def device_name():
    """The JAX accelerator's kind when the backend is JAX on a GPU or TPU, else `"cpu"`."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "cpu":
            return f"{device.platform}: {device.device_kind}"
    return "cpu"


def time_epochs(runners, steps, warmup, repeats):
    """One untimed warm-up epoch each, then `repeats` rounds that run every framework once, the order rotating by
    one each round. Returns `{name: [seconds of each timed epoch]}`."""
    for runner in runners:
        runner.epoch(warmup)
    seconds = {runner.name: [] for runner in runners}
    for repeat in range(repeats):
        shift = repeat % len(runners)
        for runner in runners[shift:] + runners[:shift]:
            seconds[runner.name].append(runner.epoch(steps))
    return seconds


def main(argv=None):
    args = parse_args(argv)  # before Keras imports TensorFlow (seconds): --help and usage errors answer at once
    import keras

    args.jit_compile = args.jit_compile or keras.backend.backend() == "jax"
    sizes = PRESETS[args.preset]
    batches = synthetic_batches(max(args.steps, args.warmup), args.batch_size, args.length, args.vocab, args.seed)
    runners = build_runners(args, sizes, batches)
    if not runners:
        raise SystemExit("error: no framework left to run")
    peaks = {} if args.peak_tflops else measure_peaks(runners)
    best = max(peaks, key=peaks.get, default=None)
    peak = args.peak_tflops or peaks[best]
    peak_source = "--peak-tflops" if args.peak_tflops else f"float32 matmul {MATMUL_SIZE}x{MATMUL_SIZE}, {best}"
    seconds = time_epochs(runners, args.steps, args.warmup, args.repeats)

    flops = training_flops(
        args.batch_size,
        args.length,
        args.length,
        sizes["num_layers"],
        sizes["hidden_dim"],
        sizes["intermediate_dim"],
        args.vocab,
    )
    results = {}
    for runner in runners:
        step_seconds = median(seconds[runner.name]) / args.steps
        step_flops = runner.flops or flops
        results[runner.name] = {
            "parameters": runner.parameters,
            "output_projection": "tied" if runner.tied else "untied",
            "step_ms": 1000 * step_seconds,
            "updates_per_second": 1 / (step_seconds * args.accumulate),
            "tokens_per_second": args.batch_size * args.length / step_seconds,  # target tokens
            "flops_per_step": step_flops,
            "tflops": step_flops / step_seconds / 1e12,
            "mfu": step_flops / step_seconds / 1e12 / peak,
            "epoch_seconds": seconds[runner.name],
        }
    kmt = results.get("kmt")
    ratios = {
        f"kmt/{name}": kmt["tokens_per_second"] / result["tokens_per_second"]
        for name, result in results.items()
        if kmt and name != "kmt"
    }

    print(
        f"\ntrain_throughput: preset {args.preset} (d={sizes['hidden_dim']}, {sizes['num_layers']}+"
        f"{sizes['num_layers']} layers, {sizes['num_heads']} heads, ffn {sizes['intermediate_dim']}, "
        f"vocab {args.vocab}), batch {args.batch_size}x"
        f"{args.length}, {args.steps} steps x {args.repeats} repeats; Keras backend {keras.backend.backend()}, "
        f"{args.precision}, jit_compile={args.jit_compile}; device {device_name()}"
    )
    measured = "".join(f"; {name} measured {value:.3g}" for name, value in peaks.items())
    print(
        f"peak {peak:.3g} TFLOP/s ({peak_source}{measured}); training FLOPs a step (3 x forward): "
        f"{flops / 1e9:.3g} GFLOP\n"
    )
    rows = [
        {
            **result,
            "framework": name,
            "mfu": f"{100 * result['mfu']:.1f}%",
            "ratio": f"{ratios[f'kmt/{name}']:.2f}" if f"kmt/{name}" in ratios else "1.00" if name == "kmt" else "",
        }
        for name, result in results.items()
    ]
    print_table(
        rows,
        [
            "framework",
            ("parameters", "params"),
            ("output_projection", "output proj."),
            ("step_ms", "step ms"),
            ("updates_per_second", f"updates/s ({args.accumulate} batches)"),
            ("tokens_per_second", "target tokens/s"),
            ("tflops", "TFLOP/s"),
            ("mfu", "MFU"),
            ("ratio", "kmt / this (tokens/s)"),
        ],
    )
    print()
    print_json(
        "train_throughput",
        preset=args.preset,
        sizes={**sizes, "vocab_size": args.vocab},
        batch_size=args.batch_size,
        length=args.length,
        accumulate=args.accumulate,
        steps=args.steps,
        repeats=args.repeats,
        dropout=args.dropout,
        backend=keras.backend.backend(),
        precision=args.precision,
        jit_compile=args.jit_compile,
        device=device_name(),
        flops_per_step=flops,
        peak_tflops=peak,
        peak_source=peak_source,
        measured_peaks_tflops=peaks,
        results=results,
        ratios=ratios,
    )


if __name__ == "__main__":
    main()
