"""Process-wide counters exposed at /metrics in the Prometheus text format."""

from __future__ import annotations

import collections
import threading


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.latency_sum: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.tokens: collections.Counter[tuple[str, str]] = collections.Counter()  # (model, prompt|completion)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            self.latency_sum[route] += seconds

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
