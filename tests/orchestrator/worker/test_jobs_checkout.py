"""The worker's checkout guard: a candidate is a plain file inside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.worker.checkout import CheckoutError, inside


def test_a_symlinked_candidate_is_refused(tmp_path: Path) -> None:
    """The attack: kernels/add/mallory.py -> bob's verified kernel, so that a job "verifies" bob's
    file under mallory's name (or a link to a task file, or out of the checkout)."""
    src = tmp_path / "src"
    (src / "kernels" / "add").mkdir(parents=True)
    (src / "kernels" / "add" / "bob.py").write_text("honest\n")
    (src / "kernels" / "add" / "mallory.py").symlink_to("bob.py")
    (src / "kernels" / "linked").symlink_to("add")
    (src / "kernels" / "add" / "out.py").symlink_to(tmp_path / "elsewhere.py")
    (tmp_path / "elsewhere.py").write_text("x\n")
    assert inside(src, "kernels/add/bob.py") == (src / "kernels" / "add" / "bob.py").resolve()
    with pytest.raises(CheckoutError, match="symlink"):
        inside(src, "kernels/add/mallory.py")
    with pytest.raises(CheckoutError, match="symlink"):
        inside(src, "kernels/linked/bob.py")
    with pytest.raises(CheckoutError, match="leaves the checkout"):
        inside(src, "kernels/add/out.py")
    with pytest.raises(CheckoutError, match="no file"):
        inside(src, "kernels/add/none.py")
