"""Who is doing this? Attribute an operation to the candidate or to Triton/the harness by its frames.

Walking outward from the frame that issued an op (a torch op, a guarded tensor method, an audit
event), torch's and the standard library's frames are transparent: they act on someone's behalf.
The first frame that is not decides: the candidate's file (its launcher, grid lambdas, heuristics,
autotune hooks, helpers, and in the interpreter its kernel bodies) -> the candidate; Triton's own
package -> Triton's work (argument copies, launch binding, benchmarking); the harness -> trusted,
except the one harness frame that calls the entry, which stands for a callable the candidate handed
over that has no Python frame of its own (``ENTRY = functools.partial(torch.add)``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import CodeType, FrameType

CANDIDATE, TRUSTED, TRANSPARENT = 0, 1, 2


class Attribution:
    def __init__(self, candidate_file: str, harness_files: Iterable[str], triton_dir: str) -> None:
        self.candidate_file = os.path.realpath(candidate_file)
        self.harness_files: frozenset[str] = frozenset(harness_files)
        self.triton_dir = os.path.realpath(triton_dir) + os.sep
        self.roots: set[CodeType] = set()
        self._cache: dict[CodeType, int] = {}

    def add_harness_file(self, filename: str) -> None:
        self.harness_files = self.harness_files | {filename}
        self._cache.clear()

    def add_root(self, code: CodeType) -> None:
        self.roots.add(code)
        self._cache.pop(code, None)

    def classify(self, code: CodeType) -> int:
        kind = self._cache.get(code)
        if kind is None:
            kind = self._classify(code)
            self._cache[code] = kind
        return kind

    def _classify(self, code: CodeType) -> int:
        if code in self.roots:
            return CANDIDATE
        name = code.co_filename
        if name in self.harness_files:
            return TRUSTED
        if name.startswith("<"):
            return TRANSPARENT  # generated code (dataclasses, namedtuple, ...): acts for its caller
        real = os.path.realpath(name)
        if real == self.candidate_file:
            return CANDIDATE
        if real.startswith(self.triton_dir):
            return TRUSTED
        return TRANSPARENT

    def is_candidate(self, frame: FrameType | None, *, direct: bool = False) -> bool:
        """True when the first non-transparent frame from ``frame`` outward is the candidate's.

        ``direct``: only ``frame`` itself counts (the stdlib exec'ing a dataclass __init__ for the
        candidate is not the candidate calling exec).
        """
        if direct:
            return frame is not None and self.classify(frame.f_code) == CANDIDATE
        while frame is not None:
            kind = self.classify(frame.f_code)
            if kind != TRANSPARENT:
                return kind == CANDIDATE
            frame = frame.f_back
        return True  # no decisive frame at all: nothing vouches for it
