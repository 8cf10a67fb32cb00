"""Report folders that are never half-written, never mixed and never written through someone else's
link, and never lose a file normdiff did not write.

`check_folder(path)` refuses, before any work, an --out that cannot become a report folder (an
existing file, a path under a file, a symlink, a read-only or unwritable place). `staged(path)`
gives a fresh private folder to write the report into, then puts it in place:

  * no folder there yet, or a folder holding only what an earlier run wrote (its manifest says
    what that is): the new folder replaces it whole, by one rename (Linux: renameat2 with
    RENAME_EXCHANGE, so readers see the old report or the new one, never neither). Two runs into
    one --out each stage their own folder: the last to finish wins, whole;
  * a folder that also holds other files (`--out .`, a folder of your own): the report's files
    are moved in one by one (each an atomic rename), the earlier run's files that this run did not
    write again are removed, others' files are kept, and the manifest is moved in last;
  * a mount point (a container's volume), which cannot be renamed: the same, file by file, with
    the staging folder inside it (a bind mount os.path.ismount misses is found when its rename
    fails with EBUSY, and merged the same way).

Everything is written into the staging folder before anything at `path` changes, so a write the
machine refuses (a full disk, a file-size limit, a read-only file system) leaves `path` as it was
and raises an OutputError naming the file, the reason and the fix (`writing` does the same for
one file: a --script, a --plot, a --save-baseline).

The manifest (.normdiff-manifest.json) lists the files a run wrote, and says whether the run was
complete. Staging folders are made by mkdtemp (a unique name, created exclusively, so nothing
planted in advance is followed) beside --out, and removed on any failure or interrupt; one a
SIGKILLed run left (its pid is in the name) is removed by the next run into the same place.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from normdiff import __version__, processes
from normdiff.files import atomic_write, refused, umask, why_refused
from normdiff.harness.data import inputs
from normdiff.harness.data.errors import OutputError, UsageError

MANIFEST = ".normdiff-manifest.json"
_STAGE_SUFFIX = ".normdiff-staging"


def _problem(what: str, path: Path, why: str, fix: str) -> UsageError:
    return UsageError(f"{what} {path}: {why}; {fix}")


def check_folder(path, what: str = "--out") -> Path:
    """`path` as a report folder normdiff can write, or a UsageError naming the problem and the fix.
    Creates nothing that outlives the check (writability is probed with a temporary folder)."""
    path = Path(path)
    if path.is_symlink():
        raise _problem(what, path, f"is a symbolic link (to {os.readlink(path)})", "give the folder itself")
    if path.exists() and not path.is_dir():
        raise _problem(what, path, "is an existing file, not a folder",
                       "give a folder name (it is created) or remove the file")
    if not path.exists():
        existing = _nearest_existing(path)
        if not existing.is_dir():
            raise _problem(what, path, f"{existing} is a file, so no folder can be made under it",
                           "give another folder")
        _probe(existing, what, path)
        _probe_create(path, what)
        return path
    if not _in_place(path):
        _probe(path.absolute().parent, what, path)  # the staging folder is made beside it
    else:
        _probe(path, what, path)  # the staging folder is made inside it
        plots = path / "plots"
        if plots.is_symlink() or (plots.exists() and not plots.is_dir()):
            raise _problem(what, path, "its plots/ is a symbolic link or a file", "remove it or give another folder")
    return path


def check_file(path, what: str) -> Path:
    """A file normdiff will write (a --script, a --plot, a --save-baseline): its folder exists and is
    writable, and it is not a folder or a link."""
    path = Path(path)
    if path.is_symlink():
        raise _problem(what, path, f"is a symbolic link (to {os.readlink(path)})", "give the file itself")
    if path.is_dir():
        raise _problem(what, path, "is a folder", "give a file name")
    if path.exists() and not path.is_file():  # writing would replace a device node, a pipe, a socket
        why = inputs.kind_of(path.stat().st_mode).removeprefix("Is ").removesuffix(", not a file")
        raise _problem(what, path, f"is {why}, not a file", "give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise _problem(what, path, f"its folder {parent} does not exist" if not parent.exists()
                       else f"{parent} is a file", "create the folder first or give another path")
    _probe(parent, what, path)
    return path


def _nearest_existing(path: Path) -> Path:
    for parent in path.absolute().parents:
        if parent.exists() or parent.is_symlink():
            return parent
    return Path("/")


def _probe(folder: Path, what: str, path: Path) -> None:
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".normdiff-probe-", dir=folder))
    except OSError as exc:
        raise _problem(what, path, f"cannot write in {folder} ({exc.strerror})", "choose a folder you can write") from None


def _probe_create(path: Path, what: str) -> None:
    """Make the missing folders of `path` and remove them again: a name too long, or a component
    the file system refuses, is found now rather than after the run."""
    made = []
    try:
        for folder in reversed([path.absolute(), *path.absolute().parents]):
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
    except OSError as exc:
        raise _problem(what, path, f"cannot create it ({exc.strerror})", "give another folder name") from None
    finally:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass


def _manifest(path: Path) -> dict | None:
    try:
        data = inputs.json_loads(inputs.read_text(path / MANIFEST, "manifest"))  # a pipe there is no manifest
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None


def _owned(path: Path) -> set[str]:
    """The files an earlier run's manifest lists, as paths inside the folder: a name that is
    absolute or climbs out with '..' is nobody's file of ours (a manifest is only a file, and
    anyone can write one)."""
    manifest = _manifest(path)
    names = {str(f) for f in manifest["files"]} if manifest else set()
    return {n for n in names if n and not os.path.isabs(n) and ".." not in Path(n).parts}


def _in_place(path: Path) -> bool:
    """Whether an existing folder must be updated file by file: it holds files no run of ours
    wrote, it is the current folder or one above it (renaming it would move the user's shell), or
    it is a mount point (which cannot be renamed)."""
    cwd = Path.cwd().resolve()
    if path.resolve() == cwd or path.resolve() in cwd.parents or os.path.ismount(path):
        return True  # renaming a mount point fails (EBUSY)
    owned = _owned(path) | {MANIFEST}
    for root, dirs, files in os.walk(path):
        rel = Path(root).relative_to(path)
        for name in files:
            if str(rel / name) not in owned:
                return True
        if any((Path(root) / d).is_symlink() for d in dirs):
            return True
    return False


@contextlib.contextmanager
def staged(path, incomplete: str | None = None, what: str = "--out"):
    """Yield a fresh folder to write a report into; on success put it in place at `path` (see the
    module's text) with its manifest. On any exception or interrupt the staging folder is removed
    and `path` is as it was; a write the machine refuses is an OutputError (`what` is the option
    named in it)."""
    path = Path(path)
    state = _before(path)
    missing = [folder for folder in path.parents if not folder.exists()]
    where = path.parent
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        inplace = path.exists() and _in_place(path)
        # beside the folder, or inside it when it is updated in place: on the same file system
        # either way, so that every move is a rename
        where, prefix = path if inplace else path.parent, f".{path.name or 'report'}."
        processes.remove_orphaned(str(where), prefix, _STAGE_SUFFIX)  # a SIGKILLed run's
        stage = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", suffix=_STAGE_SUFFIX, dir=where))
    except OSError as exc:
        if not refused(exc):
            raise
        _remove_empty(missing)
        raise _failed(what, path, f"in {where}", exc, state) from None
    moving = _Moving(path)
    try:
        os.chmod(stage, 0o777 & ~umask())  # mkdtemp's 0700 would become the report folder's mode
        yield stage
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
        atomic_write(stage / MANIFEST, json.dumps({"normdiff": __version__, "files": files,
                                                   "complete": incomplete is None, "incomplete": incomplete},
                                                  indent=2) + "\n")
        # decided again now: the folder may have appeared, or gained someone's file, meanwhile
        if path.exists() and (inplace or _in_place(path)):
            _merge(stage, path, files, moving)
        else:
            try:
                _replace(stage, path)
            except OSError as exc:  # a bind mount ismount misses; another file system
                if exc.errno not in (errno.EBUSY, errno.EXDEV) or not path.is_dir():
                    raise
                _merge(stage, path, files, moving)
    except OSError as exc:
        if not refused(exc):
            raise
        shutil.rmtree(stage, ignore_errors=True)  # first: it may be in a folder made for the report
        if not moving.state:
            _remove_empty(missing)
        raise _failed(what, path, _shown(exc.filename, stage, path), exc, moving.state or state) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _before(path: Path) -> str:
    """What a refused write leaves at `path`: what was there."""
    try:
        return f"{path} is as it was" if path.exists() else "nothing was written"
    except OSError:
        return f"{path} is as it was"


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders made for a report that was not written (innermost first), if empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def _failed(what: str, path: Path, shown: str, exc: OSError, state: str) -> OutputError:
    reason, fix = why_refused(exc, f"give another {what}")
    return OutputError(f"{what} {path}: cannot write {shown} ({reason}); {fix}; {state}")


@contextlib.contextmanager
def writing(path, what: str):
    """Around the writing of one file the user named (`what`: --script, --plot, --save-baseline):
    a write the machine refuses is an OutputError naming it, the reason and the fix. Written with
    atomic_write, an earlier file stays as it was."""
    path = Path(path)
    state = f"{path} is as it was" if path.exists() else "nothing was written"
    try:
        yield path
    except OSError as exc:
        if not refused(exc):
            raise
        reason, fix = why_refused(exc, f"give another {what}")
        shown = "it" if exc.filename in (None, str(path)) else exc.filename
        raise OutputError(f"{what} {path}: cannot write {shown} ({reason}); {fix}; {state}") from None


def _shown(filename, stage: Path, path: Path) -> str:
    """The file a refused write was for, as the report names it (inside the folder)."""
    if filename is None:
        return "the report"
    for root in (stage, path):
        try:
            rel = Path(filename).relative_to(root)
        except ValueError:
            continue
        return str(rel) if rel.parts else str(path)
    return str(filename)


class _Moving:
    """How far a merge got: what a failure in it leaves at `path`."""

    def __init__(self, path: Path):
        self.path, self.state = path, ""

    def moved(self, done: int, total: int) -> None:
        self.state = (f"{done} of this run's {total} files were moved into {self.path} before it failed, beside the "
                      "earlier run's files they did not replace, and no manifest")


def _merge(stage: Path, path: Path, files: list[str], moving: _Moving) -> None:
    """Move the new files (already written, with their manifest, in `stage`) into a folder that
    holds others' files too: renames only (or copies, across file systems), the manifest last."""
    old = _owned(path)
    (path / MANIFEST).unlink(missing_ok=True)  # until the last file is in, the folder claims nothing
    moving.moved(0, len(files))
    for i, name in enumerate(files):
        target = path / name
        if _through_link(path, target):
            continue  # a linked subfolder leads outside: its files stay in report.html only
        target.parent.mkdir(parents=True, exist_ok=True)
        _move(stage / name, target)  # a planted link at `target` is replaced, not followed
        moving.moved(i + 1, len(files))
    for name in sorted(old - set(files) - {MANIFEST}):
        target = path / name
        if not _through_link(path, target) and not target.is_symlink() and target.is_file():
            target.unlink()
    _move(stage / MANIFEST, path / MANIFEST)


def _move(source: Path, target: Path) -> None:
    """Rename `source` to `target`; across file systems (EXDEV), an atomic copy."""
    try:
        os.replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        atomic_write(target, source.read_bytes())


def _through_link(root: Path, target: Path) -> bool:
    """Whether a folder between `root` and `target` is a symbolic link (or not a folder)."""
    folder = root
    for part in target.relative_to(root).parts[:-1]:
        folder = folder / part
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            return True
    return False


def _replace(stage: Path, path: Path) -> None:
    """Put the staged folder at `path`: exchanged with an earlier report, or renamed into place."""
    if path.exists() and _exchange(stage, path):
        return  # the old report is now at `stage`, which the caller removes
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".normdiff-old", dir=path.parent))
        os.rmdir(old)
        os.rename(path, old)  # a mount point: EBUSY, and nothing moved
        try:
            os.rename(stage, path)
        except BaseException:
            os.rename(old, path)  # the earlier report back in place
            raise
        shutil.rmtree(old, ignore_errors=True)
        return
    try:
        os.rename(stage, path)
    except OSError:  # a folder appeared there meanwhile: another run's report, or someone's files
        if _in_place(path):
            raise
        if not _exchange(stage, path):
            raise


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders atomically (Linux renameat2); False where the platform cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0
