"""Seams to the outside world. Only sources/nvml.py imports pynvml."""
