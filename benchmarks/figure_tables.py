"""Renderers of docs/benchmarks.md's figures, and of the pages that quote one benchmark each
(push, schemas, Spark, broker failover): each reads named results files and returns Markdown
that says which file, of when and of which commit, every figure is from."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from benchmarks import render
from benchmarks.figure_data import Source, bench_runs, load, median, ms, rate, share, table, times, us

LATEST = "latest.json"
GO_PUBLISH = "Go Publish, default batching"
GO_RAISED = "Go Receive, NumGoroutines=4"
GO_DEFAULT = "Go Receive, default settings"
GO_LATENCY = "Go Publish -> Receive"
GO_STREAM = "raw-stub StreamingPull"


def machine() -> str:
    src = load(LATEST)
    m = src.data["machine"]
    cache = src.data.get("page_cache_emptied_before_runs", {})
    return (
        f"The machine of the current figures, as {src.cite()} records it: {m['cores']} vCPUs "
        f"({m['cpu_model']}), {m['memory_gib']} GiB, Linux {m['kernel']}, shared with other work; "
        f"CPython {m['python']} (`{m['python_executable']}`); Kafka {m['kafka']}, embedded, on the same "
        f"machine; confluent-kafka {m['confluent_kafka']} (librdkafka {m['librdkafka']}), grpcio "
        f"{m['grpcio']}, protobuf {m['protobuf']}. Other processes took "
        f"{src.data['background_cpu_pct_before_run']}% of the machine's CPU just before the run; the "
        f"page cache was emptied before {cache.get('done', 0)} publish runs ({cache.get('refused', 0)} "
        f"refused). The run took {src.data['seconds']:.0f} s."
    )


def _target_value(value: Any) -> str:
    if value is None:
        return "not measured"
    if isinstance(value, dict) and "msgs_per_s" in value:
        dups = ", ".join(str(d) for d in value["duplicates"])
        return f"{rate(value['msgs_per_s'])} msg/s, duplicates {dups}"
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            shown = f"{item[0]} of {item[1]}" if isinstance(item, list) else f"{item}"
            parts.append(f"{key}: {shown}")
        return "; ".join(parts)
    if isinstance(value, float) and value >= 1000:
        return rate(value)
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def targets() -> str:
    src = load(LATEST)
    rows = [
        [t["target"], _target_value(t["value"]), "met" if t["met"] else "**not met**"]
        for t in src.data["targets"]
    ]
    return f"The verdict `python -m benchmarks` printed, {src.cite()}:\n\n" + table(
        ["target", "measured", "verdict"], rows
    )


def scenario(name: str) -> Callable[[], str]:
    """One scenario of the last full run, as benchmarks/render.py tabulates a results file."""

    def rendered() -> str:
        src = load(LATEST)
        return f"The `{name}` scenario, {src.cite()}:\n\n" + render.scenario_table(src.scenario(name))

    return rendered


def _go_cell(src: Source, case: str) -> str:
    try:
        row = src.row("goclient", case)
    except LookupError:
        return "-"
    extra = row["extra"]
    if "median_p99_ms" in extra:
        return ms(extra["median_p99_ms"])
    cpu = extra.get("median_gw_cpu_us_per_msg")
    return rate(extra["median_msgs_per_s"]) + (f", {us(cpu)}" if cpu is not None else "")


def goclient(name: str) -> Callable[[], str]:
    """The goclient scenario's rows of one run, medians of its rounds."""
    return lambda: _goclient(name)


def _goclient(name: str) -> str:
    src = load(name)
    rows = []
    for row in src.scenario("goclient"):
        extra = row["extra"]
        if "median_p99_ms" in extra:
            figure = f"p50 {ms(extra['median_p50_ms'])}, p99 {ms(extra['median_p99_ms'])}"
            rounds = ", ".join(ms(v) for v in extra["rounds_p99_ms"])
        elif "median_first_message_ms" in extra:
            figure = f"first message after {ms(extra['median_first_message_ms'])}"
            rounds = ", ".join(ms(v) for v in extra["rounds_first_message_ms"])
        else:
            figure = f"{rate(extra['median_msgs_per_s'])} msg/s"
            rounds = ", ".join(rate(v) for v in extra["rounds_msgs_per_s"])
        if "rounds_duplicates" in extra:
            figure += f", {sum(extra['rounds_duplicates'])} duplicates"
        cpu = extra.get("median_gw_cpu_us_per_msg")
        rows.append(
            [
                row["case"],
                figure,
                "-" if row["ratio"] is None else times(row["ratio"]),
                "-" if cpu is None else us(cpu),
                rounds,
                "; ".join(row["limits"]),
            ]
        )
    head = ["case", "median round", "x raw, same round", "gateway CPU / msg", "every round", "limit"]
    return f"The `goclient` scenario, {src.cite()}:\n\n" + table(head, rows)


def _go_medians(runs: list[Source]) -> list[str]:
    cells = []
    for case in (GO_PUBLISH, GO_RAISED, GO_DEFAULT, GO_LATENCY, GO_STREAM):
        key = "median_p99_ms" if case == GO_LATENCY else "median_msgs_per_s"
        values = [s.row("goclient", case)["extra"][key] for s in runs]
        cells.append(ms(median(values)) if case == GO_LATENCY else rate(median(values)))
    return cells


def goclient_runs(under: str, with_latest: bool) -> Callable[[], str]:
    """Every goclient run in a folder of benchmarks/results (and the last full run's), one row each."""

    def rendered() -> str:
        runs = [s for s in bench_runs(under) if s.scenario("goclient")]
        if with_latest:
            runs = sorted([*runs, load(LATEST)], key=lambda s: s.data["machine"]["date"])
        rows = []
        for src in runs:
            args = f", `{src.data['gateway_args']}`" if src.data.get("gateway_args") else ""
            cells = [_go_cell(src, c) for c in (GO_PUBLISH, GO_RAISED, GO_DEFAULT, GO_LATENCY, GO_STREAM)]
            rows.append([f"`{src.name}` ({src.when}, `{src.commit}`{args})", *cells])
        for flags in sorted({s.data.get("gateway_args") or "" for s in runs}):
            group = [s for s in runs if (s.data.get("gateway_args") or "") == flags]
            if len(group) > 1:
                label = f"with `{flags}`" if flags else "without gateway flags"
                rows.append([f"median of the {len(group)} runs {label}", *_go_medians(group)])
        head = [
            "run (benchmarks/results/)",
            "Go Publish: msg/s, CPU",
            "Go Receive, raised",
            "Go Receive, defaults",
            "Go p99 at 1,000 msg/s",
            "raw-stub StreamingPull",
        ]
        intro = (
            f"Each `python -m benchmarks --scenarios goclient` run in `benchmarks/results/{under}/`"
            + (" and the goclient part of the last full run" if with_latest else "")
            + "; each cell is the run's median round (gateway CPU per message: the median of its rounds):"
        )
        return intro + "\n\n" + table(head, rows)

    return rendered


def push() -> str:
    src = load("push.json")
    rows = []
    for row in src.data["rows"]:
        case = row["case"]
        if "rounds_msgs_per_s" in row:
            case += " (rounds " + " / ".join(f"{v:,}" for v in row["rounds_msgs_per_s"]) + ")"
        cpu = row.get("gateway_cpu_us_per_msg")
        rows.append(
            [
                case,
                f"{row['msgs_per_s']:,}",
                "" if cpu is None else f"{cpu:.0f} us",
                f"{row.get('x_bare', 1):.2f}",
                f"{row['requests_per_message']:.3f}",
            ]
        )
    head = ["case", "msg/s", "gateway CPU per message", "x bare push client", "requests per message"]
    return (
        f"`{src.data['command'].strip()}`, {src.cite()}, on CPython {src.data['python']['version']}:\n\n"
        + table(head, rows, right=(1, 2, 3, 4))
    )


def schema_validation() -> str:
    src = load("schema-validation.json")
    rows = [
        [
            c["case"],
            f"{c['mean_message_bytes']:,}",
            us(c["validate_us_per_msg"]),
            rate(c["validate_msgs_per_s"]),
            f"`{c['reference']}`",
            rate(c["reference_msgs_per_s"]),
            times(c["validate_over_reference_time"]),
        ]
        for c in src.data["cases"]
    ]
    head = [
        "message",
        "bytes",
        "validation",
        "msg/s, one thread",
        "reference",
        "its msg/s",
        "time x reference",
    ]
    return f"`{src.data['command']}`, {src.cite()}:\n\n" + table(head, rows, right=(1, 2, 3, 5, 6))


_SPARK_READS = {
    "plain": "plain Spark Kafka source, all columns",
    "pubsub view": "+ Pub/Sub columns (message_id, attributes map, ordering_key, ...)",
    "backlog": "`read_backlog`, timed from the call (subscription, ack log, offsets, anti-join)",
}


def _spark_rows(data: dict[str, Any]) -> list[list[str]]:
    return [
        [
            what,
            f"{data['rows'][key]:,}",
            ", ".join(f"{s:.1f} s" for s in data["seconds"][key]),
            f"{data['best_seconds'][key]:.2f} s",
            rate(data["rate_per_s"][key]),
        ]
        for key, what in _SPARK_READS.items()
    ]


_SPARK_HEAD = ["read", "rows", "runs", "best", "rows/s"]


def spark_local() -> str:
    src = load("spark.json")
    return f"`{src.data['command']}`, {src.cite()}, `local[2]`:\n\n" + table(
        _SPARK_HEAD, _spark_rows(src.data), right=(1, 3, 4)
    )


def spark_local_costs() -> str:
    src = load("spark.json")
    d = src.data
    best, pull, log = d["best_seconds"], d["gateway_pull_ack"], d["ack_log"]
    return (
        f"From {src.cite()}: the ack-log filtering costs {share(d['filter_overhead_vs_view'])} over "
        f"the same read without it ({best['backlog']:.2f} s against {best['pubsub view']:.2f} s), "
        f"{d['backlog_planning_seconds']:.2f} s of it before the data read starts. Against the plain "
        f"read the backlog read costs {share(d['filter_overhead'])}, of which the Pub/Sub columns "
        f"alone are {share(best['pubsub view'] / best['plain'] - 1)}. Before the reads the gateway "
        f"delivered {pull['delivered']:,} messages and took {pull['acked']:,} acknowledgements in "
        f"{pull['seconds']:.1f} s; its lease/ack log then held {log['records']:,} records "
        f"({log['mb']} MB)."
    )


def spark_cluster() -> str:
    src = load("spark-cluster.json")
    d = src.data
    c, export = d["cluster"], d["export"]
    rows = _spark_rows(d)
    rows.append(
        [
            f"export job `--once`, {export['batches']} micro-batch, to Parquet + `ack()`",
            f"{export['rows']:,}",
            f"{export['seconds']:.1f} s",
            "",
            rate(export["rate_per_s"]),
        ]
    )
    return (
        f"`{d['command']}`, {src.cite()}: {c['executors']} executors of {c['executor_cores']} core and "
        f"{c['executor_memory']}, a {c['driver_memory']} driver:\n\n"
        + table(_SPARK_HEAD, rows, right=(1, 3, 4))
    )


def spark_cluster_setup() -> str:
    src = load("spark-cluster.json")
    d = src.data
    pull, spark_ack = d["gateway_pull_ack"], d["spark_ack"]
    acked = d["messages"] - d["rows"]["backlog"]
    return (
        f"In the run of {src.cite()}, the producer wrote {d['messages']:,} messages in "
        f"{d['produce_seconds']:.0f} s; through the gateway the client pulled {pull['delivered']:,} and "
        f"acknowledged {pull['acked']:,} of them in {pull['seconds']:.0f} s "
        f"({rate(pull['delivered'] / pull['seconds'])} msg/s); `spark.ack()` acknowledged "
        f"{spark_ack['acked']:,} offsets in {spark_ack['seconds']:.0f} s. Together {acked:,} "
        f"acknowledged, {d['rows']['backlog']:,} in the backlog."
    )


def spark_cluster_costs() -> str:
    src = load("spark-cluster.json")
    d = src.data
    r, log, export = d["rate_per_s"], d["ack_log"], d["export"]
    return (
        f"From {src.cite()}: `read_backlog` took {share(d['filter_overhead'])} in time against the "
        f"plain read ({rate(r['backlog'])} against {rate(r['plain'])} rows/s) and "
        f"{share(d['filter_overhead_vs_view'])} against the read with the Pub/Sub columns; its call "
        f"took {d['backlog_planning_seconds']:.1f} s before the data read started, with a log of "
        f"{log['records']:,} records ({log['mb']} MB). The export job wrote {export['rows']:,} rows, "
        f"{export['parquet_mb']:.0f} MB of Parquet, at {rate(export['rate_per_s'])} rows/s."
    )


def failover() -> str:
    rows = []
    cites = []
    for name in ("failover.json", "failover-detect-3s.json"):
        src = load(name)
        d = src.data
        cites.append(src.cite())
        session = int(d["cluster"].get("broker.session.timeout.ms", 9000)) / 1000
        for rnd in d["rounds"]:
            errors = sum(rnd["publish_errors"].values()) + sum(rnd["ack_failures"].values())
            ready = "never 503" if rnd["ready_again_s"] == 0 else f"{rnd['ready_again_s']:.1f} s"
            rows.append(
                [
                    f"{session:.0f} s"
                    + (" (default)" if "broker.session.timeout.ms" not in d["cluster"] else ""),
                    "leader of the most partitions" if rnd["killed"] == "leader" else "group coordinator",
                    str(d["lost_in_total"]),
                    str(rnd["redelivered_after_confirmed_ack"]),
                    str(errors),
                    f"{rnd['flowing_again_s']:.0f} s",
                    f"{rnd['longest_delivery_gap_s']:.1f} s",
                    f"{rnd['longest_publish_s']:.1f} s",
                    ready,
                ]
            )
    head = [
        "broker session",
        "killed",
        "acknowledged publishes lost",
        "redelivered after a confirmed ack",
        "client errors",
        "deliveries flowing again",
        "longest gap in deliveries",
        "longest publish",
        "`/readyz` 200 again",
    ]
    return f"From {' and '.join(cites)}:\n\n" + table(head, rows, right=(2, 3, 4, 5, 6, 7, 8))


def failover_fast_fence() -> str:
    """docs/kafka.md: how soon after the cluster's fence deliveries resume (make test-cluster)."""
    src = load("failover-fast-fence.json")
    (r,) = src.data["rounds"]
    return (
        f"`make test-cluster` (`test_delivery_resumes_within_a_second_of_the_fence`), from {src.cite()}: "
        f"with `broker.session.timeout.ms=3000` the controller fenced the killed leader "
        f"{r['fenced_s']:.2f} s after the kill (its log says when), and deliveries resumed "
        f"{r['resumed_after_fence_s']:.2f} s after the fence, {r['resumed_any_s']:.2f} s after the kill; "
        f"{src.data['lost_in_total']} acknowledged publishes lost, {r['redelivered_after_confirmed_ack']} "
        "redelivered after a confirmed ack."
    )


def workers() -> str:
    one, two = load("workers-1.json"), load("workers-2.json")
    rows = []
    for scenario_name in ("publish", "deliver"):
        for a in one.scenario(scenario_name):
            b = next((r for r in two.scenario(scenario_name) if r["case"] == a["case"]), None)
            if b is None or a["status"] != "ok" or b["status"] != "ok":
                continue
            each = b["extra"].get("gw_cpu_pct_each")
            cpu = (
                "-"
                if a["extra"].get("gw_cpu_us_per_msg") is None
                else f"{us(a['extra']['gw_cpu_us_per_msg'])} / {us(b['extra']['gw_cpu_us_per_msg'])}"
            )
            rows.append(
                [
                    a["case"],
                    f"{a['msgs_per_s']:,.0f}",
                    f"{b['msgs_per_s']:,.0f}",
                    " / ".join(f"{c}%" for c in each[1:]) if each else "",
                    cpu,
                    f"{a['other_cpu_pct']:.0f}% / {b['other_cpu_pct']:.0f}%",
                ]
            )
    head = [
        "case",
        "1 worker, msg/s",
        "2 workers, msg/s",
        "each worker's CPU (2 workers)",
        "gateway CPU / msg, 1 / 2",
        "others' CPU, % of a core, 1 / 2",
    ]
    return (
        f"`{one.data['command']}` with `{one.data['gateway_args']}`, {one.cite()}, then with "
        f"`{two.data['gateway_args']}`, {two.cite()}:\n\n" + table(head, rows, right=(1, 2))
    )


def one_port() -> str:
    src = load("one-port-ab.json")
    runs = src.data["runs"]
    rows = [
        [
            f"GetTopic round trip {key}, sequential",
            " / ".join(f"{r['get_topic_ms']['direct'][key]:.2f} ms" for r in runs),
            " / ".join(f"{r['get_topic_ms']['shared'][key]:.2f} ms" for r in runs),
            " / ".join(times(r["get_topic_shared_over_direct"][key]) for r in runs),
        ]
        for key in ("p50", "p99")
    ]
    paired = [
        ("Publish (100 x 1 KiB, 16 in flight), msg/s", "publish_msgs_per_s", rate),
        ("gateway CPU per published message", "publish_gw_cpu_us_per_msg", us),
        ("StreamingPull drain, msg/s", "streaming_pull_msgs_per_s", rate),
        ("gateway CPU per streamed message", "streaming_pull_gw_cpu_us_per_msg", us),
    ]
    for what, key, fmt in paired:
        rows.append(
            [
                what,
                " / ".join(fmt(r[key]["median_direct"]) for r in runs),
                " / ".join(fmt(r[key]["median_shared"]) for r in runs),
                " / ".join(times(r[key]["shared_over_direct_paired_median"]) for r in runs),
            ]
        )
    which = "; ".join(f"{r['date']}, gateway at `{r['commit']}`, {r['rounds']} rounds" for r in runs)
    return (
        f"`python -m benchmarks.port_ab`, {src.cite()}: two runs ({which}); each cell gives both, "
        "medians of the rounds, the ratio the median of the rounds' ratios:\n\n"
        + table(["figure", "direct", "shared", "shared / direct"], rows, right=(1, 2, 3))
    )


def idle() -> str:
    rows = []
    cites = []
    for name in ("idle/c30863f.json", "idle/quiet-sweep.json"):
        src = load(name)
        cites.append(src.cite())
        rows += [
            [
                f"`{name}`",
                str(r["subscriptions"]),
                f"{r['cpu_ms_per_s']:.1f} ms",
                f"{r['switches_per_s']:.0f}",
            ]
            for r in src.data["rows"]
        ]
    head = ["file", "idle subscriptions served", "gateway CPU a second", "context switches a second"]
    return f"`python -m benchmarks.idle`, from {' and '.join(cites)}:\n\n" + table(
        head, rows, right=(1, 2, 3)
    )


def containers() -> str:
    """docker/README.md: what the container tier (make test-containers) built, started and timed."""
    src = load("containers.json")
    f = src.data["figures"]

    def mb(key: str) -> str:
        return f"{f[key]:.0f} MB"

    def s(key: str) -> str:
        return f"{f[key]:.0f} s"

    rows = [
        ["the gateway's image", mb("gateway_image_mb"), s("gateway_image_build_seconds")],
        ["the export job's image", mb("spark_export_image_mb"), s("spark_export_image_build_seconds")],
        ["their base (local Debian python3)", mb("python_base_image_mb"), ""],
        ["the local Kafka image", mb("kafka_image_mb"), ""],
    ]
    return (
        f"`make test-containers`, {src.cite()}, {src.data['engine']}:\n\n"
        + table(["image", "size", "build, from the bases"], rows, right=(1, 2))
        + f"\n\nThe engine and the local bases took {s('engine_and_bases_seconds')} to make. The "
        f"gateway's container was healthy (`/readyz`) {s('gateway_container_healthy_seconds')} after "
        f"`docker run`; `docker compose up --build -d`, on the images just built, took "
        f"{s('compose_up_build_seconds')} to a healthy "
        f"gateway, `stop` and `start` {s('compose_stop_start_seconds')}, and the export job wrote its "
        f"first Parquet file {s('spark_export_first_file_seconds')} after its `up` (a JVM, Spark and a "
        "first micro-batch)."
    )


_AB_FIGURES = (
    ("publish_msgs_per_s", "Publish, msg/s (batches of 1,000, 4 in flight)", rate),
    ("publish_cpu_us_per_msg", "Publish, gateway CPU per message", us),
    ("receive_msgs_per_s", "Pull (max 1,000) + Acknowledge, msg/s", rate),
    ("receive_cpu_us_per_msg", "Pull + Acknowledge, gateway CPU per message", us),
)


def source_ab(name: str) -> Callable[[], str]:
    """A `python -m benchmarks.source_ab` run: two source trees, alternating rounds."""

    def rendered() -> str:
        src = load(f"source_ab/{name}.json")
        data = src.data
        base, new = data["trees"]["base"]["commit"], data["trees"]["new"]["commit"]
        medians, ratios = data["medians"], data["ratios_new_over_base"]
        rows = [
            [
                label,
                fmt(medians["base"][key]),
                fmt(medians["new"][key]),
                times(ratios[key]),
                ", ".join(fmt(r[key]) for r in data["rounds"]["new"]),
            ]
            for key, label, fmt in _AB_FIGURES
        ]
        head = ["figure (median of rounds)", f"`{base}`", f"`{new}`", "new / base", "rounds of the new"]
        intro = (
            f"`{data['command']}`: {data['messages']:,} messages of 1 KiB with {data['attributes']} "
            f"attributes a round, {len(data['rounds']['new'])} rounds a tree in alternating order "
            f"({data['machine']['date'][:16].replace('T', ' ')} UTC):"
        )
        return intro + "\n\n" + table(head, rows, right=(1, 2, 3))

    return rendered


def attributes() -> str:
    """`python -m benchmarks.attributes`: ns per message of each stage at 0/2/5 attributes."""
    src = load("attributes.json")
    per_message, per_attribute = src.data["ns_per_message"], src.data["ns_per_attribute"]
    rows = []
    for side in ("publish", "delivery"):
        for stage in per_message[side]["0"]:
            cells = [f"{per_message[side][n][stage]:,.0f}" for n in ("0", "2", "5")]
            rows.append([f"{side}: {stage}", *cells, f"{per_attribute[side][stage]:,.0f}"])
    head = ["stage", "0 attributes", "2", "5", "per attribute (0 to 5)"]
    return f"`{src.data['command'].strip()}`, {src.cite()}, ns per message:\n\n" + table(
        head, rows, right=(1, 2, 3, 4)
    )


_SOAK_METRICS = (  # the metrics the soak checks, as its verdict names them: label, scale, decimals, unit
    ("rss_mb", "gateway RSS", 1.0, 1, " MiB"),
    ("fds", "open file descriptors", 1.0, 0, ""),
    ("threads", "threads", 1.0, 0, ""),
    ("lease_log_segment_bytes", "lease logs retained (segments on disk)", 1 / 2**20, 1, " MiB"),
    ("lease_log_topics", "lease-log topics", 1.0, 0, ""),
    ("p99_ms", "p99 publish to first delivery", 1.0, 0, " ms"),
)


def soak() -> str:
    """`python -m benchmarks.soak`: each checked metric's thirds and slope, and what the hour lost."""
    src = load("soak.json")
    d = src.data
    rows = []
    for key, label, scale, decimals, unit in _SOAK_METRICS:
        v = d["verdict"][key]
        rows.append(
            [
                label,
                f"{v['first_third_median'] * scale:.{decimals}f}{unit}",
                f"{v['last_third_median'] * scale:.{decimals}f}{unit}",
                f"{v['slope_per_minute_second_half'] * scale:+.2f}{unit} a minute",
                "bounded" if v["ok"] else "**grows**",
            ]
        )
    head = ["sampled", "first third (median)", "last third (median)", "slope, second half", "verdict"]
    settings, history = d["settings"], d["history"]
    ends = d["verdict"]["lease_log_end_offsets"]["growth_per_minute"]
    sizes = [s["lease_log_segment_bytes"] for s in d["samples"]]
    floors = [b for a, b in itertools.pairwise(sizes) if b < a]  # the sample just after a compaction
    return (
        f"`python -m benchmarks.soak --minutes {settings['minutes']:g}`, {src.cite()}; "
        f"{len(d['samples'])} samples, the first {settings['warm_up_samples']} a warm-up:\n\n"
        + table(head, rows, right=(1, 2, 3))
        + f"\n\n{history['confirmed_publishes']:,} publishes confirmed, "
        f"{history['lost_confirmed_publishes']} of them never delivered; "
        f"{history['exactly_once']['deliveries_after_confirmed_ack']} deliveries on the exactly-once "
        f"subscription after a confirmed ack; {len(d['churn'])} subscriptions created, read and "
        f"deleted. The lease logs' end offsets grew by {ends:,.0f} records a minute; what they "
        "retained just after each compaction: " + ", ".join(f"{b / 2**20:.1f}" for b in floors) + " MiB."
    )
