"""The server's metrics in Prometheus's text format (`GET /metrics`), for a load balancer or a scraper, and its access
log (`AccessLog`, the middleware that feeds both).

- `kmt_requests_total{route, code}`: requests, by route and HTTP status; code 499 (nginx's "client closed request")
  counts the clients that went away before their answer, to whom nothing was sent;
- `kmt_request_latency_seconds{quantile}`: latency percentiles (0.5, 0.95, 0.99) over the last `window` requests to
  the model routes that were answered, with `_sum` and `_count` over all of them;
- `kmt_batch_size`: a histogram of the batches decoded (sentences per batch);
- `kmt_sentences_total`: sentences decoded;
- `kmt_queue_depth`: sentences accepted and not yet answered;
- `kmt_ready`: 1 once the model is loaded and warmed.
"""

import collections
import logging
import time

QUANTILES = (0.5, 0.95, 0.99)
MODEL_ROUTES = ("/v1/models/:predict", "/translate")  # the routes whose latency the quantiles count
CLIENT_GONE = 499  # nginx's "client closed request": logged and counted, never sent
access_logger = logging.getLogger("kmt.serving.access")


class Metrics:
    """Counters the app updates (on the event loop's thread) and renders as text."""

    def __init__(self, max_batch_size, window=4096):
        self.requests = collections.Counter()  # (route, code) -> count
        self.latencies = collections.deque(maxlen=window)
        self.latency_sum, self.latency_count = 0.0, 0
        self.bucket_bounds = _powers_of_two(max_batch_size)
        self.batch_buckets = [0] * len(self.bucket_bounds)
        self.batch_sum = self.batch_count = 0

    def observe_request(self, route, code, seconds, model_route):
        self.requests[route, code] += 1
        if model_route:
            self.latencies.append(seconds)
            self.latency_sum += seconds
            self.latency_count += 1

    def observe_batch(self, size):
        for i, bound in enumerate(self.bucket_bounds):
            if size <= bound:
                self.batch_buckets[i] += 1
                break
        self.batch_sum += size
        self.batch_count += 1

    def render(self, queue_depth, ready):
        lines = [
            "# HELP kmt_requests_total Requests by route and HTTP status (499: the client went away first).",
            "# TYPE kmt_requests_total counter",
        ]
        lines += [
            f'kmt_requests_total{{route="{route}",code="{code}"}} {count}'
            for (route, code), count in sorted(self.requests.items())
        ]
        lines += [
            "# HELP kmt_request_latency_seconds Latency of the model routes' requests (quantiles over the "
            f"last {self.latencies.maxlen}).",
            "# TYPE kmt_request_latency_seconds summary",
        ]
        ordered = sorted(self.latencies)
        for q in QUANTILES:
            value = ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")
            lines.append(f'kmt_request_latency_seconds{{quantile="{q}"}} {value:.6f}')
        lines += [
            f"kmt_request_latency_seconds_sum {self.latency_sum:.6f}",
            f"kmt_request_latency_seconds_count {self.latency_count}",
            "# HELP kmt_batch_size Sentences per decoded batch.",
            "# TYPE kmt_batch_size histogram",
        ]
        cumulative = 0
        for bound, count in zip(self.bucket_bounds, self.batch_buckets):
            cumulative += count
            lines.append(f'kmt_batch_size_bucket{{le="{bound}"}} {cumulative}')
        lines += [
            f'kmt_batch_size_bucket{{le="+Inf"}} {self.batch_count}',
            f"kmt_batch_size_sum {self.batch_sum}",
            f"kmt_batch_size_count {self.batch_count}",
            "# HELP kmt_sentences_total Sentences decoded.",
            "# TYPE kmt_sentences_total counter",
            f"kmt_sentences_total {self.batch_sum}",
            "# HELP kmt_queue_depth Sentences accepted and not yet answered.",
            "# TYPE kmt_queue_depth gauge",
            f"kmt_queue_depth {queue_depth}",
            "# HELP kmt_ready 1 once the model is loaded and warmed.",
            "# TYPE kmt_ready gauge",
            f"kmt_ready {int(ready)}",
        ]
        return "\n".join(lines) + "\n"


def _powers_of_two(limit):
    bounds = [1]
    while bounds[-1] < limit:
        bounds.append(bounds[-1] * 2)
    return bounds


class AccessLog:
    """ASGI middleware: one log line per request (client, method, path, status, milliseconds) and its metrics."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]  # an exception's 500, unless a response starts

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - started
            route = _route(scope["path"])
            answered = status[0] != CLIENT_GONE
            self.metrics.observe_request(route, status[0], seconds, answered and route in MODEL_ROUTES)
            client = "{}:{}".format(*scope["client"]) if scope.get("client") else "-"
            access_logger.info(
                '%s "%s %s" %d %.1fms%s',
                client,
                scope["method"],
                scope["path"],
                status[0],
                seconds * 1000,
                "" if answered else " (the client went away; nothing sent)",
            )


def _route(path):
    """The metrics label of a path (a fixed set, whatever paths clients send)."""
    if path.startswith("/v1/models/"):
        return "/v1/models/:predict" if path.endswith(":predict") else "/v1/models/"
    if path.startswith("/static/"):
        return "/static/"
    known = ("/", "/translate", "/healthz", "/readyz", "/metrics", "/languages", "/detect", "/frontend/settings")
    if path.startswith("/download_file/"):
        return "/download_file/"
    return path if path in (*known, "/translate_file") else "other"
