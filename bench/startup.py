"""Start-up: seconds before a command's first output, for a SavedModel export and a CTranslate2 directory side by
side, each command a fresh process, in rounds whose order rotates.

    python bench/startup.py RUN_DIR                              # its export/ and, if there, its ctranslate2/
    python bench/startup.py RUN_DIR --ctranslate2 CT2_DIR --repeats 5
    python bench/startup.py --export EXPORT_DIR --ctranslate2 CT2_DIR

Rows:
- `python -c "import tensorflow"`;
- `python -c "import kmt.cli, tensorflow"`: TensorFlow imported as a kmt command imports it (what TensorFlow would
  import only for features kmt does not use left out, the garbage collector paused), the floor of every command that
  loads a SavedModel;
- `python -c "import kmt"`;
- `kmt-translate EXPORT`, one sentence piped in (`--sentence`), the whole command until it exits;
- `kmt-serve EXPORT`, until it prints that it is listening (its port answers; `/readyz` still says 503 while the
  model loads), until `/readyz` answers 200 (the model loaded, the signatures of a plain request run once), and
  until it logs that it has run the other signatures too.

Figures: median, min and max over `--repeats` rounds. kmt-translate is the console script beside this Python, as a
user types it; kmt-serve starts as bench/serve_load.py starts it.
"""

import argparse
import collections
import subprocess
import sys
import time
from pathlib import Path

from common import hardware, median, print_json, print_table, require_positive  # bench/ is on sys.path
from serve_load import Server

TIMEOUT_S = 300


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="a kmt-train run directory: its export/ and ctranslate2/")
    parser.add_argument("--export", help="the SavedModel export to time (default: RUN_DIR/export)")
    parser.add_argument(
        "--ctranslate2", help="a kmt-export --format ctranslate2 directory (default: RUN_DIR/ctranslate2, if there)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds; figures are their medians (default: 3)")
    parser.add_argument("--sentence", default="5 May 1999", help="what kmt-translate translates (default: a date)")
    args = parser.parse_args(argv)
    require_positive(parser, args, "repeats")
    if not (args.run_dir or args.export):
        parser.error("pass a run directory or --export EXPORT_DIR")
    run = Path(args.run_dir) if args.run_dir else None
    args.export = Path(args.export) if args.export else run / "export"
    if args.ctranslate2 is None and run and (run / "ctranslate2").is_dir():
        args.ctranslate2 = run / "ctranslate2"
    for name, path in (("export", args.export), ("ctranslate2", args.ctranslate2)):
        if path is not None and not (Path(path) / ("saved_model.pb" if name == "export" else "model.bin")).is_file():
            what = "SavedModel (no saved_model.pb)" if name == "export" else "CTranslate2 directory (no model.bin)"
            parser.error(f"{path} is not a {what}")
    return args


def console_script(name):
    """The console script `name` beside this Python, as a user runs it (or `python -m kmt.cli.<module>`)."""
    script = Path(sys.executable).with_name(name)
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", f"kmt.cli.{name.removeprefix('kmt-')}"]


def seconds(argv, stdin=None):
    """Wall seconds of a whole command; exits the bench with its last line of stderr if it fails."""
    started = time.perf_counter()
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"error: {' '.join(map(str, argv))} failed: {last}")
    return elapsed


def main(argv=None):
    args = parse_args(argv)
    formats = {"SavedModel": args.export, **({"CTranslate2": args.ctranslate2} if args.ctranslate2 else {})}
    floors = {
        "import tensorflow": "import tensorflow",
        "import tensorflow in a command": "import kmt.cli, tensorflow",
        "import kmt": "import kmt",
    }
    times = collections.defaultdict(list)  # (command, format) -> seconds, one per round

    def run(job):
        command, fmt = job
        if command in floors:
            times[(command, "")].append(seconds([sys.executable, "-c", floors[command]]))
        elif command == "kmt-translate":
            argv = [*console_script("kmt-translate"), str(formats[fmt])]
            times[(command, fmt)].append(seconds(argv, stdin=args.sentence + "\n"))
        else:
            server = Server(formats[fmt], [])  # bench/serve_load.py's, as its load rows start it
            server.stop()
            times[("kmt-serve listening", fmt)].append(server.listening_s)
            times[("kmt-serve ready", fmt)].append(server.ready_s)
            times[("kmt-serve every signature warmed", fmt)].append(server.warmed_s)

    jobs = [(command, None) for command in floors] + [(c, f) for c in ("kmt-translate", "kmt-serve") for f in formats]
    print(f"{len(jobs)} commands, {args.repeats} rounds, on {hardware()}", file=sys.stderr)
    for round_ in range(args.repeats):
        shift = round_ % len(jobs)
        for job in jobs[shift:] + jobs[:shift]:  # a rotating order: no command always runs first
            run(job)
    order = [*floors, "kmt-translate", "kmt-serve listening", "kmt-serve ready", "kmt-serve every signature warmed"]
    table = [
        {"command": command, "format": fmt, "median_s": median(values), "min_s": min(values), "max_s": max(values)}
        for (command, fmt), values in sorted(
            times.items(), key=lambda item: (order.index(item[0][0]), item[0][1] != "SavedModel")
        )
    ]
    print_table(table, ["command", "format", ("median_s", "median s"), ("min_s", "min s"), ("max_s", "max s")])
    print_json(
        "startup", repeats=args.repeats, export=str(args.export), ctranslate2=str(args.ctranslate2 or ""), rows=table
    )


if __name__ == "__main__":
    main()
