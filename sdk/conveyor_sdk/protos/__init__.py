"""The dispatcher's gRPC API: ``dispatch.proto`` and the Python code grpcio-tools generates from it.

The generated ``dispatch_pb2.py``, ``dispatch_pb2.pyi`` and ``dispatch_pb2_grpc.py`` are committed,
so installing Conveyor needs no protoc; ``python -m conveyor_sdk.protos.generate`` rewrites
them after an edit of the proto, and a unit test fails while they are out of date.
"""
