"""The Textual triage dashboard (`fleettool tui`), installed as fleettool.tui: the only package that imports
textual; nothing in the core imports it.

app.py is the alert list (FleetTui), screens/ holds one module per screen and the SCREENS registry the app's
keys read, messages.py what the workers post back, source.py where they read from (a database or a fleet
location, through fleettool.views), errors.py the one handler for a worker that raises.
"""
