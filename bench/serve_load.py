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
"""

import argparse
import http.client
import json
import os
import re
import signal
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
    parser.add_argument("run_dir", nargs="?", help="a kmt-train run directory, served from its export/ (default: "
                                                   "train the default dates model into a temporary directory)")
    parser.add_argument("--export", help="serve this export directory instead of a run's")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts (default: 1,8,32)")
    parser.add_argument("--requests", type=int, default=300, help="most requests a row sends (default: 300)")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="most seconds a row runs (default: 30)")
    parser.add_argument("--max-batch-size", type=int, default=32, help="kmt-serve --max-batch-size (default: 32)")
    parser.add_argument("--batch-timeout-ms", type=float, default=5.0,
                        help="kmt-serve --batch-timeout-ms (default: 5)")
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
    subprocess.run([sys.executable, "-m", "kmt.cli.train", f"hydra.run.dir={directory}"], check=True,
                   env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"})
    return Path(directory) / "export"


class Server:
    """A kmt-serve process on a free port of 127.0.0.1, ready once its /readyz answers."""

    def __init__(self, export, flags, timeout=180):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kmt.cli.serve", str(export), "--port", "0", "--max-queue", "4096", *flags],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"})
        self.port = None
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            if self.port and self.get("/readyz")[0] == 200:
                return
            time.sleep(0.2)
        self.process.kill()
        raise SystemExit("kmt-serve did not become ready")

    def _read(self):
        for line in self.process.stderr:
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            self.port = int(found[1]) if found else self.port
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


def load(port, sentences, clients, requests, max_seconds):
    """Closed-loop clients on `port`: (latencies of the answered requests, failures, wall seconds)."""
    latencies, failures, lock, sent = [], [], threading.Lock(), iter(range(requests))
    deadline = time.monotonic() + max_seconds

    def client(number):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < deadline:
            with lock:
                index = next(sent, None)
            if index is None:
                break
            body = json.dumps({"text": [sentences[(index * 7 + number) % len(sentences)]]})
            started = time.perf_counter()
            try:
                connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                ok = response.status == 200
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


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from kmt.data.dates import generate_date_pairs

    sentences = [source for source, _ in generate_date_pairs(1000, seed=4242)]
    with tempfile.TemporaryDirectory(prefix="serve_load_") as scratch:
        export = Path(args.export) if args.export else (
            Path(args.run_dir) / "export" if args.run_dir else train_dates(Path(scratch) / "dates"))
        batching = ["--max-batch-size", str(args.max_batch_size), "--batch-timeout-ms", str(args.batch_timeout_ms)]
        servers = {mode: Server(export, flags + batching) for mode, flags in MODES.items()}
        rows, order = [], list(MODES)
        try:
            for clients in args.clients:
                for mode in order:
                    server = servers[mode]
                    load(server.port, sentences, clients, 2 * clients, args.max_seconds)  # untimed
                    before = server.batches()
                    latencies, failures, seconds = load(server.port, sentences, clients, args.requests,
                                                        args.max_seconds)
                    batches, decoded = (after - first for after, first in zip(server.batches(), before))
                    rows.append({"clients": clients, "mode": mode, "requests": len(latencies),
                                 "requests/s": len(latencies) / seconds,
                                 "p50 ms": 1000 * percentile(latencies, 50) if latencies else float("nan"),
                                 "p95 ms": 1000 * percentile(latencies, 95) if latencies else float("nan"),
                                 "mean batch": decoded / max(batches, 1), "failed": failures})
                order = order[1:] + order[:1]
        finally:
            codes = {mode: server.stop() for mode, server in servers.items()}
    for clients in args.clients:
        on, off = (next(r for r in rows if r["clients"] == clients and r["mode"] == mode) for mode in MODES)
        on["speed-up"] = on["requests/s"] / off["requests/s"] if off["requests/s"] else float("nan")
    print(f"kmt-serve under load over loopback, {export}, on {hardware()}")
    print_table(rows, ["clients", "mode", "requests", "requests/s", "p50 ms", "p95 ms", "mean batch", "failed",
                       "speed-up"])
    print_json("serve_load", export=str(export), max_batch_size=args.max_batch_size,
               batch_timeout_ms=args.batch_timeout_ms, rows=rows, exit_codes=codes)


if __name__ == "__main__":
    main()
