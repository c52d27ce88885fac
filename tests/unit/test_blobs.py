"""The blob store (service.store.blobs) and the file artifacts over it (service.engine.files),
on a real directory: content addressing, deduplication, references per task and their
release (what task retention calls), limits, and the url part a stored file becomes."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os

import pytest
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.agent import Caller, FileArtifactLimitError, TurnContext
from service.engine.bus import InProcessBus
from service.engine.files import FileArtifacts, clean_filename, clean_media_type
from service.engine.registry import Engine
from service.protocol.errors import TaskNotFoundError
from service.store import Scope
from service.store.blobs import BlobTooLargeError, LocalBlobStore
from service.store.memory import MemoryTaskStore
from tests.conftest import user_message

ALICE = Scope("acme", "bearer:alice")
BOB = Scope("acme", "bearer:bob")
DATA = b"some bytes worth keeping"
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def blobs(tmp_path):
    return LocalBlobStore(tmp_path / "files")


async def test_bytes_path_and_stream_store_the_same_blob(blobs, tmp_path):
    source = tmp_path / "source.txt"
    source.write_bytes(DATA)
    a = await blobs.put(ALICE, "t1", DATA, 1000)
    b = await blobs.put(ALICE, "t2", source, 1000)
    c = await blobs.put(BOB, "t3", io.BytesIO(DATA), 1000)
    assert a.sha256 == b.sha256 == c.sha256 == SHA and a.size == len(DATA)
    assert a.path == blobs.object_path(SHA) and a.path.read_bytes() == DATA
    assert blobs.count() == 1  # deduplicated
    assert not os.access(a.path, os.W_OK) or os.geteuid() == 0  # read-only
    assert list((blobs.root / "tmp").iterdir()) == []


async def test_find_only_for_a_task_that_stored_it(blobs):
    await blobs.put(ALICE, "t1", DATA, 1000)
    assert (await blobs.find(ALICE, "t1", SHA)).size == len(DATA)
    assert await blobs.find(BOB, "t1", SHA) is None  # another owner
    assert await blobs.find(Scope("", "bearer:alice"), "t1", SHA) is None  # another tenant
    assert await blobs.find(ALICE, "t2", SHA) is None  # another task
    assert await blobs.find(ALICE, "t1", "../" + SHA[3:]) is None
    assert await blobs.find(ALICE, "t1", "0" * 64) is None


async def test_release_deletes_a_blob_with_its_last_reference(blobs):
    await blobs.put(ALICE, "t1", DATA, 1000)
    await blobs.put(BOB, "t2", DATA, 1000)
    other = await blobs.put(ALICE, "t1", b"only in t1", 1000)
    assert blobs.count() == 2
    assert await blobs.release_task(ALICE, "t1") == 1  # its own blob; the shared one stays
    assert blobs.count() == 1 and not other.path.exists()
    assert await blobs.find(ALICE, "t1", SHA) is None
    assert (await blobs.find(BOB, "t2", SHA)).path.read_bytes() == DATA
    assert await blobs.release_task(ALICE, "t1") == 0  # idempotent
    assert await blobs.release_task(BOB, "t2") == 1
    assert blobs.count() == 0
    assert list((blobs.root / "refs").iterdir()) == []
    assert list((blobs.root / "tasks").iterdir()) == []
    again = await blobs.put(BOB, "t4", DATA, 1000)  # stored anew after its deletion
    assert again.path.read_bytes() == DATA


async def test_the_same_task_storing_twice_is_one_reference(blobs):
    await blobs.put(ALICE, "t1", DATA, 1000)
    await blobs.put(ALICE, "t1", DATA, 1000)
    assert await blobs.release_task(ALICE, "t1") == 1 and blobs.count() == 0


async def test_too_large_stores_nothing(blobs, tmp_path):
    source = tmp_path / "big"
    source.write_bytes(b"x" * 100)
    for big in (b"x" * 100, source, io.BytesIO(b"x" * 100)):
        with pytest.raises(BlobTooLargeError):
            await blobs.put(ALICE, "t1", big, 99)
    assert blobs.count() == 0 and list((blobs.root / "tmp").iterdir()) == []
    assert (await blobs.put(ALICE, "t1", b"x" * 99, 99)).size == 99


async def test_a_non_regular_path_is_refused(blobs, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "sub").mkdir()
    for special in (tmp_path / "fifo", tmp_path / "sub"):
        with pytest.raises(ValueError, match="not a regular file"):
            await blobs.put(ALICE, "t1", special, 10)
    assert blobs.count() == 0


async def test_stale_half_written_blobs_are_swept(tmp_path):
    root = tmp_path / "files"
    (root / "tmp").mkdir(parents=True)
    stale, fresh = root / "tmp" / "put-old", root / "tmp" / "put-new"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"being written")
    os.utime(stale, (0, 0))
    await LocalBlobStore(root).put(ALICE, "t1", DATA, 1000)
    assert not stale.exists() and fresh.exists()


async def test_a_half_written_blob_is_kept_while_its_writer_holds_it(tmp_path):
    import fcntl

    blobs = LocalBlobStore(tmp_path / "files")
    await blobs.put(ALICE, "t1", DATA, 1000)
    dead, alive = tmp_path / "files" / "tmp" / "put-dead", tmp_path / "files" / "tmp" / "put-alive"
    dead.write_bytes(b"half")
    alive.write_bytes(b"still being written")
    os.utime(dead, (0, 0))
    os.utime(alive, (0, 0))  # old, but its writer (this test) holds its lock
    held = os.open(alive, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert await blobs.sweep_tmp() == 1  # what retention runs, not only startup
        assert not dead.exists() and alive.exists()
    finally:
        os.close(held)
    assert await blobs.sweep_tmp() == 1 and not alive.exists()  # its writer is gone now


async def test_temporary_directories_of_ended_processes_are_removed(tmp_path, monkeypatch):
    import tempfile

    from service.store import blobs as blob_module

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = LocalBlobStore.temporary()  # a live process's: kept while it holds its lock
    os.utime(live.root, (0, 0))
    left = LocalBlobStore.temporary()  # a process that is killed: it never closes
    await left.put(ALICE, "t1", DATA, 1000)
    assert left._owner is not None
    os.close(left._owner)  # what the kernel does when that process dies
    os.utime(left.root, (0, 0))
    assert blob_module.remove_abandoned_directories() == 1
    assert not left.root.exists() and live.root.exists()
    left = LocalBlobStore.temporary()
    os.close(left._owner)
    os.utime(left.root, (0, 0))
    again = LocalBlobStore.temporary()  # a new process's start removes it, not a live one
    assert not left.root.exists() and live.root.exists() and again.root.exists()
    await live.close()
    await again.close()
    assert not live.root.exists() and not again.root.exists()


async def test_an_ephemeral_store_is_removed_on_close(tmp_path):
    store = LocalBlobStore(tmp_path / "tmpfiles", ephemeral=True)
    await store.put(ALICE, "t1", DATA, 1000)
    await store.close()
    assert not (tmp_path / "tmpfiles").exists()
    durable = LocalBlobStore(tmp_path / "keep")
    await durable.put(ALICE, "t1", DATA, 1000)
    await durable.close()
    assert durable.count() == 1


# ---- FileArtifacts: the part, the limits ---------------------------------------------


async def test_the_part_names_the_route_size_and_hash(blobs):
    files = FileArtifacts(blobs, base_url="https://a2a.example/", local_urls=True)
    part, size = await files.store(ALICE, "t1", DATA, "out/report.txt", None, used=0)
    assert size == len(DATA)
    assert part.url == f"https://a2a.example/acme/tasks/t1/files/{SHA}"
    assert part.filename == "report.txt" and part.media_type == "text/plain"
    meta = json_format.MessageToDict(part.metadata)["a2a_service"]
    assert meta == {
        "byteSize": len(DATA),
        "sha256": SHA,
        "fileUrl": blobs.object_path(SHA).resolve().as_uri(),
    }
    task = pb.Task(id="t1")
    task.artifacts.add(artifact_id="a").parts.append(part)
    found = await files.find(ALICE, task, SHA)
    assert found is not None and found.filename == "report.txt" and found.size == len(DATA)
    assert await files.find(BOB, task, SHA) is None
    assert await files.release_task(ALICE, "t1") == 1
    assert await files.find(ALICE, task, SHA) is None


async def test_limits_name_the_file_and_the_setting(blobs):
    files = FileArtifacts(blobs, base_url="", max_file_bytes=10, max_turn_bytes=15)
    with pytest.raises(FileArtifactLimitError, match=r"'a\.bin'.*file_artifact_max_bytes"):
        await files.store(ALICE, "t1", b"x" * 11, "a.bin", None, used=0)
    part, size = await files.store(ALICE, "t1", b"x" * 10, "b.bin", None, used=0)
    assert part.url == f"/acme/tasks/t1/files/{hashlib.sha256(b'x' * 10).hexdigest()}"
    with pytest.raises(FileArtifactLimitError, match="file_artifacts_max_bytes_per_turn"):
        await files.store(ALICE, "t1", b"y" * 6, "c.bin", None, used=size)
    assert blobs.count() == 1


def test_file_names_and_media_types():
    assert clean_filename("../../etc/passwd") == "passwd"
    assert clean_filename("C:\\Users\\x\\a.txt") == "a.txt"
    assert clean_filename("bad\r\nname.txt") == "badname.txt"
    assert len(clean_filename("x" * 300 + ".txt").encode()) == 255
    assert clean_filename("x" * 300 + ".txt").endswith(".txt")
    for hopeless in ("", "..", "dir/", "\x00"):
        with pytest.raises(ValueError):
            clean_filename(hopeless)
    assert clean_media_type(None, "a.png") == "image/png"
    assert clean_media_type(None, "a.unknownext") == "application/octet-stream"
    assert clean_media_type("Text/Markdown; charset=utf-8", "a") == "text/markdown"
    with pytest.raises(ValueError):
        clean_media_type("text/plain\r\nX-Evil: 1", "a")


# ---- through the engine: ctx.file_artifact on a TaskRun ------------------------------


class FileTurns:
    """`path P`: a file by path; `nameless`: bytes without a file name; `twice N`: two files
    of N bytes in one turn; then the turn completes."""

    async def run(self, ctx: TurnContext) -> None:
        word, _, rest = ctx.text.partition(" ")
        if word == "path":
            await ctx.file_artifact(rest)
        elif word == "nameless":
            await ctx.file_artifact(b"x")
        elif word == "twice":
            for name in ("one.bin", "two.bin"):
                await ctx.file_artifact(os.urandom(int(rest)), filename=name)


async def _settle(engine: Engine, text: str) -> pb.Task:
    turn = await engine.send(ALICE, user_message(text), Caller())
    outcome = await asyncio.wait_for(engine.wait(turn), 5)
    assert isinstance(outcome, pb.Task)
    return outcome


async def test_file_artifacts_through_the_engine(blobs, tmp_path):
    files = FileArtifacts(blobs, base_url="http://h", max_file_bytes=100, max_turn_bytes=150)
    engine = Engine(MemoryTaskStore(), FileTurns(), InProcessBus(), files=files)
    source = tmp_path / "notes.md"
    source.write_bytes(DATA)
    try:
        task = await _settle(engine, f"path {source}")
        assert task.status.state == pb.TASK_STATE_COMPLETED
        [part] = task.artifacts[0].parts
        assert part.filename == "notes.md" and part.media_type == "text/markdown"
        found = await engine.stored_file(ALICE, task.id, SHA)
        assert found.path == str(blobs.object_path(SHA)) and found.filename == "notes.md"
        with pytest.raises(TaskNotFoundError):
            await engine.stored_file(BOB, task.id, SHA)
        with pytest.raises(TaskNotFoundError):
            await engine.stored_file(ALICE, task.id, "0" * 64)

        again = await _settle(engine, f"path {source}")  # the same bytes: one blob
        assert blobs.count() == 1
        assert await engine.release_files(ALICE, task.id) == 0  # `again` still has them
        with pytest.raises(TaskNotFoundError):
            await engine.stored_file(ALICE, task.id, SHA)
        assert (await engine.stored_file(ALICE, again.id, SHA)).size == len(DATA)
        assert await engine.release_files(ALICE, again.id) == 1
        assert blobs.count() == 0

        nameless = await _settle(engine, "nameless")
        assert nameless.status.state == pb.TASK_STATE_FAILED  # a ValueError of the agent

        fits = await _settle(engine, "twice 70")  # 140 of 150 bytes
        assert [a.name for a in fits.artifacts] == ["one.bin", "two.bin"]
        over = await _settle(engine, "twice 80")  # the second would make 160
        assert over.status.state == pb.TASK_STATE_FAILED
        assert [a.name for a in over.artifacts] == ["one.bin"]
    finally:
        await engine.shutdown()


async def test_an_engine_without_files_refuses_them(tmp_path):
    engine = Engine(MemoryTaskStore(), FileTurns(), InProcessBus())
    try:
        task = await _settle(engine, "twice 1")
        assert task.status.state == pb.TASK_STATE_FAILED and not task.artifacts
        with pytest.raises(TaskNotFoundError):
            await engine.stored_file(ALICE, task.id, SHA)
        assert await engine.release_files(ALICE, task.id) == 0
    finally:
        await engine.shutdown()
