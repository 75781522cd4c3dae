"""Who calls (authn.py), what they may do (iam.py), and the TLS of both wires (tls.py).

docs/security.md has the threat model and how to run a shared gateway safely.
"""
