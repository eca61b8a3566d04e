"""Observability: Prometheus metrics per model, the cheap /load and /slots views, per-request
context (timing headers, trace spans), graceful drain and optional OpenTelemetry traces.

Nothing here imports an HTTP framework except `server.py` (uvicorn, for drain on SIGTERM);
the routes and middleware that expose it live in inferd/api/observe.py."""
