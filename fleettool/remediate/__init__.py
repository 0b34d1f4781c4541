"""Remediation with proof: `fleettool remediate NODE` climbs a ladder of rungs (reset one GPU, reboot the node,
power-cycle it through its BMC, RMA), each taking out of service only what it must, and returns a GPU or node to
service only when a proof of four parts passes (recovery action NONE, no new XID for the quiet window, a per-GPU
burn-in at the SKU's floors, NVLink links back to the count before the fault), never on an exit code alone.

- model.py: the words (rungs, vias, steps, plans, proof parts), shared by every module here.
- runner.py: runs a command on the node (here, over ssh, or in the agent's pod) or here (a scheduler, a BMC tool),
  with a bound, and keeps what it printed for the audit trail.
- The episode and its audit trail are stored by fleettool.store.remediations.
"""
