"""`make gen`: compile proto/a2a.proto (1.0), proto/a2a_v0_3.proto (v0.3) and our own
proto/jsonrpc_envelope.proto (the gRPC JSON-RPC envelope transport) into gen/.

Two steps instead of one plain protoc call, so that the embedded descriptor is
byte-identical to the one a2a-sdk ships and both can live in one process (the
protobuf runtime refuses a second `a2a.proto` that differs by a single byte; the
same holds for the v0.3 contract, `a2a_v0_3.proto`, a2a-sdk's compat copy):

1. protoc writes a descriptor set; that form carries each field's `json_name`.
2. The set is fed back to protoc for code generation, with the dependency's
   `google.api.field_behavior` extension marked `packed = false`, as in current
   googleapis (the installed copy may lack that option, which changes the bytes
   of every REQUIRED field's options).

Run: python proto/codegen.py [OUT_DIR]   (default: gen)

`python proto/codegen.py image PATH` instead writes the same descriptor set,
plus source info (comments, locations), to PATH as a binary image for
`buf lint` / `buf breaking` (see buf.yaml and `make lint`): buf cannot resolve
the google/api imports itself, since they come from the installed
googleapis-common-protos rather than from a registry.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import grpc_tools
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
PROTO_FILE = "a2a.proto"
V03_PROTO_FILE = "a2a_v0_3.proto"
ENVELOPE_PROTO_FILE = "jsonrpc_envelope.proto"  # a service of our own package
PROTO_FILES = (PROTO_FILE, V03_PROTO_FILE, ENVELOPE_PROTO_FILE)


def _include_dirs() -> list[str]:
    import google.api.http_pb2 as http_pb2  # locates the installed googleapis protos

    googleapis = pathlib.Path(http_pb2.__file__).parent.parent.parent
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    return [str(PROTO_DIR), str(googleapis), str(well_known)]


def _run_protoc(args: list[str]) -> None:
    if protoc.main(["protoc", *args]) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")


def descriptor_set(include_source_info: bool = False) -> descriptor_pb2.FileDescriptorSet:
    """The compiled contract with its imports, normalised as described above.

    `include_source_info` adds comments and locations (for buf); code
    generation never uses it, so comments cannot leak into gen/.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        includes = [f"-I{d}" for d in _include_dirs()]
        extra = ["--include_source_info"] if include_source_info else []
        _run_protoc(
            [
                *includes,
                "--include_imports",
                *extra,
                f"--descriptor_set_out={out}",
                *PROTO_FILES,
            ]
        )
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    for file in fds.file:
        if file.name == "google/api/field_behavior.proto":
            for ext in file.extension:
                if ext.name == "field_behavior":
                    ext.options.packed = False
    return fds


def generate(out_dir: pathlib.Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        set_path = pathlib.Path(tmp) / "set.pb"
        set_path.write_bytes(descriptor_set().SerializeToString())
        _run_protoc(
            [
                f"--descriptor_set_in={set_path}",
                f"--python_out={out_dir}",
                f"--pyi_out={out_dir}",
                f"--grpc_python_out={out_dir}",
                *PROTO_FILES,
            ]
        )
    for proto in PROTO_FILES:
        module = proto.removesuffix(".proto") + "_pb2"
        grpc_module = out_dir / f"{module}_grpc.py"
        text = grpc_module.read_text()
        grpc_module.write_text(text.replace(f"import {module} as", f"from gen import {module} as"))
    (out_dir / "__init__.py").write_text(
        '"""Generated from proto/a2a.proto, proto/a2a_v0_3.proto and proto/jsonrpc_envelope.proto '
        'by `make gen`. Do not edit."""\n'
    )


def write_image(path: pathlib.Path) -> None:
    """Write the contract with imports and source info as a buf-readable image."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(descriptor_set(include_source_info=True).SerializeToString())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "image":
        write_image(pathlib.Path(sys.argv[2]))
    elif len(sys.argv) <= 2:
        generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "gen")
    else:
        raise SystemExit("usage: python proto/codegen.py [OUT_DIR] | image PATH")
