"""A fleet location: a directory, or s3://bucket/prefix on any S3-compatible server (pyarrow's S3 client; the
endpoint from FLEETTOOL_S3_ENDPOINT or AWS_ENDPOINT_URL, credentials from the usual AWS_* variables).

DuckDB 2.x's wheel has no httpfs and PyPI's duckdb-extension-httpfs matches 1.5.x only (docs/design.md), so
object storage goes through pyarrow.fs, which ships in the pyarrow wheel fleettool already needs, for both writing
segments and scanning them (DuckDB scans the Arrow dataset with projection and filter pushdown)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow.fs as pafs


@dataclass(frozen=True)
class Location:
    fs: pafs.FileSystem
    root: str  # path inside fs, no trailing slash
    url: str

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts]) if self.root else "/".join(parts)


def open_location(url: str, *, create: bool = True) -> Location:
    """The location named by url. A local directory is created for a writer (create=True); a reader gets
    FileNotFoundError / NotADirectoryError naming it instead (a typo must not read as an empty fleet)."""
    if url.startswith("s3://"):
        u = urlparse(url)
        endpoint = os.environ.get("FLEETTOOL_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
        kw: dict[str, object] = {
            "region": os.environ.get("AWS_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1")),
            # parts are uploaded as they fill, not queued behind a slow server: a segment's upload holds one
            # part in memory, however big the segment (its export runs inside the agent's memory limit)
            "background_writes": False,
        }
        if endpoint:
            e = urlparse(endpoint)
            kw["endpoint_override"] = e.netloc or e.path
            kw["scheme"] = e.scheme or "https"
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            kw["access_key"] = os.environ["AWS_ACCESS_KEY_ID"]
            kw["secret_key"] = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        fs = pafs.S3FileSystem(**kw)  # type: ignore[arg-type]
        root = (u.netloc + u.path).rstrip("/")
        return Location(fs, root, url)
    path = os.path.abspath(url)
    if create:
        os.makedirs(path, exist_ok=True)
    elif not os.path.exists(path):
        raise FileNotFoundError(f"{url}: no such directory")
    elif not os.path.isdir(path):
        raise NotADirectoryError(f"{url}: not a directory (a fleet location is a directory or s3://...)")
    return Location(pafs.LocalFileSystem(), path, url)
