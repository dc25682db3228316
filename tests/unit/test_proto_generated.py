"""The checked-in protobuf/gRPC modules are what `make proto` makes from proto/*.proto now (not stale)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ["bookie_pb2.py", "bookie_pb2.pyi", "bookie_pb2_grpc.py", "formats_pb2.py", "formats_pb2.pyi"]


def test_generated_protobuf_code_is_current(tmp_path: Path) -> None:
    from grpc_tools import protoc

    # as `make proto` does: the folder proto/ is generated as bkledger/proto (the import root)
    sources = [str(ROOT / "proto" / "bookie.proto"), str(ROOT / "proto" / "formats.proto")]
    args = ["protoc", f"-Ibkledger/proto={ROOT / 'proto'}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}", *sources]
    assert protoc.main(args) == 0
    made = tmp_path / "bkledger" / "proto"
    stale = [name for name in GENERATED if (made / name).read_text() != (ROOT / "proto" / name).read_text()]
    if stale:
        pytest.fail(f"proto/{', proto/'.join(stale)} differ from what proto/*.proto makes: run `make proto` "
                    "and commit the result")
