"""The v0.3 wire contract: proto/a2a_v0_3.proto compiles to the descriptor a2a-sdk 1.3.0
ships as `a2a.compat.v0_3.a2a_v0_3_pb2`, byte for byte, so gen/ and the SDK's compat
module (the v0.3 client the interop tests use) can share one process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from google.protobuf import descriptor_pb2

from tests.interop.test_contract import ROOT, _env, _normalised, _text_diff, codegen

V03_FILE = "a2a_v0_3.proto"


def _sdk_v03_file_proto() -> descriptor_pb2.FileDescriptorProto:
    from a2a.compat.v0_3 import a2a_v0_3_pb2 as sdk

    proto = descriptor_pb2.FileDescriptorProto()
    sdk.DESCRIPTOR.CopyToProto(proto)
    return _normalised(proto)


def test_v03_descriptor_equals_a2a_sdk():
    compiled = _normalised(next(f for f in codegen.descriptor_set().file if f.name == V03_FILE))
    sdk = _sdk_v03_file_proto()
    assert compiled == sdk, (
        "proto/a2a_v0_3.proto no longer compiles to a2a-sdk 1.3.0's v0.3 descriptor "
        "(only comments may change):\n"
        + _text_diff(sdk, compiled, ("a2a-sdk", "proto/a2a_v0_3.proto"))
    )
    from a2a.compat.v0_3 import a2a_v0_3_pb2 as sdk_pb2

    from gen import a2a_v0_3_pb2 as gen_pb2

    assert gen_pb2.DESCRIPTOR.serialized_pb == sdk_pb2.DESCRIPTOR.serialized_pb


def test_v03_comments_stay_out_of_gen():
    with_info = codegen.descriptor_set(include_source_info=True)
    ours = next(f for f in with_info.file if f.name == V03_FILE)
    assert ours.source_code_info.location
    ours.ClearField("source_code_info")
    assert _normalised(ours) == _sdk_v03_file_proto()


_BOTH = textwrap.dedent(
    """
    import sys
    if sys.argv[1] == "gen-first":
        from gen import a2a_v0_3_pb2 as g
        from a2a.compat.v0_3 import a2a_v0_3_pb2 as s
    else:
        from a2a.compat.v0_3 import a2a_v0_3_pb2 as s
        from gen import a2a_v0_3_pb2 as g
    from gen import a2a_pb2, a2a_v0_3_pb2_grpc  # noqa: F401  (1.0 beside v0.3)
    wire = g.Message(message_id="m", content=[g.Part(text="hi")]).SerializeToString()
    assert s.Message.FromString(wire).content[0].text == "hi"
    print("ok")
    """
)


def test_gen_v03_and_sdk_compat_coexist():
    for order in ("gen-first", "sdk-first"):
        result = subprocess.run(
            [sys.executable, "-c", _BOTH, order],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0 and "ok" in result.stdout, result.stderr
