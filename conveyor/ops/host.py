"""This machine's figures in node_exporter's metric names, read from /proc, /sys and statvfs: the
``host:`` component page. The local runtime's brokers run on this machine, so the rules and panels
written for node_exporter on remote broker hosts watch them too, unchanged.

What it reports, as node_exporter names it: bytes per network interface and the link's speed;
per whole disk (node_exporter's own exclusions: partitions, loop and RAM devices) the reads,
writes, time spent on each and time busy; the size and free space of the filesystems that hold
the runtime home and ``ops.machines.paths``; CPU time per CPU and mode (steal among them).
Parsing is pure, text in and figures out; :class:`HostPage` reads the files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from conveyor.config.machines import Machines

PROC = Path("/proc")
SYS_NET = Path("/sys/class/net")
#: node_exporter's default device exclusion: partitions and devices that are not disks.
IGNORED_DISKS = re.compile(r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$")
#: Fields of a /proc/stat cpu line, in order.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
#: /proc/diskstats counts sectors of 512 bytes and times in milliseconds.
_MS = 1000.0


@dataclass(frozen=True)
class Interface:
    device: str
    receive_bytes: int
    transmit_bytes: int


@dataclass(frozen=True)
class Disk:
    device: str
    reads: int
    read_seconds: float
    writes: int
    write_seconds: float
    io_seconds: float


@dataclass(frozen=True)
class Mount:
    device: str
    mountpoint: str
    fstype: str


@dataclass(frozen=True)
class Filesystem:
    mount: Mount
    size_bytes: int
    free_bytes: int
    avail_bytes: int


def parse_net_dev(text: str) -> list[Interface]:
    """``/proc/net/dev``: two header lines, then ``device: rx_bytes ... (8 fields) tx_bytes ...``."""
    found = []
    for line in text.splitlines()[2:]:
        device, _, figures = line.partition(":")
        fields = figures.split()
        if len(fields) >= 9:
            found.append(Interface(device.strip(), int(fields[0]), int(fields[8])))
    return found


def parse_diskstats(text: str) -> list[Disk]:
    """``/proc/diskstats``: major, minor, name, then reads completed, merged, sectors, ms reading,
    writes completed, merged, sectors, ms writing, I/Os in progress, ms doing I/O, ..."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 13 or IGNORED_DISKS.match(fields[2]):
            continue
        reads, read_ms, writes, write_ms, io_ms = (int(fields[i]) for i in (3, 6, 7, 10, 12))
        found.append(Disk(fields[2], reads, read_ms / _MS, writes, write_ms / _MS, io_ms / _MS))
    return found


def parse_cpu(text: str, ticks_per_second: int) -> dict[str, dict[str, float]]:
    """Seconds per mode per CPU (``"0"``, ``"1"``...) from ``/proc/stat``'s ``cpuN`` lines."""
    found: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu" and name[3:].isdigit():
            found[name[3:]] = {mode: int(value) / ticks_per_second for mode, value in zip(CPU_MODES, fields)}
    return found


def _unescape(field: str) -> str:
    # The kernel writes a space in a mount point as \040 (and tab, newline, backslash likewise).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> list[Mount]:
    """``/proc/self/mounts``: device, mount point, type, options..."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            found.append(Mount(_unescape(fields[0]), _unescape(fields[1]), fields[2]))
    return found


def mount_of(path: Path, mounts: Sequence[Mount]) -> Mount | None:
    """The mount that holds ``path`` (absolute, resolved): the last-mounted of the longest mount
    points above it, as the kernel resolves it."""
    best: Mount | None = None
    for mount in mounts:
        point = Path(mount.mountpoint)
        if (path == point or point in path.parents) and (best is None or len(point.parts) >= len(Path(best.mountpoint).parts)):
            best = mount
    return best


def families(interfaces: Iterable[Interface], speeds_bytes: dict[str, float], disks: Iterable[Disk],
             filesystems: Iterable[Filesystem], cpus: dict[str, dict[str, float]]) -> list[Metric]:
    """node_exporter's metric families of the figures. Pure."""
    receive = CounterMetricFamily("node_network_receive_bytes", "Network device statistic receive_bytes.",
                                  labels=["device"])
    transmit = CounterMetricFamily("node_network_transmit_bytes", "Network device statistic transmit_bytes.",
                                   labels=["device"])
    speed = GaugeMetricFamily("node_network_speed_bytes", "Network device property: speed in bytes per second.",
                              labels=["device"])
    for interface in interfaces:
        receive.add_metric([interface.device], interface.receive_bytes)
        transmit.add_metric([interface.device], interface.transmit_bytes)
        if interface.device in speeds_bytes:
            speed.add_metric([interface.device], speeds_bytes[interface.device])
    disk_families = {
        "reads": CounterMetricFamily("node_disk_reads_completed", "The total number of reads completed successfully.",
                                     labels=["device"]),
        "read_seconds": CounterMetricFamily("node_disk_read_time_seconds", "The total number of seconds spent by all "
                                            "reads.", labels=["device"]),
        "writes": CounterMetricFamily("node_disk_writes_completed", "The total number of writes completed "
                                      "successfully.", labels=["device"]),
        "write_seconds": CounterMetricFamily("node_disk_write_time_seconds", "This is the total number of seconds "
                                             "spent by all writes.", labels=["device"]),
        "io_seconds": CounterMetricFamily("node_disk_io_time_seconds", "Total seconds spent doing I/Os.",
                                          labels=["device"]),
    }
    for disk in disks:
        for field, family in disk_families.items():
            family.add_metric([disk.device], getattr(disk, field))
    labels = ["device", "mountpoint", "fstype"]
    size = GaugeMetricFamily("node_filesystem_size_bytes", "Filesystem size in bytes.", labels=labels)
    free = GaugeMetricFamily("node_filesystem_free_bytes", "Filesystem free space in bytes.", labels=labels)
    avail = GaugeMetricFamily("node_filesystem_avail_bytes", "Filesystem space available to non-root users in bytes.",
                              labels=labels)
    for fs in filesystems:
        names = [fs.mount.device, fs.mount.mountpoint, fs.mount.fstype]
        size.add_metric(names, fs.size_bytes)
        free.add_metric(names, fs.free_bytes)
        avail.add_metric(names, fs.avail_bytes)
    cpu = CounterMetricFamily("node_cpu_seconds", "Seconds the CPUs spent in each mode.", labels=["cpu", "mode"])
    for index, modes in cpus.items():
        for mode, seconds in modes.items():
            cpu.add_metric([index, mode], seconds)
    return [receive, transmit, speed, *disk_families.values(), size, free, avail, cpu]


class _Collected:
    def __init__(self, metrics: Sequence[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics


def render(metrics: Sequence[Metric]) -> str:
    """Prometheus's text format of ``metrics``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(metrics))
    return generate_latest(registry).decode()


def _kernel_speed(device: str) -> float | None:
    """The link speed the kernel reports, in bytes per second; None where it reports none (the
    loopback and many virtual devices answer EINVAL, others -1)."""
    try:
        mbit = int((SYS_NET / device / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return mbit * 125_000.0 if mbit > 0 else None


class HostPage:
    """The ``host:`` page of this machine: the figures read anew at every scrape."""

    def __init__(self, machines: Machines, paths: Sequence[Path]) -> None:
        self.machines = machines
        self.paths = [Path(p).resolve() for p in paths]

    def filesystems(self) -> list[Filesystem]:
        mounts = parse_mounts((PROC / "self" / "mounts").read_text())
        found: dict[str, Filesystem] = {}
        for path in self.paths:
            mount = mount_of(path, mounts)
            if mount is None or mount.mountpoint in found or not path.exists():
                continue
            stat = os.statvfs(path)
            found[mount.mountpoint] = Filesystem(mount, stat.f_blocks * stat.f_frsize, stat.f_bfree * stat.f_frsize,
                                                 stat.f_bavail * stat.f_frsize)
        return list(found.values())

    def text(self) -> str:
        interfaces = parse_net_dev((PROC / "net" / "dev").read_text())
        declared = {device: mbit * 125_000.0 for device, mbit in self.machines.link_speed_mbit.items()}
        speeds = {}
        for interface in interfaces:
            speed = _kernel_speed(interface.device) or declared.get(interface.device)
            if speed is not None:
                speeds[interface.device] = speed
        disks = parse_diskstats((PROC / "diskstats").read_text())
        cpus = parse_cpu((PROC / "stat").read_text(), os.sysconf("SC_CLK_TCK"))
        return render(families(interfaces, speeds, disks, self.filesystems(), cpus))
