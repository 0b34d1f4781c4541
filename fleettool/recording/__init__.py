"""Recordings: a directory of standard files (OpenMetrics, kernel logs, nccl-tests output, nvidia-smi)."""
