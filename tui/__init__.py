"""The Textual triage dashboard (`fleettool tui`): the only package that imports textual.

Installed as fleettool.tui. The screens arrive with the TUI issue; nothing in the core imports this package.
"""
