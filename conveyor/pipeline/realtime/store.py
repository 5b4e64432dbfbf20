"""The views' Redis side: deltas applied at most once per key and batch, event ids claimed once per
window, and the job's own state.

Each view key is a hash of counters plus ``_batch``, the id of the last micro-batch that wrote it.
One Lua script call (atomic in Redis) applies a whole chunk of keys, each only if the batch is newer
than its ``_batch``, so a batch replayed after a crash skips the keys its first attempt wrote and
writes the others. Counters are signed 64-bit, as HINCRBY's: the script checks every value and
delta of the chunk before it writes any, and a sum beyond the bounds saturates at the bound instead
of stopping the script half-way. The job's state hash holds the last committed batch, the newest
event time seen (before and after that batch: the watermark of a replayed batch must be the one its
first attempt used) and exact counts of everything applied and rejected, committed by one more
script call with the same rule.

Event ids are claimed from the Spark tasks, before the deltas are summed: ``<state key>:id:<topic>:
<event_id>`` holds ``partition:offset`` of the record that claimed it, for ``dedup_window``
seconds (SET NX EX). The claim names its record, so a replayed batch finds its own claims and
counts the same records as its first attempt, whichever of them was applied before the crash.

On Redis Cluster every script call's keys must share a hash slot. View keys are named by the
views, so their writes are grouped per slot (the batch guard is per key, so nothing crosses a
slot); claim keys carry a hash tag, one of :data:`CLAIM_BUCKETS` derived from the event id
(``<state key>:id:{<bucket>}:<topic>:<event_id>``), and are claimed per bucket. redis-py's
cluster pipeline sends the calls to their nodes together; it does not pipeline EVALSHA, so there
the scripts travel as EVAL (Redis caches them by their digest all the same).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import orjson
import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.crc import key_slot
from redis.retry import Retry

from conveyor.config import NotSetError, Platform
from conveyor.pipeline.errors import PipelineError
from conveyor.pipeline.realtime.failover import through_failover
from conveyor.pipeline.realtime.plan import BATCH_FIELD, ViewPlan, saturate

#: Keys per script call: long enough to amortise the round trip, short enough not to stall Redis.
CHUNK = 500

#: Event ids per claim script call (1,000 claims hold Redis for a few milliseconds).
CLAIM_CHUNK = 1000

#: Buckets of a topic's claims, each a hash per minute of event time: on Redis Cluster, hash slots
#: enough to share them among the masters; everywhere, hashes small enough that one expires without
#: holding Redis long, and few enough that a task's ids make calls of several ids each.
CLAIM_BUCKETS = 64

Client: TypeAlias = "redis.Redis | RedisCluster"
#: A view key's write: (key, position, ttl seconds, {hash field: delta}).
Entry = tuple[str, int, int, Mapping[str, int]]

# ARGV: the fence field, then one JSON array with an entry per key: [its position (a batch id, or an
# offset of the fence's partition), ttl seconds, [field, delta, field, delta, ...]], every number a
# string (Lua's numbers are doubles: a 64-bit delta would lose digits, and a large offset would print
# in exponent notation). One argument per call, not several per key: redis-py packs each argument at
# a cost, and a JSON text halves the driver's CPU for a batch's writes. A key applies
# only past its fence; a key may come again later in the call with a later position. Returns per
# key: 0 (skipped: that position or a later one wrote it), 1 (written) or 2 (written, and a delta or
# a sum reached a 64-bit bound). Everything is read and checked before the first write: a Redis error
# after it would leave the chunk half-applied, its keys' fences unset, and a replay adding the
# written half again.
_APPLY = """
local MAX, MIN = '9223372036854775807', '-9223372036854775808'
local function int64(s)  -- exactly what HINCRBY accepts (Redis' string2ll)
  if type(s) ~= 'string' then return false end
  if s == '0' then return true end
  local digits = s
  if s:sub(1, 1) == '-' then digits = s:sub(2) end
  if not digits:find('^[1-9]%d*$') then return false end
  if #digits ~= 19 then return #digits < 19 end
  return digits <= (digits == s and MAX or MIN:sub(2))
end
local fence = ARGV[1]
local entries = cjson.decode(ARGV[2])
local status, todo = {}, {}
for k = 1, #KEYS do
  local position, fields = entries[k][1], entries[k][3]
  local names = {fence}
  for j = 1, #fields, 2 do names[#names + 1] = fields[j] end
  local held = redis.call('HMGET', KEYS[k], unpack(names))
  status[k] = 0
  if tonumber(position) > tonumber(held[1] or '-1') then
    for j = 2, #names do
      local old, delta = held[j], fields[2 * j - 2]
      if (old and not int64(old)) or not int64(delta) then
        return redis.error_reply('conveyor: ' .. KEYS[k] .. ' field ' .. names[j] .. ' holds ' .. tostring(old) ..
          ', delta ' .. tostring(delta) .. ': not a 64-bit integer; nothing of this call was written')
      end
    end
    todo[#todo + 1] = k
  end
end
for _, k in ipairs(todo) do
  local position, ttl, fields = entries[k][1], entries[k][2], entries[k][3]
  status[k] = 1
  for j = 1, #fields, 2 do
    local name, delta = fields[j], fields[j + 1]
    if delta == MAX or delta == MIN then status[k] = 2 end
    if type(redis.pcall('HINCRBY', KEYS[k], name, delta)) == 'table' then
      -- Both numbers passed the check: the only error left is a sum beyond 64 bits.
      redis.call('HSET', KEYS[k], name, delta:sub(1, 1) == '-' and MIN or MAX)
      status[k] = 2
    end
  end
  redis.call('HSET', KEYS[k], fence, position)
  redis.call('EXPIRE', KEYS[k], ttl)
end
return status
"""

# KEYS: the hash of one bucket of claims (ids of one hash-tag bucket and one minute of event time).
# ARGV: seconds the hash lives after its last claim, event ids and their records, each space-separated
# (the contracts make every event_id a UUID). Returns one '1' per id whose record owns its claim (new,
# or its own from an earlier attempt), else '0'. Ids travel as one string: one argument per id costs
# the Spark worker about 10 times the CPU in redis-py.
_CLAIM = """
local ids, owned, k = {}, {}, 0
for id in string.gmatch(ARGV[2], '%S+') do ids[#ids + 1] = id end
for owner in string.gmatch(ARGV[3], '%S+') do
  k = k + 1
  if redis.call('HSETNX', KEYS[1], ids[k], owner) == 1 then
    owned[k] = '1'
  else
    owned[k] = redis.call('HGET', KEYS[1], ids[k]) == owner and '1' or '0'
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return table.concat(owned)
"""


# ARGV: the position field, the position (a batch id, or the last offset of a span), the newest
# event time ('' if none), the position the writer expects to find ('' for any: a real-time task
# knows its partition's, and finding another means Redis lost it), then counter/delta pairs. Numbers
# stay strings throughout: Lua would print a millisecond timestamp in exponent notation.
_COMMIT = """
local held = redis.call('HGET', KEYS[1], ARGV[1]) or '-1'
if ARGV[4] ~= '' and held ~= ARGV[4] then
  if tonumber(held) > tonumber(ARGV[4]) then
    return redis.error_reply('conveyor: ' .. KEYS[1] .. ' is at ' .. held .. ', past ' .. ARGV[4] ..
      ' where this task left it: ' .. ANOTHER_WRITER)
  end
  return redis.error_reply('conveyor: ' .. KEYS[1] .. ' is at ' .. held .. ', not at ' .. ARGV[4] ..
    ' where this task left it: Redis lost data')
end
local last = tonumber(held)
if tonumber(ARGV[2]) <= last then return 0 end
local old = redis.call('HGET', KEYS[1], 'max_ms')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 'prev_max_ms', old or '')
if ARGV[3] ~= '' and ((not old) or old == '' or tonumber(ARGV[3]) > tonumber(old)) then
  redis.call('HSET', KEYS[1], 'max_ms', ARGV[3])
end
for i = 5, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


# A real-time task's claim of its partition's next span. ARGV: the ``done`` and ``pending`` the task
# read, then the span's ``pending`` and ``pending_max``. Moved past what the task read means another
# task writes the partition (a zombie of a lost executor, a duplicate attempt), and the task stops before
# writing a key: the other's span would be counted twice. Moved back means Redis lost data. Finding its
# own claim already set is a retry after a lost reply.
_BEGIN = """
local done = tonumber(redis.call('HGET', KEYS[1], 'done') or '-1')
local pending = tonumber(redis.call('HGET', KEYS[1], 'pending') or '-1')
local read_done, read_pending = tonumber(ARGV[1]), tonumber(ARGV[2])
if done == read_done and (pending == read_pending or pending == tonumber(ARGV[3])) then
  redis.call('HSET', KEYS[1], 'pending', ARGV[3], 'pending_max', ARGV[4])
  return 1
end
local moved = 'conveyor: ' .. KEYS[1] .. ' is at done ' .. done .. ', pending ' .. pending ..
  ', not at done ' .. ARGV[1] .. ', pending ' .. ARGV[2] .. ' where this task read it: '
if done > read_done or pending > read_pending then return redis.error_reply(moved .. ANOTHER_WRITER) end
return redis.error_reply(moved .. 'Redis lost data')
"""

#: Why a real-time task found its partition's position moved ahead of it; it stops, and Spark's retry
#: reads the position again.
ANOTHER_WRITER = ("another task wrote this partition meanwhile (a zombie of a lost executor or a second "
                  "attempt); this one stops before counting anything twice, and its retry starts from there")


def _with_message(script: str) -> str:
    return script.replace("ANOTHER_WRITER", "'" + ANOTHER_WRITER + "'")


class CheckpointBehindError(PipelineError):
    """Redis holds views written by a later batch than the checkpoint knows: the checkpoint was
    reset or replaced. Going on would skip every key; rebuild the views or restore the checkpoint."""


class RedisBehindError(PipelineError):
    """Redis holds the job's state of an earlier batch than the checkpoint has committed, or none:
    Redis lost data (FLUSHALL, a failover to a lagging replica, a lost AOF tail). Going on would
    leave the lost batches' counts out of the views for good; rebuild them from Kafka."""


def rebuild_command(views: Sequence[str]) -> str:
    """The command that rebuilds a job's views from Kafka (``conveyor views run --rebuild``)."""
    return " ".join(["conveyor views run --rebuild", *(f"--views {v}" for v in views)])


@dataclass(frozen=True)
class RedisTarget:
    """The views' Redis: one server, or the nodes of a Redis Cluster to start from. Plain values:
    it travels to Spark's workers with the claims and connects there. ``ca``: the authority a
    ``rediss://`` server's certificate is checked against besides the system's (the platform's)."""

    urls: tuple[str, ...]
    cluster: bool = False
    ca: str | None = None


def redis_target(platform: Platform, reader: bool = False) -> RedisTarget:
    """pipeline.realtime.redis: one server, or a Redis Cluster's nodes; ``reader``: as the
    read-only user of ``redis_reader`` sees it, when one is given."""
    settings = platform.pipeline.realtime
    chosen = (settings.redis_reader or settings.redis) if reader else settings.redis
    if chosen is None:
        raise NotSetError("pipeline.realtime.redis", "the views need a Redis: give its URL in platform.yaml, or "
                                                     "run `conveyor up` with runtime.redis enabled to start one")
    urls = tuple(url.get_secret_value() for url in (chosen if isinstance(chosen, list) else [chosen]))
    ca = str(platform.resolve(platform.tls.ca)) if platform.tls is not None and platform.tls.ca is not None else None
    return RedisTarget(urls, cluster=isinstance(chosen, list), ca=ca if urls[0].startswith("rediss:") else None)


def connect(platform: Platform, reader: bool = False) -> Client:
    """``reader``: as the read-only user (pipeline.realtime.redis_reader), for parts that only read."""
    return connect_to(redis_target(platform, reader))


def connect_to(target: RedisTarget) -> Client:
    """A client that retries a lost connection for about half a minute: every write here is
    idempotent (a claim sent again finds itself), so sending one again is safe. A cluster client
    also follows slots that move (MOVED, ASK)."""
    common: dict[str, Any] = {"socket_timeout": 30, "socket_connect_timeout": 5, "decode_responses": True,
                              "retry": Retry(ExponentialBackoff(cap=5, base=0.1), 10)}
    if target.ca is not None:
        common["ssl_ca_certs"] = target.ca
    if target.cluster:
        first, *others = target.urls
        nodes = [ClusterNode(urlsplit(u).hostname, urlsplit(u).port or 6379) for u in others]
        return RedisCluster.from_url(first, startup_nodes=nodes, **common)
    return redis.Redis.from_url(target.urls[0], retry_on_error=[redis.ConnectionError, redis.TimeoutError], **common)


def _run(pipe: Any, script: Script, keys: list[str], args: list[Any]) -> None:
    """Queue a script call on a pipeline: EVALSHA, or on a cluster pipeline (which refuses EVALSHA)
    EVAL with the script's text."""
    if isinstance(pipe, RedisCluster):  # redis-py's ClusterPipeline is one
        pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)  # its eval() means MULTI's
    else:
        script(keys=keys, args=args, client=pipe)


def _by_slot(keys: Sequence[str], cluster: bool) -> list[list[int]]:
    """Positions of ``keys`` grouped by hash slot on a cluster, in one group on a single server."""
    if not cluster:
        return [list(range(len(keys)))]
    groups: dict[int, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key_slot(key.encode())].append(i)
    return list(groups.values())


def state_key(job: str) -> str:
    return f"conveyor:realtime:{job}"


def mode_key(job: str) -> str:
    """Set when a job first runs in real-time mode (its state is then per partition)."""
    return f"{state_key(job)}:mode"


def claims_prefix(job: str) -> str:
    return f"{state_key(job)}:id:"


@lru_cache(maxsize=4)
def _claimer(target: RedisTarget) -> tuple[Client, Script]:
    """One client per Python worker process (Spark reuses workers across tasks and batches)."""
    client = connect_to(target)
    return client, client.register_script(_CLAIM)


@dataclass(frozen=True)
class EventClaims:
    """The job's :class:`~conveyor.pipeline.realtime.deltas.Claims` in Redis. Plain values only:
    it travels to Spark's workers with the task and connects there."""

    target: RedisTarget
    prefix: str
    ttl_seconds: int

    def _groups(self, topic: str, event_ids: Sequence[str], times_ms: Sequence[int]) -> list[tuple[str, list[int]]]:
        """(hash key, positions of the ids claimed in it): a hash per hash-tag bucket of the id and
        minute of the event's time, so that each expires whole once its minute's copies are past
        the window, and no hash outgrows what Redis frees at once (about 20,000 fields at 20,000
        events/s). A copy carries its original's event time: it finds the same hash."""
        buckets: dict[str, list[int]] = defaultdict(list)
        for i, (event_id, event_ms) in enumerate(zip(event_ids, times_ms, strict=True)):
            bucket = zlib.crc32(event_id.encode()) % CLAIM_BUCKETS
            buckets[f"{self.prefix}{{{bucket}}}:{topic}:{event_ms // 60_000}"].append(i)
        return list(buckets.items())

    def __call__(self, topic: str, event_ids: Sequence[str], owners: Sequence[str],
                 times_ms: Sequence[int]) -> list[bool]:
        if not event_ids:
            return []
        client, script = _claimer(self.target)
        return through_failover(client, lambda: self._claim(client, script, topic, event_ids, owners, times_ms))

    def _claim(self, client: Client, script: Script, topic: str, event_ids: Sequence[str],
               owners: Sequence[str], times_ms: Sequence[int]) -> list[bool]:
        pipe = client.pipeline(transaction=False)
        order: list[int] = []
        for key, positions in self._groups(topic, event_ids, times_ms):
            for start in range(0, len(positions), CLAIM_CHUNK):
                chunk = positions[start:start + CLAIM_CHUNK]
                _run(pipe, script, [key], [self.ttl_seconds, " ".join(event_ids[i] for i in chunk),
                                           " ".join(owners[i] for i in chunk)])
                order += chunk
        owned = [False] * len(event_ids)
        for i, flag in zip(order, (flag for reply in pipe.execute() for flag in reply), strict=True):
            owned[i] = flag == "1"
        return owned


@dataclass(frozen=True)
class JobState:
    #: Last batch whose writes are all in Redis (None: none yet).
    batch: int | None
    #: Newest event time seen up to and including ``batch``, and before it.
    max_ms: int | None
    prev_max_ms: int | None
    #: applied, records, duplicates, malformed, future, late:<view>, incomplete:<view>.
    counters: dict[str, int]

    @classmethod
    def of(cls, fields: Mapping[str, str]) -> JobState:
        def number(name: str) -> int | None:
            value = fields.get(name)
            return int(value) if value else None

        plain = {"batch", "max_ms", "prev_max_ms"}
        return cls(number("batch"), number("max_ms"), number("prev_max_ms"),
                   {k: int(v) for k, v in fields.items() if k not in plain})

    def newest_before(self, batch_id: int, views: Sequence[str] = ()) -> int | None:
        """The newest event time of the batches before ``batch_id``: what its watermarks follow.
        Spark runs batch N only once N - 1 is in its commit log, and the job commits its state in
        Redis before Spark does: so the state is at N - 1, or at N for a replay; anything else
        means the checkpoint or Redis lost what the other holds (``views``: the job's, for the
        command that rebuilds them)."""
        if batch_id > 0 and (self.batch is None or self.batch < batch_id - 1):
            held = "no state" if self.batch is None else f"the state of batch {self.batch}"
            lost = "every batch" if self.batch is None else f"batches {self.batch + 1} to {batch_id - 1}"
            raise RedisBehindError(
                f"Redis lost the views' data: it holds {held} but the checkpoint has committed batch {batch_id - 1} "
                f"(a FLUSHALL, a failover to a lagging replica, a lost AOF tail?); the counts of {lost} are gone "
                f"from the views. Rebuild them from Kafka: {rebuild_command(views)}")
        if self.batch is None or self.batch < batch_id:
            return self.max_ms
        if self.batch == batch_id:  # a replay of the last committed batch
            return self.prev_max_ms
        raise CheckpointBehindError(
            f"Redis holds views of batch {self.batch} but the checkpoint is at batch {batch_id}: the checkpoint "
            f"was reset; rebuild the views from Kafka ({rebuild_command(views)}), or restore its checkpoint"
        )


@dataclass(frozen=True)
class Applied:
    #: Keys written (a replay skips those its first attempt wrote).
    written: int
    #: Keys written where a delta or a sum reached a 64-bit bound (saturated).
    saturated: tuple[str, ...]


class ViewStore:
    def __init__(self, client: Client, job: str) -> None:
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self.key = state_key(job)
        self._apply = client.register_script(_APPLY)
        self._commit = client.register_script(_with_message(_COMMIT))
        self._begin = client.register_script(_with_message(_BEGIN))

    def state(self) -> JobState:
        return JobState.of(through_failover(self.client, lambda: self.client.hgetall(self.key)))

    def apply(self, batch_id: int, deltas: Mapping[str, tuple[int, Mapping[str, int]]]) -> Applied:
        """Apply ``key -> (ttl seconds, {field: delta})``, each counter saturating at the 64-bit
        bounds; what was written (a replay skips the keys its first attempt wrote)."""
        return self.write(BATCH_FIELD, [(key, batch_id, ttl, fields) for key, (ttl, fields) in deltas.items()])

    def begin(self, key: str, read: tuple[int, int], pending: int, pending_max: int | None) -> None:
        """Set position hash ``key``'s ``pending`` before a span's writes, if its ``done`` and
        ``pending`` are still those the task ``read``; else fail (see ``_BEGIN``)."""
        args = [*read, pending, "" if pending_max is None else pending_max]
        through_failover(self.client, lambda: self._begin(keys=[key], args=args))

    def write(self, fence: str, entries: Sequence[Entry]) -> Applied:
        """Apply each ``(key, position, ttl seconds, {field: delta})`` whose position is past the
        key's ``fence`` field, in order (a key may come again with a later position)."""
        return through_failover(self.client, lambda: self._write(fence, entries))

    def _write(self, fence: str, entries: Sequence[Entry]) -> Applied:
        if not entries:
            return Applied(0, ())
        pipe = self.client.pipeline(transaction=False)
        order: list[int] = []
        for group in _by_slot([e[0] for e in entries], self.cluster):
            for start in range(0, len(group), CHUNK):
                chunk = group[start:start + CHUNK]
                packed = orjson.dumps([[str(position), str(ttl), [part for name, delta in fields.items()
                                                                  for part in (name, str(saturate(delta)))]]
                                       for _, position, ttl, fields in (entries[i] for i in chunk)])
                _run(pipe, self._apply, [entries[i][0] for i in chunk], [fence, packed])
                order += chunk
        replies = pipe.execute()
        statuses = [status for reply in replies for status in reply]
        saturated = tuple(entries[i][0] for i, s in zip(order, statuses, strict=True) if s == 2)
        return Applied(sum(1 for s in statuses if s), saturated)

    def commit(self, batch_id: int, max_ms: int | None, counters: Mapping[str, int]) -> bool:
        """Record the batch as done; False when it was already (a replay)."""
        return self.commit_to(self.key, "batch", batch_id, max_ms, counters)

    def commit_to(self, key: str, field: str, position: int, max_ms: int | None, counters: Mapping[str, int],
                  expected: int | None = None) -> bool:
        """Move hash ``key``'s ``field`` to ``position`` with its newest event time and counters,
        once: False when it was there already. ``expected``: the position it must be at (-1: none
        yet), else Redis lost it and the call fails."""
        def once() -> bool:
            pipe = self.client.pipeline(transaction=False)
            self.queue_commit(pipe, key, field, position, max_ms, counters, expected)
            return bool(pipe.execute()[0])

        return through_failover(self.client, once)

    def queue_commit(self, pipe: Any, key: str, field: str, position: int, max_ms: int | None,
                     counters: Mapping[str, int], expected: int | None = None) -> None:
        """:meth:`commit_to` queued on ``pipe``, to go with other commands."""
        args: list[str | int] = [field, position, "" if max_ms is None else max_ms, "" if expected is None else expected]
        for name, value in counters.items():
            args += [name, value]
        _run(pipe, self._commit, [key], args)


def check_mode(client: Client, job: str, views: Sequence[str], live: bool) -> None:
    """A job's views are fenced by batch ids in micro-batch mode and by offsets in real-time mode:
    each fence means nothing to the other, so a job keeps its mode until it is rebuilt."""
    held_live = bool(client.exists(mode_key(job)))
    held_batches = bool(client.exists(state_key(job)))
    if (live and held_batches) or (not live and held_live):
        ran, asked = ("micro-batch", "real-time") if held_batches else ("real-time", "micro-batch")
        raise PipelineError(f"job {job} has run in {ran} mode; to run it in {asked} mode (pipeline.realtime.mode), "
                            f"start it over from Kafka: {rebuild_command(views)}")


def clear_job(client: Client, job: str, views: Sequence[ViewPlan]) -> int:
    """Delete a job's view keys, its state, its partitions' positions and its event id claims; how
    many keys there were."""
    deleted = 0
    for pattern in [state_key(job), f"{state_key(job)}:*", *(v.key_pattern() for v in views)]:
        pipe = client.pipeline(transaction=False)
        for key in client.scan_iter(match=pattern, count=1000):
            pipe.delete(key)  # one key per call: a cluster routes each by its slot
            if len(pipe) >= CHUNK:
                deleted += sum(pipe.execute())
        deleted += sum(pipe.execute())
    return deleted
