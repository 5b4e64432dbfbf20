"""The host: page: /proc's and statvfs's figures in node_exporter's names and units, from the
kernel's own formats; and the page this machine gives, read back as the panels and Prometheus read it."""

from __future__ import annotations

import os
from pathlib import Path

from conveyor.config.machines import Machines
from conveyor.ops.host import (Disk, Filesystem, Interface, Mount, HostPage, families, mount_of, parse_cpu,
                               parse_diskstats, parse_mounts, parse_net_dev, render)
from conveyor.ops.scrape import parse_page

NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 8942282 1000    0    0    0     0          0         0  8942282 1000    0    0    0     0       0          0
  eth0: 6121285  5000    0    0    0     0          0         0 10014816  4000    0    0    0     0       0          0
"""
DISKSTATS = """ 253       0 vda 1325083 1000 90000 2838717 7392474 2000 800000 3803962 0 1784956 6642679 0 0 0 0
 253       1 vda1 100 0 800 50 200 0 1600 70 0 120 120 0 0 0 0
   7       0 loop0 5 0 10 1 0 0 0 0 0 1 1 0 0 0 0
 259       0 nvme0n1 10 0 80 20 30 0 240 60 0 70 80 0 0 0 0
 259       1 nvme0n1p1 1 0 8 2 3 0 24 6 0 7 8 0 0 0 0
"""
STAT = """cpu  100 0 50 1000 5 0 2 30 0 0
cpu0 50 0 25 500 2 0 1 10 0 0
cpu1 50 0 25 500 3 0 1 20 0 0
intr 12345
"""
MOUNTS = """overlay / overlay rw,relatime 0 0
proc /proc proc rw 0 0
/dev/vdb /var/lib/kafka ext4 rw 0 0
tmpfs /var/lib/kafka/with\\040space tmpfs rw 0 0
"""


def test_network_bytes_per_interface_are_the_first_receive_and_transmit_fields():
    assert parse_net_dev(NET_DEV) == [Interface("lo", 8942282, 8942282), Interface("eth0", 6121285, 10014816)]


def test_whole_disks_only_with_times_in_seconds():
    assert parse_diskstats(DISKSTATS) == [
        Disk("vda", 1325083, 2838.717, 7392474, 3803.962, 1784.956), Disk("nvme0n1", 10, 0.02, 30, 0.06, 0.07)]


def test_cpu_seconds_per_cpu_and_mode_from_ticks():
    cpus = parse_cpu(STAT, 100)
    assert sorted(cpus) == ["0", "1"]
    assert cpus["1"]["steal"] == 0.2 and cpus["0"]["user"] == 0.5 and cpus["0"]["idle"] == 5.0


def test_a_path_belongs_to_its_deepest_mount_and_escaped_spaces_are_read():
    mounts = parse_mounts(MOUNTS)
    assert mounts[3] == Mount("tmpfs", "/var/lib/kafka/with space", "tmpfs")
    assert mount_of(Path("/var/lib/kafka/logs/0"), mounts) == mounts[2]
    assert mount_of(Path("/var/lib/kafka/with space/x"), mounts) == mounts[3]
    assert mount_of(Path("/home/x"), mounts) == mounts[0]


def test_the_families_carry_node_exporter_names_labels_and_units():
    fs = Filesystem(Mount("/dev/vdb", "/var/lib/kafka", "ext4"), 1000, 300, 250)
    page = parse_page(render(families([Interface("eth0", 10, 20)], {"eth0": 125_000_000.0},
                                      [Disk("vda", 1, 0.5, 2, 1.5, 0.7)], [fs], {"0": {"steal": 3.0}})))
    samples = {(name, tuple(sorted(labels.items()))): value for f in page for name, labels, value in f.samples}
    assert samples[("node_network_transmit_bytes_total", (("device", "eth0"),))] == 20
    assert samples[("node_network_speed_bytes", (("device", "eth0"),))] == 125_000_000
    assert samples[("node_disk_io_time_seconds_total", (("device", "vda"),))] == 0.7
    labels = (("device", "/dev/vdb"), ("fstype", "ext4"), ("mountpoint", "/var/lib/kafka"))
    assert samples[("node_filesystem_avail_bytes", labels)] == 250
    assert samples[("node_filesystem_size_bytes", labels)] == 1000
    assert samples[("node_cpu_seconds_total", (("cpu", "0"), ("mode", "steal")))] == 3.0


def test_this_machines_page_reports_the_home_filesystem_and_a_declared_link_speed(tmp_path: Path):
    text = HostPage(Machines(link_speed_mbit={"lo": 800}), [tmp_path]).text()
    samples = {(name, tuple(sorted(labels.items()))): value
               for f in parse_page(text) for name, labels, value in f.samples}
    assert samples[("node_network_speed_bytes", (("device", "lo"),))] == 100_000_000
    (size,) = [v for (name, _), v in samples.items() if name == "node_filesystem_size_bytes"]
    stat = os.statvfs(tmp_path)
    assert size == stat.f_blocks * stat.f_frsize
    assert any(name == "node_cpu_seconds_total" for name, _ in samples)
