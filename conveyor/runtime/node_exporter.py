"""The flags of the local node_exporter (Debian's ``prometheus-node-exporter`` 1.5.0) that watches
this machine for the host rules (``conveyor.ops.rules.host_rules``).

Only the collectors those rules and the ``hosts`` panel read run. Debian's build leaves out what
the rules need: the loopback (the local brokers talk over it) and mounts under /run, /mnt and
/media. So the loopback is counted, and the filesystem exclusions are Debian's minus whatever
would hide the mount holding the runtime home or a folder of ``ops.machines.paths``.
Pure but for :func:`mounts`, which reads this machine's mount table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: cpu: steal; diskstats: busy and time per I/O; filesystem: size and space; netdev: bytes per
#: interface; netclass: the link's speed.
COLLECTORS = ("cpu", "diskstats", "filesystem", "netclass", "netdev")
#: Debian's defaults of --collector.filesystem.mount-points-exclude, one alternative each.
MOUNT_POINTS_EXCLUDED = ("dev", "proc", "run", "sys", "mnt", "media", "var/lib/docker/.+",
                         "var/lib/containers/storage/.+")
#: And of --collector.filesystem.fs-types-exclude.
FS_TYPES_EXCLUDED = ("autofs", "binfmt_misc", "bpf", "cgroup2?", "configfs", "debugfs", "devpts", "devtmpfs",
                     "fusectl", "hugetlbfs", "iso9660", "mqueue", "nsfs", "overlay", "proc", "procfs", "pstore",
                     "rpc_pipefs", "securityfs", "selinuxfs", "squashfs", "sysfs", "tracefs")


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    fstype: str


def _unescape(field: str) -> str:
    # The kernel writes a space in a mount point as \040 (and tab, newline, backslash likewise).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> list[Mount]:
    """``/proc/self/mounts``: device, mount point, type, options..."""
    return [Mount(_unescape(fields[1]), fields[2]) for fields in map(str.split, text.splitlines()) if len(fields) >= 3]


def mount_of(path: Path, mounts: Sequence[Mount]) -> Mount | None:
    """The mount that holds ``path`` (absolute, resolved): the last-mounted of the longest mount
    points above it, as the kernel resolves it."""
    best: Mount | None = None
    for mount in mounts:
        point = Path(mount.mountpoint)
        if (path == point or point in path.parents) and (best is None or len(point.parts) >= len(Path(best.mountpoint).parts)):
            best = mount
    return best


def filesystem_flags(watched: Sequence[Mount]) -> list[str]:
    """Debian's filesystem exclusions without the alternatives that would leave out a ``watched`` mount."""
    points = [alt for alt in MOUNT_POINTS_EXCLUDED
              if not any(re.match(f"^/({alt})($|/)", m.mountpoint) for m in watched)]
    types = [alt for alt in FS_TYPES_EXCLUDED if not any(re.fullmatch(alt, m.fstype) for m in watched)]
    return [f"--collector.filesystem.mount-points-exclude=^/({'|'.join(points)})($|/)",
            f"--collector.filesystem.fs-types-exclude=^({'|'.join(types)})$"]


def flags(listen: str, watched: Sequence[Mount]) -> list[str]:
    return [f"--web.listen-address={listen}", "--collector.disable-defaults",
            *(f"--collector.{name}" for name in COLLECTORS),
            # Debian's build leaves out the loopback, which carries the local brokers' traffic.
            "--collector.netdev.device-exclude=^$",
            # A link that reports no speed (-1) gets none, so a speed of ops.machines.link_speed_mbit
            # stands in for it in the rules instead of a negative one.
            "--collector.netclass.ignore-invalid-speed",
            *filesystem_flags(watched), "--log.level=warn"]


def mounts() -> list[Mount]:
    """This machine's mount table."""
    return parse_mounts(Path("/proc/self/mounts").read_text())
