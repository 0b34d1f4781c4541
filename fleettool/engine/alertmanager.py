"""An Alertmanager configuration (alertmanager.yml) that folds the alerts of `rules export --prometheus` the way
fleettool folds its own: routes that group by job, NVLink domain and rack, and inhibit rules by which a root
mutes its symptoms.

The labels it reads are those the exported rules give an alert (`alertname`, `severity`, `category`, `action`;
an XID's `kind="xid"` and `code` from `fleettool_events_total{Hostname, kind, code}`; the node label, `Hostname`
unless --node-label), plus three topology labels the fleet's scrape attaches (static target labels or
relabelling): the job (default `hpc_job`, the label dcgm-exporter's --hpc-job-mapping-dir adds), the rack
(`rack`) and the NVLink domain (`nvlink_domain`). Each is renamed with `--label job=NAME` and so on.

An inhibit rule whose `equal` names a topology label asks, on its source side, that the label be set: Alertmanager
takes a label missing on both sides as equal, so without it a root with no job would mute every job's symptoms.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from fleettool.engine.kinds._promql import NODE
from fleettool.engine.promql import LABEL_NAME

# The same sets as the fold's (fleettool.incidents.model: TEARDOWN_XIDS, HARDWARE_ACTIONS; a test holds them equal):
# the XIDs a job's teardown leaves on its GPUs, and the judged actions that mean the hardware is at fault.
TEARDOWN_XIDS = (13, 31, 43, 45)
HARDWARE_ACTIONS = ("reset-gpu", "reboot-node", "inspect-hardware")
NVLINK_ROOT_XID, NVLINK_SYMPTOM_XID = 149, 145  # a GPU's NVLink fault (149), its peers' link errors (145)
SXID_SYMPTOM_XID = 74  # the GPU-side NVLink error a fatal NVSwitch SXid leaves on its node
SXID_ALERT = "NvswitchSxid"  # fleettool's rule; critical when the SXid is fatal

DEFAULT_LABELS = {"job": "hpc_job", "rack": "rack", "nvlink_domain": "nvlink_domain"}
DEFAULT_WEBHOOK = "http://127.0.0.1:5001/fleettool-replace-me"
TIMING = {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h"}


@dataclass(frozen=True)
class Labels:
    """The label names the config groups and inhibits by."""

    node: str = NODE
    job: str = DEFAULT_LABELS["job"]
    rack: str = DEFAULT_LABELS["rack"]
    nvlink_domain: str = DEFAULT_LABELS["nvlink_domain"]


def parse_labels(specs: list[str] | None, node: str = NODE) -> Labels:
    """`job=hpc_job`, `rack=rack_name`, `nvlink_domain=clique` (each at most once) over the defaults; raises
    ValueError naming the spec that is wrong."""
    names = dict(DEFAULT_LABELS)
    seen: set[str] = set()
    for spec in specs or []:
        key, sep, value = spec.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise ValueError(f"{spec!r}: give KEY=LABEL with KEY one of {', '.join(names)}")
        if key in seen:
            raise ValueError(f"{spec!r}: {key} given twice")
        if not LABEL_NAME.fullmatch(value.strip()):
            raise ValueError(f"{spec!r}: {value.strip()!r} is not a Prometheus label name")
        seen.add(key)
        names[key] = value.strip()
    if not LABEL_NAME.fullmatch(node):
        raise ValueError(f"{node!r} is not a Prometheus label name")
    labels = Labels(node, **names)
    used = [labels.node, labels.job, labels.rack, labels.nvlink_domain]
    if len(set(used)) < len(used):
        raise ValueError(f"the node, job, rack and NVLink-domain labels must differ: {', '.join(used)}")
    return labels


def _codes(codes: tuple[int, ...] | int) -> str:
    return "|".join(map(str, codes)) if isinstance(codes, tuple) else str(codes)


def _xid(codes: tuple[int, ...] | int) -> list[str]:
    op = "=~" if isinstance(codes, tuple) else "="
    return ['kind="xid"', f'code{op}"{_codes(codes)}"']


def _set(label: str) -> str:
    return f'{label}=~".+"'


def inhibit_rules(lb: Labels) -> list[dict[str, object]]:
    """The folds of the causal evidence, as inhibit rules (root: source, symptom: target)."""
    hardware = ['severity="critical"', f'action=~"{"|".join(HARDWARE_ACTIONS)}"']
    return [
        # a hardware fault's own node: its job's processes die there first
        {"source_matchers": hardware, "target_matchers": _xid(TEARDOWN_XIDS), "equal": [lb.node]},
        # the job's other nodes: their XIDs 13/31/43/45 are the teardown the root caused
        {
            "source_matchers": [*hardware, _set(lb.job)],
            "target_matchers": _xid(TEARDOWN_XIDS),
            "equal": [lb.job],
        },
        # one GPU's NVLink fault (149) and the 145s of its domain's peers
        {
            "source_matchers": [*_xid(NVLINK_ROOT_XID), _set(lb.nvlink_domain)],
            "target_matchers": _xid(NVLINK_SYMPTOM_XID),
            "equal": [lb.nvlink_domain],
        },
        # a fatal NVSwitch SXid and its node's XID 74
        {
            "source_matchers": [f'alertname="{SXID_ALERT}"', 'severity="critical"'],
            "target_matchers": _xid(SXID_SYMPTOM_XID),
            "equal": [lb.node],
        },
    ]


def route(lb: Labels, receiver: str = "fleettool") -> dict[str, object]:
    """One notification per fold: each hardware root on its own (two faults never share a page), then a domain's
    NVLink alerts, a rack's thermal or power alerts, a job's alerts, a rack's; the rest per node."""
    hardware = ['severity="critical"', f'action=~"{"|".join(HARDWARE_ACTIONS)}"']
    return {
        "receiver": receiver,
        "group_by": ["alertname", lb.node],
        **TIMING,
        "routes": [
            {"matchers": hardware, "group_by": ["alertname", lb.node]},
            {
                "matchers": ['category="nvlink"', _set(lb.nvlink_domain)],
                "group_by": ["alertname", lb.nvlink_domain],
            },
            {"matchers": ['category=~"thermal|power"', _set(lb.rack)], "group_by": ["alertname", lb.rack]},
            {"matchers": [_set(lb.job)], "group_by": ["alertname", lb.job]},
            {"matchers": [_set(lb.rack)], "group_by": ["alertname", lb.rack]},
        ],
    }


def config(lb: Labels | None = None, webhook: str = DEFAULT_WEBHOOK) -> dict[str, object]:
    lb = lb or Labels()
    return {
        "route": route(lb),
        "inhibit_rules": inhibit_rules(lb),
        "receivers": [{"name": "fleettool", "webhook_configs": [{"url": webhook, "send_resolved": True}]}],
    }


def render(lb: Labels | None = None, webhook: str = DEFAULT_WEBHOOK) -> str:
    """alertmanager.yml's text: a header saying what it expects, then the config."""
    lb = lb or Labels()
    flags = "".join(
        f" --label {k}={getattr(lb, k)}" for k, v in DEFAULT_LABELS.items() if getattr(lb, k) != v
    ) + ("" if lb.node == NODE else f" --node-label {lb.node}")
    head = (
        f"# Generated by `fleettool rules export --alertmanager{flags}`; for the alerts of `fleettool rules export "
        f"--prometheus{'' if lb.node == NODE else f' --node-label {lb.node}'}`.\n"
        f"# Labels: node {lb.node}, job {lb.job}, rack {lb.rack}, NVLink domain {lb.nvlink_domain} (the scrape "
        "attaches the last three);\n"
        '# XID alerts carry kind="xid" and code (fleettool\'s names; over --names dcgm the code is the value, not a '
        "label, and the XID inhibitions do not apply).\n"
        f"# Roots mute symptoms: a critical hardware alert mutes XIDs {', '.join(map(str, TEARDOWN_XIDS))} on its node and its "
        f"job; XID {NVLINK_ROOT_XID} mutes {NVLINK_SYMPTOM_XID} in its NVLink domain;\n"
        f"# a critical {SXID_ALERT} (fatal SXid; fleettool judges it, PromQL cannot) mutes its node's XID "
        f"{SXID_SYMPTOM_XID}.\n"
        f"# Replace the receiver's webhook ({webhook}) with yours.\n"
    )
    return head + yaml.safe_dump(config(lb, webhook), sort_keys=False, width=120)
