"""Aborting unfinished S3 multipart uploads, which pyarrow's S3 client cannot do from Python (its output
stream has no abort: a stream dropped mid-upload leaves the upload open, and the bucket keeps billing its parts
until a lifecycle rule, if any, removes them).

Two calls of the S3 REST API, signed with AWS Signature Version 4 from the same environment the location uses
(FLEETTOOL_S3_ENDPOINT / AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION): ListMultipartUploads for one key, then AbortMultipartUpload for each upload found. Path-style
requests, standard library only."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

_EMPTY = hashlib.sha256(b"").hexdigest()


class AbortUnavailable(OSError):
    """No credentials in the environment to sign with (an instance role): the upload cannot be aborted here."""


def _endpoint() -> tuple[str, str, str]:
    region = os.environ.get("AWS_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    ep = os.environ.get("FLEETTOOL_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if not ep:
        return "https", f"s3.{region}.amazonaws.com", region
    u = urllib.parse.urlparse(ep if "//" in ep else f"https://{ep}")
    return u.scheme or "https", u.netloc or u.path, region


def _request(method: str, bucket: str, key: str, query: dict[str, str], timeout: float) -> bytes:
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise AbortUnavailable(
            "no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY to sign an AbortMultipartUpload with"
        )
    scheme, host, region = _endpoint()
    path = "/" + urllib.parse.quote(f"{bucket}/{key}" if key else bucket, safe="/-_.~")
    qs = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(query.items())
    )
    now = dt.datetime.now(dt.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-content-sha256": _EMPTY, "x-amz-date": amz_date}
    token = os.environ.get("AWS_SESSION_TOKEN")
    if token:
        headers["x-amz-security-token"] = token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [method, path, qs, *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, _EMPTY]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = f"AWS4{secret}".encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, Signature={sig}"
    )
    url = f"{scheme}://{host}{path}" + (f"?{qs}" if qs else "")
    req = urllib.request.Request(
        url, method=method, headers={k: v for k, v in headers.items() if k != "host"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (the location's own endpoint)
            return bytes(r.read())
    except urllib.error.HTTPError as e:
        raise OSError(f"S3 {method} {bucket}/{key}: HTTP {e.code} {e.read()[:200]!r}") from None
    except (urllib.error.URLError, TimeoutError) as e:
        raise OSError(f"S3 {method} {bucket}/{key}: {getattr(e, 'reason', e)}") from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def list_uploads(bucket: str, prefix: str, *, timeout: float = 10.0) -> list[tuple[str, str]]:
    """(key, upload id) of every unfinished multipart upload whose key starts with prefix."""
    body = _request("GET", bucket, "", {"uploads": "", "prefix": prefix}, timeout)
    out = []
    for up in ET.fromstring(body):
        if _local(up.tag) != "Upload":
            continue
        fields = {_local(c.tag): (c.text or "") for c in up}
        out.append((fields.get("Key", ""), fields.get("UploadId", "")))
    return out


def abort_uploads(path: str, *, timeout: float = 10.0) -> int:
    """Abort every unfinished multipart upload of the object at path ("bucket/key"); how many were aborted.
    OSError when S3 cannot be reached or refuses."""
    bucket, _, key = path.partition("/")
    n = 0
    for k, upload_id in list_uploads(bucket, key, timeout=timeout):
        if k == key:
            _request("DELETE", bucket, key, {"uploadId": upload_id}, timeout)
            n += 1
    return n
