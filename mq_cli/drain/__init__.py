"""The drain: the loop, its session and lease, claims, batches, acknowledgements, waiting,
limits, the run log's writer (mq_cli/host/ holds what it shares with the operators' commands)."""
