"""Process-wide counters exposed at /metrics in the Prometheus text format.

HTTP requests are counted once, here: RequestContext (the outermost middleware) records each
request in one call to `observe_request`, with the model it used and its route family when
it used one (the Observe middleware leaves its RequestInfo in the ASGI scope for that). Both
request families on /metrics are views of that one record:
  inferd_requests_total{method,route,status}, inferd_request_seconds_sum{route}   (render)
  inferd_model_requests_total{model,family,status},
  inferd_request_duration_seconds{model,family}        (Observer.render, from model_requests)"""

from __future__ import annotations

import collections
import threading

from inferd.observability.prom import LATENCY_BUCKETS, Histogram


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.latency_sum: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.tokens: collections.Counter[tuple[str, str]] = collections.Counter()  # (model, prompt|completion)
        # the requests that used a model: (model, family, status) and latency per (model, family)
        self._model_requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self._model_durations: dict[tuple[str, str], Histogram] = {}

    def observe_request(self, method: str, route: str, status: int, seconds: float,
                        model: str | None = None, family: str | None = None) -> None:
        """One finished HTTP request (the only place requests are counted)."""
        with self._lock:
            self.requests[(method, route, status)] += 1
            self.latency_sum[route] += seconds
            if model:
                fam = family or "unknown"
                self._model_requests[(model, fam, status)] += 1
                h = self._model_durations.get((model, fam))
                if h is None:
                    h = self._model_durations[(model, fam)] = Histogram(LATENCY_BUCKETS)
                h.observe(seconds)

    def model_requests(self) -> tuple[dict[tuple[str, str, int], int], dict[tuple[str, str], Histogram]]:
        """A snapshot of the per-model view: counts by (model, family, status), latency
        histograms by (model, family)."""
        with self._lock:
            return dict(self._model_requests), dict(self._model_durations)

    def add_tokens(self, model: str, prompt: int, completion: int) -> None:
        with self._lock:
            self.tokens[(model, "prompt")] += prompt
            self.tokens[(model, "completion")] += completion

    def render(self, gauges: dict[str, float]) -> str:
        def esc(v: object) -> str:
            return str(v).replace("\\", "\\\\").replace('"', '\\"')

        lines = ["# TYPE inferd_requests_total counter"]
        with self._lock:
            for (m, r, s), n in sorted(self.requests.items()):
                lines.append(f'inferd_requests_total{{method="{m}",route="{esc(r)}",status="{s}"}} {n}')
            lines.append("# TYPE inferd_request_seconds_sum counter")
            for r, v in sorted(self.latency_sum.items()):
                lines.append(f'inferd_request_seconds_sum{{route="{esc(r)}"}} {v:.6f}')
            lines.append("# TYPE inferd_tokens_total counter")
            for (model, which), n in sorted(self.tokens.items()):
                lines.append(f'inferd_tokens_total{{model="{esc(model)}",type="{which}"}} {n}')
        for name, v in sorted(gauges.items()):
            lines += [f"# TYPE inferd_{name} gauge", f"inferd_{name} {v}"]
        return "\n".join(lines) + "\n"
