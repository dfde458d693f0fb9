"""What the supervisor publishes of an agent's memory: read the way ``memory show`` reads it (no link
followed, no fifo blocking) and bounded, because the agent writes that dir and the supervisor reads it
on every pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.supervisor import memory
from orchestrator.swarm_dir.provision import SwarmLayout


def memory_dir(tmp_path: Path, name: str = "a-1") -> tuple[SwarmLayout, Path]:
    layout = SwarmLayout(tmp_path)
    mem = layout.agent_dir(name, "memory")
    mem.mkdir(parents=True)
    return layout, mem


def test_summary_shows_memory_files_and_snapshots(tmp_path: Path) -> None:
    layout, mem = memory_dir(tmp_path)
    text = "# Memory of a-1\nfact: fp16 needs atol 1e-2\n"
    (mem / "MEMORY.md").write_text(text)
    (mem / "notes").mkdir()
    (mem / "notes" / "tiling.md").write_text("64x64")
    snap = memory.snapshot(layout, "a-1", "ui")
    got = memory.summary(layout, "a-1")
    assert got.error == "" and "fact: fp16" in got.memory_md and not got.memory_md_truncated
    assert got.files == [("MEMORY.md", len(text)), ("notes/tiling.md", 5)]
    assert got.snapshots == [snap] and not got.files_truncated


def test_summary_follows_no_link_and_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    layout, mem = memory_dir(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root:$6$hash")
    (mem / "MEMORY.md").symlink_to(secret)
    (mem / "escape").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(mem / "pipe")
    got = memory.summary(layout, "a-1")
    assert got.memory_md == "" and "root:" not in got.model_dump_json()
    assert ("MEMORY.md", -1) in got.files and ("escape", -1) in got.files  # shown as links
    assert all(not path.startswith("escape/") for path, _ in got.files), "a linked dir is not walked"
    # The memory dir itself replaced by a link: not read at all.
    os.rename(mem, tmp_path / "moved")
    mem.symlink_to(tmp_path / "moved", target_is_directory=True)
    linked = memory.summary(layout, "a-1")
    assert linked.error and "symlink" in linked.error and linked.files == []


def test_summary_is_bounded(tmp_path: Path) -> None:
    layout, mem = memory_dir(tmp_path)
    (mem / "MEMORY.md").write_text("x" * (memory.SUMMARY_MD_BYTES + 10))
    deep = mem
    for i in range(memory.SUMMARY_FILES + 50):  # a tree of empty dirs costs as much as files
        deep = deep / f"d{i % 3}"
        deep.mkdir(exist_ok=True)
    for i in range(memory.SUMMARY_FILES + 50):
        (mem / f"f{i}").write_text("")
    got = memory.summary(layout, "a-1")
    assert len(got.memory_md) == memory.SUMMARY_MD_BYTES and got.memory_md_truncated
    assert got.files_truncated and len(got.files) <= memory.SUMMARY_FILES


def test_summary_of_an_agent_never_provisioned_says_so(tmp_path: Path) -> None:
    got = memory.summary(SwarmLayout(tmp_path), "a-9")
    assert "no memory dir" in got.error and got.files == [] and got.snapshots == []


def test_a_file_name_that_is_not_utf8_cannot_break_the_published_summary(tmp_path: Path) -> None:
    # An agent names a file in its memory with bytes that are no UTF-8: the supervisor must still
    # publish (a name it cannot serialise would end every pass's publishing, hiding the whole swarm).
    layout, mem = memory_dir(tmp_path)
    fd = os.open(bytes(mem) + b"/bad\xff\xfe-name", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    got = memory.summary(layout, "a-1")
    published = got.model_dump_json()
    assert "bad" in published and "-name" in published
    assert [name for name, _ in got.files] == ["bad\ufffd\ufffd-name"]


def test_a_dir_swapped_for_a_link_after_listing_is_not_walked(tmp_path: Path) -> None:
    # The walk lists ``notes`` as a dir, then (the agent racing it) opens it again to list it; what it
    # opens then is opened with O_NOFOLLOW at every step, so a link swapped in by now is refused.
    _, mem = memory_dir(tmp_path)
    outside = tmp_path / "other-agent"
    outside.mkdir()
    (outside / "their-secret-plan.md").write_text("x")
    (mem / "notes").symlink_to(outside, target_is_directory=True)
    fd = os.open(mem, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            memory._open_below(fd, ("notes",))
        files, _ = memory.first_files(fd, 100)
    finally:
        os.close(fd)
    assert files == [("notes", -1)]
