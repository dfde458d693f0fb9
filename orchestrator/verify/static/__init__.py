"""The static gate: what a candidate's source may name, read before anything of it runs.

``gate`` drives it (``check_source`` / ``check_file``); every name and attribute chain is resolved to
the object it reaches (``names``, ``values``) and the final target judged against the allow-lists
(``targets``, ``policy``); ``nodes``, ``kernels``, ``launches``, ``tensors``, ``devices`` and
``recursion`` hold the rules for statements, ``@triton.jit`` bodies, launches, host-side tensor use,
device-conditioned code and recursion. docs/verification.md, "The static gate", describes the rules.
"""
