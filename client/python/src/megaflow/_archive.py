"""Directories into and out of a sandbox as tar streams, for
``Sandbox.upload`` and ``Sandbox.download`` (Go's client/sandbox_archive.go,
``megaflow sandbox cp``): the tar of a local tree, the checks of a tar given
as is, and the extraction of a downloaded one, where no entry may land
outside the destination. No gRPC here; both clients stream the bytes, the
asyncio one running these functions in a thread.

Every tar is spooled (in memory up to 8 MiB, then in a temporary file) and
checked whole before anything is sent or written, so that a bad entry or a
stream over the bound fails with nothing changed.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator, List, Optional, Tuple, Union

from .errors import FileTooLarge, InvalidArgument

MAX_ARCHIVE = 256 << 20
"""The bound of one tar stream into or out of a sandbox, in bytes (Go's
spec.SandboxMaxArchive): 256 MiB."""

CHUNK = 1 << 20
"""The bytes of tar in one upload message (Go's spec.SandboxArchiveChunk)."""

_SPOOL_IN_MEMORY = 8 << 20

Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]
"""What ``Sandbox.upload`` copies: a local directory or file (a path), a
tar stream (bytes), or a binary file object holding one."""


class _Bounded:
    """A writable spool (what tarfile writes to) that refuses to grow past
    MAX_ARCHIVE bytes."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.file: Any = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)
        self.n = 0

    def write(self, b: Any) -> int:
        n = len(b)
        if self.n + n > MAX_ARCHIVE:
            raise InvalidArgument(f"megaflow: {self.what}: the tar stream is over {MAX_ARCHIVE} bytes "
                                  f"(256 MiB): copy a smaller directory")
        self.file.write(b)
        self.n += n
        return n

    def tell(self) -> int:
        return self.n


class Spool:
    """A tar stream checked and ready to send or extract: ``file`` is at
    its start, ``size`` its length in bytes. Close it (or use ``with``)
    to drop the temporary file."""

    def __init__(self, file: Any, size: int) -> None:
        self.file = file
        self.size = size

    def chunks(self) -> Iterator[bytes]:
        """The stream in pieces of at most CHUNK bytes."""
        while True:
            b = self.file.read(CHUNK)
            if not b:
                return
            yield b

    def close(self) -> None:
        """Drop the spooled bytes."""
        self.file.close()

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- up: the tar to send ---------------------------------------------------------


def upload_spool(source: Source, what: str) -> Spool:
    """The tar stream of an upload, checked and bounded.

    Args:
        source: a local directory (its contents are sent, named relative
            to it), a local file or symbolic link (sent under its own
            name), a tar stream as bytes, or a binary file object read to
            its end.
        what: the call, for messages ("upload into sandbox sbx-1").

    Returns:
        The spooled tar.

    Raises:
        InvalidArgument: a local path that cannot be read or holds a device,
            FIFO or socket; a given tar that is not one (or is compressed),
            or holds an entry the worker refuses (absolute, leaving the
            directory, a device, a sparse file); over MAX_ARCHIVE bytes.
    """
    if isinstance(source, (str, os.PathLike)):
        return _local_tar(Path(source), what)
    spool = _Bounded(what)
    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            spool.write(bytes(source))
        elif hasattr(source, "read"):
            while True:
                b = source.read(CHUNK)
                if not b:
                    break
                if not isinstance(b, (bytes, bytearray)):
                    raise InvalidArgument(f"megaflow: {what}: the file object gave {type(b).__name__}, "
                                          f"not bytes: open it in binary mode ('rb')")
                spool.write(b)
        else:
            raise InvalidArgument(f"megaflow: {what}: the source must be a local path, tar bytes or a binary "
                                  f"file object, not {type(source).__name__}")
        spool.file.seek(0)
        for m in _members(spool.file, what):
            problem = upload_entry_problem(m)
            if problem:
                raise InvalidArgument(f"megaflow: {what}: entry {m.name!r} {problem}; nothing was sent")
        spool.file.seek(0)
    except BaseException:
        spool.file.close()
        raise
    return Spool(spool.file, spool.n)


def upload_entry_problem(m: tarfile.TarInfo) -> str:
    """What the worker would refuse in entry m of an uploaded tar ("" if
    nothing): as Go's worker rearchive."""
    name = m.name
    if name.startswith("/"):
        return "is an absolute path: tar entries must be relative to the directory"
    if _leaves(posixpath.normpath(name)):
        return "leaves the directory"
    if _sparse(m):
        return "is a sparse file: copy it as a regular file (tar without --sparse)"
    if m.islnk():
        target = m.linkname
        if target.startswith("/") or _leaves(posixpath.normpath(target)):
            return f"is a hard link to {target!r}, outside the directory"
    elif not (m.isreg() or m.isdir() or m.issym()):
        return f"is of tar type {m.type!r}: only files, directories and links are copied"
    return ""


def _local_tar(local: Path, what: str) -> Spool:
    """The tar of a local tree, as Go's writeTar: a directory's entries
    named relative to it (depth first, sorted), a file or a link under its
    own name; regular files, directories and symbolic links only."""
    try:
        st = os.lstat(local)
    except OSError as e:
        raise InvalidArgument(f"megaflow: {what}: local path {str(local)!r}: {e.strerror}") from None
    spool = _Bounded(what)
    try:
        with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
            if stat.S_ISDIR(st.st_mode):
                for path, name, pst in _walk(local, what):
                    _add(tf, path, name, pst, what)
            else:
                _add(tf, local, local.name, st, what)
        spool.file.seek(0)
    except OSError as e:
        spool.file.close()
        raise InvalidArgument(f"megaflow: {what}: reading {e.filename or str(local)!r}: {e.strerror}") from None
    except BaseException:
        spool.file.close()
        raise
    return Spool(spool.file, spool.n)


def _walk(root: Path, what: str) -> Iterator[Tuple[Path, str, os.stat_result]]:
    """Every entry below root, depth first in name order (a directory's
    entries right after it, as Go's filepath.WalkDir), without following
    symbolic links: (path, its name relative to root, its lstat)."""
    def listing(d: Path, prefix: str) -> Iterator[Tuple[Path, str]]:
        with os.scandir(d) as it:
            names = sorted(e.name for e in it)
        return iter([(d / n, prefix + n) for n in names])

    stack = [listing(root, "")]
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            continue
        path, name = nxt
        st = os.lstat(path)
        yield path, name, st
        if stat.S_ISDIR(st.st_mode):
            stack.append(listing(path, name + "/"))


def _add(tf: tarfile.TarFile, path: Path, name: str, st: os.stat_result, what: str) -> None:
    ti = tarfile.TarInfo(name)
    ti.mode = stat.S_IMODE(st.st_mode)
    ti.mtime = int(st.st_mtime)
    ti.uid, ti.gid = st.st_uid, st.st_gid
    ti.uname = ti.gname = ""
    if stat.S_ISREG(st.st_mode):
        ti.type, ti.size = tarfile.REGTYPE, st.st_size
        with open(path, "rb") as f:
            tf.addfile(ti, f)
        return
    if stat.S_ISDIR(st.st_mode):
        ti.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        ti.type, ti.linkname = tarfile.SYMTYPE, os.readlink(path)
    else:
        raise InvalidArgument(f"megaflow: {what}: {str(path)!r} is a {_kind(st.st_mode)}: only files, "
                              f"directories and symbolic links are copied; nothing was sent")
    tf.addfile(ti)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


# -- down: the tar received ------------------------------------------------------


class Receiver:
    """Collects a downloaded tar stream's chunks, at most limit bytes.

    Args:
        what: the call, for messages.
        limit: the most bytes accepted (the request's max_bytes, or
            MAX_ARCHIVE).
    """

    def __init__(self, what: str, limit: int) -> None:
        self.what = what
        self.limit = limit
        self.file: Any = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)
        self.n = 0

    def add(self, data: bytes) -> None:
        """Append a chunk.

        Raises:
            FileTooLarge: the stream passed the limit (the head should have
                refused it first).
        """
        self.n += len(data)
        if self.n > self.limit:
            raise FileTooLarge(f"megaflow: {self.what}: the tar stream is over {self.limit} bytes: "
                               f"download a smaller directory; nothing was written")
        self.file.write(data)

    def spool(self) -> Spool:
        """The bytes received, from their start."""
        self.file.seek(0)
        return Spool(self.file, self.n)

    def close(self) -> None:
        """Drop the bytes received."""
        self.file.close()

    def __enter__(self) -> "Receiver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def extract_plan(members: List[tarfile.TarInfo], base: str) -> List[Tuple[tarfile.TarInfo, str, str]]:
    """Where each entry of a downloaded tar goes, as Go's extractTar: the
    entries are named from the downloaded path's base name on, so the
    directory's own entry is dropped and "base/" stripped from the others
    (a single file keeps its name). Checked whole before anything is
    written.

    Args:
        members: the tar's entries, in order.
        base: the base name of the path downloaded.

    Returns:
        (entry, its path relative to the destination, the target of a
        hard link relative to the destination or "") for each entry to
        write.

    Raises:
        InvalidArgument: an entry whose name is absolute or leaves the
            destination (".."), a symbolic link that points outside it (an
            absolute target, or one that climbs out), a hard link to
            something outside the directory downloaded, or an entry that is
            not a file, a directory or a link (a device, a FIFO, a sparse
            file).
    """
    plan = []
    for m in members:
        raw = m.name
        if raw.startswith("/"):
            raise _refused(m, "has an absolute name")
        name = posixpath.normpath(raw)
        if name.startswith(base + "/"):
            name = name[len(base) + 1:]
        elif name == base and m.isdir():
            continue
        if name == ".":
            if m.isdir():
                continue
            raise _refused(m, "names the destination directory itself")
        if _leaves(name):
            raise _refused(m, "leaves the destination directory")
        link = ""
        if _sparse(m):
            raise _refused(m, "is a sparse file: only files, directories and links are copied")
        if m.issym():
            target = m.linkname
            if target.startswith("/"):
                raise _refused(m, f"is a symbolic link to the absolute path {target!r}, outside the destination "
                                  f"directory")
            if not target or _leaves(posixpath.normpath(posixpath.join(posixpath.dirname(name), target))):
                raise _refused(m, f"is a symbolic link to {target!r}, outside the destination directory")
        elif m.islnk():
            target = posixpath.normpath(m.linkname)
            if not target.startswith(base + "/"):
                raise _refused(m, f"is a hard link to {m.linkname!r}, outside the directory downloaded")
            link = target[len(base) + 1:]
            if _leaves(link):
                raise _refused(m, f"is a hard link to {m.linkname!r}, outside the destination directory")
        elif not (m.isreg() or m.isdir()):
            raise _refused(m, f"is of tar type {m.type!r}: only files, directories and links are copied")
        plan.append((m, name, link))
    return plan


def extract(spool: Spool, dest: Path, base: str, what: str) -> None:
    """Write a downloaded tar under dest (created if missing), every entry
    checked first (:func:`extract_plan`); then, as each is written, the
    directory it goes into must resolve inside dest, so that no entry is
    written through a symbolic link (one in the tar, or one already in
    dest) that leads out. An existing file or link at an entry's path is
    replaced.

    Raises:
        InvalidArgument: a refused entry (nothing written when the tar
            itself is at fault; the entries before it when a link already
            in dest leads out), or a tar the SDK cannot read.
        OSError: the local file system's errors.
    """
    try:
        with tarfile.open(fileobj=spool.file, mode="r:") as tf:
            plan = extract_plan(tf.getmembers(), base)
            dest.mkdir(parents=True, exist_ok=True)
            root = os.path.realpath(dest)
            for m, name, link in plan:
                _write(tf, m, root, name, link)
    except tarfile.TarError as e:
        raise InvalidArgument(f"megaflow: {what}: the head sent a tar the SDK cannot read: {e}") from None
    except InvalidArgument as e:
        raise InvalidArgument(f"megaflow: {what}: {e.message}") from None


def _write(tf: tarfile.TarFile, m: tarfile.TarInfo, root: str, name: str, link: str) -> None:
    target = os.path.join(root, *name.split("/"))
    parent = os.path.dirname(target)
    if not _inside(root, os.path.realpath(parent)):
        raise _refused(m, "would be written through a symbolic link that leads out of the destination directory",
                       written=True)
    os.makedirs(parent, 0o755, exist_ok=True)
    mode = m.mode & 0o777
    if m.isdir():
        if not _inside(root, os.path.realpath(target)):
            raise _refused(m, "is a directory behind a symbolic link that leads out of the destination directory",
                           written=True)
        os.makedirs(target, mode | 0o700, exist_ok=True)
        return
    if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
        os.unlink(target)
    if m.issym():
        if not _inside(root, os.path.realpath(os.path.join(parent, m.linkname))):
            raise _refused(m, f"is a symbolic link to {m.linkname!r}, which resolves outside the destination "
                              f"directory", written=True)
        os.symlink(m.linkname, target)
    elif m.islnk():
        src = os.path.join(root, *link.split("/"))
        if not _inside(root, os.path.realpath(src)):
            raise _refused(m, f"is a hard link to {m.linkname!r}, which resolves outside the destination "
                              f"directory", written=True)
        os.link(src, target)
    else:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
        with os.fdopen(fd, "wb") as out:
            f = tf.extractfile(m)
            assert f is not None  # a regular file's entry
            while True:
                b = f.read(CHUNK)
                if not b:
                    break
                out.write(b)


def _members(f: Any, what: str) -> List[tarfile.TarInfo]:
    try:
        with tarfile.open(fileobj=f, mode="r:") as tf:
            return tf.getmembers()
    except tarfile.TarError as e:
        raise InvalidArgument(f"megaflow: {what}: not an uncompressed tar stream ({e}); nothing was sent") from None


def _refused(m: tarfile.TarInfo, problem: str, written: bool = False) -> InvalidArgument:
    after = "the entries before it were written" if written else "nothing was written"
    return InvalidArgument(f"entry {m.name!r} {problem}; {after}")


def _leaves(clean: str) -> bool:
    """Whether a normalized relative name climbs out of its directory."""
    return clean == ".." or clean.startswith("../") or clean.startswith("/")


def _sparse(m: tarfile.TarInfo) -> bool:
    return m.type == tarfile.GNUTYPE_SPARSE or getattr(m, "sparse", None) is not None


def _inside(root: str, p: str) -> bool:
    return p == root or p.startswith(root.rstrip(os.sep) + os.sep)


def base_name(remote: str) -> str:
    """The base name a downloaded tar's entries start with: that of the
    remote path, cleaned."""
    return posixpath.basename(posixpath.normpath(remote))


def check_max_bytes(what: str, max_bytes: Optional[int]) -> int:
    """max_bytes of a download: 0 (or None) is the bound, MAX_ARCHIVE.

    Raises:
        InvalidArgument: not an int from 0 to MAX_ARCHIVE.
    """
    if max_bytes is None:
        return 0
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 0 <= max_bytes <= MAX_ARCHIVE:
        raise InvalidArgument(f"megaflow: {what}: max_bytes {max_bytes!r} is out of range: 0 (the limit) to "
                              f"{MAX_ARCHIVE}")
    return max_bytes
