"""``ops.machines``: the broker hosts watched, and where their figures say the host is the trouble."""

from __future__ import annotations

from pydantic import Field, model_validator

from conveyor.config.units import Model, Seconds


class Machines(Model):
    """Thresholds of the rules over node_exporter's metrics (``conveyor ops rules``), and what the
    local runtime's node_exporter (``runtime.node_exporter``) must report of this machine."""

    #: Folders whose filesystems the local node_exporter reports, besides the runtime home (where
    #: the local brokers keep their logs), even where Debian's build leaves their mounts out (/mnt,
    #: /media, /run): a disk mounted for the logs elsewhere, for example.
    paths: list[str] = Field(default_factory=list)
    #: Link speed in Mbit/s of interfaces that report none (the loopback, many virtual NICs), which
    #: the host rules take for their node_network_speed_bytes on every host; a speed the kernel
    #: reports wins.
    link_speed_mbit: dict[str, float] = Field(default_factory=dict)
    #: Bytes sent or received per second over the link's speed above this: the link is saturated
    #: (the reports' 1 Gb uplink).
    network_ratio: float = Field(default=0.8, gt=0, le=1)
    #: Share of time a disk is busy above this: saturated (a RAID rebuild, a compaction storm).
    disk_busy_ratio: float = Field(default=0.9, gt=0, le=1)
    #: Mean time per disk I/O above this: a disk going bad, or one drowned in requests.
    disk_await: Seconds = Field(default=0.1, gt=0)
    #: Share of a filesystem in use: a warning above the first, critical above the second (a broker
    #: whose log disk fills stops).
    filesystem_warn: float = Field(default=0.85, gt=0, lt=1)
    filesystem_alarm: float = Field(default=0.95, gt=0, lt=1)
    #: Share of CPU time the hypervisor gave to others (steal) above this: a noisy neighbour.
    cpu_steal_ratio: float = Field(default=0.1, gt=0, le=1)
    #: The window the rates are taken over, and how long a rule must hold before it fires.
    window: Seconds = Field(default=300.0, gt=0)
    hold: Seconds = Field(default=300.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Machines:
        if self.filesystem_warn > self.filesystem_alarm:
            raise ValueError("filesystem_warn must not be above filesystem_alarm")
        for device, speed in self.link_speed_mbit.items():
            if speed <= 0:
                raise ValueError(f"link_speed_mbit: {device} must be above 0 Mbit/s")
        return self
