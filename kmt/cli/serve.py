"""`kmt-serve EXPORT_DIR`: serve a kmt export over HTTP, speaking TensorFlow Serving's REST API.

A client written against `tensorflow_model_server --rest_api_port=8501 --model_name=kmt` works unchanged:

    curl -s -X POST http://127.0.0.1:8501/v1/models/kmt:predict \\
        -d '{"signature_name": "translate", "instances": ["Tuesday, March 5, 1996"]}'
    curl -s -X POST http://127.0.0.1:8501/translate -d '{"text": ["7 May 1971"]}'

Routes: POST /v1/models/NAME:predict (row "instances" or columnar "inputs"), GET /v1/models/NAME (status),
GET /v1/models/NAME/metadata (signatures), each also under NAME/versions/1 and NAME/labels/LABEL; POST /translate,
GET /healthz, GET /readyz (once the model is loaded and warmed), GET /metrics (Prometheus text). LibreTranslate's API
too, for its clients: POST /translate with "q" (JSON or a form), GET /languages, POST /detect, GET /frontend/settings,
POST /translate_file; and a web page for people at / (--no-frontend: none):

    curl -s -X POST http://127.0.0.1:8501/translate -d q="A man sleeps." -d source=en -d target=de

Concurrent requests are gathered into batches of up to --max-batch-size sentences, waiting at most
--batch-timeout-ms after the first, sorted by length and decoded together; each request gets its own lines. A full
queue answers 503 with Retry-After; a request over a limit, 400 naming it; a body that does not arrive within
--request-timeout-s, 408. SIGTERM (or Ctrl-C) stops accepting
connections, answers every request already received, then exits 0. docs/serving.md has the details.

Examples:
    kmt-serve runs/dates/<time>/export
    kmt-serve runs/multi30k/<time>/export --host 0.0.0.0 --port 8080 --max-batch-size 64 --batch-timeout-ms 10
    kmt-serve --model en-de=runs/multi30k_en_de/<time>/export --model de-en=runs/multi30k_de_en/<time>/ctranslate2
"""

import argparse
import logging
import signal
import socket

from kmt.cli import console_script
from kmt.cli.common import setup_logging
from kmt.cli.errors import exit_on_user_error, fail
from kmt.errors import KmtError

logger = logging.getLogger("kmt.serving")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "export_dir",
        metavar="EXPORT_DIR",
        nargs="?",
        help="a kmt SavedModel export (a run's export/), a CTranslate2 directory "
        "(kmt-export RUN_DIR --format ctranslate2) or a run directory (its Keras model)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 for every interface (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8501,
        help="port; 0 picks a free one, logged at start (default: 8501, TensorFlow Serving's REST port)",
    )
    parser.add_argument(
        "--model-name",
        default="kmt",
        help="the NAME in /v1/models/NAME, as tensorflow_model_server's --model_name (default: kmt)",
    )
    parser.add_argument(
        "--max-batch-size", type=int, default=32, help="most sentences decoded in one batch (default: 32)"
    )
    parser.add_argument(
        "--batch-timeout-ms",
        type=float,
        default=5.0,
        help="longest wait for a batch to fill after its first sentence arrives (default: 5)",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        default=1024,
        help="most sentences accepted and not yet answered; beyond it a request gets 503 with "
        "Retry-After (default: 1024)",
    )
    parser.add_argument(
        "--request-timeout-s",
        type=float,
        default=30.0,
        help="a request whose body has not arrived within this gets 408, one not answered "
        "within this 504 (default: 30)",
    )
    parser.add_argument("--max-sentences", type=int, default=64, help="most sentences in one request (default: 64)")
    parser.add_argument("--max-chars", type=int, default=1000, help="most characters in one sentence (default: 1000)")
    parser.add_argument(
        "--glossary",
        metavar="TSV",
        help="source term, TAB, target term a line: every translate request (and /translate without its own "
        "glossary) is decoded with the target terms of the source terms found in its sentences as constraints (or "
        "inline, for a model trained with data.terminology)",
    )
    parser.add_argument(
        "--model",
        metavar="SOURCE-TARGET=EXPORT_DIR",
        action="append",
        dest="models",
        help="serve EXPORT_DIR for a language pair, such as en-de=runs/multi30k_en_de/<time>/export; repeat it for "
        "several models, each at /v1/models/SOURCE-TARGET and on LibreTranslate's routes (in place of EXPORT_DIR)",
    )
    parser.add_argument(
        "--languages",
        metavar="SOURCE-TARGET",
        help="the model's language pair for LibreTranslate's routes, ISO 639-1 codes such as en-de (default: the "
        "data.source_lang and data.target_lang of the run EXPORT_DIR is or is in)",
    )
    parser.add_argument(
        "--api-keys",
        metavar="FILE",
        help="LibreTranslate's routes take only requests whose api_key is one of FILE's lines (default: no key)",
    )
    parser.add_argument(
        "--req-limit",
        type=int,
        default=0,
        help="LibreTranslate requests one client (its api_key, else its address) may make a minute; beyond it "
        "429 (default: 0, no limit)",
    )
    parser.add_argument(
        "--max-file-bytes",
        type=int,
        default=10_000_000,
        help="the largest file LibreTranslate's /translate_file takes (default: 10000000)",
    )
    parser.add_argument(
        "--no-frontend",
        action="store_true",
        help="serve no web page at / (as LibreTranslate's --disable-web-ui); the APIs stay (default: the page is on)",
    )
    parser.add_argument(
        "--file-ttl-s",
        type=float,
        default=1800.0,
        help="how long a file /translate_file translated stays to download, in seconds (default: 1800)",
    )
    parser.add_argument(
        "--no-batching",
        action="store_true",
        help="decode each request alone, as it arrives (for comparison: bench/serve_load.py)",
    )
    args = parser.parse_args(argv)
    for name in ("max_batch_size", "max_queue", "max_sentences", "max_chars", "max_file_bytes", "file_ttl_s"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive. Received: {getattr(args, name)}")
    for name in ("batch_timeout_ms", "request_timeout_s", "req_limit"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative. Received: {getattr(args, name)}")
    if (args.export_dir is None) == (args.models is None):
        parser.error("give one EXPORT_DIR, or --model SOURCE-TARGET=EXPORT_DIR once or more")
    if args.models and args.languages:
        parser.error("--languages names EXPORT_DIR's pair; a --model names its own")
    if args.max_queue < args.max_sentences:
        parser.error(
            f"--max-queue must hold one request of --max-sentences. Received: --max-queue "
            f"{args.max_queue}, --max-sentences {args.max_sentences}"
        )
    return args


def served_models(args):
    """The `Served` models of the command line: each --model, or EXPORT_DIR as --model-name with its `Pair`
    (--languages, else its run's; None where neither says). Each path is checked."""
    from kmt.run_dir import languages_of_run
    from kmt.serving.languages import Pair
    from kmt.serving.loading import Served
    from kmt.serving.model import check_model_path

    served = []
    for given in args.models or []:
        name, equals, path = given.partition("=")
        if not equals or not path:
            raise KmtError(
                "--model is SOURCE-TARGET=EXPORT_DIR, such as en-de=runs/multi30k_en_de/<time>/export. "
                f"Received: {given}"
            )
        try:
            pair = Pair.parse(name)
        except ValueError as error:
            raise KmtError(f"--model {given}: {error}") from None
        if any(other.pair == pair for other in served):
            raise KmtError(f"--model {given}: {pair} is served once")
        check_model_path(path)
        served.append(Served(str(pair), path, pair))
    if served:
        return served
    check_model_path(args.export_dir)
    try:
        if args.languages is not None:
            pair = Pair.parse(args.languages)
        else:
            languages = languages_of_run(args.export_dir)
            pair = Pair(*languages) if languages else None
    except ValueError as error:
        raise KmtError(f"--languages: {error}") from None
    return [Served(args.model_name, args.export_dir, pair)]


def read_api_keys(path):
    """The keys in `path`, one a line (blank lines skipped); None without a file."""
    if path is None:
        return None
    try:
        keys = frozenset(line.strip() for line in open(path, encoding="utf-8") if line.strip())
    except (OSError, UnicodeDecodeError) as error:
        raise KmtError(f"--api-keys {path}: {getattr(error, 'strerror', None) or error}") from None
    if not keys:
        raise KmtError(f"--api-keys {path} holds no key")
    return keys


@console_script
def main(argv=None):
    args = parse_args(argv)
    setup_logging(verbose=True)
    with exit_on_user_error():
        from kmt.inference.glossary import Glossary

        glossary = None if args.glossary is None else Glossary.load(args.glossary)
        served, api_keys = served_models(args), read_api_keys(args.api_keys)
    import uvicorn

    from kmt.serving.app import Settings, create_app

    settings = Settings(
        model_name=args.model_name,
        max_batch_size=args.max_batch_size,
        batch_timeout_ms=args.batch_timeout_ms,
        max_queue=args.max_queue,
        request_timeout_s=args.request_timeout_s,
        max_sentences=args.max_sentences,
        max_chars=args.max_chars,
        batching=not args.no_batching,
        glossary=glossary,
        api_keys=api_keys,
        req_limit=args.req_limit,
        max_file_bytes=args.max_file_bytes,
        file_ttl_s=args.file_ttl_s,
        frontend=not args.no_frontend,
    )
    failed = []

    def on_load_failure():
        failed.append(True)
        server.should_exit = True

    app = create_app(served, settings, on_load_failure)
    config = uvicorn.Config(
        app, log_config=None, access_log=False, timeout_graceful_shutdown=args.request_timeout_s + 5
    )
    server = uvicorn.Server(config)
    listening = _listen(args.host, args.port)
    names = ", ".join(model.name for model in served)
    logger.info(
        "listening on http://%s:%d (model name%s %s)",
        args.host,
        listening.getsockname()[1],
        "s" * (len(served) > 1),
        names,
    )
    pairs = [str(model.pair) for model in served if model.pair is not None]
    if pairs:
        logger.info("LibreTranslate's routes translate %s", ", ".join(pairs))
    else:
        logger.info("LibreTranslate's routes need the model's languages: start with --languages SOURCE-TARGET")
    # uvicorn re-raises a stopping signal once it has shut down gracefully; with these handlers that ends the
    # process with status 0 rather than by the signal.
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda number, frame: None)
    server.run(sockets=[listening])
    if failed:
        raise SystemExit(1)


def _listen(host, port):
    """A socket bound to `host`:`port` (uvicorn listens on it), or a one-line error before the model loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror or error}")
    return listening


if __name__ == "__main__":
    main()
