"""Regenerate the committed protobuf/gRPC Python code from ``protos/``.

Usage: ``python -m gateway.protogen [OUT_DIR]`` (default: ``gateway/_pb``).
Needs grpcio-tools (a test/dev dependency); the runtime does not.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
DEFAULT_OUT = Path(__file__).resolve().parent / "_pb"
PROTO_FILES = (
    "google/pubsub/v1/schema.proto",
    "google/pubsub/v1/pubsub.proto",
    # The seed's early API (docs/legacy-api.md) and the two files it imports.
    "proto2/empty.proto",
    "tech/label/label.proto",
    "tech/pubsub/pubsub.proto",
)
PACKAGE_DIRS = ("google", "google/pubsub", "google/pubsub/v1", "proto2", "tech", "tech/label", "tech/pubsub")

_OWN_IMPORT = re.compile(r"^from (google\.pubsub\.v1|proto2|tech\.label|tech\.pubsub) import ", re.MULTILINE)
_RELOCATED = r"from gateway._pb.\1 import "
# Our descriptors go into a pool of their own (gateway/_pb/_pool.py), not protobuf's default
# pool, where the official client registers the same names.
_DEFAULT_POOL = "_descriptor_pool.Default().AddSerializedFile("
_OWN_POOL = "_pool.POOL.AddSerializedFile("
_BUILDER_IMPORT = "from google.protobuf.internal import builder as _builder\n"
_POOL_IMPORT = "from gateway._pb import _pool\n"
# Generated stubs use bare Mapping and the grpc module is untyped; keep
# `mypy --strict` quiet about code we do not write by hand.
_PYI_HEADER = '# mypy: disable-error-code="type-arg"\n'
_GRPC_HEADER = "# mypy: ignore-errors\n"


def _module_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{module} is not installed")
    return Path(spec.origin).parent


def include_dirs() -> list[Path]:
    """Proto search path: ours, protoc's well-known types, googleapis commons."""
    well_known = _module_dir("grpc_tools") / "_proto"
    common_protos = _module_dir("google.api.annotations_pb2").parent.parent
    return [PROTO_ROOT, well_known, common_protos]


def generate(out_dir: Path = DEFAULT_OUT) -> list[Path]:
    """Run protoc into ``out_dir`` and post-process; return the files written."""
    protoc = importlib.import_module("grpc_tools.protoc")
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc"]
    args += [f"--proto_path={d}" for d in include_dirs()]
    args += [f"--python_out={out_dir}", f"--pyi_out={out_dir}"]
    args += [f"--grpc_python_out={out_dir}"]
    args += list(PROTO_FILES)
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")

    written: list[Path] = []
    for pkg in PACKAGE_DIRS:
        init = out_dir / pkg / "__init__.py"
        init.write_text("")
        written.append(init)
    for proto in PROTO_FILES:
        stem = out_dir / proto.removesuffix(".proto")
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            path = stem.with_name(stem.name + suffix)
            text = _OWN_IMPORT.sub(_RELOCATED, path.read_text(encoding="utf-8"))
            if suffix == "_pb2.py":
                text = _own_pool(text, path)
            elif suffix == "_pb2.pyi":
                text = _PYI_HEADER + text
            elif suffix == "_pb2_grpc.py":
                text = _GRPC_HEADER + text
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def _own_pool(text: str, path: Path) -> str:
    if text.count(_DEFAULT_POOL) != 1 or text.count(_BUILDER_IMPORT) != 1:
        raise RuntimeError(f"{path}: protoc's output no longer has the expected pool lines")
    text = text.replace(_DEFAULT_POOL, _OWN_POOL)
    return text.replace(_BUILDER_IMPORT, _BUILDER_IMPORT + _POOL_IMPORT)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else DEFAULT_OUT
    for path in generate(out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
