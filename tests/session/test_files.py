"""session.files.read_regular: special files under the home are refused at once, never followed."""

import os
import threading
from pathlib import Path

import pytest

from boxmaker.session.errors import NotARegularFile
from boxmaker.session.files import read_regular


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 3000)
    assert read_regular(tmp_path / "f", 3000) == b"x" * 3000


def test_a_missing_file_is_none(tmp_path: Path) -> None:
    assert read_regular(tmp_path / "nope", 10) is None


def test_over_the_bound_is_refused_before_reading(tmp_path: Path) -> None:
    with open(tmp_path / "big", "wb") as f:
        f.truncate(10 << 30)  # sparse: 10 GiB that would take minutes to read
    with pytest.raises(NotARegularFile, match="over its bound of 1,024 bytes"):
        read_regular(tmp_path / "big", 1024)


def test_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_regular(tmp_path / "fifo", 10)
        except BaseException as e:
            done.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "read_regular blocked on a FIFO"
    assert isinstance(done[0], NotARegularFile)
    assert "a FIFO" in str(done[0])


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/hostname", "/nonexistent"])
def test_a_symlink_is_never_followed(tmp_path: Path, target: str) -> None:
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(NotARegularFile, match="symbolic link"):
        read_regular(tmp_path / "link", 1 << 20)


def test_a_folder_and_a_device_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(NotARegularFile, match="a folder"):
        read_regular(tmp_path / "d", 10)
    with pytest.raises(NotARegularFile, match="a device"):
        read_regular(Path("/dev/null"), 10)
