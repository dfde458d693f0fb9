"""Interleaved programs on the cpu pool: atomics and memory order explored, not assumed.

The interpreter runs a grid's programs one after another, each to completion. A kernel whose
programs talk to each other through memory (a ticket, a lock, a flag, a read-modify-write) is then
only ever seen in the friendliest schedule: a read-modify-write built from two atomics never loses
an update, a flag published with ``sem="relaxed"`` is always seen after the data it guards. A device
runs programs concurrently, so every monitored launch of a kernel that uses atomics runs here as
interleaved coroutines (greenlets):

- at most ``residency`` programs are in flight (drawn per launch: 2, 3, 4 or 8; programs start in
  the launch's order, natural, reversed or shuffled), like the resident blocks of a device;
- before every load, store and atomic the running program may be suspended and another one resumed
  (a switch probability drawn per launch), so each monitored call of a trial explores another
  schedule -- sampled, not exhausted;
- a program that repeats the very same access (a spin) yields at once; when every program in flight
  only spins and nothing else can start, the launch is stalled (a device deadlocks there).

Memory order is judged by happens-before, not by the schedule that happened: interp._Launch keeps a
vector clock per program; an atomic whose ``sem`` releases publishes the program's clock on the
addresses it touches, one that acquires takes in what was published there. A program reading (or
overwriting) what another program stored in the same launch must have acquired that store through
such a chain, or the access is a data race (``order``) -- whichever way this schedule ran.

Loaded in the child only (spawn.BUNDLE), before interp.py.
"""

from __future__ import annotations

import inspect
import random
from typing import Any

from greenlet import GreenletExit
from greenlet import getcurrent as _current_greenlet
from greenlet import greenlet as Greenlet

RESIDENCIES = (2, 3, 4, 8)
SWITCH_CHANCES = (0.3, 0.6, 0.9)
STALL_ROUNDS = 8  # repeats of one spin, with no program making progress meanwhile, that make a stall


class Program:
    """One program of an interleaved launch, with the state the interpreter keeps per program."""

    __slots__ = ("epoch", "glet", "grid_idx", "prog", "spin_count", "spin_key", "stuck")

    def __init__(self, glet: Any, prog: int, grid_idx: tuple[int, int, int]) -> None:
        self.glet, self.prog, self.grid_idx = glet, prog, grid_idx
        self.spin_key: tuple[int, int] | None = None
        self.spin_count = 0
        self.epoch = -1  # the launch's progress count when this program last repeated an access
        self.stuck = 0  # repeats since any program last made progress


class Interleaving:
    """Runs one launch's programs as interleaved coroutines (see the module docstring)."""

    def __init__(self, interpreter: Any, launch: Any, rng: random.Random) -> None:
        self.I, self.launch, self.rng = interpreter, launch, rng
        self.builder = interpreter.interpreter_builder
        self.residency = rng.choice(RESIDENCIES)
        self.switch_chance = rng.choice(SWITCH_CHANCES)
        self.running: Program | None = None
        self.scheduler: Any = None
        self.epoch = 0  # progress: an access that is not a repeat, a store, a program started or done

    # --- the launch (mirrors triton's GridExecutor.__call__, with our own program loop) ----------
    def run(self, executor: Any, args_dev: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        argspec = inspect.getfullargspec(executor.fn)
        kwargs = {k: v for k, v in kwargs.items() if k in argspec.args or k in argspec.kwonlyargs}
        args_hst, kwargs_hst = executor._init_args_hst(args_dev, kwargs)
        for hook in executor.pre_run_hooks:
            hook(*args_hst, **kwargs_hst)
        patch_scope = self.I._patch_lang(executor.fn)
        try:
            args = inspect.getcallargs(executor.fn, *args_hst, **kwargs_hst)
            args = {
                name: arg if name in executor.constexprs else self.I._implicit_cvt(arg)
                for name, arg in args.items()
            }
            grid = executor.grid(args) if callable(executor.grid) else executor.grid
            assert len(grid) <= 3, "grid must have at most 3 dimensions"
            grid = tuple(grid) + (1,) * (3 - len(grid))
            self.builder.set_grid_dim(*grid)
            try:
                self._programs(executor.fn, args, grid)
            except Exception as exc:
                raise self.I.InterpreterError(repr(exc)) from exc
        finally:
            patch_scope.restore()
        executor._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    def _programs(self, fn: Any, args: dict[str, Any], grid: tuple[int, ...]) -> None:
        starts = [(x, y, z) for x in range(grid[0]) for y in range(grid[1]) for z in range(grid[2])]
        starts.reverse()  # popped from the end: the loop's own order; set_grid_idx permutes it
        live: list[Program] = []
        self.scheduler = _current_greenlet()
        try:
            while starts or live:
                program = self._pick(live, bool(starts))
                if program is None:
                    program = self._start(fn, args, starts.pop())
                    live.append(program)
                self._resume(program)
                if program.glet.dead:
                    live.remove(program)
                self.epoch += program.glet.dead
        finally:
            self.running = None
            for program in live:  # a program failed: unwind the others where they stand
                if not program.glet.dead:
                    program.glet.throw(GreenletExit)

    def _pick(self, live: list[Program], can_start: bool) -> Program | None:
        """The program to resume next, or None to start a new one."""
        if can_start and len(live) < self.residency:
            if not live or self.rng.random() < 0.5:
                return None
        busy = [p for p in live if not self._waiting(p)]
        if busy:
            return self.rng.choice(busy)
        if can_start and len(live) < self.residency:
            return None
        return self.rng.choice(live)  # every one spins: resumed, each counts a stuck round

    def _waiting(self, program: Program) -> bool:
        """It spun, and nothing happened since that could release it."""
        return program.stuck > 0 and program.epoch == self.epoch

    def _start(self, fn: Any, args: dict[str, Any], idx: tuple[int, int, int]) -> Program:
        self.builder.set_grid_idx(*idx)  # the instruments map it to the program the order says
        self.epoch += 1
        return Program(Greenlet(lambda: fn(**args)), self.launch.prog, tuple(self.builder.grid_idx))

    def _resume(self, program: Program) -> None:
        launch = self.launch
        self.running = program
        self.builder.grid_idx = program.grid_idx
        launch.prog, launch.spin_key, launch.spin_count = program.prog, program.spin_key, program.spin_count
        try:
            program.glet.switch()
        finally:
            program.spin_key, program.spin_count = launch.spin_key, launch.spin_count
            self.running = None

    # --- called by the instruments from inside the running program -------------------------------
    def point(self) -> None:
        """Before a memory access: maybe let another program run first."""
        if self.running is not None and self.rng.random() < self.switch_chance:
            self.scheduler.switch()

    def accessed(self, repeated: bool) -> None:
        """After a load or atomic: a repeat of the same access is a spin, anything else progress.

        A spinning program yields at once; one that has spun STALL_ROUNDS times per program in flight
        while no program made progress raises StalledLaunch (every program in flight waits)."""
        program = self.running
        if program is None:
            return
        if not repeated:
            self.epoch += 1
            return
        if program.epoch != self.epoch:
            program.epoch, program.stuck = self.epoch, 0
        program.stuck += 1
        if program.stuck >= STALL_ROUNDS * self.residency:
            raise StalledLaunch(f"program {program.prog} waits on another program (spin)")
        self.scheduler.switch()

    def stored(self) -> None:
        """After a store: a spinning program may now move on."""
        if self.running is not None:
            self.epoch += 1


class StalledLaunch(RuntimeError):
    """Every program in flight of an interleaved launch spins on another one."""
