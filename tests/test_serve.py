"""kmt-serve against a real server process on 127.0.0.1: TensorFlow Serving's request and response shapes,
concurrent clients answered as serial ones, every bad request's status and JSON error, poison, stalled and
vanishing clients beside good ones, a full queue, a request's timeout, and SIGTERM draining the queue."""

import functools
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SENTENCES = [
    f"{day} {month} {year}"
    for day, month, year in zip(
        range(1, 29), ["May", "June", "July", "Aug", "September", "Oct", "Nov"] * 4, range(1950, 1978)
    )
]
SENTENCES += ["Tuesday, March 5, 1996", "7/4/21", "the 3rd of December 2001", "2020"]  # 32, of varied lengths
REQUEST_TIMEOUT_S = 8  # the module's server: how long a stalled body is waited for


class Server:
    """A `kmt-serve` process on a free port of 127.0.0.1, its log lines collected as it writes them."""

    def __init__(self, export, *flags, timeout=120):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kmt.cli.serve", str(export), "--port", "0", *flags],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=_env(),
        )
        self.lines, self.url = [], None
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if self.url and self.get("/readyz")[0] == 200:
                return
            time.sleep(0.2)
        self.process.kill()
        raise AssertionError("kmt-serve did not become ready:\n" + "\n".join(self.lines[-30:]))

    def _read(self):
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            listening = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if listening:
                self.url = listening[1]

    def request(self, method, path, body=None, timeout=60):
        """`(status, headers, JSON or text)`; `body` is sent as JSON unless it is bytes."""
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, headers, text = response.status, response.headers, response.read().decode()
        except urllib.error.HTTPError as error:
            status, headers, text = error.code, error.headers, error.read().decode()
        is_json = headers.get("content-type", "").startswith("application/json")
        return status, headers, json.loads(text) if is_json else text

    def get(self, path):
        try:
            return self.request("GET", path, timeout=5)
        except OSError:
            return None, None, None

    def post(self, path, body):
        return self.request("POST", path, body)

    def stop(self, timeout=60):
        """SIGTERM, then the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)


def _env():
    import os

    return os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def server(smoke_run):
    """One server for the tests that need it answering: small limits, so that going past them is cheap."""
    running = Server(
        smoke_run / "export",
        "--max-sentences",
        "8",
        "--max-chars",
        "100",
        "--max-batch-size",
        "16",
        "--request-timeout-s",
        str(REQUEST_TIMEOUT_S),
    )
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def serial(server):
    """Each of SENTENCES translated in a request of its own, one request at a time: {sentence: (translation,
    score)}."""
    answers = {}
    for sentence in SENTENCES:
        status, _, body = server.post("/translate", {"text": [sentence]})
        assert status == 200, body
        answers[sentence] = (body["translations"][0], body["scores"][0])
    return answers


def answered(body):
    """A /translate answer as [(translation, score), ...], the scores to float32's rounding: a batch's other
    sentences change its padding, and so the order of a sum, by a unit in the last place."""
    return [
        (translation, pytest.approx(score, rel=1e-5))
        for translation, score in zip(body["translations"], body["scores"])
    ]


def test_tensorflow_serving_requests_and_responses(server, serial, smoke_run):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    sentences = SENTENCES[:3]
    signatures = tf.saved_model.load(str(smoke_run / "export")).signatures
    direct = signatures["translate"](text=tf.constant(sentences))
    expected = [
        {"translation": t.decode(), "score": pytest.approx(float(s), rel=1e-6)}
        for t, s in zip(direct["translation"].numpy(), direct["score"].numpy())
    ]

    row = server.post("/v1/models/kmt:predict", {"signature_name": "translate", "instances": sentences})
    assert row[0] == 200 and row[2] == {"predictions": expected}
    assert server.post("/v1/models/kmt:predict", {"instances": [{"text": s} for s in sentences]})[2] == row[2]
    columnar = server.post("/v1/models/kmt:predict", {"signature_name": "translate", "inputs": {"text": sentences}})
    assert columnar[2] == {
        "outputs": {
            "translation": [p["translation"] for p in row[2]["predictions"]],
            "score": [p["score"] for p in row[2]["predictions"]],
        }
    }
    assert server.post("/v1/models/kmt:predict", {"inputs": sentences})[2] == columnar[2]
    assert server.post("/translate", {"text": sentences})[2] == {
        "translations": columnar[2]["outputs"]["translation"],
        "scores": columnar[2]["outputs"]["score"],
    }

    pairs = {"source": sentences[:2], "target": ["1950-05-01", "1951-06-02"]}
    scored = signatures["score"](**{key: tf.constant(values) for key, values in pairs.items()})
    status, _, body = server.post("/v1/models/kmt:predict", {"signature_name": "score", "inputs": pairs})
    assert status == 200 and body["outputs"]["length"] == scored["length"].numpy().tolist()
    assert body["outputs"]["score"] == pytest.approx(scored["score"].numpy().tolist(), rel=1e-6)
    rows = [{"source": s, "target": t} for s, t in zip(*pairs.values())]
    assert server.post("/v1/models/kmt:predict", {"signature_name": "score", "instances": rows})[2] == {
        "predictions": [{"score": s, "length": n} for s, n in zip(body["outputs"]["score"], body["outputs"]["length"])]
    }
    nbest = server.post("/v1/models/kmt:predict", {"signature_name": "translate_nbest", "instances": sentences[:1]})
    assert nbest[2]["predictions"][0]["translations"] == [row[2]["predictions"][0]["translation"]]  # greedy: K = 1
    assert server.post("/v1/models/kmt:predict", {"instances": []})[2] == {"predictions": []}

    assert server.get("/v1/models/kmt")[2] == {
        "model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    }
    assert server.get("/healthz")[:3:2] == (200, {"status": "ok"})
    status, headers, metrics = server.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'kmt_requests_total{route="/v1/models/:predict",code="200"}' in metrics
    assert "kmt_queue_depth 0" in metrics and "kmt_ready 1" in metrics
    assert re.search(r'^kmt_request_latency_seconds\{quantile="0.95"\} \d', metrics, re.M)
    assert any(re.search(r'"POST /v1/models/kmt:predict" 200 [\d.]+ms$', line) for line in server.lines)


def test_concurrent_clients_get_their_serial_answers(server, serial):
    requests = [SENTENCES[i : i + 1 + i % 3] for i in range(32)]  # 1 to 3 sentences each, overlapping

    def ask(sentences):
        return server.post("/translate", {"text": sentences})

    before = batches(server)
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(ask, requests))
    for sentences, (status, _, body) in zip(requests, answers):
        assert status == 200, body
        assert answered(body) == [serial[s] for s in sentences]
    assert batches(server) - before < len(requests)  # requests were decoded together


def batches(server):
    """How many batches the server has decoded."""
    return int(re.search(r"^kmt_batch_size_count (\d+)", server.get("/metrics")[2], re.M)[1])


BAD = [  # (method, path, body, status, what the error says)
    ("POST", "/translate", b'{"text": ["7 May', 400, "malformed JSON"),
    ("POST", "/translate", b"\xff\xfe", 400, "malformed JSON"),
    ("POST", "/translate", [1, 2], 400, "must be a JSON object"),
    ("POST", "/translate", {"txt": ["7 May 1971"]}, 400, "unknown fields: txt"),
    ("POST", "/translate", {"text": "7 May 1971"}, 400, "text must be a list of strings"),
    ("POST", "/translate", {"text": ["7 May 1971", 3]}, 400, "text[1] must be a string"),
    ("POST", "/translate", {"text": ["7 May 1971"] * 9}, 400, "--max-sentences 8"),
    ("POST", "/translate", {"text": ["7 May 1971", "x" * 101]}, 400, "--max-chars 100"),
    ("POST", "/translate", {"text": ["x" * 100] * 200}, 413, "--max-sentences 8 and --max-chars 100"),
    ("POST", "/translate", b"x" * 10_000_000, 413, "--max-sentences 8 and --max-chars 100"),  # not a reset
    ("POST", "/translate", b"[" * 7000 + b"]" * 7000, 400, "malformed JSON: nested too deeply"),
    (
        "POST",
        "/translate",
        b'{"text": ["7 May 1971", "\\ud800"]}',
        400,
        "text[1] is not valid text: character 0 is a lone surrogate (U+D800)",
    ),
    (
        "POST",
        "/v1/models/kmt:predict",
        b'{"signature_name": "\\udfff", "inputs": ["a"]}',
        404,
        "signature '\\udfff' not found",
    ),
    ("POST", "/v1/models/kmt:predict", {"instances": [None]}, 400, "instances[0].text must be a string"),
    ("POST", "/v1/models/kmt:predict", {"instances": ["a"], "inputs": ["a"]}, 400, "exactly one of"),
    ("POST", "/v1/models/kmt:predict", {"signature_name": 7, "inputs": ["a"]}, 400, "signature_name must be"),
    (
        "POST",
        "/v1/models/kmt:predict",
        {"signature_name": "score", "inputs": {"source": ["a"], "target": []}},
        400,
        "same length",
    ),
    (
        "POST",
        "/v1/models/kmt:predict",
        {"signature_name": "score", "instances": [{"source": "a"}]},
        400,
        "inputs source, target",
    ),
    ("POST", "/v1/models/kmt:predict", {"signature_name": "nope", "inputs": ["a"]}, 404, "signature 'nope'"),
    ("POST", "/v1/models/other:predict", {"inputs": ["a"]}, 404, "model 'other' not found"),
    ("GET", "/v1/models/other", None, 404, "model 'other' not found"),
    ("GET", "/v1/models/kmt:predict", None, 405, "/v1/models/kmt:predict takes POST. Received: GET"),
    ("POST", "/v1/models/kmt/versions/1", b"", 405, "takes GET. Received: POST"),
    ("GET", "/v1/models/kmt/versions/2", None, 404, "version 2 of model 'kmt' not found"),
    ("POST", "/v1/models/kmt/versions/2:predict", {"inputs": ["a"]}, 404, "version 2 of model 'kmt' not found"),
    ("POST", "/v1/models/kmt:classify", {"examples": []}, 400, "which :classify cannot call; use :predict"),
    ("POST", "/v1/models/kmt/labels/stable:regress", {"examples": []}, 400, "which :regress cannot call"),
    ("GET", "/v1/models/kmt/metadata/x", None, 404, "no route /v1/models/kmt/metadata/x"),
    ("POST", "/healthz", b"", 405, "Method Not Allowed"),
    ("GET", "/nowhere", None, 404, "Not Found"),
]


def test_every_bad_request_gets_its_status_and_one_line_while_others_are_answered(server, serial):
    stop, good = threading.Event(), []

    def keep_asking(sentence):
        while not stop.is_set():
            status, _, body = server.post("/translate", {"text": [sentence]})
            good.append(status == 200 and answered(body) == [serial[sentence]])

    threads = [threading.Thread(target=keep_asking, args=(s,)) for s in SENTENCES[:4]]
    for thread in threads:
        thread.start()
    try:
        for method, path, body, status, says in BAD:
            got, _, answer = server.request(method, path, body)
            assert got == status, (path, body, answer)
            assert list(answer) == ["error"] and says in answer["error"] and "\n" not in answer["error"], answer
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert good and all(good)


POISON = [  # (path, body, what the 400 says): valid JSON holding text that UTF-8 cannot encode
    ("/translate", b'{"text": ["\\ud800"]}', "text[0] is not valid text"),
    ("/v1/models/kmt:predict", b'{"instances": ["7 May 1971", "\\udc00 May 1971"]}', "instances[1].text is not"),
    ("/v1/models/kmt:predict", b'{"inputs": {"text": ["x\\ud83d"]}}', "inputs.text[0] is not valid text"),
]


def ask_with_poison(server, requests):
    """`requests` ([sentences]) sent to /translate all at once with the POISON ones in between; checks that each
    poison one got its 400 and returns the others' (status, body)."""
    asks = [("/translate", {"text": sentences}) for sentences in requests]
    for i, (path, body, _) in enumerate(POISON * 3):
        asks.insert(4 * i, (path, body))
    with ThreadPoolExecutor(len(asks)) as pool:
        answers = list(pool.map(lambda ask: server.post(*ask), asks))
    good = []
    for (path, body), (status, _, answer) in zip(asks, answers):
        says = next((says for p, b, says in POISON if (p, b) == (path, body)), None)
        if says:
            assert status == 400 and says in answer["error"], answer
        else:
            good.append((status, answer))
    return good


def test_poison_requests_fail_alone_and_their_neighbours_get_their_serial_answers(server, serial):
    requests = [[SENTENCES[i % len(SENTENCES)]] for i in range(40)]
    good = ask_with_poison(server, requests)
    assert [status for status, _ in good] == [200] * 40, good
    assert [answered(body) for _, body in good] == [[serial[s] for s in sentences] for sentences in requests]


def test_tensorflow_serving_metadata_versions_and_labels(server, smoke_run):
    from google.protobuf.json_format import MessageToDict
    from tensorflow.core.protobuf import saved_model_pb2

    graph = saved_model_pb2.SavedModel.FromString((smoke_run / "export" / "saved_model.pb").read_bytes())
    defs = {
        name: MessageToDict(signature, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        for name, signature in graph.meta_graphs[0].signature_def.items()
        if not name.startswith("__")
    }
    status, _, metadata = server.get("/v1/models/kmt/metadata")
    assert status == 200 and metadata["model_spec"] == {"name": "kmt", "signature_name": "", "version": "1"}
    assert metadata["metadata"]["signature_def"]["signature_def"] == {
        name: {key: value for key, value in signature.items() if key in ("inputs", "outputs", "method_name")}
        for name, signature in defs.items()
    }  # TensorFlow Serving prints the graph's signature defs so
    assert metadata["metadata"]["signature_def"]["signature_def"]["translate"]["inputs"]["text"] == {
        "dtype": "DT_STRING",
        "tensor_shape": {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False},
        "name": "translate_text:0",
    }
    for model in ("kmt/versions/1", "kmt/labels/stable"):
        assert server.get(f"/v1/models/{model}/metadata")[2] == metadata
        assert server.get(f"/v1/models/{model}")[2] == server.get("/v1/models/kmt")[2]
        predict = {"signature_name": "translate", "instances": SENTENCES[:2]}
        assert (
            server.post(f"/v1/models/{model}:predict", predict)[::2]
            == server.post("/v1/models/kmt:predict", predict)[::2]
        )


def requests_answered(server, code):
    """How many requests the server's /metrics counts with status `code`, over every route."""
    return sum(
        int(n)
        for n in re.findall(
            rf'^kmt_requests_total\{{route="[^"]*",code="{code}"\}} (\d+)', server.get("/metrics")[2], re.M
        )
    )


def test_stalled_bodies_get_408_and_their_connections_closed_while_others_are_answered(server, serial):
    host, port = server.url.removeprefix("http://").split(":")
    stalled = [socket.create_connection((host, int(port))) for _ in range(60)]
    started = time.monotonic()
    try:
        for connection in stalled:  # a body of 100 bytes declared, 7 sent
            connection.sendall(b'POST /translate HTTP/1.1\r\nHost: kmt\r\nContent-Length: 100\r\n\r\n{"text"')
        for sentence in SENTENCES[:8]:
            status, _, body = server.post("/translate", {"text": [sentence]})
            assert status == 200 and answered(body) == [serial[sentence]], body
        assert time.monotonic() - started < REQUEST_TIMEOUT_S  # answered while the 60 wait
        for connection in stalled:
            connection.settimeout(REQUEST_TIMEOUT_S + 20)
            reply = b"".join(iter(functools.partial(connection.recv, 4096), b""))  # until the server closes it
            assert reply.startswith(b"HTTP/1.1 408 ") and b"--request-timeout-s 8" in reply, reply
    finally:
        for connection in stalled:
            connection.close()


def test_a_client_that_goes_away_is_one_log_line_and_a_499(server):
    host, port = server.url.removeprefix("http://").split(":")
    before, lines = requests_answered(server, 499), len(server.lines)
    body = json.dumps({"text": SENTENCES[:8]}).encode()
    head = b"POST /translate HTTP/1.1\r\nHost: kmt\r\nContent-Length: %d\r\n\r\n" % len(body)
    for sent in (head + body[:10], head + body):  # gone while sending its body, gone while waiting for its answer
        with socket.create_connection((host, int(port))) as connection:
            connection.sendall(sent)
    deadline = time.monotonic() + 30
    while requests_answered(server, 499) < before + 2:
        assert time.monotonic() < deadline, "\n".join(server.lines[lines:])
        time.sleep(0.1)
    wait_for_depth(server, 0)  # the second one's sentences were dropped or decoded
    logged = server.lines[lines:]
    assert (
        sum('"POST /translate" 499 ' in line and "(the client went away; nothing sent)" in line for line in logged) == 2
    )
    assert not any("Traceback" in line or '" 500 ' in line for line in logged), logged


def test_mistakes_in_the_command_line_stop_in_one_line(capsys, smoke_run, tmp_path):
    from kmt.cli.serve import main
    from tests.helpers import refused

    assert refused(capsys, main, tmp_path) == (
        2,
        f"error: {tmp_path} is not a kmt run directory (config.yaml), "
        "SavedModel export (saved_model.pb) or CTranslate2 directory; pass "
        "a run, its export/ or the output of kmt-export --format "
        "ctranslate2",
    )
    assert refused(capsys, main, tmp_path, "--max-queue", "8")[1].endswith(
        "--max-queue must hold one request of --max-sentences. Received: --max-queue 8, --max-sentences 64"
    )
    assert refused(capsys, main, tmp_path, "--batch-timeout-ms", "-1")[1].endswith(
        "--batch-timeout-ms must not be negative. Received: -1.0"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, line = refused(capsys, main, smoke_run / "export", "--port", port)
    assert (code, line) == (2, f"error: cannot listen on 127.0.0.1:{port}: Address already in use")


def wait_for_depth(server, depth, timeout=10):
    """Waits until the server holds `depth` sentences not yet answered."""
    deadline = time.monotonic() + timeout
    while f"kmt_queue_depth {depth}\n" not in server.get("/metrics")[2]:
        assert time.monotonic() < deadline, f"the queue never held {depth} sentences"
        time.sleep(0.05)


def test_full_queue_gets_503_and_a_slow_request_504(smoke_run):
    """A batch that waits 3 s for company holds the queue (two sentences) past the 1 s request timeout."""
    server = Server(
        smoke_run / "export",
        "--max-queue",
        "2",
        "--max-sentences",
        "2",
        "--batch-timeout-ms",
        "3000",
        "--request-timeout-s",
        "1",
    )
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(server.post, "/translate", {"text": SENTENCES[:2]})
            wait_for_depth(server, 2)
            status, headers, body = server.post("/translate", {"text": SENTENCES[2:3]})
            assert (status, headers["retry-after"]) == (503, "1") and "--max-queue 2" in body["error"], body
            status, _, body = first.result(timeout=30)
        assert status == 504 and "--request-timeout-s 1" in body["error"], body
    finally:
        assert server.stop() == 0


def test_sigterm_answers_every_queued_request_then_exits_0(smoke_run, serial):
    server = Server(smoke_run / "export", "--batch-timeout-ms", "4000", "--max-batch-size", "64")
    with ThreadPoolExecutor(32) as pool:
        answers = [pool.submit(server.post, "/translate", {"text": [s]}) for s in SENTENCES]
        wait_for_depth(server, 32)  # every request queued, in one batch that waits for more
        assert server.stop() == 0
        for sentence, answer in zip(SENTENCES, answers):
            status, _, body = answer.result(timeout=30)
            assert status == 200 and answered(body) == [serial[sentence]], body
    with pytest.raises(OSError):  # and nothing listens any more
        urllib.request.urlopen(server.url + "/healthz", timeout=5)
    assert sum('/translate" 200' in line for line in server.lines) == 32


def test_load_bench_runs_batching_and_no_batching_side_by_side(smoke_run):
    result = subprocess.run(
        [
            sys.executable,
            "bench/serve_load.py",
            "--export",
            str(smoke_run / "export"),
            "--clients",
            "1,3",
            "--requests",
            "6",
            "--max-seconds",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["exit_codes"] == {"batching": 0, "no batching": 0}
    rows = {(row["clients"], row["mode"]): row for row in report["rows"]}
    assert set(rows) == {(c, m) for c in (1, 3) for m in ("batching", "no batching")}
    assert all(row["requests"] == 6 and row["failed"] == 0 for row in rows.values())
    assert rows[1, "no batching"]["mean batch"] == rows[3, "no batching"]["mean batch"] == 1


def test_a_ctranslate2_directory_is_served_with_the_saved_models_answers(smoke_run, serial, tmp_path):
    from kmt.cli import export as export_cli

    export_cli.main([str(smoke_run), "--format", "ctranslate2", "--output", str(tmp_path / "ct2")])
    running = Server(tmp_path / "ct2")
    try:
        status, _, body = running.post("/translate", {"text": SENTENCES[:8]})
        assert status == 200, body
        assert body["translations"] == [serial[sentence][0] for sentence in SENTENCES[:8]]  # greedy: kmt's tokens
        good = ask_with_poison(running, [[sentence] for sentence in SENTENCES[:16]])
        assert [(status, body["translations"]) for status, body in good] == [
            (200, [serial[s][0]]) for s in SENTENCES[:16]
        ]
        status, _, body = running.post(
            "/v1/models/kmt:predict", {"signature_name": "translate", "instances": SENTENCES[:2]}
        )
        assert status == 200 and [p["translation"] for p in body["predictions"]] == [
            serial[s][0] for s in SENTENCES[:2]
        ]
    finally:
        assert running.stop() == 0


def test_a_run_directory_is_served_with_the_saved_models_answers(smoke_run, serial):
    running = Server(smoke_run)  # `kmt-serve RUN_DIR`: the run's Keras model, searching with its decode settings
    try:
        status, _, body = running.post("/translate", {"text": SENTENCES[:8]})
        assert status == 200, body
        assert body["translations"] == [serial[sentence][0] for sentence in SENTENCES[:8]]
    finally:
        assert running.stop() == 0
