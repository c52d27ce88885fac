"""A SendMessage whose push config cannot be stored runs no agent and stores no task."""

from __future__ import annotations

import asyncio
import shutil

import grpc
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.agents import RecordingAgent
from tests.conftest import user_message
from tests.grpc_util import expect_error


@pytest.mark.parametrize("store", ["memory:", "sqlite"])
@pytest.mark.parametrize("stream", [False, True], ids=["send", "stream"])
async def test_a_push_config_that_cannot_be_stored_starts_nothing(
    start_service, tmp_path, store, stream
):
    store_url = "memory:" if store == "memory:" else f"sqlite:{tmp_path / 'tasks.db'}"
    service = await start_service(
        store=store_url, agent="tests.agents:RecordingAgent", push_allow_networks=["127.0.0.0/8"]
    )
    # Break the push queue under the running server: its files can no longer be written.
    queue_tmp = tmp_path / "data" / "push-queue" / "tmp"
    shutil.rmtree(queue_tmp)
    queue_tmp.write_text("not a directory")
    RecordingAgent.turns.clear()
    config = pb.SendMessageConfiguration(
        task_push_notification_config=pb.TaskPushNotificationConfig(
            id="hook", url="http://127.0.0.1:9/hook"
        )
    )
    request = pb.SendMessageRequest(message=user_message("must not run"), configuration=config)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        call = stub.SendStreamingMessage(request) if stream else stub.SendMessage(request)
        await expect_error(
            call.read() if stream else call, grpc.StatusCode.INTERNAL, "INTERNAL_ERROR"
        )
        listed = await stub.ListTasks(pb.ListTasksRequest())
    assert RecordingAgent.turns == []  # the agent never ran for a request not wholly stored
    assert listed.total_size == 0 and not listed.tasks
    # Without a push config the same request runs normally.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        done = await stub.SendMessage(pb.SendMessageRequest(message=user_message("runs")))
    assert done.task.status.state == pb.TASK_STATE_COMPLETED and RecordingAgent.turns == ["runs"]


async def test_past_the_call_limit_grpc_answers_resource_exhausted_with_a_retry_hint(start_service):
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    from tests.push_util import eventually

    service = await start_service(
        store="memory:", agent="tests.agents:ScriptedAgent", grpc_max_concurrent_calls=3
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        hanging = [
            stub.SendMessage(pb.SendMessageRequest(message=user_message("hang"))) for _ in range(3)
        ]
        refused: list[grpc.aio.AioRpcError] = []

        async def one_more_is_refused() -> bool:
            try:
                await stub.ListTasks(pb.ListTasksRequest())
            except grpc.aio.AioRpcError as err:
                refused.append(err)
                return True
            return False

        await eventually(one_more_is_refused, 10, "a call past the limit refused")
        err = refused[-1]
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
        details = {d.TypeName(): d for d in rpc_status.from_call(err).details}
        info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
        details["google.rpc.ErrorInfo"].Unpack(info)
        details["google.rpc.RetryInfo"].Unpack(retry)
        assert info.reason == "RESOURCE_EXHAUSTED" and info.metadata["limit"] == "3"
        assert retry.retry_delay.seconds == 1
        for call in hanging:
            call.cancel()
        # Calls that ended free their places.
        await eventually(lambda: _lists(stub), 10, "calls accepted again")


async def _lists(stub) -> bool:
    try:
        await stub.ListTasks(pb.ListTasksRequest())
    except grpc.aio.AioRpcError:
        return False
    return True


async def test_a_burst_far_past_the_call_limit_is_refused_never_cancelled(start_service):
    """2,000 calls at once on one connection: grpc-core queues calls the servicer has not
    taken yet and, past its own default (1,000), cancels some at random; every call must
    instead reach the call limit and be answered (the burst is twice that default)."""
    service = await start_service(
        store="memory:", agent="tests.agents:ScriptedAgent", grpc_max_concurrent_calls=100
    )
    outcomes: dict[str, int] = {}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)

        async def one() -> None:
            try:
                await stub.SendMessage(pb.SendMessageRequest(message=user_message("sleep 1")))
                code = "OK"
            except grpc.aio.AioRpcError as err:
                code = err.code().name
            outcomes[code] = outcomes.get(code, 0) + 1

        await asyncio.gather(*(one() for _ in range(2000)))
    assert set(outcomes) == {"OK", "RESOURCE_EXHAUSTED"}, outcomes
    assert outcomes["RESOURCE_EXHAUSTED"] >= 1000, outcomes
