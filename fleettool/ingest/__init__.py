"""Ingest a recording into the store: each file identified by content (fleettool.recording.identify) and read
by the reader for its format (readers.READERS), one transaction per file (run.ingest).

The readers turn what a file holds into store rows through the collectors' own conversions (the series
mapping of collectors.series, the kernel-record conversion of collectors.kmsg), so a replay exercises the
code the agent runs live. fleettool.pipeline drives it for `fleettool replay`, `fleettool demo` and the tests;
the rule tests (engine.ruletest) ingest their input files with it.
"""
