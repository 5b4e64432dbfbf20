"""Regenerate the Python code of ``dispatch.proto`` with grpcio-tools (a dev dependency).

Run ``python -m conveyor_sdk.protos.generate`` after editing the proto. The proto is compiled
from the SDK's folder (sdk/) so that the generated modules import each other as
``conveyor_sdk.protos.dispatch_pb2``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROTO = HERE / "dispatch.proto"
OUTPUTS = ("dispatch_pb2.py", "dispatch_pb2.pyi", "dispatch_pb2_grpc.py")


def generate(out_root: Path = ROOT) -> list[Path]:
    """Write the generated modules under ``out_root`` (the SDK's folder by default)."""
    from grpc_tools import protoc

    relative = PROTO.relative_to(ROOT)
    status = protoc.main(["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out_root}",
                          f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", str(relative)])
    if status != 0:
        raise SystemExit(f"protoc failed on {relative} (status {status})")
    return [out_root / relative.parent / name for name in OUTPUTS]


if __name__ == "__main__":
    for path in generate():
        sys.stdout.write(f"wrote {path}\n")
