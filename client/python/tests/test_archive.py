"""Sandbox.upload and Sandbox.download against fake heads: the tar built
from a local tree and the messages that carry it, tars given as bytes or
a file object, round trips, bad sources and unsafe entries refused before
anything is sent or written, the size bounds, and no resend once sent.
The where-does-each-entry-go rule (extract_plan) is a table test. Each
client test runs against the blocking client and megaflow.aio."""

import io
import os
import stat
import tarfile

import grpc
import pytest

import megaflow
from fakehead import fail, with_reason
from megaflow import _archive
from megaflow._proto import sandbox_pb2 as sbx

FAST = dict(backoff=(0.01, 0.05), timeout=5)


def make_tar(*entries):
    """A tar of (name, kind, payload[, mode]) entries: kind "f" (payload:
    bytes), "d", "l" (symbolic link to payload), "h" (hard link to the
    entry named payload), "c" (character device), "p" (FIFO)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            name, kind, payload = e[:3]
            ti = tarfile.TarInfo(name)
            ti.mode = e[3] if len(e) > 3 else (0o755 if kind == "d" else 0o644)
            if kind == "f":
                ti.size = len(payload)
                tf.addfile(ti, io.BytesIO(payload))
                continue
            ti.type = {"d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE, "c": tarfile.CHRTYPE,
                       "p": tarfile.FIFOTYPE}[kind]
            if kind in "lh":
                ti.linkname = payload
            tf.addfile(ti)
    return buf.getvalue()


def read_tar(data):
    """{name: (kind, payload, mode)} of a tar's entries."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for m in tf.getmembers():
            if m.isfile():
                out[m.name] = ("f", tf.extractfile(m).read(), m.mode)
            elif m.isdir():
                out[m.name] = ("d", None, m.mode)
            elif m.issym():
                out[m.name] = ("l", m.linkname, None)
            else:
                out[m.name] = (m.type, m.linkname, None)
    return out


def local_tree(root):
    """{relative path: (kind, payload)} of a local tree (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("l", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("d", None)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("f", f.read())
    return out


class Archives:
    """UploadArchive and DownloadArchive handlers: uploads are recorded
    (their messages), downloads answer with self.tar in chunks."""

    def __init__(self, tar=b"", chunk=1 << 20):
        self.uploads = []
        self.tar = tar
        self.chunk = chunk

    def install(self, *hs):
        for h in hs:
            h.handlers.update({"UploadArchive": self.upload, "DownloadArchive": self.download,
                               "GetSandbox": self.get})
        return self

    def upload(self, request_iterator, context):
        msgs = list(request_iterator)
        self.uploads.append(msgs)
        return sbx.SandboxUploadArchiveResponse(bytes=sum(len(m.data) for m in msgs))

    def get(self, req, context):
        return sbx.GetSandboxResponse(sandbox=sbx.Sandbox(id=req.id, state=sbx.SANDBOX_STATE_READY, index=11))

    def download(self, req, context):
        for i in range(0, len(self.tar), self.chunk):
            yield sbx.SandboxDownloadArchiveResponse(data=self.tar[i:i + self.chunk])

    def sent(self, i=-1):
        return b"".join(m.data for m in self.uploads[i])


def test_upload_of_a_directory_sends_its_tar_in_chunks(heads, api, tmp_path):
    (h,) = heads(1)
    arc = Archives().install(h)
    src = tmp_path / "repo"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (src / "pkg" / "run.sh").chmod(0o755)
    (src / "big.bin").write_bytes(os.urandom((2 << 20) + 5))
    (src / "pkg" / "sub" / "empty").write_bytes(b"")
    os.symlink("pkg/run.sh", src / "run")
    with api.Client([h.addr], **FAST) as c:
        sb = c.get_sandbox("sbx-abc")
        n = sb.upload(str(src), "/work/repo")
        msgs = arc.uploads[0]
        assert (msgs[0].sandbox_id, msgs[0].path, msgs[0].min_index) == ("sbx-abc", "/work/repo", 11)
        assert all(m.sandbox_id == "" and m.path == "" for m in msgs[1:])
        assert len(msgs) == 3 and all(len(m.data) <= 1 << 20 for m in msgs)
        assert n == len(arc.sent())
        entries = read_tar(arc.sent())
        assert list(entries) == ["big.bin", "pkg", "pkg/run.sh", "pkg/sub", "pkg/sub/empty", "run"]
        assert entries["pkg/run.sh"] == ("f", b"#!/bin/sh\necho hi\n", 0o755)
        assert entries["big.bin"][1] == (src / "big.bin").read_bytes()
        assert entries["pkg"][0] == "d" and entries["run"] == ("l", "pkg/run.sh", None)

        # A file goes under its own name; a tar given as bytes or a file
        # object is sent as it is.
        sb.upload(src / "pkg" / "run.sh", "/work")
        assert list(read_tar(arc.sent())) == ["run.sh"]
        tar = make_tar(("a/b.txt", "f", b"b"))
        assert sb.upload(tar, "/work") == len(tar) and arc.sent() == tar
        sb.upload(io.BytesIO(tar), "/work")
        assert arc.sent() == tar


def test_upload_refuses_bad_sources_before_any_rpc(heads, api, tmp_path, monkeypatch):
    (h,) = heads(1)
    Archives().install(h)
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    (fifo_dir / "ok").write_bytes(b"x")
    os.mkfifo(fifo_dir / "pipe")
    gz = io.BytesIO()
    with tarfile.open(fileobj=gz, mode="w:gz") as tf:
        tf.addfile(tarfile.TarInfo("x"))
    cases = [
        (str(fifo_dir), "/work", "is a FIFO"),
        (str(tmp_path / "missing"), "/work", "local path"),
        (make_tar(("../x", "f", b"")), "/work", "leaves the directory"),
        (make_tar(("/etc/x", "f", b"")), "/work", "absolute"),
        (make_tar(("ok", "f", b""), ("dev", "c", "")), "/work", "tar type"),
        (make_tar(("ok", "f", b""), ("h", "h", "../etc/passwd")), "/work", "hard link"),
        (b"not a tar at all" * 100, "/work", "not an uncompressed tar"),
        (gz.getvalue(), "/work", "not an uncompressed tar"),
        (io.StringIO("text"), "/work", "binary mode"),
        (12, "/work", "source must be"),
        (make_tar(("x", "f", b"")), "work", "absolute file path"),
        (make_tar(("x", "f", b"")), "/", "absolute file path"),
        (make_tar(("x", "f", b"")), None, "absolute file path"),
    ]
    with api.Client([h.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        for source, remote, match in cases:
            with pytest.raises(megaflow.InvalidArgument, match=match):
                sb.upload(source, remote)
        # Over the bound (lowered here): a built tar and a given one.
        monkeypatch.setattr(_archive, "MAX_ARCHIVE", 4096)
        big = tmp_path / "big"
        big.mkdir()
        (big / "f").write_bytes(b"x" * 5000)
        for source in (str(big), b"x" * 4097):
            with pytest.raises(megaflow.InvalidArgument, match="over 4096 bytes"):
                sb.upload(source, "/work")
    assert not h.calls


def test_upload_is_not_resent_once_sent(heads, api):
    h1, h2 = heads(2)
    arc = Archives().install(h1, h2)
    for h in (h1, h2):
        h.fail_next("UploadArchive", fail(grpc.StatusCode.UNAVAILABLE, "connection reset"))
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        with pytest.raises(megaflow.Unavailable, match="may or may not have run"):
            api.Sandbox(c, "sbx-abc").upload(make_tar(("x", "f", b"1")), "/work")
    assert h1.count("UploadArchive") + h2.count("UploadArchive") == 1
    assert arc.uploads == []


def test_download_round_trip(heads, api, tmp_path):
    (h,) = heads(1)
    arc = Archives(chunk=7000).install(h)
    src = tmp_path / "out"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "x.py").write_bytes(b"print(1)\n" * 2000)
    (src / "run.sh").write_bytes(b"#!/bin/sh\n")
    (src / "run.sh").chmod(0o750)
    os.symlink("a/b/x.py", src / "link")
    # The tar a worker sends: entries from the base name on.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(src, arcname="out")
    arc.tar = buf.getvalue()
    with api.Client([h.addr], **FAST) as c:
        sb = c.get_sandbox("sbx-abc")
        dest = tmp_path / "dest" / "new"
        assert sb.download("/work/out/", str(dest)) == len(arc.tar)
        req = h.calls["DownloadArchive"][0]
        assert (req.sandbox_id, req.path, req.max_bytes, req.min_index) == ("sbx-abc", "/work/out/", 0, 11)
        assert local_tree(dest) == local_tree(src)
        assert stat.S_IMODE(os.stat(dest / "run.sh").st_mode) == 0o750
        # Again over what is there: files replaced.
        (dest / "run.sh").write_bytes(b"changed")
        sb.download("/work/out", dest, max_bytes=1 << 20)
        assert (dest / "run.sh").read_bytes() == b"#!/bin/sh\n"
        assert h.calls["DownloadArchive"][1].max_bytes == 1 << 20
        # One file lands under its own name; a hard link within the
        # directory is made.
        arc.tar = make_tar(("log.txt", "f", b"done\n"))
        sb.download("/work/log.txt", tmp_path / "one")
        assert local_tree(tmp_path / "one") == {"log.txt": ("f", b"done\n")}
        arc.tar = make_tar(("d", "d", ""), ("d/f", "f", b"1"), ("d/g", "h", "d/f"))
        sb.download("/d", tmp_path / "hl")
        assert os.stat(tmp_path / "hl" / "g").st_ino == os.stat(tmp_path / "hl" / "f").st_ino


@pytest.mark.parametrize("bad,match", [
    (("/etc/cron.d/x", "f", b"x"), "absolute name"),
    (("out/../../x", "f", b"x"), "leaves the destination"),
    (("../x", "f", b"x"), "leaves the destination"),
    (("out/evil", "l", "/etc/passwd"), "absolute path '/etc/passwd'"),
    (("out/up", "l", "../../x"), "outside the destination"),
    (("out/a/up", "l", "../.."), "outside the destination"),
    (("out/h", "h", "etc/passwd"), "hard link"),
    (("out/h", "h", "out/../../x"), "hard link"),
    (("out/dev", "c", ""), "tar type"),
    (("out/pipe", "p", ""), "tar type"),
])
def test_download_refuses_unsafe_entries_and_writes_nothing(heads, api, tmp_path, bad, match):
    (h,) = heads(1)
    Archives(make_tar(("out", "d", ""), ("out/ok", "f", b"fine"), bad)).install(h)
    dest = tmp_path / "dest"
    with api.Client([h.addr], **FAST) as c:
        with pytest.raises(megaflow.InvalidArgument, match=match) as ei:
            api.Sandbox(c, "sbx-abc").download("/work/out", dest)
    assert "nothing was written" in str(ei.value) and "sbx-abc" in str(ei.value)
    assert not dest.exists() or local_tree(dest) == {}
    assert local_tree(tmp_path) in ({}, {"dest": ("d", None)})


def test_download_never_writes_through_a_link_that_leads_out(heads, api, tmp_path):
    (h,) = heads(1)
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(outside, dest / "escape")  # already there, pointing out
    arc = Archives(make_tar(("out", "d", ""), ("out/escape/f", "f", b"owned"))).install(h)
    with api.Client([h.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        with pytest.raises(megaflow.InvalidArgument, match="symbolic link that leads out"):
            sb.download("/work/out", dest)
        # A link in the tar to a link already there that leads out.
        os.symlink(outside / "target", dest / "away")
        arc.tar = make_tar(("out", "d", ""), ("out/l", "l", "away"))
        with pytest.raises(megaflow.InvalidArgument, match="resolves outside"):
            sb.download("/work/out", dest)
        # A link in the tar, to a place inside, then a file at its name:
        # the link is replaced, nothing is written through it.
        (dest / "sub").mkdir()
        arc.tar = make_tar(("out", "d", ""), ("out/l", "l", "sub"), ("out/l", "f", b"plain"))
        sb.download("/work/out", dest)
        assert os.listdir(dest / "sub") == []
    assert os.listdir(outside) == []
    assert (dest / "l").read_bytes() == b"plain" and not (dest / "l").is_symlink()


def test_download_bounds_and_errors(heads, api, tmp_path):
    h1, h2 = heads(2)
    arc = Archives(make_tar(("out", "d", ""), ("out/f", "f", os.urandom(3 << 20))), chunk=1 << 20).install(h1, h2)
    dest = tmp_path / "dest"
    with api.Client([h1.addr, h2.addr], **FAST) as c:
        sb = api.Sandbox(c, "sbx-abc")
        # The head should refuse past max_bytes; the SDK stops anyway.
        with pytest.raises(megaflow.FileTooLarge, match="over 1048576 bytes"):
            sb.download("/work/out", dest, max_bytes=1 << 20)
        assert not dest.exists()
        for h in (h1, h2):
            h.fail_next("DownloadArchive", with_reason(grpc.StatusCode.NOT_FOUND, "no /work/nope in sbx-abc",
                                                       "FILE_NOT_FOUND"))
        with pytest.raises(megaflow.FileNotFound):
            sb.download("/work/nope", dest)
        for h in (h1, h2):
            h.failures.clear()
            h.fail_next("DownloadArchive", fail(grpc.StatusCode.UNAVAILABLE, "connection reset"))
        with pytest.raises(megaflow.Unavailable, match="may or may not have run"):
            sb.download("/work/out", dest)
        for kw in (dict(max_bytes=-1), dict(max_bytes=(256 << 20) + 1), dict(max_bytes="1")):
            with pytest.raises(megaflow.InvalidArgument, match="max_bytes"):
                sb.download("/work/out", dest, **kw)
        for remote, local in (("work", dest), ("/", dest), ("/work", None), ("/work", 5), ("/work", "")):
            with pytest.raises(megaflow.InvalidArgument):
                sb.download(remote, local)
    assert h1.count("DownloadArchive") + h2.count("DownloadArchive") == 3  # nothing resent


def _m(name, kind="f", link=""):
    ti = tarfile.TarInfo(name)
    ti.type = {"f": tarfile.REGTYPE, "d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
               "b": tarfile.BLKTYPE, "s": tarfile.GNUTYPE_SPARSE}[kind]
    ti.linkname = link
    return ti


@pytest.mark.parametrize("entry,base,want", [
    (_m("out", "d"), "out", None),                 # the directory itself: dropped
    (_m("out/a.txt"), "out", ("a.txt", "")),
    (_m("out/a/../b.txt"), "out", ("b.txt", "")),
    (_m("log.txt"), "log.txt", ("log.txt", "")),   # a single file keeps its name
    (_m("./", "d"), "out", None),
    (_m("out/l", "l", "x/y"), "out", ("l", "")),
    (_m("out/d/l", "l", "../x"), "out", ("d/l", "")),
    (_m("out/h", "h", "out/a.txt"), "out", ("h", "a.txt")),
    (_m("other/x"), "out", ("other/x", "")),       # not under the base: kept, inside
    (_m("/abs"), "out", "absolute name"),
    (_m("out/../x"), "out", ("x", "")),           # cleaned, as Go's path.Clean: inside
    (_m("../../x"), "out", "leaves"),
    (_m("."), "out", "destination directory itself"),
    (_m("out/l", "l", "/"), "out", "absolute path"),
    (_m("out/l", "l", ".."), "out", "outside"),
    (_m("out/d/l", "l", "../.."), "out", "outside"),
    (_m("out/l", "l", ""), "out", "outside"),
    (_m("out/h", "h", "a.txt"), "out", "outside the directory downloaded"),
    (_m("out/h", "h", "out/../../a"), "out", "outside the directory downloaded"),
    (_m("out/b", "b"), "out", "tar type"),
    (_m("out/s", "s"), "out", "sparse"),
])
def test_extract_plan(entry, base, want):
    if isinstance(want, str):
        with pytest.raises(megaflow.InvalidArgument, match=want):
            _archive.extract_plan([entry], base)
        return
    plan = _archive.extract_plan([entry], base)
    assert [(name, link) for _, name, link in plan] == ([] if want is None else [want])
