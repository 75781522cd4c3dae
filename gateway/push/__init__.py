"""Push delivery: subscriptions with a push endpoint are delivered over HTTP by this process.

Modules: `window.py` (push window and backoff, pure), `body.py` (request bodies and headers,
pure), `auth.py` (signed OIDC tokens and the key set, pure), `keystore.py` (signing keys kept in
Kafka), `jwks.py` (the OpenID configuration and key set over HTTP), `sender.py` (one HTTP
request), `settle.py` (acks and nacks in batches), `dispatcher.py` (one subscription),
`manager.py` (all of them in this process).

This package imports nothing here, so its pure modules load without the gateway's protos.
"""
