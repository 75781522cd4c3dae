"""Observability: Prometheus metrics at /metrics, liveness and readiness (/healthz, /readyz,
grpc.health.v1.Health), OpenTelemetry spans, JSON log lines (docs/metrics.md).

This package sits beside gateway/server.py, which composes it (observer.Observer): it reads the
services' state (core, push, Kafka statistics) and is imported by nothing below it. The only
counts kept on the paths that deliver and publish are the plain integers of
gateway/core/tally.py. Importing the package itself costs nothing: cli.py takes logs.py from it
before anything else is loaded.
"""
