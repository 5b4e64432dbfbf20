"""Conveyor's client SDK: publish events to the gateway (``conveyor_sdk.publisher.Publisher``) and
consume them through the dispatcher (``conveyor_sdk.subscriber.Subscriber``, and
``conveyor_sdk.subscriber_aio.AsyncSubscriber`` for asyncio). It installs alone (``pip install
conveyor-sdk``: httpx, orjson, grpcio and protobuf) on the hosts of the services that use the
platform; the platform itself (``conveyor``) depends on it."""
