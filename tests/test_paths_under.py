"""monoagent.open_directory_under / open_file_under / replace_file_durably(root=): no component below the root is
followed through a symlink; the root itself may be."""

from __future__ import annotations

import os

import pytest

from monoagent import SymlinkedPath, open_directory_under, open_file_under, replace_file_durably


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    (root / "a" / "link").symlink_to(tmp_path / "outside")
    (root / "a" / "file").write_text("x")
    return root


@pytest.mark.parametrize("relative", ["link/x", "a/link/x", "link/deeper/x"])
def test_a_symlinked_directory_anywhere_below_the_root_is_refused_naming_it(tree, relative):
    with pytest.raises(SymlinkedPath) as refused:
        open_file_under(tree, relative, os.O_WRONLY | os.O_CREAT, create_directories=True, what="test file")
    component = str(tree / relative.rsplit("/", 1)[0].replace("/deeper", ""))
    assert refused.value.component == component and refused.value.path == str(tree / relative)
    assert f"test file {tree / relative}: {component} is a symlink; refused: below {tree}" in str(refused.value)
    assert os.listdir(tree.parent / "outside") == []  # nothing created or written through it


def test_a_file_where_a_directory_is_needed_and_a_symlinked_file_are_refused(tree):
    with pytest.raises(NotADirectoryError, match=f"{tree / 'a' / 'file'} is a regular file, not a directory"):
        open_directory_under(tree, "a/file/c", create=True)
    (tree / "a" / "b" / "f").symlink_to(tree / "a" / "file")
    with pytest.raises(SymlinkedPath, match="is a symlink; refused"):
        open_file_under(tree, "a/b/f", os.O_WRONLY | os.O_APPEND)
    assert (tree / "a" / "file").read_text() == "x"


@pytest.mark.parametrize("relative", ["/etc/passwd", "../x", "a/../../x"])
def test_a_path_that_leaves_the_root_is_a_value_error(tree, relative):
    with pytest.raises(ValueError, match="not a relative path below its root"):
        open_file_under(tree, relative, os.O_RDONLY)


def test_the_root_itself_may_be_a_symlink_and_missing_directories_are_created_0700(tree, tmp_path):
    (tmp_path / "via").symlink_to(tree)
    fd = open_file_under(tmp_path / "via", "new/dir/f", os.O_WRONLY | os.O_CREAT, create_directories=True)
    os.close(fd)
    assert (tree / "new" / "dir" / "f").is_file() and (tree / "new").stat().st_mode & 0o777 == 0o700


def test_replace_file_durably_with_a_root_refuses_a_symlinked_directory_and_keeps_the_committed_file(tree, tmp_path):
    replace_file_durably(tree / "a" / "b" / "state.json", b"v1", stage_prefix=".s.", root=tree)
    os.rename(tree / "a" / "b", tree / "a" / "moved")
    (tree / "a" / "b").symlink_to(tmp_path / "outside")
    with pytest.raises(SymlinkedPath, match=f"{tree / 'a' / 'b'} is a symlink"):
        replace_file_durably(tree / "a" / "b" / "state.json", b"v2", stage_prefix=".s.", root=tree)
    assert (tree / "a" / "moved" / "state.json").read_bytes() == b"v1" and os.listdir(tmp_path / "outside") == []
    replace_file_durably(tree / "a" / "moved" / "state.json", b"v2", stage_prefix=".s.", root=tree)
    assert os.listdir(tree / "a" / "moved") == ["state.json"] and (tree / "a" / "moved" / "state.json").read_bytes() == b"v2"


def test_private_directory_under_walks_then_judges_the_directory_it_opened(tree):
    from monoagent import private_directory_under

    assert private_directory_under(tree, "made/here", create=True, what="test directory") is None
    assert oct((tree / "made" / "here").stat().st_mode & 0o777) == "0o700"
    (tree / "a").chmod(0o755)
    assert private_directory_under(tree, "a", what="test directory") == (
        f"test directory {tree / 'a'} has mode 0755; it must be owner-only (0700): chmod 700 {tree / 'a'}")
    with pytest.raises(SymlinkedPath):
        private_directory_under(tree, "a/link", what="test directory")
