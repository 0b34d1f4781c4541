"""Burn-in: GEMM, HBM copy and all-reduce stress with telemetry watched during each test, and strict
PASS / WARN / FAIL / SKIPPED / INCONCLUSIVE verdicts per GPU and test. torch is an optional extra
(`pip install fleettool[burnin]`); nothing here imports it at module import time.

runner.py runs the steps of steps.py's STEPS table; each step measures with its kernel module (gemm.py,
hbm.py, allreduce.py, dcgm.py) under telemetry.py's watch and is judged by verdict.py against floors.py;
context.py holds the config and what a step is given; report.py is the run's report, its JSON and its save
to the store; dispatch.py runs a burn-in on another node (ssh, Slurm, Kubernetes).
"""
