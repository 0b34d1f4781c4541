"""Incidents above alerts: one per fault across GPUs, nodes and the fleet.

An alert (fleettool.engine) is one fault's findings on one GPU or node. An incident folds alerts that share a
cause, in this order (fold.py):
  1. causal evidence (causal.py): the driver's `caused by previous Xid N`; XID 145 after 149 in one NVLink
     domain; XID 13/43/45 on a job's nodes minutes after a hardware XID on one of them; a fatal SXid and its
     node's XID 74; XID 154 after the fault whose recovery it asks for;
  2. topology (spread.py): NIC faults (category nic) on several nodes of one IB leaf, and NVLink faults on
     several nodes of one NVLink domain, any rule, each within 60 s of the one before: one leaf / domain
     incident with no node action (its switches failed); k of n nodes of a rack, NVLink domain or IB leaf with
     the same finding in a window; the same finding on the nodes of one driver version and none of the others;
     several GPUs of one node;
  3. time (bursts.py): what is left, each alert within 5 minutes of the one before (a hardware fault only
     within a minute of the burst's first), and teardown XIDs alone chained into one informational storm.
The root pages; members are counted, never paged. A storm of job-teardown XIDs with no hardware root is one
informational incident. Planned work (a node in a lifecycle state other than healthy/suspect, or an alert
silenced with a reason) never pages. Inputs (inputs.py) are the alerts table, node topology, jobs and GPU
inventory of the store; refresh.py writes the result to the incidents tables (fleettool.store.incidents).
"""
