"""The projection engine's errors (re-exported by ``projections.engine`` and ``projections``)."""

from __future__ import annotations

from typing import Any

class ProjectionError(Exception):
    """A projection could not be defined, applied, built or read. The message says which and why."""


class PositionConflict(ProjectionError):
    """A batch was refused because the view is already at or past its first position (exactly once)."""


class BuildsNotAligned(ProjectionError):
    """Two builds cannot be compared: they are not at the same notification position."""


class BuildBusy(ProjectionError):
    """Another writer holds the lease of a build (or of a projection's rebuild); nothing was written."""


class BuildGone(ProjectionError):
    """The build being caught up was dropped meanwhile (a rebuild switched readers and pruned it)."""


class ProjectionFailed(ProjectionError):
    """A projection cannot apply an event: its ``apply`` raised, or the rows it gives cannot be stored.

    ``notification_id`` (with the stream, its version and the topic) names the event; it is None while
    the failure is only known for a whole batch (rows are written at the end of a batch), until the
    runner has narrowed the batch down to the one event."""

    def __init__(self, projection: str, version: int, reason: str, notification_id: int | None = None,
                 stream_id: Any = None, stream_version: int | None = None, topic: str | None = None) -> None:
        self.projection, self.version, self.reason = projection, version, reason
        self.notification_id, self.stream_id = notification_id, stream_id
        self.stream_version, self.topic = stream_version, topic
        if notification_id is None:
            where = "a batch"
        else:
            where = (f"stream {stream_id} version {stream_version} (notification {notification_id}, {topic})")
        super().__init__(f"projection {projection} v{version} cannot apply {where}: {reason}")

    def at(self, notification_id: int, event: Any) -> ProjectionFailed:
        """The same failure, pinned to one event."""
        return ProjectionFailed(self.projection, self.version, self.reason, notification_id,
                                event.originator_id, event.originator_version,
                                getattr(type(event), "TOPIC", type(event).__name__))

