# A stand-in for python:3.11-slim-bookworm where no image registry can be reached: Debian's own
# python3 (3.11 on bookworm) on a base made by debootstrap (docker/local/engine.sh bases).
# Python and pip are a venv's, first on PATH, as the official image has them in /usr/local/bin.
# The host's own CAs (local-ca/: those in its /usr/local/share/ca-certificates, for registries
# behind a TLS-inspecting proxy) join the system's store, which Java's is made from too, and pip
# is told to use it (PIP_CERT): pip's own bundle has only the public CAs.
ARG DEBIAN_IMAGE=pubsub-gateway-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
COPY local-ca/ /usr/local/share/ca-certificates/
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && update-ca-certificates >/dev/null \
    && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:$PATH \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LANG=C.UTF-8
