"""What an operator reads and probes: log formats and redaction (`logs.py`), log-flood
control (`logflood.py`), readiness of the parts a call needs (`readiness.py`)."""
