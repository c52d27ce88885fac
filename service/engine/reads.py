"""Reads: GetTask, ListTasks, a task's stored files and latest sequence number. A task
live here is read from its run (its latest state, once loaded); any other from the store.
"""

from __future__ import annotations

from gen import a2a_pb2 as pb
from service.engine.files import FileArtifacts, StoredFile
from service.engine.runs import Runs
from service.protocol.errors import TaskNotFoundError
from service.protocol.views import (
    check_page_size,
    decode_cursor,
    encode_cursor,
    shape_task,
    status_after,
)
from service.store import Scope, TaskQuery, TaskStore


class Reads:
    def __init__(self, store: TaskStore, files: FileArtifacts | None, runs: Runs) -> None:
        self.store = store
        self.files = files
        self.runs = runs

    async def get(self, scope: Scope, task_id: str) -> pb.Task:
        run = self.runs.get(scope, task_id)
        if run is not None and run.task is not None and run.ready is None:
            return run.task
        task = await self.store.get(scope, task_id)
        if task is None:
            raise TaskNotFoundError(f"Task {task_id} not found.")
        return task

    async def stored_file(self, scope: Scope, task_id: str, sha256: str) -> StoredFile:
        """A file artifact of a task the scope can see (TaskNotFoundError, as GetTask, for
        any other task; also for a hash the task has no file of)."""
        task = await self.get(scope, task_id)
        found = await self.files.find(scope, task, sha256) if self.files is not None else None
        if found is None:
            raise TaskNotFoundError(f"Task {task_id} has no stored file {sha256}.")
        return found

    async def release_files(self, scope: Scope, task_id: str) -> int:
        """For task retention, when it deletes a task: its stored files go, unless another
        task stored the same bytes. Returns how many blobs were deleted."""
        return await self.files.release_task(scope, task_id) if self.files is not None else 0

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        """The task's latest committed event (0 when none): where a new listener starts."""
        return await self.store.last_seq(scope, task_id)

    async def latest_in_context(self, scope: Scope, context_id: str) -> pb.Task | None:
        """The context's task with the latest status (committed), or None."""
        page = await self.store.list(scope, TaskQuery(context_id=context_id, page_size=1))
        return page.tasks[0] if page.tasks else None

    async def list(self, scope: Scope, request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        page_size = check_page_size(request.page_size if request.HasField("page_size") else None)
        query = TaskQuery(
            context_id=request.context_id,
            state=request.status,
            status_after_us=status_after(request),
            page_size=page_size,
            cursor=decode_cursor(self.store.page_token_key, scope, request.page_token)
            if request.page_token
            else None,
        )
        page = await self.store.list(scope, query)
        history = request.history_length if request.HasField("history_length") else None
        include = request.include_artifacts if request.HasField("include_artifacts") else False
        response = pb.ListTasksResponse(
            page_size=page_size,
            total_size=page.total_size,
            next_page_token=encode_cursor(self.store.page_token_key, scope, page.next_cursor)
            if page.next_cursor
            else "",
        )
        for task in page.tasks:  # committed snapshots: they are what the filters and order saw
            response.tasks.append(shape_task(task, history, include))
        return response
