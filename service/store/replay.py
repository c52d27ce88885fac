"""A stored snapshot brought up to date with the artifact updates stored after it.

A store that keeps an older snapshot of a streaming task (service.store.base, `steady`
saves) holds its newer chunks only as events; a read applies them here, the way the
engine applied them to the live task (service.engine.run `TaskRun.artifact`): an append
to an artifact the task has adds the chunk's parts to it; any other update replaces the
artifact of that id, or adds it when the task has none.
"""

from __future__ import annotations

from collections.abc import Iterable

from gen import a2a_pb2 as pb


def apply_artifact_updates(task: pb.Task, events: Iterable[pb.StreamResponse]) -> pb.Task:
    """`task` with the artifact updates among `events` applied, in order (others are
    skipped: a save that changes anything else stores its snapshot)."""
    index: dict[str, int] = {}
    for i, artifact in enumerate(task.artifacts):
        index.setdefault(artifact.artifact_id, i)  # the first of an id, as the engine finds it
    for event in events:
        if not event.HasField("artifact_update"):
            continue
        update = event.artifact_update
        artifact_id = update.artifact.artifact_id
        at = index.get(artifact_id)
        if at is None:
            index[artifact_id] = len(task.artifacts)
            task.artifacts.append(update.artifact)
        elif update.append:
            task.artifacts[at].parts.extend(update.artifact.parts)
        else:
            task.artifacts[at].CopyFrom(update.artifact)
    return task
