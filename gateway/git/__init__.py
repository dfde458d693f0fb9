"""The one git layer, used by every process that touches a repository.

- ``core``: the one error type (``GitError``) and the one clean environment (``git_env``: no user or
  system config, no prompts, a token only through ``GIT_CONFIG_*`` variables, never in argv);
- ``sync``: GitPython, for the synchronous side: the worker's checkout of one exact sha, the dataset
  build's mirror, tests' clones;
- ``aio``: asyncio subprocesses, only where the gateway must not block: the embedded forge's bare
  repositories, smart HTTP, the KB's reads;
- ``diffcut``: a diff cut while it streams (per file and in total), from git's stdout or an HTTP body.

The embedded forge's receive hook (``gateway/forge/embedded/receive.py``) stays standard-library only: git
runs it with a bare interpreter (``python -I -S``).
"""
