"""Benchmark: the balance planner on synthetic skewed clusters at the scale Conveyor is built for.

Two clusters (a bus of 20,000 partitions, and a cluster near the 200,000-partition limit of
docs/architecture.md, section 3):

- ``read-cluster``: 9 brokers on 3 racks, 2,000 topics x 10 partitions (20,000), RF 3; replicas
  favour some brokers, a fifth of the topics have every leader on one broker, heavy-tailed traffic;
- ``large``: 2,000 brokers on 20 racks, 200,000 partitions, RF 3; 1,900 skewed brokers plus 100
  just added (empty), and 3 % of the topics isolated on the 120 brokers tagged ``online``.

For each: planning time, max/mean before and after for replicas, leaders, bytes in and bytes out,
bytes moved. The peer, computed in the same run, is the placement Kafka's reassignment generator
(``kafka-reassign-partitions --generate``) would propose: its rack-aware round-robin
(``AdminUtils.assignReplicasToBrokers``), reimplemented here because it needs a live cluster to
run; it ignores load and isolation tags, so we report its balance, bytes moved and isolation
breaches. Writes ``bench/results/balance_plan.json``.

Run: ``python -m bench.balance_plan`` (``--quick`` for the small cluster only).
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import time

from rich.console import Console
from rich.table import Table

from bench.common import host, write_results
from conveyor.ops.balance import Broker, ClusterModel, Partition, plan
from conveyor.ops.balance.planner import LOADS

RETENTION_S = (6 * 3600, 86_400, 3 * 86_400, 7 * 86_400)


def _topic(rng: random.Random, per_partition: float) -> tuple[float, int, int, int]:
    """(bytes in/s, consumer fan-out, retention seconds, partitions) of a new topic.

    Traffic is heavy-tailed; the partition count follows it as operators size topics (at least
    the bus's default of 9, more for busy topics: about ``per_partition`` bytes/s in and out per
    partition), so that no partition alone outweighs a broker.
    """
    rate, fanout = rng.lognormvariate(11, 1.6), rng.randint(1, 6)
    partitions = min(max(rng.choice((9, 12, 24)), math.ceil(rate * (1 + fanout) / per_partition)), 1024)
    return rate, fanout, rng.choice(RETENTION_S), partitions


def _partition(rng: random.Random, topic: str, n: int, replicas: list[int], traffic: tuple) -> Partition:
    rate, fanout, retention, count = traffic
    bytes_in = rate / count * rng.lognormvariate(0, 0.3)
    return Partition(topic, n, tuple(replicas), bytes_in=bytes_in, bytes_out=bytes_in * fanout,
                     size=int(bytes_in * retention * rng.uniform(0.5, 1.0)))


def read_cluster(seed: int = 7) -> ClusterModel:
    rng = random.Random(seed)
    brokers = [Broker(i, rack="abc"[(i - 1) % 3]) for i in range(1, 10)]
    weight = {1: 2.2, 2: 1.0, 3: 1.0, 4: 1.7, 5: 1.0, 6: 0.7, 7: 1.0, 8: 0.5, 9: 0.4}
    by_rack = {r: [b.id for b in brokers if b.rack == r] for r in "abc"}
    partitions = []
    for t in range(2000):
        topic, traffic, pinned = f"topic-{t:04d}", (*_topic(rng, 1e9)[:3], 10), t % 5 == 0
        for n in range(10):
            reps = [rng.choices(ids, [weight[i] for i in ids])[0] for ids in by_rack.values()]
            rng.shuffle(reps)
            if pinned:  # the field's case: every leader of the topic on one broker
                reps[reps.index(next(r for r in reps if r in by_rack["a"]))] = 1
                reps.remove(1)
                reps.insert(0, 1)
            partitions.append(_partition(rng, topic, n, reps, traffic))
    return ClusterModel(brokers, partitions)


def large_cluster(seed: int = 11) -> ClusterModel:
    rng = random.Random(seed)
    racks, existing, total = 20, 1900, 2000
    online = set(range(1, 121))
    brokers = [Broker(i, rack=f"r{(i - 1) % racks:02d}", tags=frozenset({"online"} if i in online else ()))
               for i in range(1, total + 1)]
    weight = {i: rng.lognormvariate(0, 0.35) for i in range(1, existing + 1)}

    def sampler(ids: list[int]):
        return ids, list(itertools.accumulate(weight[i] for i in ids))

    rack_of = {b.id: b.rack for b in brokers}
    pools = {r: sampler([i for i in weight if rack_of[i] == r]) for r in sorted(set(rack_of.values()))}
    online_pools = {r: sampler([i for i in online if rack_of[i] == r]) for r in pools}
    partitions, isolation, t = [], {}, 0
    while len(partitions) < 200_000:
        topic, use = f"t{t:05d}", pools
        *traffic, count = _topic(rng, 2e6)
        count = min(count, 200_000 - len(partitions))
        traffic = (*traffic, count)
        if t % 33 == 0:
            isolation[topic], use = "online", online_pools
        for n in range(count):
            reps = [rng.choices(*use[r])[0] for r in rng.sample(sorted(use), 3)]
            partitions.append(_partition(rng, topic, n, reps, traffic))
        t += 1
    return ClusterModel(brokers, partitions, isolation)


def kafka_generate(model: ClusterModel, rng: random.Random) -> list[tuple[int, ...]]:
    """Replica lists from Kafka's rack-aware round-robin, topic by topic, as --generate does."""
    rack_of = {b.id: b.rack or str(b.id) for b in model.brokers}
    racks = sorted(set(rack_of.values()))
    queues = {r: sorted(b for b in rack_of if rack_of[b] == r) for r in racks}
    arranged = []
    for i in range(max(len(q) for q in queues.values())):  # the rack-alternated broker list
        arranged.extend(queues[r][i] for r in racks if i < len(queues[r]))
    n, n_racks = len(arranged), len(racks)
    out: list[tuple[int, ...]] = []
    for _, parts in itertools.groupby(model.partitions, key=lambda p: p.topic):
        start, shift = rng.randrange(n), rng.randrange(n)
        for pid, part in enumerate(parts):
            if pid > 0 and pid % n == 0:
                shift += 1
            first = (pid + start) % n
            reps, used_racks, k = [arranged[first]], {rack_of[arranged[first]]}, 0
            while len(reps) < len(part.replicas):
                b = arranged[(first + 1 + (shift * n_racks + k) % (n - 1)) % n]
                if (rack_of[b] not in used_racks or len(used_racks) == n_racks) and b not in reps:
                    reps.append(b)
                    used_racks.add(rack_of[b])
                k += 1
            out.append(tuple(reps))
    return out


def _ratio(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return max(values) / mean if mean else 1.0


def peer_figures(model: ClusterModel, assignment: list[tuple[int, ...]]) -> dict:
    live = [b.id for b in model.brokers]
    load = {b: [0, 0, 0.0, 0.0] for b in live}
    moved = breaches = 0
    tagged = {tag: {b.id for b in model.brokers if tag in b.tags} for tag in model.isolation.values()}
    for part, reps in zip(model.partitions, assignment):
        moved += part.size * len(set(reps) - set(part.replicas))
        tag = model.isolation.get(part.topic)
        if tag:
            breaches += sum(1 for b in reps if b not in tagged[tag])
        for b in reps:
            load[b][0] += 1
            load[b][2] += part.bytes_in
        load[reps[0]][1] += 1
        load[reps[0]][3] += part.leader_bytes_out
    return {
        "bytes_moved": moved,
        "isolation_breaches": breaches,
        "after": {name: round(_ratio([load[b][i] for b in live]), 3) for i, name in enumerate(LOADS)},
    }


def run(name: str, model: ClusterModel, console: Console) -> dict:
    started, cpu = time.perf_counter(), time.process_time()
    result = plan(model)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    total = sum(p.size * len(p.replicas) for p in model.partitions)
    figures = {
        "cluster": name,
        "brokers": len(model.brokers),
        "partitions": len(model.partitions),
        "replicas": sum(len(p.replicas) for p in model.partitions),
        "plan_seconds": round(seconds, 2),
        "plan_cpu_seconds": round(cpu_seconds, 2),
        "replica_moves": len(result.moves),
        "partitions_changed": len(result.changes),
        "preferred_elections": len(result.elections),
        "bytes_moved": result.bytes_to_move,
        "bytes_total": total,
        "moved_share": round(result.bytes_to_move / total, 4) if total else 0.0,
        "before": {k: round(v.max_over_mean, 3) for k, v in result.stats_before.items()},
        "after": {k: round(v.max_over_mean, 3) for k, v in result.stats_after.items()},
        "actions_per_goal": dict(result.actions_per_goal),
        "kafka_generate": peer_figures(model, kafka_generate(model, random.Random(1))),
    }
    peer = figures["kafka_generate"]
    table = load_table(f"{name}: {figures['partitions']:,} partitions on {figures['brokers']:,} brokers, "
                       f"planned in {seconds:.2f} s ({cpu_seconds:.2f} s CPU)", figures["before"], figures["after"],
                       peer["after"])
    table.add_row("bytes moved", "", f"{result.bytes_to_move / 1e12:.2f} TB ({figures['moved_share']:.1%})",
                  f"{peer['bytes_moved'] / 1e12:.2f} TB ({peer['bytes_moved'] / total:.1%})")
    table.add_row("replica moves / elections", "", f"{len(result.moves):,} / {len(result.elections):,}", "")
    table.add_row("isolation breaches", "", "0", f"{peer['isolation_breaches']:,}")
    console.print(table)
    return figures


def load_table(title: str, before: dict[str, float], ours: dict[str, float], peer: dict[str, float]) -> Table:
    """Max/mean per broker of each load before, after Conveyor's plan and after Kafka's --generate;
    the caller adds its own rows."""
    table = Table(title=title)
    for column in ("max/mean", "before", "after (conveyor)", "after (kafka --generate)"):
        table.add_column(column, justify="right")
    for load in LOADS:
        table.add_row(load, f"{before[load]:.3f}", f"{ours[load]:.3f}", f"{peer[load]:.3f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.balance_plan", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the 9-broker cluster")
    args = parser.parse_args()
    console = Console()
    clusters = [("read-cluster", read_cluster)] + ([] if args.quick else [("large", large_cluster)])
    results = []
    for name, build in clusters:
        with console.status(f"generating {name}"):
            model = build()
        with console.status(f"planning {name}"):
            results.append(run(name, model, console))
    path = write_results("balance_plan", {"benchmark": "balance_plan", **host(), "results": results})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
