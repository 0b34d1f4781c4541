"""The node agent: runs collectors under a watchdog, buffers rows, flushes batches to the store."""
