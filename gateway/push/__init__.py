"""Push delivery: subscriptions with a push endpoint are delivered by this process, over HTTP or gRPC.

Modules: `window.py` (push window, backoff and rate, pure), `body.py` (request bodies and headers,
pure), `auth.py` (signed OIDC tokens and the key set, pure), `keystore.py` (signing keys kept in
Kafka), `jwks.py` (the OpenID configuration and key set over HTTP), `sender.py` (one HTTP
request), `http_push.py` (the Pusher seam, and HTTP push through it), `grpc_push.py` (gRPC push
of the seed's early API), `settle.py` (acks and nacks in batches), `dispatcher.py` (one
subscription), `manager.py` (all of them in this process).

This package imports nothing here, so its pure modules load without the gateway's protos.
"""
