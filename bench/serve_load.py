"""Load on kmt-serve over loopback: 1, 8 and 32 concurrent clients sending one-sentence requests, with dynamic
batching on and off, side by side in one run.

    python bench/serve_load.py                                   # trains the default dates model first (kmt-train)
    python bench/serve_load.py runs/dates/<time>                 # a run's export/
    python bench/serve_load.py --export EXPORT_DIR --clients 1,8,32 --requests 400 --max-seconds 30

Two kmt-serve processes serve the same export on free ports of 127.0.0.1: one batching (`--max-batch-size` and
`--batch-timeout-ms` below, kmt-serve's defaults) and one with `--no-batching` (each request decoded alone, as it
arrives, on a thread pool). For each client count the two take turns, the first in a rotating order, each after a
few untimed requests. Each client is a thread of this process with its own keep-alive connection, sending
`POST /translate {"text": [one date]}` and the next as soon as it is answered (a closed loop), until the row has
sent `--requests` requests or run `--max-seconds`. Sentences are generated dates (`kmt.data.dates`), a seed apart
from the training data's.

Figures: requests/s (one sentence each) over the row's wall time; p50 and p95 latency of a request as its client
sees it; the server's mean batch (sentences per decoded batch, from its /metrics); failed requests. The clients
share the machine's cores with the server, as a load balancer on the same host would.

`--routes` measures instead the routes of one batching server against each other, in turns at each client count:
TensorFlow Serving's predict, kmt's `/translate` and LibreTranslate's `/translate` (`{"q": ..., "source": ...,
"target": ...}`, its sentence splitting included), each row's requests/s also as a ratio to predict's.

    python bench/serve_load.py --export EXPORT_DIR --routes --clients 32 --max-seconds 20

`--hostile` measures instead what hostile clients cost good ones, on one batching server (`--request-timeout-s 10`,
so that stalled clients come back within a row): `--clients` good clients (the largest count) run the closed loop
above alone and beside hostile clients (threads of another process), in turns, twice each for half of
`--max-seconds`; each hostile client sends a request every `--hostile-interval-ms` (100): 4 poison (a lone
surrogate, `"\\ud800"`, in valid JSON), 2 nested (100,000 nested arrays), 16 stalled (declare a 100-byte body, send
7 bytes, wait for the 408) and 4 disconnecting (send a whole request, close before the answer). It prints, for both
rows, good requests sent and answered, how many answers equal their serial answer (the sentence sent alone first;
scores to float32's rounding), requests/s, p50 and p95 latency, and the hostile requests by kind and status.

    python bench/serve_load.py --export EXPORT_DIR --hostile --clients 32 --max-seconds 20
"""

import argparse
import collections
import http.client
import json
import math
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import hardware, percentile, print_json, print_table  # bench/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"batching": [], "no batching": ["--no-batching"]}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "run_dir",
        nargs="?",
        help="a kmt-train run directory, served from its export/ (default: "
        "train the default dates model into a temporary directory)",
    )
    parser.add_argument("--export", help="serve this export directory instead of a run's")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts (default: 1,8,32)")
    parser.add_argument("--requests", type=int, default=300, help="most requests a row sends (default: 300)")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="most seconds a row runs (default: 30)")
    parser.add_argument("--max-batch-size", type=int, default=32, help="kmt-serve --max-batch-size (default: 32)")
    parser.add_argument("--batch-timeout-ms", type=float, default=5.0, help="kmt-serve --batch-timeout-ms (default: 5)")
    parser.add_argument(
        "--routes",
        action="store_true",
        help="one batching server: TF Serving's predict, kmt's /translate and LibreTranslate's /translate in turns",
    )
    parser.add_argument("--languages", help="with --routes: kmt-serve --languages, for an export outside a run")
    parser.add_argument(
        "--hostile",
        action="store_true",
        help="good clients alone, then beside poison, nested, stalled and disconnecting ones",
    )
    parser.add_argument(
        "--hostile-interval-ms",
        type=float,
        default=100.0,
        help="with --hostile: each hostile client's wait between requests (default: 100)",
    )
    args = parser.parse_args(argv)
    try:
        args.clients = [int(c) for c in args.clients.split(",")]
    except ValueError:
        parser.error(f"--clients must be comma-separated integers. Received: {args.clients!r}")
    if min(args.clients) < 1 or args.requests < 1 or args.max_seconds <= 0:
        parser.error("--clients, --requests and --max-seconds must be positive")
    return args


def train_dates(directory):
    """`kmt-train` with the default config (the dates task) into `directory`; returns its export."""
    print(f"training the default dates model into {directory} ...", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "kmt.cli.train", f"hydra.run.dir={directory}"],
        check=True,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return Path(directory) / "export"


class Server:
    """A kmt-serve process on a free port of 127.0.0.1, ready once its /readyz answers and it has logged that every
    signature ran once (it runs those a plain request does not take after /readyz says ready, which would share the
    cores with the first requests timed); `listening_s`, `ready_s` and `warmed_s` are the seconds from its start
    until it said it listens, until /readyz answered 200 and until that log line."""

    def __init__(self, export, flags, timeout=180):
        started, self.warmed = time.perf_counter(), threading.Event()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kmt.cli.serve", str(export), "--port", "0", "--max-queue", "4096", *flags],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        self.port = None
        threading.Thread(target=self._read, args=(started,), daemon=True).start()
        while self.process.poll() is None and time.perf_counter() - started < timeout:
            if self.port and self.get("/readyz")[0] == 200:
                self.ready_s = time.perf_counter() - started
                if self.warmed.wait(timeout):  # it may log the line before /readyz is polled again
                    self.warmed_s = max(self.warmed_s, self.ready_s)
                    return
                break
            time.sleep(0.02)
        self.process.kill()
        raise SystemExit("kmt-serve did not become ready")

    def _read(self, started):
        for line in self.process.stderr:
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if found and self.port is None:
                self.listening_s, self.port = time.perf_counter() - started, int(found[1])
            if re.match(r"INFO kmt\.serving: .*: warmed .* in [\d.]+ s$", line) and not self.warmed.is_set():
                self.warmed_s = time.perf_counter() - started
                self.warmed.set()
            if " ERROR " in line or line.startswith(("ERROR", "error")):
                print(line, end="", file=sys.stderr)

    def get(self, path):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode()
        except OSError:
            return None, ""

    def batches(self):
        """(batches, sentences) the server has decoded."""
        text = self.get("/metrics")[1]
        return tuple(int(re.search(rf"^kmt_batch_size_{key} (\d+)", text, re.M)[1]) for key in ("count", "sum"))

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


# --routes: the path, the body of a one-sentence request, and the (translation, score) of its answer
ROUTES = {
    "TF Serving predict": (
        "/v1/models/kmt:predict",
        lambda sentence, pair: {"instances": [sentence]},
        lambda answer: (answer["predictions"][0]["translation"], answer["predictions"][0]["score"]),
    ),
    "kmt /translate": (
        "/translate",
        lambda sentence, pair: {"text": [sentence]},
        lambda answer: (answer["translations"][0], answer["scores"][0]),
    ),
    "LibreTranslate /translate": (
        "/translate",
        lambda sentence, pair: {"q": sentence, "source": pair[0], "target": pair[1]},
        lambda answer: (answer["translatedText"], None),
    ),
}


def load(port, sentences, clients, requests, max_seconds, answers=None, route="kmt /translate", pair=None):
    """Closed-loop clients on `port` sending `route`'s requests (`ROUTES`): (latencies of the answered requests,
    failures, wall seconds); each answer's (sentence, translation, score) is appended to `answers` if given."""
    path, body_of, answer_of = ROUTES[route]
    latencies, failures, lock, sent = [], [], threading.Lock(), iter(range(requests))
    deadline = time.monotonic() + max_seconds

    def client(number):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < deadline:
            with lock:
                index = next(sent, None)
            if index is None:
                break
            sentence = sentences[(index * 7 + number) % len(sentences)]
            started = time.perf_counter()
            try:
                body = json.dumps(body_of(sentence, pair))
                connection.request("POST", path, body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                body = response.read()
                ok = response.status == 200
                if ok and answers is not None:
                    answers.append((sentence, *answer_of(json.loads(body))))
            except OSError:
                ok, connection = False, http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            with lock:
                (latencies if ok else failures).append(time.perf_counter() - started)
        connection.close()

    threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, len(failures), time.perf_counter() - started


HOSTILE = {"poison": 4, "nested": 2, "stalled": 16, "disconnecting": 4}  # clients of each kind
MIXES = {"alone": False, "beside hostile clients": True}  # whether the hostile clients run


def hostile_client(kind, port, interval_s, stop, statuses):
    """One hostile client of `kind`: a request at once, then one every `interval_s` until `stop` is set; counts the
    statuses it gets in `statuses[kind]` ("closed" when the server closed the connection without an answer)."""
    bodies = {
        "poison": b'{"text": ["\\ud800 May 1971"]}',
        "nested": b"[" * 100_000 + b"]" * 100_000,
        "disconnecting": b'{"text": ["Tuesday, March 5, 1996"]}',
    }
    while True:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
            body = bodies.get(kind, b'{"text"')
            length = 100 if kind == "stalled" else len(body)
            connection.sendall(
                b"POST /translate HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (length, body)
            )
            if kind == "disconnecting":
                statuses[kind]["sent, gone"] += 1
            else:
                found = re.match(rb"HTTP/1.1 (\d+)", connection.recv(64))
                statuses[kind][found[1].decode() if found else "closed"] += 1
        if stop.wait(interval_s):
            break


def hostile_clients(port, interval_s, stop, started, results):
    """Every `HOSTILE` client, on threads of this process (another than the good clients', as other machines would
    be), from when it sets `started` until `stop` is set; then puts {kind: {status: count}} on `results`."""
    statuses = collections.defaultdict(collections.Counter)
    threads = [
        threading.Thread(target=hostile_client, args=(kind, port, interval_s, stop, statuses))
        for kind, count in HOSTILE.items()
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    started.set()
    for thread in threads:
        thread.join()
    results.put({kind: dict(counts) for kind, counts in statuses.items()})


def hostile(args, export, sentences):
    """Rows of good clients' figures without and with hostile clients (`HOSTILE`), on one batching server."""
    server = Server(export, ["--request-timeout-s", "10"])
    clients, rows = max(args.clients), []
    try:
        serial = {}
        for sentence in sentences:
            load(server.port, [sentence], 1, 1, 60, answers := [])
            serial[sentence] = answers[0][1:]
        load(server.port, sentences, clients, 2 * clients, args.max_seconds)  # untimed
        runs = {
            mode: {"latencies": [], "failures": 0, "answers": [], "seconds": 0.0, "statuses": collections.Counter()}
            for mode in MIXES
        }
        for mode in list(MIXES) * 2:  # in turns, so that a drift in the machine's load falls on both
            run, context = runs[mode], multiprocessing.get_context("spawn")
            stop, started, results = context.Event(), context.Event(), context.Queue()
            process = context.Process(
                target=hostile_clients, args=(server.port, args.hostile_interval_ms / 1000, stop, started, results)
            )
            if MIXES[mode]:
                process.start()
                if not started.wait(120):  # the good clients' row starts beside running hostile clients
                    raise SystemExit("the hostile clients did not start")
            latencies, failures, seconds = load(
                server.port, sentences, clients, 10**9, args.max_seconds / 2, run["answers"]
            )
            run["latencies"] += latencies
            run["failures"] += failures
            run["seconds"] += seconds
            if MIXES[mode]:
                stop.set()
                for kind, counts in results.get(timeout=60).items():
                    run["statuses"].update({f"{kind} {status}": count for status, count in counts.items()})
                process.join()
        for mode, run in runs.items():
            latencies = run["latencies"]
            same = sum(
                serial[sentence][0] == translation and math.isclose(serial[sentence][1], score, rel_tol=1e-5)
                for sentence, translation, score in run["answers"]
            )
            rows.append(
                {
                    "good clients": clients,
                    "mode": mode,
                    "sent": len(latencies) + run["failures"],
                    "answered": len(latencies),
                    "as serial": same,
                    "requests/s": len(latencies) / run["seconds"],
                    "p50 ms": 1000 * percentile(latencies, 50),
                    "p95 ms": 1000 * percentile(latencies, 95),
                    "hostile": dict(run["statuses"]),
                }
            )
        rows[1]["p95 x"] = rows[1]["p95 ms"] / rows[0]["p95 ms"]
    finally:
        code = server.stop()
    print(f"kmt-serve's good clients alone and beside hostile ones, {export}, on {hardware()}")
    print_table(
        rows, ["good clients", "mode", "sent", "answered", "as serial", "requests/s", "p50 ms", "p95 ms", "p95 x"]
    )
    for row in rows[1:]:
        print(f"hostile requests by kind and status: {row['hostile']}")
    print_json(
        "serve_load_hostile",
        export=str(export),
        hostile_clients=HOSTILE,
        hostile_interval_ms=args.hostile_interval_ms,
        rows=rows,
        exit_code=code,
    )


def routes(args, export, sentences):
    """`--routes`: one batching server, its routes taking turns at each client count (`ROUTES`)."""
    batching = ["--max-batch-size", str(args.max_batch_size), "--batch-timeout-ms", str(args.batch_timeout_ms)]
    server = Server(export, batching + (["--languages", args.languages] if args.languages else []))
    rows, order = [], list(ROUTES)
    try:
        languages = json.loads(server.get("/languages")[1])
        pair = (languages[0]["code"], languages[0]["targets"][0])
        for clients in args.clients:
            for route in order:
                load(server.port, sentences, clients, 2 * clients, args.max_seconds, route=route, pair=pair)  # untimed
                latencies, failures, seconds = load(
                    server.port, sentences, clients, args.requests, args.max_seconds, route=route, pair=pair
                )
                rows.append(
                    {
                        "clients": clients,
                        "route": route,
                        "requests": len(latencies),
                        "requests/s": len(latencies) / seconds,
                        "p50 ms": 1000 * percentile(latencies, 50) if latencies else float("nan"),
                        "p95 ms": 1000 * percentile(latencies, 95) if latencies else float("nan"),
                        "failed": failures,
                    }
                )
            order = order[1:] + order[:1]
    finally:
        code = server.stop()
    for row in rows:
        base = next(r for r in rows if r["clients"] == row["clients"] and r["route"] == "TF Serving predict")
        row["vs predict"] = row["requests/s"] / base["requests/s"] if base["requests/s"] else float("nan")
    print(f"kmt-serve's routes under load over loopback, {export}, on {hardware()}")
    print_table(rows, ["clients", "route", "requests", "requests/s", "p50 ms", "p95 ms", "failed", "vs predict"])
    print_json("serve_routes", export=str(export), pair=list(pair), rows=rows, exit_code=code)


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from kmt.data.dates import generate_date_pairs

    sentences = [source for source, _ in generate_date_pairs(1000, seed=4242)]
    with tempfile.TemporaryDirectory(prefix="serve_load_") as scratch:
        export = (
            Path(args.export)
            if args.export
            else (Path(args.run_dir) / "export" if args.run_dir else train_dates(Path(scratch) / "dates"))
        )
        if args.hostile:
            return hostile(args, export, sentences[:64])
        if args.routes:
            return routes(args, export, sentences)
        batching = ["--max-batch-size", str(args.max_batch_size), "--batch-timeout-ms", str(args.batch_timeout_ms)]
        servers = {mode: Server(export, flags + batching) for mode, flags in MODES.items()}
        rows, order = [], list(MODES)
        try:
            for clients in args.clients:
                for mode in order:
                    server = servers[mode]
                    load(server.port, sentences, clients, 2 * clients, args.max_seconds)  # untimed
                    before = server.batches()
                    latencies, failures, seconds = load(
                        server.port, sentences, clients, args.requests, args.max_seconds
                    )
                    batches, decoded = (after - first for after, first in zip(server.batches(), before))
                    rows.append(
                        {
                            "clients": clients,
                            "mode": mode,
                            "requests": len(latencies),
                            "requests/s": len(latencies) / seconds,
                            "p50 ms": 1000 * percentile(latencies, 50) if latencies else float("nan"),
                            "p95 ms": 1000 * percentile(latencies, 95) if latencies else float("nan"),
                            "mean batch": decoded / max(batches, 1),
                            "failed": failures,
                        }
                    )
                order = order[1:] + order[:1]
        finally:
            codes = {mode: server.stop() for mode, server in servers.items()}
    for clients in args.clients:
        on, off = (next(r for r in rows if r["clients"] == clients and r["mode"] == mode) for mode in MODES)
        on["speed-up"] = on["requests/s"] / off["requests/s"] if off["requests/s"] else float("nan")
    print(f"kmt-serve under load over loopback, {export}, on {hardware()}")
    print_table(
        rows, ["clients", "mode", "requests", "requests/s", "p50 ms", "p95 ms", "mean batch", "failed", "speed-up"]
    )
    print_json(
        "serve_load",
        export=str(export),
        max_batch_size=args.max_batch_size,
        batch_timeout_ms=args.batch_timeout_ms,
        rows=rows,
        exit_codes=codes,
    )


if __name__ == "__main__":
    main()
