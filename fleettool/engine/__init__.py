"""The rules engine: rules as YAML data (rules/), evaluated in event time over the store into alerts.

    rules.py        loads and validates rule files (the common fields here, each kind's own in kinds/)
    kinds/          one module per rule kind: its fields, its SQL evaluation, its PromQL form; KINDS registry
    state.py        the pure pending -> firing -> resolved machine over one entity's observations
    evaluate.py     runs the rules, folds the findings of one fault into one incident, writes the alerts
    incremental.py  the agent's rule scheduler: each rule at its cadence over a trailing window
    ruletest.py     promtool-style rule unit tests (rules/tests/*.test.yaml)
    promql.py       exports the rules as Prometheus alerting rules
    silences.py     the rules for silences and acknowledgements (stored by fleettool.store.silences)
    baselines.py    fleet baselines per (SKU, driver) that peer rules and burn-in floors start from

Reads the store through its methods (writes go through fleettool.store); knows nothing of the TUI or exporter.
"""
