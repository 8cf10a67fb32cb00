"""Writing a file so that readers see the old file or the new one, never a part of it.

Pure: imports nothing from normdiff.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike, data, durable: bool = True) -> Path:
    """Write `data` (str, bytes, or an iterable of str pieces) to `path` through a fresh temporary
    file in the same folder (a unique name, created exclusively, so no symlink is followed), fsync'd
    and moved into place with os.replace. The temporary file is removed if anything fails.
    `durable` False skips the fsyncs: for a cache, whose torn or lost file is only made again."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _naming(exc, path, None)
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp's 0600 would hide a report from its readers
        if isinstance(data, bytes):
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                if durable:
                    os.fsync(fh.fileno())
        else:
            # a lone surrogate (an exception's text, a command's undecodable byte) is no UTF-8: its escape
            with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="\n") as fh:
                for piece in ([data] if isinstance(data, str) else data):
                    fh.write(piece)
                fh.flush()
                if durable:
                    os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _naming(exc, path, tmp)
        raise
    if durable:
        _sync_folder(path.parent)
    return path


def _naming(exc: OSError, path: Path, tmp: str | None) -> OSError:
    """`exc` naming the file that was being written rather than its temporary name (a write that
    fails for lack of space names no file at all), so that whoever reports it names the right file."""
    if exc.errno is None or not (exc.filename is None or exc.filename == tmp
                                 or (tmp is None and Path(exc.filename).parent == path.parent)):
        return exc  # not the system's, or already naming another file: as it is
    return OSError(exc.errno, exc.strerror, str(path))  # of its subclass: FileNotFoundError, ...


# The first fix to try when the machine refuses a write, by its errno; "{elsewhere}" is where else to
# write ("give another --out"). A file over the size limit is over it anywhere.
_FIXES = {
    errno.ENOSPC: "free some space or {elsewhere}",
    errno.EDQUOT: "free some space within your disk quota or {elsewhere}",
    errno.EFBIG: "raise the file-size limit (ulimit -f)",
    errno.EACCES: "get write permission there or {elsewhere}",
    errno.EPERM: "get write permission there or {elsewhere}",
    errno.EIO: "check the device or {elsewhere}",
}


def refused(exc: BaseException) -> bool:
    """Whether `exc` is the operating system refusing a write (it carries an errno), not a bug."""
    return isinstance(exc, OSError) and exc.errno is not None


def why_refused(exc: OSError, elsewhere: str) -> tuple[str, str]:
    """The reason as the system words it (and the errno's name: what a search finds), and the fix."""
    name = errno.errorcode.get(exc.errno, str(exc.errno))
    return (f"{exc.strerror or os.strerror(exc.errno)}, {name}",
            _FIXES.get(exc.errno, "{elsewhere}").format(elsewhere=elsewhere))


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every platform opens folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def umask() -> int:
    """The process's umask, read without setting it where Linux tells it (setting it to read it
    races with any thread creating a file)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


CACHE_HOME_ENV = "NORMDIFF_CACHE_HOME"
INDUCTOR_CACHE_ENV = "NORMDIFF_INDUCTOR_CACHE"  # torch inductor's cache (empty: none of ours)


def cache_home() -> str:
    """The folder of normdiff's own caches: $NORMDIFF_CACHE_HOME, else ~/.cache/normdiff. A worker
    is given it explicitly (harness/engine/pool.py), since its HOME is the run's temporary folder."""
    return os.environ.get(CACHE_HOME_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "normdiff")


def cache_dir(env: str, name: str) -> str | None:
    """A compilation cache's directory: $`env` (empty: no cache) or cache_home()/`name`, created;
    None when it cannot be written (compiling again is slower, never wrong)."""
    path = os.environ.get(env, os.path.join(cache_home(), name))
    if not path:
        return None
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):  # writable, not just present
            pass
    except OSError:
        return None
    return path

