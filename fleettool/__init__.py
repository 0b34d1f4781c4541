"""fleettool: fleet telemetry and incident triage for NVIDIA GPU clusters.

Data flows one way: sources -> collectors -> store -> rules -> alerts -> exporter/TUI.
"""

__version__ = "0.1.0"
