"""InfiniBand inputs of a recording, through `fleettool replay` and the store: ibstat / ibstatus, ibv_devinfo,
perfquery, iblinkinfo text and a saved sysfs tree as a tarball, each recognised by content (under names that say
nothing of their format), timed by the file name, and stored through collectors.fabric_samples as the live
collector would store them; node_exporter's node_infiniband_* series mapped onto the same metrics. Real outputs
(fixtures/infiniband/SOURCES.md); faults are written into copies."""

from __future__ import annotations

import gzip
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from fleettool.collectors.dcgm_exporter import DcgmExporterCollector
from fleettool.collectors.fabric_samples import reading_samples
from fleettool.formats.ib_sysfs import read_ib_sysfs
from fleettool.formats.ib_sysfs_tar import read_ib_tarball
from fleettool.formats.ib_text import parse_ibv_devinfo, sniff
from fleettool.formats.iblinkinfo import parse_iblinkinfo
from fleettool.formats.perfquery import parse_perfquery
from fleettool.recording.identify import identify_why
from tests.conftest import run_cli

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "infiniband"
IBSTAT = FIX / "ibstat"
H100 = FIX / "sysfs-h100"
HEALTHY_TREES = {"h100": H100, "no-pma": FIX / "sysfs-node_exporter", "omni-path": FIX / "sysfs-omnipath"}
PERF_X = FIX / "perfquery" / "perfquery-x.rhel75.lid10.txt"
DEVINFO = FIX / "ibv_devinfo" / "ibv_devinfo.mlx4.2hca.port2-down.txt"
DEVINFO_V = FIX / "ibv_devinfo" / "ibv_devinfo-v.mlx4_1.port2.with-hca-header.txt"
LINKINFO = FIX / "iblinkinfo" / "iblinkinfo.archwiki.2ca.txt"
NODE_EXPORTER = FIX / "node_exporter" / "e2e-infiniband-metrics.prom"
T0, T1 = "2026-12-01T10-00-00Z", "2026-12-01T11-00-00Z"


def _replay(rec: Path, db: Path, *extra: str, ok: bool = True) -> dict[str, object]:
    rc = run_cli("replay", str(rec), "--db", str(db), "--json", *extra)
    assert "Traceback" not in rc.stderr, rc.stderr
    if ok:
        assert rc.returncode == 0, rc.stderr + rc.stdout
    out: dict[str, object] = json.loads(rc.stdout) if rc.stdout.strip() else {}
    out["_rc"], out["_stderr"] = rc.returncode, rc.stderr
    return out


def _rows(db: Path, where: str = "true") -> set[tuple[str, str, str, float]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {
            (n, m, s, v)
            for n, m, s, v in con.execute(
                f"SELECT node, metric, sub, value FROM samples WHERE {where}"
            ).fetchall()
        }
    finally:
        con.close()


def _series(db: Path, metric: str, sub: str) -> list[tuple[str, float]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        q = "SELECT strftime(ts, '%H:%M'), value FROM samples WHERE metric = ? AND sub = ? ORDER BY ts"
        return [(t, v) for t, v in con.execute(q, [metric, sub]).fetchall()]
    finally:
        con.close()


def _tarball(tree: Path, out: Path, prefix: str = "sys/class", pad: bool = False) -> Path:
    """`tar czhf out /sys/class/infiniband` of a saved tree: members under `prefix`/infiniband; with `pad`, each
    file NUL-padded as GNU tar pads a sysfs file that "shrank" from its 4096 reported bytes."""
    with tarfile.open(out, "w:gz") as tf:
        for p in sorted((tree / "class").rglob("*")):
            name = f"{prefix}/{p.relative_to(tree / 'class')}"
            if p.is_dir():
                tf.add(p, name, recursive=False)
                continue
            data = p.read_bytes() + (b"\0" * 32 if pad else b"")
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o444
            tf.addfile(info, io.BytesIO(data))
    return out


# --- the change over time: two snapshots of one node are two polls -----------------------------------------


def test_two_ibstat_snapshots_an_hour_apart_give_the_port_4_to_1(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / f"snap-{T0}").write_bytes((IBSTAT / "ibstat.47.0.h100.all.active.0").read_bytes())
    (rec / f"snap-{T1}").write_bytes(
        (IBSTAT / "ibstat.47.0.h100.all.active.0.fault-mlx5_10-down").read_bytes()
    )
    db = tmp_path / "t.duckdb"
    out = _replay(rec, db, "--node", "gpu-17")
    files = out["files"]
    assert isinstance(files, list)
    assert [f["format"] for f in files] == ["ibstat", "ibstat"]
    assert all("the file name" in f["time_source"] for f in files)
    assert _series(db, "ib_port_state", "port=mlx5_10/1") == [("10:00", 4.0), ("11:00", 1.0)]
    assert _series(db, "ib_port_phys_state", "port=mlx5_10/1") == [("10:00", 5.0), ("11:00", 2.0)]
    # the other eleven ports stayed ACTIVE in both polls
    assert _series(db, "ib_port_state", "port=mlx5_0/1") == [("10:00", 4.0), ("11:00", 4.0)]
    assert {n for n, *_ in _rows(db)} == {"gpu-17"}


@pytest.mark.parametrize("first", ["earlier", "later"])
def test_a_device_gone_from_the_second_snapshot_reads_absent(tmp_path: Path, first: str) -> None:
    """Files are read in path order: whichever snapshot is read first, the answer is the same."""
    rec = tmp_path / "rec"
    rec.mkdir()
    a, b = ("a", "b") if first == "earlier" else ("b", "a")
    (rec / f"{a}-{T0}").write_bytes((IBSTAT / "ibstat.47.0.h100.all.active.0").read_bytes())
    (rec / f"{b}-{T1}").write_bytes(
        (IBSTAT / "ibstat.47.0.h100.all.active.0.fault-mlx5_10-gone").read_bytes()
    )
    db = tmp_path / "t.duckdb"
    _replay(rec, db, "--node", "gpu-17")
    assert _series(db, "ib_device_present", "device=mlx5_10") == [("10:00", 1.0), ("11:00", 0.0)]
    assert _series(db, "ib_device_present", "device=mlx5_0") == [("10:00", 1.0), ("11:00", 1.0)]
    assert _series(db, "ib_port_state", "port=mlx5_10/1") == [("10:00", 4.0)]  # no reading, not a DOWN


def test_a_failed_ibstat_run_keeps_its_ports_and_judges_no_presence(tmp_path: Path) -> None:
    """ibpanic after 8 CAs: the CAs it never printed are not gone, the run stopped."""
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / f"a-{T0}").write_bytes((IBSTAT / "ibstat.47.0.h100.all.active.0").read_bytes())
    (rec / f"b-{T1}").write_bytes((IBSTAT / "ibstat.39.0.a100.failed.ibpanic.exit-255.0").read_bytes())
    db = tmp_path / "t.duckdb"
    out = _replay(rec, db, "--node", "gpu-17")
    files = out["files"]
    assert isinstance(files, list) and files[1]["issues"] == 1
    assert any("failed part-way" in n for n in files[1]["notes"])
    con = duckdb.connect(str(db), read_only=True)
    try:
        at_t1 = con.execute(
            "SELECT metric, count(*) FROM samples WHERE strftime(ts, '%H:%M') = '11:00' GROUP BY metric"
        ).fetchall()
    finally:
        con.close()
    assert dict(at_t1)["ib_port_state"] == 8 and "ib_device_present" not in dict(at_t1)


def test_a_prompt_line_names_the_node(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    body = (IBSTAT / "ibstat.47.0.h100.all.active.0").read_text()
    (rec / f"paste-{T0}.txt").write_text("[root@gpu-31 ~]# ibstat\n" + body)
    db = tmp_path / "t.duckdb"
    out = _replay(rec, db)
    assert {n for n, *_ in _rows(db)} == {"gpu-31"}
    files = out["files"]
    assert isinstance(files, list) and files[0]["nodes"] == ["gpu-31"]


# --- a saved sysfs tree as a tarball -----------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "pad"), [("sys/class", True), ("class", False)])
def test_h100_tarball_stores_what_read_ib_sysfs_of_the_directory_gives(
    tmp_path: Path, prefix: str, pad: bool
) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    _tarball(H100, rec / f"ib-{T0}.tgz", prefix, pad)
    db = tmp_path / "t.duckdb"
    out = _replay(rec, db, "--node", "gpu-17")
    files = out["files"]
    assert isinstance(files, list) and files[0]["format"] == "ib-sysfs-tar"
    want = {("gpu-17", s.metric, s.sub, s.value) for s in reading_samples(read_ib_sysfs(H100), "gpu-17", 0.0)}
    devices = {p.device for p in read_ib_sysfs(H100).ports}
    want |= {("gpu-17", "ib_device_present", f"device={d}", 1.0) for d in devices}
    assert _rows(db) == want
    # saturated counters are unknown, never a sample: link_downed=255 on mlx5_1, named in the file's notes
    assert not [r for r in _rows(db) if r[1] == "ib_link_downed_total" and r[2] == "port=mlx5_1/1"]
    assert any("link_downed: saturated at 255" in n for n in files[0]["notes"])


@pytest.mark.parametrize("cut", ["half", "gzip-trailer", "tar-at-a-member-edge"])
def test_truncated_tarball_is_one_line_exit_3_and_the_store_keeps_what_it_had(
    tmp_path: Path, cut: str
) -> None:
    db = tmp_path / "t.duckdb"
    first = tmp_path / "first"
    first.mkdir()
    _tarball(H100, first / f"ib-{T0}.tgz")
    _replay(first, db, "--node", "gpu-17")
    before = _rows(db)
    rec = tmp_path / "rec"
    rec.mkdir()
    whole = _tarball(H100, tmp_path / "whole.tgz").read_bytes()
    bad = rec / f"ib-{T1}.tgz"
    if cut == "half":
        bad.write_bytes(whole[: len(whole) // 2])
    elif cut == "gzip-trailer":  # all the tar, but the gzip stream does not end
        bad.write_bytes(whole[:-8])
    else:  # a plain tar cut between two members: tarfile alone would read a smaller tree
        tar = gzip.decompress(whole)
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            edge = tf.getmembers()[len(tf.getmembers()) // 2].offset
        bad = rec / f"ib-{T1}.tar"
        bad.write_bytes(tar[:edge])
    out = _replay(rec, db, "--node", "gpu-17", ok=False)
    assert out["_rc"] == 3
    lines = [ln for ln in str(out["_stderr"]).splitlines() if ln.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "nothing of it was read" in lines[0], lines
    assert _rows(db) == before


def test_tarball_members_out_of_the_tree_are_not_extracted_and_named(tmp_path: Path) -> None:
    tgz = _tarball(H100, tmp_path / "ib.tgz")
    bad = tmp_path / "bad.tgz"
    with tarfile.open(tgz) as src, tarfile.open(bad, "w:gz") as dst:
        for m in src:
            f = src.extractfile(m)
            dst.addfile(m, f)
        for name, kind, target in (
            ("/etc/evil", tarfile.REGTYPE, ""),
            ("sys/../../escape", tarfile.REGTYPE, ""),
            ("sys/class/infiniband/mlx5_0/ports/1/outside", tarfile.SYMTYPE, "/etc/passwd"),
            ("sys/class/infiniband/up", tarfile.SYMTYPE, "../../../../x"),
        ):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            dst.addfile(info, io.BytesIO(b""))
    tree = read_ib_tarball(bad)
    assert len(tree.reading.ports) == 9
    assert len(tree.skipped) == 4
    assert {s.split(": ", 1)[0] for s in tree.skipped} == {
        "/etc/evil",
        "sys/../../escape",
        "sys/class/infiniband/mlx5_0/ports/1/outside",
        "sys/class/infiniband/up",
    }


def test_tarball_saved_without_h_is_skipped_with_why(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    with tarfile.open(rec / f"ib-{T0}.tgz", "w:gz") as tf:
        for dev in ("mlx5_0", "mlx5_1"):
            info = tarfile.TarInfo(f"sys/class/infiniband/{dev}")
            info.type, info.linkname = (
                tarfile.SYMTYPE,
                f"../../devices/pci0000:00/0000:00:01.0/infiniband/{dev}",
            )
            tf.addfile(info)
    out = _replay(rec, tmp_path / "t.duckdb", "--node", "n", ok=False)
    assert out["_rc"] == 3  # nothing recognised: a replay that stored nothing is never a quiet 0
    assert "2 devices are links into /sys/devices" in str(out["_stderr"])
    assert "tar czhf" in str(out["_stderr"])


def test_a_tar_of_something_else_is_named_as_skipped(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    with tarfile.open(rec / "logs.tgz", "w:gz") as tf:
        info = tarfile.TarInfo("var/log/syslog")
        info.size = 5
        tf.addfile(info, io.BytesIO(b"hello"))
    (rec / f"snap-{T0}").write_bytes((IBSTAT / "ibstat.47.0.h100.all.active.0").read_bytes())
    out = _replay(rec, tmp_path / "t.duckdb", "--node", "n")
    files = {Path(f["path"]).name: f for f in out["files"]}  # type: ignore[union-attr]
    assert files["logs.tgz"]["skipped"] == "a tar archive, but not of /sys/class/infiniband"


@pytest.mark.parametrize("tree", sorted(HEALTHY_TREES))
def test_zero_findings_on_every_healthy_saved_tree(tmp_path: Path, tree: str) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for t in (T0, T1):  # two polls an hour apart: the saturated and unreadable counters never move
        _tarball(HEALTHY_TREES[tree], rec / f"ib-{t}.tgz")
    db = tmp_path / "t.duckdb"
    out = _replay(rec, db, "--node", "gpu-17")
    assert out["alerts"] == []
    assert len({m for _, m, _, _ in _rows(db)}) >= 5  # it was read: states, rates, counters, presence


# --- the text tools -----------------------------------------------------------------------------------------


def test_each_tool_output_is_recognised_by_content(tmp_path: Path) -> None:
    cases = {
        IBSTAT / "ibstat.47.0.h100.all.active.0": ("ibstat", "ibstat"),
        IBSTAT / "ibstatus.39.0.a100.all.active.0": ("ibstat", "ibstatus"),
        DEVINFO: ("ibv-devinfo", "ibv_devinfo"),
        DEVINFO_V: ("ibv-devinfo", "ibv_devinfo -v"),
        PERF_X: ("perfquery", "perfquery -x"),
        LINKINFO: ("iblinkinfo", "iblinkinfo"),
    }
    for i, (src, want) in enumerate(cases.items()):
        p = tmp_path / f"capture-{i}"
        p.write_bytes(src.read_bytes())
        ident = identify_why(p)
        assert (ident.format, ident.shape) == want, src.name


def test_perfquery_x_maps_onto_the_counter_metrics(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    text = PERF_X.read_text().replace("# perfquery -x 10 1", "[root@gpu-5 ~]# perfquery -x -C mlx5_3 -P 1")
    (rec / f"counters-{T0}").write_text(text)
    db = tmp_path / "t.duckdb"
    _replay(rec, db)
    rows = _rows(db)
    assert {s for _, _, s, _ in rows} == {"port=mlx5_3/1"} and {n for n, *_ in rows} == {"gpu-5"}
    assert {m for _, m, _, _ in rows} >= {
        "ib_symbol_error_total",
        "ib_link_downed_total",
        "ib_port_rcv_errors_total",
        "ib_link_error_recovery_total",
        "ib_excessive_buffer_overrun_errors_total",
        "ib_local_link_integrity_errors_total",
    }
    assert {v for *_, v in rows} == {0.0}


def test_perfquery_legacy_counters_saturate_at_their_widths_extended_do_not() -> None:
    legacy = (
        PERF_X.read_text()
        .replace("# Port extended counters:", "# Port counters:")
        .replace("LinkDownedCounter:...............0", "LinkDownedCounter:...............255")
        .replace("ExcessiveBufferOverrunErrors:....0", "ExcessiveBufferOverrunErrors:....15")
        .replace("SymbolErrorCounter:..............0", "SymbolErrorCounter:..............7")
    )
    (port,), issues = parse_perfquery(legacy, "p")
    assert issues == []
    assert port.key == "lid10/1"
    assert (
        port.counters["link_downed"].saturated and port.counters["excessive_buffer_overrun_errors"].saturated
    )
    assert port.counters["symbol_error"].value == 7 and not port.counters["symbol_error"].saturated
    extended = legacy.replace("# Port counters:", "# Port extended counters:")
    (port,), _ = parse_perfquery(extended, "p")
    assert not port.counters["link_downed"].saturated  # 64 bits in PortCountersExtended: 255 is a count


def test_perfquery_garbage_value_is_an_issue_naming_the_line_and_strict_exits_3(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    text = PERF_X.read_text().replace(
        "PortRcvErrors:...................0", "PortRcvErrors:...................x!"
    )
    bad = rec / f"counters-{T0}"
    bad.write_text(text)
    out = _replay(rec, tmp_path / "t.duckdb", "--node", "n", "--strict", ok=False)
    assert out["_rc"] == 3
    assert f"{bad}:17: PortRcvErrors: not an integer" in str(out["_stderr"])


def test_ibstat_with_garbage_names_the_file_and_line(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    text = (IBSTAT / "ibstat.47.0.h100.all.active.0").read_text().replace("Rate: 400", "Rate: fast", 1)
    bad = rec / f"snap-{T0}"
    bad.write_text(text)
    out = _replay(rec, tmp_path / "t.duckdb", "--node", "n", "--strict", ok=False)
    assert out["_rc"] == 3
    assert f"{bad}:11: rate not understood: 'fast'" in str(out["_stderr"])


def test_ibv_devinfo_states_and_the_v_rate() -> None:
    ports, issues = parse_ibv_devinfo(DEVINFO.read_text(), "d")
    assert issues == []
    assert [(p.key, p.state, p.link_layer) for p in ports] == [
        ("mlx4_1/1", 4, "InfiniBand"),
        ("mlx4_1/2", 1, "InfiniBand"),
        ("mlx4_0/1", 4, "InfiniBand"),
        ("mlx4_0/2", 1, "InfiniBand"),
    ]
    # not printed without -v: not guessed
    assert all(p.rate_gbps is None and p.phys_state is None for p in ports)
    (port,), issues = parse_ibv_devinfo(DEVINFO_V.read_text(), "d")
    assert issues == []
    assert (port.key, port.state, port.phys_state, port.phys_state_name) == ("mlx4_1/2", 1, 2, "Polling")
    assert (port.rate_gbps, port.rate_text) == (10.0, "10 Gb/sec (4X)")  # 4X x 2.5 Gbps a lane


def test_iblinkinfo_keeps_the_hosts_hca_ports_and_names_what_it_leaves_out(tmp_path: Path) -> None:
    info, issues = parse_iblinkinfo(LINKINFO.read_text(), "l")
    assert issues == []
    assert list(info.hosts) == ["hostname"]
    (port,) = info.hosts["hostname"]
    assert (port.key, port.state, port.phys_state, port.rate_gbps) == ("mlx4_0/1", 4, 5, 20.0)  # 4X DDR
    assert info.nameless == ["MT25408 ConnectX Mellanox Technologies"]
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / f"fabric-{T0}").write_bytes(LINKINFO.read_bytes())
    db = tmp_path / "t.duckdb"
    out = _replay(rec, db)
    assert {(n, m, v) for n, m, s, v in _rows(db) if s == "port=mlx4_0/1"} == {
        ("hostname", "ib_port_state", 4.0),
        ("hostname", "ib_port_phys_state", 5.0),
        ("hostname", "ib_port_rate_gbps", 20.0),
        ("hostname", "ib_port_width_lanes", 4.0),
    }
    notes = out["files"][0]["notes"]  # type: ignore[index]
    assert any("names no host" in n and "MT25408" in n for n in notes)


def test_sniff_takes_none_of_the_other_outputs() -> None:
    assert sniff("GPU 00000000:17:00.0\n    Product Name : NVIDIA H100\n") is None
    assert sniff("# HELP x y\n# TYPE x gauge\nx 1\n") is None


# --- node_exporter ------------------------------------------------------------------------------------------


def _node_exporter_want() -> set[tuple[str, str, float]]:
    """What read_ib_sysfs of the tree node_exporter's fixture was made from gives, less the series node_exporter
    does not serve (width, link layer)."""
    reading = read_ib_sysfs(FIX / "sysfs-node_exporter")
    return {
        (s.metric, s.sub, s.value)
        for s in reading_samples(reading, "n", 0.0)
        if s.metric not in ("ib_port_width_lanes", "ib_port_link_layer")
    }


def test_node_exporter_body_maps_to_the_same_metrics_as_the_sysfs_tree(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / f"scrape-{T0}").write_bytes(NODE_EXPORTER.read_bytes())
    db = tmp_path / "t.duckdb"
    out = _replay(rec, db, "--node", "gpu-9")
    rows = _rows(db)
    ib = {(m, s, v) for _, m, s, v in rows if m != "net_carrier_changes_total"}
    assert ib == _node_exporter_want()
    assert {(m, s, v) for _, m, s, v in rows if m == "net_carrier_changes_total"} == {
        ("net_carrier_changes_total", "netdev=bond0", 2.0),
        ("net_carrier_changes_total", "netdev=eth0", 2.0),
    }
    # port_xmit_wait = 4294967295 (32-bit PortXmitWait stuck at its maximum): unknown, not stored, and said
    assert not [r for r in rows if r[1] == "ib_port_xmit_wait_total"]
    notes = out["files"][0]["notes"]  # type: ignore[index]
    assert any("saturated" in n and "node_infiniband_port_transmit_wait_total" in n for n in notes)


@pytest.fixture
def exporter() -> Iterator[str]:
    body = NODE_EXPORTER.read_bytes()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    finally:
        srv.shutdown()
        srv.server_close()


def test_node_exporter_scrape_maps_like_the_saved_body(exporter: str) -> None:
    got = DcgmExporterCollector("gpu-9", exporter).collect(1_800_000_000.0)
    ib = {(s.metric, s.sub, s.value) for s in got.samples if s.metric != "net_carrier_changes_total"}
    assert ib == _node_exporter_want()
    assert all(s.gpu is None and s.node == "gpu-9" for s in got.samples)


def test_iblinkinfo_one_line_layout_reads_the_same_port() -> None:
    """`iblinkinfo -l` puts each node's GUID and description on every port line; this line is the ArchWiki
    fixture's `hostname mlx4_0` port written in that layout (constructed here: no real -l capture was found)."""
    line = (
        '0x0002c90300002f79 "                hostname mlx4_0"      3    1[  ] ==( 4X           5.0 Gbps Active/  LinkUp)==>'
        '  0x0002c90300002779      4    1[  ] "MT25408 ConnectX Mellanox Technologies" ( )\n'
    )
    info, issues = parse_iblinkinfo(line, "l")
    assert issues == []
    (port,) = info.hosts["hostname"]
    assert (port.key, port.state, port.phys_state, port.rate_gbps) == ("mlx4_0/1", 4, 5, 20.0)
