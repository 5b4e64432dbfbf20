"""The local node_exporter's flags: only the host rules' collectors, the loopback counted, and
Debian's filesystem exclusions minus those that would hide the runtime home's or a watched
folder's mount. No process starts."""

from __future__ import annotations

import re
from pathlib import Path

from conveyor.runtime.node_exporter import Mount, filesystem_flags, flags, mount_of, parse_mounts

DEBIAN_MOUNT_POINTS = "^/(dev|proc|run|sys|mnt|media|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)"
DEBIAN_FS_TYPES = ("^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|iso9660|"
                   "mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|sysfs|tracefs)$")


def _excluded(watched: list[Mount]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    points, types = (flag.split("=", 1)[1] for flag in filesystem_flags(watched))
    return re.compile(points), re.compile(types)


def test_a_home_on_the_root_filesystem_keeps_debians_exclusions() -> None:
    points, types = _excluded([Mount("/", "ext4")])
    assert (points.pattern, types.pattern) == (DEBIAN_MOUNT_POINTS, DEBIAN_FS_TYPES)


def test_a_watched_mount_debian_leaves_out_is_reported_and_the_rest_stay_out() -> None:
    # A log disk mounted under /mnt, and a home in a container's overlay root.
    points, types = _excluded([Mount("/mnt/kafka-logs", "xfs"), Mount("/", "overlay")])
    assert not points.match("/mnt/kafka-logs") and not types.match("overlay")
    assert all(points.match(p) for p in ("/proc", "/sys/fs/cgroup", "/run/user/0", "/var/lib/docker/overlay2/x"))
    assert all(types.match(t) for t in ("proc", "cgroup2", "squashfs"))


def test_the_mount_of_a_folder_is_the_last_of_the_longest_mount_points_above_it() -> None:
    table = parse_mounts("/dev/vda / ext4 rw 0 0\n"
                         "tmpfs /srv/kafka\\040logs tmpfs rw 0 0\n"
                         "/dev/vdb /srv/kafka\\040logs xfs rw 0 0\n")
    assert mount_of(Path("/srv/kafka logs/dc1"), table) == Mount("/srv/kafka logs", "xfs")
    assert mount_of(Path("/srv/other"), table) == Mount("/", "ext4")


def test_only_the_rules_collectors_run_on_loopback_with_the_loopback_counted() -> None:
    argv = flags("127.0.0.1:18061", [Mount("/", "ext4")])
    assert argv[:2] == ["--web.listen-address=127.0.0.1:18061", "--collector.disable-defaults"]
    assert {a for a in argv if re.fullmatch(r"--collector\.\w+", a)} == {
        f"--collector.{name}" for name in ("cpu", "diskstats", "filesystem", "netclass", "netdev")}
    assert "--collector.netdev.device-exclude=^$" in argv and "--collector.netclass.ignore-invalid-speed" in argv
