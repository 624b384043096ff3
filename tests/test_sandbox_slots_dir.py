"""The sandbox's slot folder is private to its user (issue 64, item 6).

The default slot folder sits at a predictable path in the temp dir; another user who creates it
first (or puts a symlink there) could hold every slot and stall this user's runs. These tests
make that folder as the other user would (``chown`` to a uid that is not ours needs root; those
tests are skipped otherwise) and check it is refused, with an error that names the fix.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from agentbench_poad.sandbox.concurrency import (
    SLOTS_DIR_ENV_VAR,
    MachineSlots,
    UnsafeSlotsDir,
    default_slots_dir,
)

OTHER_UID = 4242  # a user that is not us
as_root = pytest.mark.skipif(
    os.getuid() != 0, reason="making a folder another user owns needs root"
)


@pytest.fixture
def temp_dir(tmp_path, monkeypatch) -> Path:
    """A temp dir of our own as the default folder's parent (sticky and world-writable like
    /tmp), with no XDG runtime dir and no slot-folder setting."""
    root = tmp_path / "tmp"
    root.mkdir()
    root.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv(SLOTS_DIR_ENV_VAR, raising=False)
    return root


def default_path(temp_dir: Path) -> Path:
    path = default_slots_dir()
    assert path.parent == temp_dir  # the fixture's temp dir is the one in use
    return path


def test_the_default_folder_is_made_private_and_works(temp_dir):
    slots = MachineSlots(2)
    first, second = slots.try_acquire(), slots.try_acquire()
    assert first is not None and second is not None and slots.try_acquire() is None
    info = os.lstat(default_path(temp_dir))
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    assert stat.S_IMODE(info.st_mode) & 0o077 == 0
    MachineSlots.release(first)
    assert slots.try_acquire() is not None  # a released slot is free again


@as_root
def test_a_folder_another_user_made_first_is_refused(temp_dir):
    squat = default_path(temp_dir)
    squat.mkdir(mode=0o777)
    squat.chmod(0o777)
    os.chown(squat, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeSlotsDir, match=rf"owned by uid {OTHER_UID}.*{SLOTS_DIR_ENV_VAR}"):
        MachineSlots(1).try_acquire()
    assert list(squat.iterdir()) == []  # no slot file was made in it


@as_root
def test_a_folder_of_ours_that_another_user_can_write_is_refused(temp_dir):
    loose = default_path(temp_dir)
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(UnsafeSlotsDir, match="open to other users"):
        MachineSlots(1).try_acquire()


def test_a_symlink_at_the_default_path_is_refused(temp_dir, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    default_path(temp_dir).symlink_to(target)
    with pytest.raises(UnsafeSlotsDir, match="symlink"):
        MachineSlots(1).try_acquire()
    assert list(target.iterdir()) == []


def test_a_symlinked_slot_file_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "slot-0.lock").symlink_to(victim)
    with pytest.raises(UnsafeSlotsDir, match="symlink"):
        MachineSlots(1, directory=shared).try_acquire()
    assert victim.read_text() == "keep me"


def test_a_named_folder_may_be_shared(tmp_path, monkeypatch):
    shared = tmp_path / "team-slots"
    shared.mkdir()
    shared.chmod(0o1777)  # several users, one budget: the user's choice
    monkeypatch.setenv(SLOTS_DIR_ENV_VAR, str(shared))
    slots = MachineSlots(1)
    held = slots.try_acquire()
    assert held is not None and slots.try_acquire() is None
    MachineSlots.release(held)


def test_the_runtime_dir_is_preferred_when_it_is_ours(tmp_path, monkeypatch):
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv(SLOTS_DIR_ENV_VAR, raising=False)
    assert default_slots_dir().parent == runtime
    held = MachineSlots(1).try_acquire()
    assert held is not None
    assert (runtime / "agentbench-poad-sandbox-slots" / "slot-0.lock").exists()
    MachineSlots.release(held)
