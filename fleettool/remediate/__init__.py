"""Remediation with proof: `fleettool remediate NODE` climbs a ladder of rungs (reset one GPU, reboot the node,
power-cycle it through its BMC, RMA), each taking out of service only what it must, and returns a GPU or node to
service only when a proof of four parts passes (recovery action NONE, no new XID for the quiet window, a per-GPU
burn-in at the SKU's floors, NVLink links back to the count before the fault), never on an exit code alone.

- model.py: the words (rungs, vias, steps, plans, proof parts), shared by every module here.
- ladder.py: which rung first, for which GPU (the firing alerts' actions, NVML's recovery action, --from).
- plan.py: a rung's steps for a via: the scheduler's (k8s.py, slurm.py), the node's (reset.py), the BMC's (bmc.py).
- guard.py: the blast guard (per rack, NVLink domain, fleet) and the job-teardown storm check.
- loop.py: runs the plan, records the audit trail, waits for a rebooted node, proves, puts back or climbs.
- proof.py (+ proof_context, proof_smi, proof_xid, proof_burnin): the four parts of a proof.
- rma.py: the evidence bundle for the vendor.
- outcome.py: how a run ends (proven, failed, stopped, refused) and its exit code.
- runner.py: runs a command on the node (here, over ssh, or in the agent's pod) or here (a scheduler, a BMC tool),
  with a bound, and keeps what it printed for the audit trail.
- The episode and its audit trail are stored by fleettool.store.remediations.
"""
