#!/usr/bin/env bash
# A Docker engine of this checkout's own, and the local base images, for machines that reach the
# package registries but no image registry (docker/README.md, "Without Docker Hub").
#
#   docker/local/engine.sh install   Debian's docker.io and debootstrap, if missing (root)
#   docker/local/engine.sh start     dockerd on .cache/docker-engine/docker.sock, if not running
#   docker/local/engine.sh bases     pubsub-gateway-local/debian:bookworm (debootstrap) and
#                                    pubsub-gateway-local/python:3.11-bookworm (Debian's python3)
#   docker/local/engine.sh kafka     pubsub-gateway-local/kafka:VERSION, from the embedded broker's jars
#   docker/local/engine.sh env       the variables that point the docker CLI at this engine
#   docker/local/engine.sh stop      stops that dockerd
#
# The engine runs without a default bridge and without iptables: containers reach each other on
# networks of their own (compose's, testcontainers'), the host reaches them through published
# ports, and builds reach the registries with --network host.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
state="$root/.cache/docker-engine"
socket="$state/docker.sock"
# containerd's sockets live under the exec root and must stay short: one per checkout in /tmp.
exec_root="/tmp/pgw-docker-$(printf '%s' "$root" | cksum | cut -d' ' -f1)"
python="${PYTHON:-$root/.venv/bin/python}"
mirror="${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}"
mirror="${mirror:-http://deb.debian.org/debian}"
export DOCKER_HOST="unix://$socket" DOCKER_CONFIG="$root/.cache/docker"

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

install() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return
    [ "$(id -u)" -eq 0 ] || { echo "installing ${missing[*]} needs root (apt-get)" >&2; exit 1; }
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

start() {
    if docker version >/dev/null 2>&1; then return; fi
    mkdir -p "$state/data" "$exec_root"
    dockerd --bridge=none --iptables=false --ip6tables=false \
        --data-root "$state/data" --exec-root "$exec_root" --pidfile "$state/docker.pid" \
        -H "unix://$socket" >"$state/dockerd.log" 2>&1 &
    for _ in $(seq 1 60); do
        docker version >/dev/null 2>&1 && return
        sleep 0.5
    done
    echo "dockerd did not start; its log:" >&2
    tail -20 "$state/dockerd.log" >&2
    exit 1
}

bases() {
    if ! has_image pubsub-gateway-local/debian:bookworm; then
        local rootfs="$state/rootfs"
        rm -rf "$rootfs"
        debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$state/debootstrap.log" 2>&1 \
            || { tail -20 "$state/debootstrap.log" >&2; exit 1; }
        tar -C "$rootfs" -c . | docker import - pubsub-gateway-local/debian:bookworm >/dev/null
        rm -rf "$rootfs"
    fi
    if ! has_image pubsub-gateway-local/python:3.11-bookworm; then
        local ctx="$state/python-context"
        rm -rf "$ctx" && mkdir -p "$ctx"
        cp "$root/docker/local/python.Dockerfile" "$ctx/Dockerfile"
        mkdir -p "$ctx/local-ca"
        cp /usr/local/share/ca-certificates/*.crt "$ctx/local-ca/" 2>/dev/null || true
        docker build -q --network host -t pubsub-gateway-local/python:3.11-bookworm "$ctx" >/dev/null
    fi
}

kafka() {
    local version
    version=$("$python" -c 'from gateway.kafka.brokerjars import KAFKA_VERSION; print(KAFKA_VERSION)')
    local image="pubsub-gateway-local/kafka:$version"
    has_image "$image" && return
    local ctx="$state/kafka-context"
    rm -rf "$ctx" && mkdir -p "$ctx/libs" "$ctx/tools"
    cp -r "$root/docker/kafka/." "$ctx/"
    cp "$("$python" -c 'from gateway.kafka.brokerjars import default_cache_dir, resolve_broker
print(resolve_broker(default_cache_dir()))')"/*.jar "$ctx/libs/"
    mvn -q -B dependency:copy -Dartifact="org.apache.kafka:kafka-tools:$version" \
        -DoutputDirectory="$ctx/tools" >"$state/kafka-tools.log" 2>&1 \
        || { tail -20 "$state/kafka-tools.log" >&2; exit 1; }
    docker build -q --network host --build-arg DEBIAN_IMAGE=pubsub-gateway-local/debian:bookworm \
        -t "$image" "$ctx" >/dev/null
}

env_() {
    echo "export DOCKER_HOST=$DOCKER_HOST DOCKER_CONFIG=$DOCKER_CONFIG"
}

stop() {
    [ -f "$state/docker.pid" ] || return 0
    local pid
    pid=$(cat "$state/docker.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
}

for step in "$@"; do
    case "$step" in
        install | start | bases | kafka | stop) "$step" ;;
        env) env_ ;;
        *) echo "unknown step: $step (install, start, bases, kafka, env, stop)" >&2; exit 2 ;;
    esac
done
