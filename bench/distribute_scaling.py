"""Data-parallel scaling (`trainer.distribute`): training tokens per second on one device and on two, side by side,
and the efficiency `tokens/s on 2 / (2 x tokens/s on 1)`. Nothing is asserted.

    python bench/distribute_scaling.py                       # TensorFlow and JAX, 2 devices, 3 rounds
    python bench/distribute_scaling.py --backends jax --devices 4 --pairs 20000 model.hidden_dim=256

Each backend runs in a process of its own, since devices are fixed when it starts: TensorFlow splits this machine's
CPU into logical devices for `tf.distribute.MirroredStrategy` unless it has GPUs, JAX gets host devices from
`XLA_FLAGS=--xla_force_host_platform_device_count` unless it has GPUs. In that process the training data (`kmt-prepare
debug=smoke` with `--pairs` pairs of the embedded dates set, made once) trains under `trainer.distribute=none` and
`mirrored`, alternating `--rounds` times, each after an untimed epoch (tracing, one compile per bucket under XLA).
Every device gets the same token budget, so N devices train N times the tokens a step; a round's tokens/s is an
epoch's real target tokens over the seconds `model.fit` spends training it (`common.fit_seconds`). On CPU devices
that share the machine's cores the ratio shows the engines' overhead more than a speed-up: see docs/scaling.md.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common  # noqa: E402

MODEL = ("model.num_layers=2", "model.hidden_dim=128", "model.num_heads=4", "model.intermediate_dim=256")


def measure(prepared, devices, rounds, overrides):
    """In this process (its backend and devices set by `main`): `rounds` x (none, mirrored) tokens/s."""
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU"):
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)

    from kmt.training.prepare import prepare

    runs = {}
    for mode in ("none", "mirrored"):
        cfg = common.recipe_config(
            None,
            [
                "debug=smoke",
                "data=prepared",
                f"data.path={prepared}",
                f"trainer.distribute={mode}",
                "trainer.precision=float32",
                *MODEL,
                *overrides,
            ],
        )
        p = prepare(cfg, tempfile.mkdtemp(prefix=f"kmt-scaling-{mode}-"))
        with p.placement.scope():
            common.fit_seconds(p.model, p.train_data, p.steps_per_epoch)  # untimed: traces and compiles
        runs[mode] = p
    rows = []
    for number in range(rounds):
        for mode, p in runs.items():
            with p.placement.scope():
                seconds = common.fit_seconds(p.model, p.train_data, p.steps_per_epoch)
            rows.append(
                {
                    "round": number,
                    "mode": mode,
                    "devices": p.placement.replicas,
                    "tokens_per_second": p.epoch.target_tokens / seconds,
                    "steps": p.steps_per_epoch,
                }
            )
    print(json.dumps({"rows": rows, "backend": keras.backend.backend()}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"], choices=["tensorflow", "jax"])
    parser.add_argument("--devices", type=int, default=2, help="CPU devices to split the machine into (no GPUs)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=4000, help="training pairs of the dates set")
    parser.add_argument("--worker", nargs=2, metavar=("PREPARED", "DEVICES"), help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the model or data (key=value)")
    args = parser.parse_args()
    if args.worker:
        return measure(args.worker[0], int(args.worker[1]), args.rounds, args.overrides)
    common.require_positive(parser, args, "devices", "rounds", "pairs")

    prepared = Path(tempfile.mkdtemp(prefix="kmt-scaling-")) / "data"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "kmt.cli.prepare",
            "debug=smoke",
            f"data.num_train={args.pairs}",
            f"data.limit={args.pairs}",
            "data.max_tokens=1024",
            f"hydra.run.dir={prepared}",
        ],
        capture_output=True,
        text=True,
    )
    if made.returncode:
        sys.exit(f"error: kmt-prepare failed: {made.stderr.strip().splitlines()[-1]}")
    table = []
    for backend in args.backends:
        env = os.environ | {"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        if backend == "jax":
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={args.devices}"
        result = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                str(prepared),
                str(args.devices),
                "--rounds",
                str(args.rounds),
                *args.overrides,
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        if result.returncode:
            sys.exit(f"error: the {backend} run failed: {result.stderr.strip().splitlines()[-1]}")
        rows = json.loads(result.stdout.strip().splitlines()[-1])["rows"]
        best = {mode: max(r["tokens_per_second"] for r in rows if r["mode"] == mode) for mode in ("none", "mirrored")}
        devices = next(r["devices"] for r in rows if r["mode"] == "mirrored")
        table.append(
            {
                "backend": backend,
                "devices": devices,
                "one_device": best["none"],
                "all_devices": best["mirrored"],
                "speed_up": best["mirrored"] / best["none"],
                "efficiency": best["mirrored"] / (devices * best["none"]),
            }
        )
    common.print_table(
        table,
        [
            ("backend", "backend"),
            ("devices", "devices"),
            ("one_device", "tokens/s, 1 device"),
            ("all_devices", "tokens/s, all devices"),
            ("speed_up", "speed-up"),
            ("efficiency", "efficiency"),
        ],
    )
    common.print_json("distribute_scaling", rows=table, pairs=args.pairs, rounds=args.rounds)


if __name__ == "__main__":
    main()
