"""The server's metrics in Prometheus's text format (`GET /metrics`), for a load balancer or a scraper.

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

QUANTILES = (0.5, 0.95, 0.99)


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
