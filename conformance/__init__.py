"""Conformance: the official client's own system tests, as published on PyPI, run against the gateway.

`python -m conformance` (make conformance) downloads the pinned google-cloud-pubsub source
distribution, checks its sha256, starts a broker and a gateway, and runs the downloaded tests
unmodified with the pytest plugin in plugin.py. expected.toml lists every test that is expected
not to pass, and why. docs/conformance.md describes the run.
"""
