"""The machine-wide registry of agent uid blocks: one per swarm dir, stable, reused when the dir is gone."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from orchestrator.uid_ranges import BLOCK, FIRST_UID, uid_base_for


def test_each_home_gets_its_own_stable_block(tmp_path: Path) -> None:
    registry = tmp_path / "registry" / "uid-ranges.json"
    homes = [tmp_path / f"home{i}" for i in range(3)]
    for home in homes:
        home.mkdir()
    bases = [uid_base_for(home, registry) for home in homes]
    assert len(set(bases)) == 3 and all(b >= FIRST_UID and (b - FIRST_UID) % BLOCK == 0 for b in bases)
    assert [uid_base_for(home, registry) for home in homes] == bases  # stable


def test_a_vanished_home_frees_its_block(tmp_path: Path) -> None:
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
