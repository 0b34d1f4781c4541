"""Fleet storage: each agent exports its store as Parquet segments to a directory (NFS) or S3-compatible
object storage; fleet-wide readers (alerts, rules, the TUI) query the segments of every node through DuckDB."""
