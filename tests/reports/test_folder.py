"""Report folders: --out and file paths are checked before any work, and `staged` puts a report in
place whole (or merged file by file beside a user's own files), never half-written, never through a
planted link, never losing a file normdiff did not write."""
import contextlib
import errno
import json
import os
import re
from pathlib import Path

import pytest

from normdiff.files import atomic_write
from normdiff.harness.data.errors import OutputError, UsageError
from normdiff.reports import folder
from normdiff.reports.folder import MANIFEST, check_file, check_folder, staged


def write_report(path, files, incomplete=None):
    """Stage a report of `files` ({relative name: text}) into `path`."""
    with staged(path, incomplete=incomplete) as stage:
        for name, text in files.items():
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_text(text)
    return path


def manifest(path):
    return json.loads((Path(path) / MANIFEST).read_text())


def leftovers(*folders):
    """Staging (or old) folders left beside or inside any of `folders`."""
    found = []
    for f in folders:
        if Path(f).is_dir():
            found += [p.name for p in Path(f).iterdir()
                      if p.name.endswith((".normdiff-staging", ".normdiff-old")) or p.name.startswith(".normdiff-probe-")]
    return found


# ---- check_folder ------------------------------------------------------------------------------


def test_check_folder_refuses_an_existing_file(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("a,b\n")
    with pytest.raises(UsageError, match="is an existing file, not a folder"):
        check_folder(path)
    assert path.read_text() == "a,b\n"


def test_check_folder_refuses_dev_null():
    with pytest.raises(UsageError, match="not a folder"):
        check_folder("/dev/null")


def test_check_folder_refuses_a_path_under_a_file(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UsageError, match="is a file, so no folder can be made under it"):
        check_folder(tmp_path / "file.txt" / "sub" / "out")


@pytest.mark.parametrize("to_folder", [True, False], ids=["to-a-folder", "dangling"])
def test_check_folder_refuses_a_symlink(tmp_path, to_folder):
    real = tmp_path / "real"
    if to_folder:
        real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UsageError, match="symbolic link") as err:
        check_folder(link, what="--out")
    assert str(real) in str(err.value) and str(err.value).startswith("--out ")


def test_check_folder_refuses_an_unwritable_place():
    target = Path("/sys/normdiff-x")
    try:
        os.mkdir(target)
    except OSError:
        pass
    else:
        os.rmdir(target)
        pytest.skip("/sys is writable here")
    with pytest.raises(UsageError, match="cannot write in /sys"):
        check_folder(target / "report")
    assert not target.exists()


def test_check_folder_accepts_a_new_nested_path_without_creating_anything(tmp_path):
    path = tmp_path / "a" / "b" / "c"
    assert check_folder(path) == path
    assert not (tmp_path / "a").exists()
    assert list(tmp_path.iterdir()) == []  # the writability probe is gone too


def test_check_folder_accepts_an_existing_report_and_a_users_folder(tmp_path):
    write_report(tmp_path / "report", {"results.csv": "x\n"})
    assert check_folder(tmp_path / "report") == tmp_path / "report"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert check_folder(tmp_path / "mine") == tmp_path / "mine"
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    assert leftovers(tmp_path, tmp_path / "report", tmp_path / "mine") == []


def test_check_folder_refuses_a_plots_link_in_a_users_folder(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (tmp_path / "elsewhere").mkdir()
    (out / "plots").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="plots/"):
        check_folder(out)


# ---- check_file --------------------------------------------------------------------------------


def test_check_file_refuses_a_folder(tmp_path):
    with pytest.raises(UsageError, match="is a folder"):
        check_file(tmp_path, "--script")


def test_check_file_refuses_a_missing_parent_folder(tmp_path):
    with pytest.raises(UsageError, match="does not exist") as err:
        check_file(tmp_path / "nope" / "repro.py", "--script")
    assert str(err.value).startswith("--script ")
    assert not (tmp_path / "nope").exists()


def test_check_file_refuses_a_parent_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        check_file(tmp_path / "f" / "plot.png", "--plot")


def test_check_file_refuses_a_symlink(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    link = tmp_path / "baseline.json"
    link.symlink_to(outside)
    with pytest.raises(UsageError, match="symbolic link"):
        check_file(link, "--save-baseline")
    assert outside.read_text() == "{}"


def test_check_file_accepts_a_new_or_existing_file(tmp_path):
    assert check_file(tmp_path / "new.py", "--script") == tmp_path / "new.py"
    (tmp_path / "old.py").write_text("x")
    assert check_file(tmp_path / "old.py", "--script") == tmp_path / "old.py"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.py"]


# ---- staged ------------------------------------------------------------------------------------


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_staged_creates_a_new_folder_with_its_files_and_manifest(tmp_path, umask_022):
    out = tmp_path / "deep" / "report"
    write_report(out, {"results.csv": "a\n", "summary.md": "# s\n", "plots/p.svg": "<svg/>"})
    assert (out / "results.csv").read_text() == "a\n"
    assert (out / "plots" / "p.svg").read_text() == "<svg/>"
    m = manifest(out)
    assert m["files"] == ["plots/p.svg", "results.csv", "summary.md"]
    assert m["complete"] is True and m["incomplete"] is None
    assert "normdiff" in m
    mode = out.stat().st_mode & 0o777
    assert mode == 0o755, oct(mode)  # mkdtemp's 0700 would hide the report from its readers
    assert (out / MANIFEST).stat().st_mode & 0o777 == 0o644
    assert leftovers(out.parent, out) == []


def test_staged_folder_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_report(tmp_path / "report", {"results.csv": "a\n"})
    finally:
        os.umask(old)
    assert (tmp_path / "report").stat().st_mode & 0o777 == 0o750


def test_an_earlier_report_is_replaced_whole(tmp_path):
    out = tmp_path / "report"
    write_report(out, {"results.csv": "first\n", "only_first.md": "old\n", "plots/old.svg": "<svg/>"})
    inode = out.stat().st_ino
    write_report(out, {"results.csv": "second\n"})
    assert (out / "results.csv").read_text() == "second\n"
    assert not (out / "only_first.md").exists()
    assert not (out / "plots").exists()
    assert manifest(out)["files"] == ["results.csv"]
    assert out.stat().st_ino != inode  # a new folder, swapped in, not the old one edited
    assert leftovers(tmp_path, out) == []


def test_a_users_own_files_are_kept_byte_for_byte(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    notes = b"my notes\x00\xff\n"
    changes = b"case,old,new\nmine,1,2\n"
    (out / "notes.txt").write_bytes(notes)
    (out / "changes.csv").write_bytes(changes)  # in no manifest: the user's, not an earlier run's
    inode = out.stat().st_ino
    write_report(out, {"results.csv": "a\n", "summary.md": "# s\n"})
    assert (out / "notes.txt").read_bytes() == notes
    assert (out / "changes.csv").read_bytes() == changes
    assert (out / "results.csv").read_text() == "a\n"
    assert (out / "summary.md").read_text() == "# s\n"
    assert manifest(out)["files"] == ["results.csv", "summary.md"]
    assert out.stat().st_ino == inode  # merged in place
    assert leftovers(tmp_path, out) == []

    # a second run into it removes what the first run wrote and this one did not, and only that
    write_report(out, {"results.csv": "b\n"})
    assert not (out / "summary.md").exists()
    assert (out / "notes.txt").read_bytes() == notes
    assert (out / "changes.csv").read_bytes() == changes
    assert manifest(out)["files"] == ["results.csv"]
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST, "changes.csv", "notes.txt", "results.csv"])


@pytest.mark.parametrize("users_file", [False, True], ids=["report-folder", "users-folder"])
@pytest.mark.parametrize("full_disk", [False, True], ids=["exception", "full-disk"])
def test_an_exception_inside_leaves_the_target_as_it_was(tmp_path, users_file, full_disk):
    """Also a full disk while staging: an OutputError naming the file, the reason and the fix."""
    out = tmp_path / "report"
    write_report(out, {"results.csv": "old\n", "summary.md": "old\n"})
    if users_file:
        (out / "notes.txt").write_text("mine")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    raised = (OutputError, rf"^--out {re.escape(str(out))}: cannot write plots/half\.png \(No space left on device, "
                           rf"ENOSPC\); free some space or give another --out; {re.escape(str(out))} is as it was$") \
        if full_disk else (RuntimeError, "boom")
    with pytest.raises(raised[0], match=raised[1]):
        with staged(out) as stage:
            (stage / "results.csv").write_text("new\n")
            (stage / "plots").mkdir()
            (stage / "plots" / "half.png").write_text("half")
            raise refuse(errno.ENOSPC, stage / "plots" / "half.png") if full_disk else RuntimeError("boom")
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert leftovers(tmp_path, out) == []
    assert not any(p.name.endswith(".normdiff-staging") for p in tmp_path.rglob(".*"))


def test_an_interrupt_inside_leaves_no_staging_folder(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with staged(tmp_path / "report") as stage:
            (stage / "results.csv").write_text("new\n")
            raise KeyboardInterrupt
    assert not (tmp_path / "report").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_planted_link_in_a_users_folder_is_replaced_not_followed(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # others' files: merged in place
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    (out / "results.csv").symlink_to(outside)
    write_report(out, {"results.csv": "ours\n"})
    assert not (out / "results.csv").is_symlink()
    assert (out / "results.csv").read_text() == "ours\n"
    assert outside.read_text() == "precious\n"
    assert (out / "notes.txt").read_text() == "mine"


def test_a_planted_link_in_an_earlier_report_is_not_followed(tmp_path):
    out = tmp_path / "report"
    write_report(out, {"results.csv": "old\n"})
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    (out / "results.csv").unlink()
    (out / "results.csv").symlink_to(outside)
    write_report(out, {"results.csv": "ours\n"})
    assert not (out / "results.csv").is_symlink()
    assert (out / "results.csv").read_text() == "ours\n"
    assert outside.read_text() == "precious\n"


def test_an_earlier_runs_link_is_not_deleted_through(tmp_path):
    """An earlier run's file replaced by a link to the user's file: the cleanup of files this run
    did not write again must not delete through the link (nor the link's target)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    write_report(out, {"results.csv": "a\n", "summary.md": "a\n"})
    outside = tmp_path / "outside.md"
    outside.write_text("precious\n")
    (out / "summary.md").unlink()
    (out / "summary.md").symlink_to(outside)
    write_report(out, {"results.csv": "b\n"})
    assert outside.read_text() == "precious\n"


def test_an_incomplete_run_says_so_in_its_manifest(tmp_path):
    reason = "stopped by SIGINT after 3 of 9 outcomes"
    out = write_report(tmp_path / "report", {"results.csv": "a\n"}, incomplete=reason)
    m = manifest(out)
    assert m["complete"] is False
    assert m["incomplete"] == reason
    # merged in place too
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    m = manifest(write_report(mine, {"results.csv": "a\n"}, incomplete=reason))
    assert m["complete"] is False and m["incomplete"] == reason


@pytest.mark.parametrize("spelling", [".", "absolute"])
def test_out_dot_merges_into_the_current_folder_without_renaming_it(tmp_path, monkeypatch, spelling):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    inode = tmp_path.stat().st_ino
    target = "." if spelling == "." else tmp_path
    write_report(target, {"results.csv": "a\n"})
    assert Path.cwd() == tmp_path and os.path.samefile(".", tmp_path)
    assert tmp_path.stat().st_ino == inode
    assert (tmp_path / "results.csv").read_text() == "a\n"
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert manifest(tmp_path)["files"] == ["results.csv"]
    # a second run into "." (a report folder by now) is still merged in place: never renamed
    write_report(target, {"results.csv": "b\n"})
    assert tmp_path.stat().st_ino == inode and os.path.samefile(".", tmp_path)
    assert (tmp_path / "results.csv").read_text() == "b\n"
    assert leftovers(tmp_path, tmp_path.parent) == []


def test_out_dot_in_an_empty_current_folder_is_not_renamed(tmp_path, monkeypatch):
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    inode = cwd.stat().st_ino
    write_report(".", {"results.csv": "a\n"})
    write_report(".", {"results.csv": "b\n"})  # holds only our report now: still not renamed
    assert cwd.stat().st_ino == inode and os.path.samefile(".", cwd)
    assert (cwd / "results.csv").read_text() == "b\n"


def test_a_folder_above_the_current_one_is_not_renamed(tmp_path, monkeypatch):
    out = tmp_path / "report"
    write_report(out, {"results.csv": "a\n"})
    (out / "plots").mkdir()
    monkeypatch.chdir(out / "plots")
    inode = out.stat().st_ino
    write_report(out, {"results.csv": "b\n"})
    assert out.stat().st_ino == inode
    assert os.path.samefile(".", out / "plots")
    assert (out / "results.csv").read_text() == "b\n"


def test_staging_folders_are_beside_or_inside_the_target(tmp_path):
    seen = []
    with staged(tmp_path / "report") as stage:
        seen.append(stage)
        assert stage.parent == tmp_path and stage.name.endswith(folder._STAGE_SUFFIX)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with staged(mine) as stage:
        assert stage.parent == mine and stage.name.endswith(folder._STAGE_SUFFIX)
    assert leftovers(tmp_path, tmp_path / "report", mine) == []


# ---- manifests and folders someone else changed ------------------------------------------------


@pytest.mark.parametrize("spelling", ["relative", "absolute"])
def test_a_manifest_naming_files_outside_the_folder_deletes_nothing_outside(tmp_path, spelling):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # others' files: merged in place, earlier files cleaned up
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    name = "../victim.txt" if spelling == "relative" else str(victim)
    (out / MANIFEST).write_text(json.dumps({"normdiff": "0", "files": [name], "complete": True}))
    write_report(out, {"results.csv": "a\n"})
    assert victim.read_text() == "precious\n"


def test_a_folder_created_at_the_target_while_staging_keeps_its_files(tmp_path):
    out = tmp_path / "report"
    with staged(out) as stage:
        (stage / "results.csv").write_text("a\n")
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    assert (out / "notes.txt").read_text() == "mine"


def test_a_file_added_to_an_earlier_report_while_staging_is_kept(tmp_path):
    out = tmp_path / "report"
    write_report(out, {"results.csv": "a\n"})
    with staged(out) as stage:
        (stage / "results.csv").write_text("b\n")
        (out / "notes.txt").write_text("mine")
    assert (out / "notes.txt").read_text() == "mine"


def test_merging_does_not_write_through_a_linked_subfolder(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "plots").symlink_to(elsewhere)
    try:
        write_report(out, {"results.csv": "a\n", "plots/p.svg": "<svg/>"})
    except OSError:
        pass  # refusing is fine too
    assert list(elsewhere.iterdir()) == []


# ---- writes the machine refuses, and folders that cannot be renamed -------------------------------


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}


@contextlib.contextmanager
def same_folder(path):
    """Assert that `path` is the same folder afterwards (open meanwhile: its inode number cannot be
    reused by a folder made in its place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        yield
        assert os.path.samestat(os.fstat(fd), os.stat(path)), f"{path} was replaced, not written into"
    finally:
        os.close(fd)


def refuse(number, filename=None):
    return OSError(number, os.strerror(number), *([str(filename)] if filename is not None else []))


def test_a_mount_point_is_merged_in_place_not_renamed(tmp_path, monkeypatch):
    """A container's volume as --out: renaming it gives EBUSY, so it is written file by file, its
    staging folder inside it (on its file system), the folder itself never moved."""
    out = tmp_path / "volume"
    out.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out or real(p))
    with same_folder(out):
        write_report(out, {"results.csv": "first\n", "only_first.md": "x\n"})
        write_report(out, {"results.csv": "second\n", "plots/p.png": "png"})
    assert snapshot(out) == {"results.csv": b"second\n", "plots/p.png": b"png", MANIFEST: (out / MANIFEST).read_bytes()}
    assert manifest(out)["files"] == ["plots/p.png", "results.csv"]
    assert leftovers(tmp_path, out) == []


def test_a_folder_whose_rename_gives_ebusy_is_merged_instead(tmp_path, monkeypatch):
    """A bind mount on the same file system, which os.path.ismount does not see: the swap and the
    rename fail with EBUSY, and the report is moved in file by file."""
    out = tmp_path / "bound"
    write_report(out, {"results.csv": "first\n", "only_first.md": "x\n"})
    rename = os.rename

    def busy(src, dst, *a, **kw):
        if out in (Path(src), Path(dst)):
            raise refuse(errno.EBUSY, src)
        return rename(src, dst, *a, **kw)

    monkeypatch.setattr(folder, "_exchange", lambda a, b: False)
    monkeypatch.setattr(os, "rename", busy)
    with same_folder(out):
        write_report(out, {"results.csv": "second\n"})
    assert (out / "results.csv").read_text() == "second\n" and not (out / "only_first.md").exists()
    assert manifest(out)["files"] == ["results.csv"] and manifest(out)["complete"]
    assert leftovers(tmp_path, out) == []


def test_files_moved_across_file_systems_are_copied(tmp_path, monkeypatch):
    """EXDEV (the staging folder and --out on two file systems): each file is copied in atomically."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # merged in place
    replace = os.replace

    def across(src, dst):
        if ".normdiff-staging" in str(src) and ".normdiff-staging" not in str(dst):
            raise refuse(errno.EXDEV, src)
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", across)
    write_report(out, {"results.csv": "new\n", "plots/p.png": "png"})
    assert snapshot(out) == {"notes.txt": b"mine", "results.csv": b"new\n", "plots/p.png": b"png",
                             MANIFEST: (out / MANIFEST).read_bytes()}
    assert leftovers(tmp_path, out) == [] and not list(out.rglob(".*.tmp"))


def test_a_refused_first_report_leaves_nothing_not_even_its_folders(tmp_path):
    out = tmp_path / "a" / "b" / "report"
    with pytest.raises(OutputError, match=r"cannot write report\.html \(File too large, EFBIG\); raise the file-size "
                                          r"limit \(ulimit -f\); nothing was written$"):
        with staged(out) as stage:
            raise refuse(errno.EFBIG, stage / "report.html")
    assert list(tmp_path.iterdir()) == []
    # an OSError without an errno comes from code, not from the disk: a bug, shown as one
    with pytest.raises(OSError, match="a bug of ours") as raised:
        with staged(out):
            raise OSError("a bug of ours")
    assert not isinstance(raised.value, UsageError)


def test_a_folder_that_cannot_be_written_in_says_where(tmp_path, monkeypatch):
    def read_only(*a, **kw):
        raise refuse(errno.EROFS, tmp_path / ".report.1-x.normdiff-staging")

    monkeypatch.setattr(folder.tempfile, "mkdtemp", read_only)
    with pytest.raises(OutputError, match=rf"--save-it {re.escape(str(tmp_path))}/report: cannot write in "
                                          rf"{re.escape(str(tmp_path))} \(Read-only file system, EROFS\); give another "
                                          rf"--save-it; nothing was written"):
        with staged(tmp_path / "report", what="--save-it"):
            pass


def test_permission_refused_while_putting_in_place_keeps_the_earlier_report(tmp_path, monkeypatch):
    out = tmp_path / "report"
    write_report(out, {"results.csv": "old\n"})
    before = snapshot(out)
    rename = os.rename

    def denied(src, dst, *a, **kw):  # the new report refused where the earlier one was
        if Path(dst) == out and str(src).endswith(".normdiff-staging"):
            raise refuse(errno.EACCES, dst)
        return rename(src, dst, *a, **kw)

    monkeypatch.setattr(folder, "_exchange", lambda a, b: False)
    monkeypatch.setattr(os, "rename", denied)
    with pytest.raises(OutputError, match=r"\(Permission denied, EACCES\); get write permission there or give another "
                                          r"--out; .* is as it was$"):
        write_report(out, {"results.csv": "new\n"})
    assert snapshot(out) == before  # moved aside, then put back: never lost
    assert leftovers(tmp_path, out) == []


def test_writing_one_file_names_it_and_keeps_the_earlier_one(tmp_path, monkeypatch):
    path = tmp_path / "replay.py"
    path.write_text("earlier\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(refuse(errno.EDQUOT)))
    with pytest.raises(OutputError, match=r"^--script .*replay.py: cannot write it \(Disk quota exceeded, EDQUOT\); "
                                          r"free some space within your disk quota or give another --script; "
                                          r".*replay.py is as it was$"):
        with folder.writing(path, "--script"):
            atomic_write(path, "new\n")
    assert path.read_text() == "earlier\n" and os.listdir(tmp_path) == ["replay.py"]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_check_file_refuses_what_is_not_a_regular_file(tmp_path, kind):
    """A new file would replace a named pipe or a device node (as root, /dev/full itself)."""
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
        says = r"--script .*pipe: is a named pipe \(FIFO\), not a file; give a file name"
    else:
        path = Path("/dev/full")
        says = r"--script /dev/full: is a character device, not a file"
    with pytest.raises(UsageError, match=says):
        check_file(path, "--script")
