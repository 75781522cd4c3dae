#!/bin/sh
# The spark-export image's entrypoint: the export job under spark-submit, with Spark's Kafka
# connector from the jars fetched when the image was built (no network needed at start).
# Arguments are the job's own (python -m spark.export_job --help).
set -eu
jars=$(find /opt/spark-ivy/jars -name '*.jar' | sort | paste -sd, -)
exec spark-submit --master "local[2]" --driver-memory 1g --jars "$jars" /opt/export_job.py "$@"
