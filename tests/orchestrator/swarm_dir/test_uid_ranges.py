"""The machine-wide registry of agent uid blocks: one per swarm dir, stable, reused when the dir is gone."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from orchestrator.swarm_dir import uid_ranges
from orchestrator.swarm_dir.uid_ranges import BLOCK, FIRST_UID, uid_base_for


def test_each_home_gets_its_own_stable_block(tmp_path: Path) -> None:
    registry = tmp_path / "registry" / "uid-ranges.json"
    homes = [tmp_path / f"home{i}" for i in range(3)]
    for home in homes:
        home.mkdir()
    bases = [uid_base_for(home, registry) for home in homes]
    assert len(set(bases)) == 3 and all(b >= FIRST_UID and (b - FIRST_UID) % BLOCK == 0 for b in bases)
    assert [uid_base_for(home, registry) for home in homes] == bases  # stable


def test_a_vanished_home_frees_its_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This registry is the test's own, but the uids are the machine's: an agent of another swarm running
    # now as uid 500000 would rightly keep block 0 taken. Here no process runs as any of them.
    monkeypatch.setattr(uid_ranges, "blocks_in_use", set)
    registry = tmp_path / "uid-ranges.json"
    gone, kept, new = tmp_path / "gone", tmp_path / "kept", tmp_path / "new"
    gone.mkdir()
    kept.mkdir()
    freed = uid_base_for(gone, registry)
    kept_base = uid_base_for(kept, registry)
    shutil.rmtree(gone)
    new.mkdir()
    assert uid_base_for(new, registry) == freed
    assert uid_base_for(kept, registry) == kept_base


def test_concurrent_allocations_never_collide(tmp_path: Path) -> None:
    registry = tmp_path / "uid-ranges.json"
    homes = [tmp_path / f"h{i}" for i in range(16)]
    for home in homes:
        home.mkdir()
    got: dict[Path, int] = {}

    def take(home: Path) -> None:
        got[home] = uid_base_for(home, registry)

    threads = [threading.Thread(target=take, args=(home,)) for home in homes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got.values())) == len(homes)


@pytest.mark.skipif(os.geteuid() != 0, reason="running a process as an agent uid needs root")
def test_a_vanished_homes_block_stays_taken_while_a_process_runs_as_one_of_its_uids(tmp_path: Path) -> None:
    registry = tmp_path / "uid-ranges.json"
    gone, new = tmp_path / "gone", tmp_path / "new"
    gone.mkdir()
    base = uid_base_for(gone, registry)
    # A process of the vanished home's block, still running (an agent that fled its group).
    straggler = subprocess.Popen(["sleep", "60"], user=base + 7, group=base + 7)
    try:
        shutil.rmtree(gone)
        new.mkdir()
        assert uid_base_for(new, registry) != base, "a block is not handed out while its uid runs"
    finally:
        straggler.kill()
        straggler.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="running a process as an agent uid needs root")
def test_a_block_another_registrys_agents_run_in_is_not_handed_out(tmp_path: Path) -> None:
    """A compose deployment's orchestrator allocates uids from a registry inside its container; its
    agents run as those uids on this kernel. A host swarm given the same block would kill them when it
    stops its own agents (every process of the uid), so a block in use is skipped."""
    registry = tmp_path / "uid-ranges.json"
    home = tmp_path / "home"
    home.mkdir()
    busy = uid_ranges.blocks_in_use()
    taken = next(b for b in range(uid_ranges.BLOCKS) if b not in busy)
    stranger = subprocess.Popen(["sleep", "60"], user=FIRST_UID + taken * BLOCK + 2, group=FIRST_UID + 2)
    try:
        assert uid_base_for(home, registry) != FIRST_UID + taken * BLOCK
    finally:
        stranger.kill()
        stranger.wait()
