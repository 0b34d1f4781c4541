"""Burn-in: GEMM, HBM copy and all-reduce stress with telemetry watched during each test, and strict
PASS / WARN / FAIL / SKIPPED / INCONCLUSIVE verdicts per GPU and test. torch is an optional extra
(`pip install fleettool[burnin]`); nothing here imports it at module import time.
"""
