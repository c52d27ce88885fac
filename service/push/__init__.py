"""Push notifications that arrive: validated callbacks, durable queues, retries.

One concept per module:

    ssrf.py         which callback URLs may be called; pins connections to checked addresses
    transport.py    the pinned HTTP client
    crypto.py       tokens and credentials sealed at rest (Fernet, key rotation)
    queue_base.py   the queue seam (jobs, lanes, leases, cursors)
    queue_file.py   `local-file`: atomic files under the data directory (default)
    queue_redis.py  `redis-streams`: Redis Stream + consumer group, shared by replicas
    dispatcher.py   committed task events -> jobs, with crash-safe cursors
    delivery.py     the worker: POST, retry with backoff, dead-letter
    notifier.py     the parts put together for the composition root
    settings.py     validation of the push_* configuration keys
    (the push-dead command line is service/app/push_cli.py)
"""

from service.push.notifier import PushNotifications, open_queue

__all__ = ["PushNotifications", "open_queue"]
