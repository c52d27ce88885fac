"""The listeners' transport limits (`limits.py`): connection caps and the descriptor
budget behind them, gRPC's own connection options, and the gRPC call limit."""
