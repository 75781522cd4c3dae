"""The broker's disk fills up under load, then space comes back.

A broker of the test's own keeps its data on a small tmpfs the test mounts. One gateway serves an
exactly-once, an ordered and a plain subscription on it, each streamed by the official
subscriber, while the official publisher publishes with ordering keys. After a warm-up a file
written until ENOSPC fills the tmpfs; publishing goes on, and the test's own publishes (one
Publish RPC each, the client's retries off) show the status code the gateway answers with.
Then the file is deleted, and the broker restarted on the same port and data if it does not
take writes again by itself, as an operator would.

What Kafka does (4.3, one log dir, its log): the first append that meets ENOSPC fails with
"Error while appending records to ... java.io.IOException: No space left on device", the dir goes
offline, and as no log dir is left, "Shutdown broker because all log dirs in ... have failed":
the broker stops, and only a restart brings it back once there is space.

What must hold (issue 56): publishes are refused with a code the clients retry, nothing
confirmed is lost, no message comes again after a confirmed exactly-once ack, and publishing
and delivery work again once there is space (the gateway outliving the broker's restart). The
recovery time is a FIGURE line.

FAULT_DISK_FULL_SECONDS sets how long the disk stays full (default 20 s; longer while the
test's own publish waits for its answer).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.api_core import exceptions
from google.pubsub_v1.services.publisher import PublisherClient as PublisherGapic
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.types import PubsubMessage

from gateway.kafka import jvm
from gateway.kafka.local import STOCK, LocalKafka
from tests.faults.conftest import FaultGateway, Rig
from tests.faults.resources import topic_and_subscriptions

pytestmark = [pytest.mark.integration, pytest.mark.slow_fault]

FULL_SECONDS = float(os.environ.get("FAULT_DISK_FULL_SECONDS", "20"))
WARM_UP = 8.0
AFTER = 30.0  # publishing goes on this long after the broker takes writes again
DISK_MB = 192
# The longest the test's own publish may wait for the gateway's answer: the producer's write
# timeout (30 s) and the look at the cluster that follows a write it gave up on (5 s), with room.
PROBE_SECONDS = 60.0
# How long the broker may take to take writes again by itself once the file is gone, before
# the test restarts it.
SELF_RECOVERY_SECONDS = 20.0
# The codes the official publishers retry a Publish on (shared/pubsub-facts.md, retry table).
RETRIED_CODES = {
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
}
# The same, as the Python client's exception classes (what the load's history names), and what
# follows them: a key's later publishes fail while the key is paused after a failure, and a
# publish whose retries ran out past the client's deadline.
RETRIED_ERRORS = {
    "Aborted",
    "Cancelled",
    "DeadlineExceeded",
    "InternalServerError",
    "ResourceExhausted",
    "ServiceUnavailable",
    "Unknown",
    "RetryError",
    "PublishToPausedOrderingKeyException",
}
# What the broker's log says about the disk (printed, so that a run shows what Kafka did).
BROKER_DISK_LINES = re.compile(
    r"No space left|IOException|Error while appending|offline|Offline|Shutdown broker|[Hh]alt"
)


@contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)  # busy: detach it anyway


def fill(path: Path) -> int:
    """Write zeros to `path` until the file system has no space left; the bytes written."""
    written = 0
    with path.open("ab", buffering=0) as out:  # appends: a second fill keeps the first
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096, b"\0"):
            while True:
                try:
                    n = out.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n or 0
    return written


@dataclass
class Probe:
    """One of the test's own publishes: when it was sent, how long it took, and how it ended."""

    sent: float
    took: float
    code: grpc.StatusCode | None  # None: confirmed
    detail: str = ""


_probes = itertools.count()


def probe(publisher: PublisherGapic, topic: str, what: bytes, timeout: float) -> Probe:
    """One Publish RPC, not retried. The message has the attributes the load's subscribers read,
    under a key of its own: the history counts it delivered, never confirmed."""
    sent = time.monotonic()
    attributes = {"key": "probe", "seq": str(next(_probes))}
    try:
        publisher.publish(
            topic=topic,
            messages=[PubsubMessage(data=what, attributes=attributes)],
            retry=None,
            timeout=timeout,
        )
    except exceptions.GoogleAPICallError as exc:
        return Probe(sent, time.monotonic() - sent, exc.grpc_status_code, str(exc.message)[:300])
    return Probe(sent, time.monotonic() - sent, None)


def broker_says(log: Path, since: int) -> list[str]:
    """The broker's log records since byte `since` that speak of the disk (stack traces left out)."""
    text = log.read_bytes()[since:].decode(errors="replace")
    return [
        line[:300] for line in text.splitlines() if line.startswith("[") and BROKER_DISK_LINES.search(line)
    ]


def gateway_death(gw: FaultGateway) -> str | None:
    """None while the gateway process runs; else how it ended, with the end of its log."""
    assert gw.proc is not None
    code = gw.proc.poll()
    if code is None:
        return None
    how = signal.Signals(-code).name if code < 0 else f"exit status {code}"
    lines = gw.log_paths[-1].read_text(errors="replace").splitlines()
    said = [line for line in lines if line and not line.startswith((" ", "Thread ", "Extension modules"))]
    return f"the gateway process ended ({how}); the end of its log:\n" + "\n".join(said[-12:])


@pytest.mark.timeout(720 + FULL_SECONDS)
@pytest.mark.usefixtures("_cuts_possible")
def test_a_full_disk_refuses_publishes_retriably_and_loses_nothing(log_dir: Path, tmp_path: Path) -> None:
    (port,) = jvm.free_ports(1)
    broker_log = log_dir / f"disk-full-broker-{port}.log"
    work = tmp_path / "work"
    work.mkdir()
    with tmpfs(tmp_path / "disk", DISK_MB) as disk:
        kafka = LocalKafka(
            data_dir=disk / "kafka", port=port, heap_mb=384, profile=STOCK, log_file=broker_log
        )
        kafka.start(timeout=180)
        rig = Rig(
            kafka.bootstrap, log_dir, work, "test_a_full_disk_refuses_publishes_retriably_and_loses_nothing"
        )
        try:
            _scenario(kafka, rig, disk, broker_log)
        finally:
            rig.close()
            kafka.stop()


def _scenario(kafka: LocalKafka, rig: Rig, disk: Path, broker_log: Path) -> None:
    gw = rig.gateway()
    topic, eo, ordered, plain = topic_and_subscriptions(gw.address, [gw.address])
    subs = [eo, ordered, plain]
    publisher = PublisherGapic(transport=PublisherGrpcTransport(channel=grpc.insecure_channel(gw.address)))
    assert probe(publisher, topic, b"before", 30).code is None

    # Publishing lasts past the longest the fault and a restart may take; what matters is that
    # it goes on for AFTER seconds once writes are taken again (checked below).
    publish_seconds = WARM_UP + FULL_SECONDS + PROBE_SECONDS + SELF_RECOVERY_SECONDS + 60 + AFTER
    load = rig.load(topic, subs, publish_via=gw.address, publish_seconds=publish_seconds)
    time.sleep(WARM_UP)

    log_mark = broker_log.stat().st_size
    filler = disk / "filler"
    rig.mark("disk full", "start")
    filled_at = time.monotonic()
    taken = fill(filler)
    print(f"\nfilled the {DISK_MB} MiB tmpfs with {taken / 2**20:.1f} MiB", flush=True)
    # The test's own publishes while the disk is full: each waits for the gateway's answer.
    probes: list[Probe] = []
    stop_probing = threading.Event()

    def probing() -> None:
        n = 0
        while not stop_probing.is_set():
            probes.append(probe(publisher, topic, f"full-{n}".encode(), PROBE_SECONDS + 30))
            n += 1
            if probes[-1].code is not None:  # one refusal seen; a pause before the next
                stop_probing.wait(2.0)

    prober = threading.Thread(target=probing, daemon=True)
    prober.start()
    hold_until = filled_at + FULL_SECONDS
    while time.monotonic() < hold_until or (
        not any(p.code is not None for p in probes) and time.monotonic() < filled_at + PROBE_SECONDS + 30
    ):
        time.sleep(0.5)
        fill(filler)  # whatever the broker freed (a segment deleted) is taken again
    stop_probing.set()
    filler.unlink()
    freed_at = time.monotonic()
    rig.mark("disk full", "end")
    prober.join(PROBE_SECONDS + 40)
    during = list(probes)
    print("broker log while full:", *broker_says(broker_log, log_mark)[:40], sep="\n  ", flush=True)

    # Does the broker take writes again by itself?
    restarted, restart_took = False, 0.0
    recovered: Probe | None = None
    deadline = freed_at + SELF_RECOVERY_SECONDS
    while kafka.running and time.monotonic() < deadline:
        attempt = probe(publisher, topic, b"after", max(1.0, min(10.0, deadline - time.monotonic())))
        if attempt.code is None:
            recovered = attempt
            break
        time.sleep(0.5)
    alive = kafka.running
    if recovered is None:
        # The operator's restart: stop (SIGTERM, as a service manager does) and start again on
        # the same port and data.
        restarted = True
        rig.mark("broker restart", "start")
        restart_at = time.monotonic()
        kafka.stop()
        kafka.start(timeout=240)
        rig.mark("broker restart", "end")
        restart_took = time.monotonic() - restart_at
        print(f"broker restarted (it was {'running' if alive else 'gone'}), in {restart_took:.1f} s")
        deadline = time.monotonic() + 120
        while recovered is None and gateway_death(gw) is None and time.monotonic() < deadline:
            attempt = probe(publisher, topic, b"after-restart", 30)
            if attempt.code is None:
                recovered = attempt
            else:
                time.sleep(0.5)
    (rig.work / "probes.txt").write_text("\n".join(map(str, during)))
    refusals = sorted({p.code.name for p in during if p.code is not None})
    writes_back = None if recovered is None else recovered.sent + recovered.took - freed_at
    print(
        f"FIGURE disk full: the broker {'kept running' if alive else 'stopped itself'}"
        f"{f', restarted in {restart_took:.1f} s' if restarted else ''}; writes taken again "
        f"{'never' if writes_back is None else f'{writes_back:.1f} s'} after the space came back; "
        f"while full the gateway answered {refusals or 'nothing but OK'}",
        flush=True,
    )
    rig.result(
        broker_kept_running=alive,
        broker_restarted=restarted,
        writes_back_s=None if writes_back is None else round(writes_back, 1),
        refused_with=refusals,
        gateway_died=(gateway_death(gw) or "").split(";", 1)[0] or None,
    )
    # Refused, and refused retriably: the test's own publishes while the disk was full.
    assert any(p.code is not None for p in during), (
        f"no publish was refused while the disk was full: {during}"
    )
    not_retried = [p for p in during if p.code is not None and p.code not in RETRIED_CODES]
    assert not not_retried, f"publishes refused with codes the clients do not retry: {not_retried}"
    # A product defect, not the test's: the gateway must outlive its broker's restart.
    died = gateway_death(gw)
    assert died is None, f"the gateway did not survive the broker's recovery from a full disk: {died}"
    assert recovered is not None, "publishing did not work again after the space came back"

    load.wait(publish_seconds + 240)
    died = gateway_death(gw)
    assert died is None, f"the gateway died after the broker's recovery from a full disk: {died}"
    verdict = rig.verdict(subs, ordered=[ordered.name])
    events = rig.events()
    confirmed_after = {
        f"{e['key']}/{e['seq']}" for e in events if e["ev"] == "publish" and e.get("ok") and e["t"] > freed_at
    }
    first_delivery = {
        s.name: min(
            (
                e["t"]
                for e in events
                if e["ev"] == "deliver" and e["sub"] == s.name and f"{e['key']}/{e['seq']}" in confirmed_after
            ),
            default=None,
        )
        for s in subs
    }
    delivered_back = max((t for t in first_delivery.values() if t is not None), default=None)
    print(
        f"FIGURE disk full: publishes delivered on every subscription "
        f"{'never' if delivered_back is None else f'{delivered_back - freed_at:.1f} s'} after the space "
        f"came back; the clients' failed publishes: {verdict.failed_publishes or 'none'}",
        flush=True,
    )

    rig.result(delivered_back_s=None if delivered_back is None else round(delivered_back - freed_at, 1))
    assert set(verdict.failed_publishes) <= RETRIED_ERRORS, verdict.failed_publishes
    # Nothing confirmed lost, nothing after a confirmed ack, no key skipping ahead.
    assert verdict.ok, verdict.summary()
    # Publishing and delivery work again: confirmed publishes after the space came back, on
    # every subscription.
    assert len(confirmed_after) > 0.5 * 50 * AFTER, (len(confirmed_after), verdict.summary())
    assert all(t is not None for t in first_delivery.values()), first_delivery
