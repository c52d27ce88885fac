"""service/telemetry/gather.py: every worker's Prometheus text served as one, by label."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from service.telemetry import gather

TEXT = """# HELP a2a_x_total things
# TYPE a2a_x_total counter
a2a_x_total{m="a"} {value}
"""


def test_two_workers_texts_merge_into_one_family_labelled_by_worker(tmp_path):
    servers = [
        gather.OwnText(
            gather.socket_path(str(tmp_path), i),
            lambda v=v: TEXT.replace("{value}", str(v)).encode(),
        )
        for i, v in enumerate((3.0, 4.0))
    ]
    try:
        text = gather.Workers(str(tmp_path), 3).render().decode()  # worker 2 is not there
    finally:
        for server in servers:
            server.close()
    families = [f for f in text_string_to_metric_families(text) if f.name == "a2a_x"]
    assert len(families) == 1 and families[0].type == "counter"
    by_worker = {s.labels["worker"]: s.value for s in families[0].samples}
    assert by_worker == {"0": 3.0, "1": 4.0}
    assert text.count("# TYPE a2a_x_total counter") == 1
    assert gather.read_text(gather.socket_path(str(tmp_path), 0)) is None  # closed: gone
