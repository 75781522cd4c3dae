"""The doc examples that need no broker, run as printed: the ACL commands of docs/kafka.md and
the query interface of docs/legacy-query.md, whose comments say what each line gives."""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys

from tests.doc_examples import ROOT, example


def test_the_acl_commands_are_printed_for_each_project() -> None:
    words = shlex.split(example("docs/kafka.md", "kafka-acls-print").replace("\\\n", " "))
    assert words[:3] == ["python", "-m", "gateway.kafka.acls"]
    done = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if line.startswith("kafka-acls.sh ")]
    # docs/kafka.md's table: three prefixed ACLs of the gateway's own, and one per project
    assert len(commands) == 3 + 2, done.stdout
    assert all(
        "--allow-principal User:pubsub-gateway" in c and "--command-config admin.properties" in c
        for c in commands
    )
    assert any("--topic my-app. " in c for c in commands) and any("--topic other. " in c for c in commands)


def test_the_query_interface_gives_what_its_comments_say() -> None:
    namespace: dict[str, object] = {}
    checked = 0
    for line in example("docs/legacy-query.md", "legacy-query-interface").splitlines():
        code, _, comment = line.partition("#")
        if not code.strip():
            continue
        tree = ast.parse(code.strip())
        if isinstance(tree.body[0], ast.Expr) and comment.strip():
            said = comment.strip().split(":")[0].strip()  # "True: the empty query" -> "True"
            got = eval(compile(ast.Expression(tree.body[0].value), "<doc>", "eval"), namespace)
            assert repr(got) == said, (code, got, said)
            checked += 1
        else:
            exec(compile(tree, "<doc>", "exec"), namespace)
    assert checked == 3
