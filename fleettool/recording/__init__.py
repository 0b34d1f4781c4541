"""Recordings: a directory of standard files (OpenMetrics, kernel logs, nccl-tests output, nvidia-smi).

This package reads and writes recording files and tells what each is; it sits beside the sources, below the
collectors and the store, and imports neither:
  files     bounded reads (.gz by magic number, gzip bombs refused, cut files noted), XML made whole
  identify  a file's format by its content, never its name
  times     the time of a file that carries none (its name, --at, its mtime)
  writer    write a recording (OpenMetrics with timestamps and the GPU inventory, the kernel's events as kernel-log
            text, fleettool's own events as JSON lines); own reads the OpenMetrics back
Storing a recording is fleettool.ingest's job, driven by fleettool.pipeline.
"""
