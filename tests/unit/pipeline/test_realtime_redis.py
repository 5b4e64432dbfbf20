"""Where the views live: pipeline.realtime.redis (one server or Redis Cluster nodes), the checkpoint
(a folder under runtime.home or a Hadoop URI), and the claims' hash-tag buckets on a cluster."""

from __future__ import annotations

import copy
import re
import zlib
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import yaml
from redis.crc import key_slot

from conveyor.config import ConfigError, NotSetError, parse_platform
from conveyor.pipeline.realtime.job import checkpoint_location
from conveyor.pipeline.realtime.plan import ViewPlan, job_views
from conveyor.pipeline.realtime.store import (CLAIM_BUCKETS, CheckpointBehindError, EventClaims, JobState, RedisBehindError,
                                              RedisTarget, redis_target)

ROOT = Path(__file__).resolve().parents[3]
DEMO = yaml.safe_load((ROOT / "platform.yaml").read_text())


def _platform(realtime: dict | None = None):
    data = copy.deepcopy(DEMO)
    data["pipeline"]["realtime"].update(realtime or {})
    return parse_platform(data, root=ROOT)


def test_the_views_redis_is_one_server_or_a_cluster_and_unset_an_error_naming_the_setting():
    nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]
    assert redis_target(_platform({"redis": nodes})) == RedisTarget(tuple(nodes), cluster=True)
    assert redis_target(_platform({"redis": "redis://cache:6379/2"})) == RedisTarget(("redis://cache:6379/2",))
    with pytest.raises(NotSetError, match=r"^pipeline\.realtime\.redis is not set: .*run `conveyor up`"):
        redis_target(_platform())


@pytest.mark.parametrize("bad", [[], "cache:6379", ["10.0.0.1:7000"]])
def test_a_redis_that_is_not_urls_is_refused(bad):
    data = copy.deepcopy(DEMO)
    data["pipeline"]["realtime"]["redis"] = bad
    with pytest.raises(ConfigError) as caught:
        parse_platform(data, root=ROOT)
    assert any(str(p).startswith("pipeline.realtime.redis") for p in caught.value.problems), caught.value.problems


def test_the_checkpoint_is_a_folder_under_the_home_or_a_uri():
    folder = _platform({"checkpoint": "realtime"})
    job = "+".join(sorted(job_views(folder)))
    assert checkpoint_location(folder, job_views(folder)) == str(folder.home / "realtime" / job)
    for uri in ("hdfs://nn:8020/conveyor/rt/", "s3a://bucket/rt", "file:///var/rt"):
        platform = _platform({"checkpoint": uri})
        assert checkpoint_location(platform, job_views(platform)) == f"{uri.rstrip('/')}/{job}"


def test_claims_go_per_hash_tag_bucket_and_minute_of_event_time():
    ids = [f"{n:08x}-0000-4000-8000-{n:012x}" for n in range(2000)]
    minute = 29_000_000 * 60_000
    times = [minute + (n % 3) * 30_000 for n in range(2000)]  # 0, 30 and 60 s into a minute
    for target in (RedisTarget(("redis://h:1",)), RedisTarget(("redis://h:1",), cluster=True)):
        groups = EventClaims(target, "conveyor:realtime:j:id:", 60)._groups("ads", ids, times)
        assert 2 < len(groups) <= 2 * CLAIM_BUCKETS
        assert sorted(i for _, positions in groups for i in positions) == list(range(2000))
        for key, positions in groups:
            tag, at = re.fullmatch(r"conveyor:realtime:j:id:\{(\d+)\}:ads:(\d+)", key).groups()
            assert {times[i] // 60_000 for i in positions} == {int(at)}
            assert {zlib.crc32(ids[i].encode()) % CLAIM_BUCKETS for i in positions} == {int(tag)}
            assert key_slot(key.encode()) == key_slot(f"{{{tag}}}".encode())  # one slot per call on a cluster
        # A copy (the same id and event time) finds its original's hash, in any batch of ids.
        again = dict(EventClaims(target, "conveyor:realtime:j:id:", 60)._groups("ads", ids[:50], times[:50]))
        assert all(set(positions) <= set(dict(groups)[key]) for key, positions in again.items())


def test_the_job_state_must_be_at_the_batch_before_the_checkpoint_s_or_at_it():
    state = JobState(batch=4, max_ms=9_000, prev_max_ms=5_000, counters={})
    assert state.newest_before(5) == 9_000 and state.newest_before(4) == 5_000  # the next batch; a replay
    with pytest.raises(CheckpointBehindError, match="--rebuild --views a"):
        state.newest_before(3, ["a"])
    with pytest.raises(RedisBehindError, match=r"batches 5 to 5 .*--rebuild --views a --views b"):
        state.newest_before(6, ["a", "b"])
    empty = JobState(batch=None, max_ms=None, prev_max_ms=None, counters={})
    assert empty.newest_before(0) is None  # a new job
    with pytest.raises(RedisBehindError, match="no state but the checkpoint has committed batch 2"):
        empty.newest_before(3)


def test_a_view_s_key_pattern_matches_its_keys_and_no_other_view_s():
    platform = _platform()
    views = {name: ViewPlan.of(name, view) for name, view in job_views(platform).items()}
    ctr, interests = views["banner_ctr"], views["user_interests"]
    key = ctr.key({"banner_id": "b-7"}, 1_700_000_000_000)
    assert fnmatchcase(key, ctr.key_pattern()) and not fnmatchcase(key, interests.key_pattern())
    layout = "v[1]:{view}:{banner_id}:{window_start}"  # glob characters in the layout match only themselves
    odd = ViewPlan.of("odd", job_views(platform)["banner_ctr"].model_copy(update={"key": layout}))
    assert odd.key_pattern() == r"v\[1\]:odd:*:*"
