"""The views' Redis side: deltas applied at most once per key and batch, and the job's own state.

Each view key is a hash of counters plus ``_batch``, the id of the last micro-batch that wrote it.
One Lua script call (atomic in Redis) applies a whole chunk of keys, each only if the batch is newer
than its ``_batch``, so a batch replayed after a crash skips the keys its first attempt wrote and
writes the others. The job's state hash holds the last committed batch, the newest event time seen
(before and after that batch: the watermark of a replayed batch must be the one its first attempt
used) and exact counts of everything applied and rejected, committed by one more script call with
the same rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from conveyor.config import Platform
from conveyor.pipeline.errors import PipelineError
from conveyor.pipeline.realtime.plan import BATCH_FIELD, RealtimeConfigError
from conveyor.runtime.layout import redis_layout

#: Keys per script call: long enough to amortise the round trip, short enough not to stall Redis.
CHUNK = 500

# ARGV: batch id, then per key: ttl seconds, field count, field/delta pairs. Returns keys written.
_APPLY = """
local batch = tonumber(ARGV[1])
local i, written = 2, 0
for k = 1, #KEYS do
  local ttl, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  i = i + 2
  local last = tonumber(redis.call('HGET', KEYS[k], '%(batch)s') or '-1')
  if batch > last then
    for j = i, i + 2 * n - 1, 2 do redis.call('HINCRBY', KEYS[k], ARGV[j], ARGV[j + 1]) end
    redis.call('HSET', KEYS[k], '%(batch)s', ARGV[1])
    redis.call('EXPIRE', KEYS[k], ttl)
    written = written + 1
  end
  i = i + 2 * n
end
return written
""" % {"batch": BATCH_FIELD}

# ARGV: batch id, the batch's newest event time ('' if none), then counter/delta pairs. Numbers stay
# strings throughout: Lua would print a millisecond timestamp in exponent notation.
_COMMIT = """
local last = tonumber(redis.call('HGET', KEYS[1], 'batch') or '-1')
if tonumber(ARGV[1]) <= last then return 0 end
local old = redis.call('HGET', KEYS[1], 'max_ms')
redis.call('HSET', KEYS[1], 'batch', ARGV[1], 'prev_max_ms', old or '')
if ARGV[2] ~= '' and ((not old) or old == '' or tonumber(ARGV[2]) > tonumber(old)) then
  redis.call('HSET', KEYS[1], 'max_ms', ARGV[2])
end
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


class CheckpointBehindError(PipelineError):
    """Redis holds views written by a later batch than the checkpoint knows: the checkpoint was
    reset or replaced. Going on would skip every key; clear the views or restore the checkpoint."""


def redis_url(platform: Platform) -> str:
    settings = platform.runtime.redis
    if settings.url:
        return settings.url
    layout = redis_layout(platform)
    if layout is None:
        raise RealtimeConfigError("runtime.redis is disabled and names no url: the views need a Redis")
    return layout.url


def connect(platform: Platform) -> redis.Redis:
    """A client that retries a lost connection for about half a minute: every write here is
    idempotent, so sending one again is safe."""
    return redis.Redis.from_url(
        redis_url(platform), socket_timeout=30, socket_connect_timeout=5, decode_responses=True,
        retry=Retry(ExponentialBackoff(cap=5, base=0.1), 10),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def state_key(job: str) -> str:
    return f"conveyor:realtime:{job}"


@dataclass(frozen=True)
class JobState:
    #: Last batch whose writes are all in Redis (None: none yet).
    batch: int | None
    #: Newest event time seen up to and including ``batch``, and before it.
    max_ms: int | None
    prev_max_ms: int | None
    #: applied, records, malformed, future, late:<view>, incomplete:<view>, keys:<view>.
    counters: dict[str, int]

    @classmethod
    def of(cls, fields: Mapping[str, str]) -> JobState:
        def number(name: str) -> int | None:
            value = fields.get(name)
            return int(value) if value else None

        plain = {"batch", "max_ms", "prev_max_ms"}
        return cls(number("batch"), number("max_ms"), number("prev_max_ms"),
                   {k: int(v) for k, v in fields.items() if k not in plain})

    def newest_before(self, batch_id: int) -> int | None:
        """The newest event time of the batches before ``batch_id``: what its watermarks follow."""
        if self.batch is None or self.batch < batch_id:
            return self.max_ms
        if self.batch == batch_id:  # a replay of the last committed batch
            return self.prev_max_ms
        raise CheckpointBehindError(
            f"Redis holds views of batch {self.batch} but the checkpoint is at batch {batch_id}: the checkpoint "
            "was reset; delete the job's views and state in Redis, or restore its checkpoint"
        )


class ViewStore:
    def __init__(self, client: redis.Redis, job: str) -> None:
        self.client = client
        self.key = state_key(job)
        self._apply = client.register_script(_APPLY)
        self._commit = client.register_script(_COMMIT)

    def state(self) -> JobState:
        return JobState.of(self.client.hgetall(self.key))

    def apply(self, batch_id: int, deltas: Mapping[str, tuple[int, Mapping[str, int]]]) -> int:
        """Apply ``key -> (ttl seconds, {field: delta})``; the keys written (replayed ones are not)."""
        items = list(deltas.items())
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(items), CHUNK):
            chunk = items[start:start + CHUNK]
            args: list[str | int] = [batch_id]
            for _, (ttl, fields) in chunk:
                args += [ttl, len(fields)]
                for name, delta in fields.items():
                    args += [name, delta]
            self._apply(keys=[k for k, _ in chunk], args=args, client=pipe)
        return sum(pipe.execute()) if items else 0

    def commit(self, batch_id: int, max_ms: int | None, counters: Mapping[str, int]) -> bool:
        """Record the batch as done; False when it was already (a replay)."""
        args: list[str | int] = [batch_id, "" if max_ms is None else max_ms]
        for name, value in counters.items():
            args += [name, value]
        return bool(self._commit(keys=[self.key], args=args))
