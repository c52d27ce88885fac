"""Task state classes, as the protocol defines them."""

from gen import a2a_pb2 as pb

TERMINAL = frozenset(
    {pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED, pb.TASK_STATE_REJECTED}
)
INTERRUPTED = frozenset({pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED})
SETTLED = TERMINAL | INTERRUPTED  # a turn ends here: requests return, streams close


_NAMES = {number: name for name, number in pb.TaskState.items()}


def state_name(state: int) -> str:
    return _NAMES.get(state) or str(state)  # a dict, not TaskState.Name: on the hot path


def ends_stream(event: pb.StreamResponse, until: frozenset[int] = SETTLED) -> bool:
    """Whether a stream that lasts `until` one of these states ends after this event: SETTLED
    for one turn's stream (SendStreamingMessage), TERMINAL for SubscribeToTask (it lives
    through a pause). A direct Message reply ends any stream."""
    kind = event.WhichOneof("payload")
    if kind == "message":
        return True
    if kind == "status_update":
        return event.status_update.status.state in until
    if kind == "task":
        return event.task.status.state in until
    return False
