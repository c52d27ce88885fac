"""The call pipeline: what every A2A call passes on every binding, written once.

A binding is a codec: it decodes a request, opens the call's one record (`Call`,
record.py), runs the pipeline around the `A2AApi` method (pipeline.py: authentication,
then the request's own decoding, then the interceptors — the drain gate, the caller's
rate limit, the version and required extensions, and any configured ones), encodes the
reply, stream or error, and closes the record: one access line (access.py), one span
and its metrics, whatever the outcome.
"""
