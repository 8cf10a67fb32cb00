"""The bounded reader (harness/data/inputs.py): a file is opened as what it must be, read up to a
stated size, and every refusal is one UsageError naming the file and the problem; and the numbers
(seconds, seeds, counts) within their stated bounds, in the Python API too."""
import os
import signal
import socket
import stat
from contextlib import contextmanager

import pytest

from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError


@contextmanager
def never_blocks(seconds=5):
    """Fail, rather than hang the test run, when the body blocks (a FIFO opened for reading)."""
    def alarm(signum, frame):
        raise AssertionError(f"blocked for {seconds} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_regular_file_is_read_whole(tmp_path):
    (tmp_path / "s.toml").write_text("a = 1\n")
    assert inputs.read_text(tmp_path / "s.toml", "suite") == "a = 1\n"
    assert inputs.read_bytes(tmp_path / "s.toml", "suite") == b"a = 1\n"


def test_a_named_pipe_is_refused_by_name_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "f.toml")
    with never_blocks(), pytest.raises(inputs.InputError, match=r"f.toml: cannot read it \(Is a named pipe "
                                                                r"\(FIFO\), not a file\); give a suite"):
        inputs.read_text(tmp_path / "f.toml", "suite", "give a suite")


def test_a_pipe_swapped_in_after_the_first_check_is_refused_by_the_second(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "f.json")
    monkeypatch.setattr(inputs, "check_file", lambda path, fix="": None)  # the race: stat said "a file"
    with never_blocks(), pytest.raises(inputs.InputError, match=r"Is a named pipe"):
        inputs.read_bytes(tmp_path / "f.json", "baseline")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_refused_before_anything_is_read(tmp_path, device):
    (tmp_path / "d.json").symlink_to(device)
    with never_blocks(), pytest.raises(inputs.InputError, match=r"d.json: cannot read it \(Is a character device"):
        inputs.read_bytes(tmp_path / "d.json", "baseline")


def test_a_folder_and_a_socket_are_refused(tmp_path):
    (tmp_path / "d.toml").mkdir()
    with pytest.raises(inputs.InputError, match=r"d.toml: cannot read it \(Is a directory\)"):
        inputs.read_text(tmp_path / "d.toml", "suite")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s.toml"))
        with pytest.raises(inputs.InputError, match=r"Is a socket, not a file"):
            inputs.read_text(tmp_path / "s.toml", "suite")


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(inputs.InputError, match=r"nosuch.toml: cannot read it \(No such file or directory\)") as err:
        inputs.read_text(tmp_path / "nosuch.toml", "suite")
    assert err.value.why == "No such file or directory"


def test_a_file_above_its_kinds_limit_is_refused_by_its_size(tmp_path):
    (tmp_path / "big.toml").write_bytes(b"#" * 2000)
    with pytest.raises(inputs.InputError, match=r"big.toml: it has 1.95 KiB; a suite file has at most 512 B"):
        inputs.read_text(tmp_path / "big.toml", "suite", limit=512)


def test_a_file_whose_size_lies_is_cut_at_the_limit():
    # /proc files say they have 0 bytes: what is read is bounded all the same
    assert os.stat("/proc/self/maps").st_size == 0
    with pytest.raises(inputs.InputError, match=r"a config file has at most 16 B"):
        inputs.read_bytes("/proc/self/maps", "config", limit=16)


def test_every_kind_states_its_limit():
    assert set(inputs.KINDS) >= {"suite", "baseline", "config", "source", "manifest"}
    assert all(16 * 2 ** 20 <= limit <= 2 ** 30 for limit in inputs.KINDS.values())


def test_text_that_is_not_utf8_names_the_byte(tmp_path):
    (tmp_path / "b.toml").write_bytes(b"ok = 1\n\xff")
    with pytest.raises(inputs.InputError, match=r"b.toml: not a text file \(byte 7 is not UTF-8\)"):
        inputs.read_text(tmp_path / "b.toml", "suite")


def test_nesting_deeper_than_the_parsers_follow_is_a_value_error():
    with pytest.raises(inputs.TooDeep, match="nest deeper than normdiff reads"):
        inputs.json_loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(inputs.TooDeep):
        inputs.toml_loads("a = " + "[" * 100_000 + "]" * 100_000)
    assert issubclass(inputs.TooDeep, ValueError)
    assert inputs.json_loads('{"a": [1]}') == {"a": [1]}


def test_kind_of_names_each_kind_of_file():
    assert inputs.kind_of(stat.S_IFREG) is None
    assert inputs.kind_of(stat.S_IFDIR) == "Is a directory"
    assert inputs.kind_of(stat.S_IFIFO).startswith("Is a named pipe")
    assert inputs.kind_of(stat.S_IFCHR).startswith("Is a character device")
    assert inputs.kind_of(stat.S_IFBLK).startswith("Is a block device")
    assert inputs.kind_of(stat.S_IFSOCK).startswith("Is a socket")


# ---- numbers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, says", [
    (1e10, "at most 86400"), (1e300, "at most 86400"), (86400.5, "at most 86400"), (float("nan"), "finite"),
    (float("inf"), "finite"), (-1, "above 0"), (0, "above 0"), (True, "number of seconds"), ("60", "number of seconds"),
])
def test_seconds_are_finite_positive_and_at_most_a_day(value, says):
    with pytest.raises(UsageError, match=says):
        inputs.seconds(value)


def test_seconds_within_the_bounds_are_floats():
    assert inputs.seconds(86400) == 86400.0 and inputs.seconds(0.5) == 0.5


@pytest.mark.parametrize("value", [-1, 2 ** 32, 1.5, True, "3"])
def test_a_seed_is_a_whole_number_of_32_bits(value):
    with pytest.raises(UsageError, match="seed must be a whole number from 0 to 4294967295"):
        inputs.seed(value)
    assert inputs.seed(0) == 0 and inputs.seed(2 ** 32 - 1) == 2 ** 32 - 1


def test_fuzz_refuses_a_timeout_a_seed_or_a_count_out_of_bounds_before_anything_starts():
    from normdiff.harness.commands import fuzz

    for options, says in (({"timeout": 1e10}, "timeout must be .* at most 86400"),
                          ({"max_time": 1e300}, "max_time must be .* at most 86400"),
                          ({"shrink_time": 1e10}, "shrink_time"), ({"seed": 2 ** 40}, "seed must be"),
                          ({"max_examples": 10 ** 12}, "max_examples must be a whole number from 1 to 1000000")):
        with pytest.raises(UsageError, match=says):
            fuzz.check_options(**options)


def test_model_refuses_a_seed_torch_cannot_take_before_the_model_starts():
    from normdiff.harness.commands import model

    with pytest.raises(UsageError, match="seed must be a whole number from 0 to 4294967295"):
        model.model("qwen3", {"norm": ("numpy", False)}, seed=2 ** 64)
    with pytest.raises(UsageError, match="at most 86400"):
        model.model("qwen3", {"norm": ("numpy", False)}, timeout=1e10)
