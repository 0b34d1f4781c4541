"""The rules engine: rules as YAML data (rules/), evaluated in event time over the store into alerts.

Flow: rules.py loads and validates rule files; kinds.py turns each rule into SQL observations per entity
(node, gpu, key); state.py is the pure pending -> firing -> resolved machine; incidents.py folds the findings of
one fault into one alert with its evidence; evaluate.py runs it all and writes the alerts table.
Reads the store only; knows nothing of the TUI or the exporter.
"""
