"""Renderers of the short summaries: README's performance table and sizing paragraph, and the log
of every `python -m benchmarks` run kept in benchmarks/results (benchmarks/results/HISTORY.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.figure_data import Source, bench_runs, load, ms, rate, span, table, times, us

LATEST = "latest.json"
RUN_AHEAD = "goclient-final/97846fd-run-ahead-3.json"
# The goclient scenario on messages as applications publish them (2 attributes, through the Go
# client's Publish), beside its rows of 0 and 5 attributes and of raw-filled records.
MESSAGES = "goclient-messages/25f3ca0-1.json"
PUSH = "push.json"
SPARK = "spark-cluster.json"


def _go(src: Source, case: str) -> tuple[float, float, float]:
    """(median rate, median gateway CPU per message, ratio to raw in the same round)."""
    row = src.row("goclient", case)
    return row["extra"]["median_msgs_per_s"], row["extra"]["median_gw_cpu_us_per_msg"], row["ratio"]


def _rss_peak(src: Source) -> float:
    big = src.row("backlog", "Pull+Ack 10,000 of 1,000,000")
    return max(float(big["extra"]["rss_after_mb"]), float(big["gw_rss_mb"]))


def readme_performance() -> str:
    latest, ahead, push, spark = load(LATEST), load(RUN_AHEAD), load(PUSH), load(SPARK)
    messages = load(MESSAGES)
    m_pub, m_pub_us, m_pub_x = _go(messages, "Go Publish, default batching")
    m_raised, m_raised_us, m_raised_x = _go(messages, "Go Receive, NumGoroutines=4")
    m_first = messages.row("goclient", "Go Receive, first message")["extra"]["median_first_message_ms"]
    m_raw = messages.row("goclient", "raw producer, 1 process")["extra"]["median_msgs_per_s"]
    pub, pub_us, pub_x = _go(latest, "Go Publish")
    raised, raised_us, raised_x = _go(latest, "Go Receive, NumGoroutines=4")
    default, default_us, default_x = _go(latest, "Go Receive, default settings")
    ahead_rate = ahead.row("goclient", "Go Receive, default settings")["extra"]["median_msgs_per_s"]
    go_lat = latest.row("goclient", "Go Publish -> Receive")["extra"]
    raw_lat = latest.row("goclient", "raw producer -> consumer")["extra"]
    b100, b1000 = latest.row("publish", "Publish batch=100,"), latest.row("publish", "Publish batch=1000,")
    raw_producer = latest.row("publish", "raw producer")
    pull, stream = (
        latest.row("deliver", "Pull max 1000 + Acknowledge, 4"),
        latest.row("deliver", "StreamingPull"),
    )
    stub_lat = latest.row("latency", "Publish -> StreamingPull @ 2000/s")["extra"]
    raw_2000 = latest.row("latency", "raw producer -> consumer @ 2000/s")["extra"]
    two = latest.row("scaleout", "Pull+Ack via 2 gateway")
    schema = latest.row("publish", "Publish batch=100 of")
    pushed = next(r for r in push.data["rows"] if r["case"] == "acks at once")
    cluster = spark.data["rate_per_s"]
    delivered_us = span([pull["extra"]["gw_cpu_us_per_msg"], stream["extra"]["gw_cpu_us_per_msg"]], us)
    export = rate(spark.data["export"]["rate_per_s"])
    rows = [
        [
            "official Go client, messages with 2 attributes: Publish, default batching",
            f"{rate(m_pub)} msg/s, {us(m_pub_us)}",
            f"{times(m_pub_x)} the raw producer (at {rate(m_raw)} that run)",
            "messages",
        ],
        [
            "official Go client, messages with 2 attributes it published: Receive, "
            "NumGoroutines=4, MaxOutstandingMessages=5000",
            f"{rate(m_raised)} msg/s, {us(m_raised_us)}",
            f"{times(m_raised_x)} the raw consumer",
            "messages",
        ],
        [
            "official Go client: first message of a subscription not yet served (its runner starts)",
            ms(m_first),
            "",
            "messages",
        ],
        [
            "official Go client: Publish, default batching, no attributes",
            f"{rate(pub)} msg/s, {us(pub_us)}",
            f"{times(pub_x)} the raw producer",
            "latest",
        ],
        [
            "official Go client: Receive, NumGoroutines=4, MaxOutstandingMessages=5000, of records "
            "raw producers wrote (no attributes: a lower bound)",
            f"{rate(raised)} msg/s, {us(raised_us)}",
            f"{times(raised_x)} the raw consumer",
            "latest",
        ],
        [
            "official Go client: Receive, default settings (1,000 outstanding), raw-written records",
            f"{rate(default)} msg/s, {us(default_us)}; {rate(ahead_rate)} msg/s with `--stream-run-ahead 3`",
            f"{times(default_x)} the raw consumer",
            "latest, run-ahead",
        ],
        [
            "p99 publish-to-receive, Go client at 1,000 msg/s",
            f"{ms(go_lat['median_p99_ms'])} (p50 {ms(go_lat['median_p50_ms'])})",
            f"raw Kafka {ms(raw_lat['median_p99_ms'])}",
            "latest",
        ],
        [
            "raw-stub Publish, batches of 100 / 1000",
            f"{rate(b100['msgs_per_s'])} / {rate(b1000['msgs_per_s'])} msg/s",
            f"{times(b100['ratio'])} / {times(b1000['ratio'])} a raw producer at "
            f"{rate(raw_producer['msgs_per_s'])}",
            "latest",
        ],
        [
            "raw-stub Pull (max 1000) + Acknowledge, 4 processes / StreamingPull, 4 streams",
            f"{rate(pull['msgs_per_s'])} / {rate(stream['msgs_per_s'])} msg/s, {delivered_us}",
            f"{times(pull['ratio'])} / {times(stream['ratio'])} the raw consumer",
            "latest",
        ],
        [
            "p99 publish-to-receive, one raw-stub StreamingPull stream at 2,000 msg/s",
            ms(stub_lat["p99_ms"]),
            f"raw Kafka {ms(raw_2000['p99_ms'])}",
            "latest",
        ],
        [
            "two gateway processes, Pull + Acknowledge, 4 client processes",
            f"{rate(two['msgs_per_s'])} msg/s",
            f"{times(two['extra']['speedup_vs_one_gateway'])} one process",
            "latest",
        ],
        [
            "Publish, batches of 100, to a topic with an Avro schema",
            f"{rate(schema['msgs_per_s'])} msg/s",
            f"{times(schema['extra']['vs_plain_same_run'])} the plain topic, same run",
            "latest",
        ],
        [
            "push to a local endpoint that acks at once",
            f"{rate(pushed['msgs_per_s'])} msg/s, {pushed['gateway_cpu_us_per_msg']:.0f} us a push",
            f"{times(pushed['x_bare'])} the gateway's push client alone",
            "push",
        ],
        ["gateway memory with 10^6 unacked messages", f"{_rss_peak(latest):.0f} MB peak RSS", "", "latest"],
        [
            "Spark `read_backlog` of 10^7 messages, two 1-core executors",
            f"{rate(cluster['backlog'])} rows/s; the export job {export} rows/s",
            f"a plain Spark Kafka read {rate(cluster['plain'])} rows/s",
            "spark",
        ],
    ]
    head = ["one gateway process, 1 KiB messages", "measured (gateway CPU per message)", "against", "source"]
    machine = latest.data["machine"]
    sources = (
        f"Sources: messages, `python -m benchmarks --scenarios goclient`, {messages.cite()}; latest, "
        f"`python -m benchmarks`, {latest.cite()}, each Go row the median of three rounds; the two "
        "runs are days apart and this shared machine's speed moves between them (compare each "
        f"against raw Kafka in its own run); run-ahead, {ahead.cite()}; "
        f"push, `python -m benchmarks.push_bench`, {push.cite()}; "
        f"spark, `make bench-spark-cluster`, {spark.cite()}. One machine of {machine['cores']} shared "
        f"vCPUs, the broker on it too, CPython {machine['python']}. Method, every row and what bounds "
        "each figure: [docs/benchmarks.md](docs/benchmarks.md)."
    )
    return table(head, rows) + "\n\n" + sources


def readme_sizing() -> str:
    latest, push = load(LATEST), load(PUSH)
    b1, b100, b1000 = (latest.row("publish", f"Publish batch={n},") for n in (1, 100, 1000))
    pull, stream = (
        latest.row("deliver", "Pull max 1000 + Acknowledge, 4"),
        latest.row("deliver", "StreamingPull"),
    )
    go_pub, go_pub_us, _ = _go(latest, "Go Publish")
    raised, raised_us, _ = _go(latest, "Go Receive, NumGoroutines=4")
    _, default_us, _ = _go(latest, "Go Receive, default settings")
    two = latest.row("scaleout", "Pull+Ack via 2 gateway")
    pushed = next(r for r in push.data["rows"] if r["case"] == "acks at once")
    worst = max(raised_us, default_us)
    delivered_cost = span([pull["extra"]["gw_cpu_us_per_msg"], stream["extra"]["gw_cpu_us_per_msg"]], us)
    cpu = latest.data["machine"]["cores"]

    def cost(row: dict[str, Any]) -> str:
        return us(row["extra"]["gw_cpu_us_per_msg"])

    return (
        f"**Sizing**, from the benchmark figures of {latest.cite()} and, for push, {push.cite()}, on "
        f"{cpu} shared vCPUs with the broker on the same machine and 1 KiB messages: one gateway "
        "process stops at about one core (its Python event loop). On it, it carried "
        f"{rate(b1000['msgs_per_s'])} msg/s of Publish in batches of 1000 ({cost(b1000)} of gateway "
        f"CPU per message) or {rate(b100['msgs_per_s'])} msg/s in batches of 100 ({cost(b100)}), "
        f"and {span([pull['msgs_per_s'], stream['msgs_per_s']])} "
        f"msg/s delivered with acks through Pull or StreamingPull ({delivered_cost}). The "
        f"official Go client costs more per message: {rate(go_pub)} msg/s published at {us(go_pub_us)}, "
        f"{rate(raised)} msg/s received at {us(raised_us)} ({us(default_us)} with its default settings). "
        f"At {span([raised_us, default_us], us)} a message, a core of gateway CPU comes to "
        f"{span([1e6 / worst, 1e6 / min(raised_us, default_us)])} msg/s received through it: plan well "
        f"below that. A Publish of one message cost {cost(b1)}: keep the clients' batching. A push "
        f"costs {pushed['gateway_cpu_us_per_msg']:.0f} us. A second gateway process added "
        f"{(two['extra']['speedup_vs_one_gateway'] - 1) * 100:.0f}% on these {cpu} shared cores: a process "
        f"(or `--workers` worker) needs a core of its own. Memory stays flat with the backlog: "
        f"{_rss_peak(latest):.0f} MB peak per process with 10^6 unacked messages; give each 512 MB."
    )


def _summary(src: Source) -> str:
    """A run's main figures, whatever of them it measured."""
    probes: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
        ("publish", "Publish batch=1000,", lambda r: f"Publish x1000 {rate(r['msgs_per_s'])} ({_x(r)})"),
        ("deliver", "Pull max 1000 + Acknowledge, 4", lambda r: f"Pull {rate(r['msgs_per_s'])}"),
        ("deliver", "StreamingPull", lambda r: f"stream {rate(r['msgs_per_s'])}"),
        ("latency", "Publish -> StreamingPull @ 2000/s", lambda r: f"p99 at 2,000/s {_p99(r)}"),
        ("backlog", "Pull+Ack 10,000 of 1,000,000", lambda r: f"RSS {r['gw_rss_mb']:.0f} MB"),
        ("goclient", "Go Publish,", lambda r: f"Go publish {rate(r['extra']['median_msgs_per_s'])}"),
        ("goclient", "Go Receive, NumGoroutines=4", lambda r: _go_receive("raised", r)),
        ("goclient", "Go Receive, default settings", lambda r: _go_receive("defaults", r)),
        ("goclient", "Go Publish -> Receive", lambda r: f"Go p99 {ms(r['extra']['median_p99_ms'])}"),
    ]
    found = []
    for scenario, case, show in probes:
        try:
            found.append(show(src.row(scenario, case)))
        except LookupError:
            continue
    return "; ".join(found)


def _x(row: dict[str, Any]) -> str:
    return times(row["ratio"])


def _p99(row: dict[str, Any]) -> str:
    return ms(row["extra"]["p99_ms"])


def _go_receive(label: str, row: dict[str, Any]) -> str:
    extra = row["extra"]
    return f"{label} {rate(extra['median_msgs_per_s'])} at {us(extra['median_gw_cpu_us_per_msg'])}"


def log() -> str:
    """One line per `python -m benchmarks` results file kept, oldest first."""
    rows = []
    for src in bench_runs("."):
        flags = src.data.get("gateway_args") or ""
        rows.append(
            [src.when, f"`{src.name}`", f"`{src.commit}`", f"`{flags}`" if flags else "", _summary(src)]
        )
    head = [
        "run",
        "file (benchmarks/results/)",
        "gateway at",
        "gateway flags",
        "main figures (msg/s; CPU per message)",
    ]
    return table(head, rows)
