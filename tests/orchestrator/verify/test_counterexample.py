"""Confirming a counterexample (issue 27, orchestrator/verify/counterexample.py): the harness judges a
kernel on one input, or on a generator's inputs, and only there. Confirmed when the input is inside the
task's domain and the kernel fails on it; refused, with why, when it is outside, or when the kernel is
right on it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from verifykit import CATALOGUE, CHEATS, ROOT, solution, summary

from kswarm_contracts.counterexample import CounterexampleInput
from orchestrator.verify import verify
from orchestrator.verify.counterexample import CounterexampleRun
from orchestrator.verify.forkserver import ForkServer

ADD = CATALOGUE / "add"
CAPPED = CHEATS / "fresh_shapes" / "shown_lengths_only.py"  # right only on the lengths it was shown
GENERATORS = CHEATS / "counterexamples"
UNSHOWN = CounterexampleInput(case={"n": 500}, dtype="float32", seed=3)


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    with ForkServer(interpret=True) as shared:
        yield shared


def _input(given: CounterexampleInput) -> CounterexampleRun:
    return CounterexampleRun(input_json=given.model_dump_json())


def test_a_capped_kernel_is_confirmed_broken_by_an_input_inside_the_domain(server: ForkServer) -> None:
    result = verify(ADD, CAPPED, "cpu", server=server, counterexample=_input(UNSHOWN))
    outcome = result.counterexample
    assert outcome is not None and outcome.status == "confirmed", (outcome, summary(result))
    assert outcome.input == UNSHOWN and outcome.inputs_tried == 1
    assert "mismatch" in outcome.kernel_flags or "unwritten_output" in outcome.kernel_flags
    assert result.verdict == "fail"
    assert [t.shape for t in result.trials] == [{"n": 500}], "only the counterexample, no fixed case"


def test_the_honest_kernel_refuses_the_same_input_as_right_on_it(server: ForkServer) -> None:
    result = verify(ADD, solution("add"), "cpu", server=server, counterexample=_input(UNSHOWN))
    outcome = result.counterexample
    assert outcome is not None and outcome.status == "refused", outcome
    assert outcome.reasons and "right on this input" in outcome.reasons[0]
    assert "within its tolerance" in outcome.reasons[0]
    assert result.verdict == "pass"


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"case": {"n": 0}, "dtype": "float32"}, "n=0 is outside [1, 67108864]"),
        ({"case": {"n": 500}, "dtype": "float32", "special": ["ties"]}, "special value ties is not one"),
        ({"case": {"n": 500}, "dtype": "float32", "layouts": {0: "transposed"}}, "layout transposed"),
        ({"case": {"n": 500, "k": 2}, "dtype": "float32"}, "k is not a key of this task"),
        ({"case": {"n": 500}, "dtype": "int32"}, "dtype int32 is not one of"),
    ],
)
def test_an_input_outside_the_domain_is_refused_with_the_validators_reason(
    server: ForkServer, given: dict, why: str
) -> None:
    run = CounterexampleRun(input_json=json.dumps(given))
    result = verify(ADD, CAPPED, "cpu", server=server, counterexample=run)
    outcome = result.counterexample
    assert outcome is not None and outcome.status == "refused", outcome
    assert any(why in r for r in outcome.reasons), outcome.reasons
    assert not result.trials, "nothing outside the domain reaches the kernel"


def test_an_input_over_the_cpu_pools_largest_case_is_sent_to_a_device_pool(server: ForkServer) -> None:
    big = CounterexampleInput(case={"n": 3002}, dtype="float32")  # CPU_SHAPES' largest is 3001
    result = verify(ADD, CAPPED, "cpu", server=server, counterexample=_input(big))
    outcome = result.counterexample
    assert outcome is not None and outcome.status == "refused"
    assert "larger than this pool's largest case" in outcome.reasons[0]
    assert "submit it to a device pool" in outcome.reasons[0]


def test_an_input_that_does_not_parse_is_refused(server: ForkServer) -> None:
    run = CounterexampleRun(input_json='{"case": {"n": 500}, "dtype": "float32", "verdict": "fail"}')
    outcome = verify(ADD, CAPPED, "cpu", server=server, counterexample=run).counterexample
    assert outcome is not None and outcome.status == "refused"
    assert "not a counterexample input" in outcome.reasons[0] and "verdict" in outcome.reasons[0]


def test_a_generator_confirms_with_its_first_failing_input_and_says_why_the_others_were_not(
    server: ForkServer,
) -> None:
    run = CounterexampleRun(generator=(GENERATORS / "finds_unshown_length.py").read_text())
    result = verify(ADD, CAPPED, "cpu", server=server, counterexample=run, seed_base=11)
    outcome = result.counterexample
    assert outcome is not None and outcome.status == "confirmed", (outcome, summary(result))
    assert outcome.inputs_tried == 3
    assert outcome.input is not None and outcome.input.special == ["zeros"]
    assert any(r.startswith("input 0: outside the task's domain") for r in outcome.reasons)
    assert any(r.startswith("input 1: the kernel is right on this input") for r in outcome.reasons)


def test_the_cli_writes_the_outcome_and_exits_with_the_kernels_verdict(tmp_path: Path) -> None:
    given = tmp_path / "cx.json"
    given.write_text(UNSHOWN.model_dump_json())
    out = tmp_path / "result.json"
    argv = [sys.executable, "-m", "orchestrator.verify", "--task", str(ADD), "--candidate", str(CAPPED)]
    argv += ["--counterexample-input", str(given), "--out", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=600, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["counterexample"]["status"] == "confirmed"
    assert record["counterexample"]["input"]["case"] == {"n": 500}
    both = [*argv, "--counterexample-generator", str(GENERATORS / "endless.py")]
    assert subprocess.run(both, cwd=ROOT, capture_output=True, timeout=600, check=False).returncode == 2
