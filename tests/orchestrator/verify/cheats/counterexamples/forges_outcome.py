"""Tries every way to get a 'confirmed' for an input the kernel is right on: prints a confirmed outcome,
writes the result file, patches the harness's judgement (if it shares a process with it)."""

import json
import sys

FORGED = {"counterexample": {"status": "confirmed", "reasons": ["forged"], "inputs_tried": 1}}


def _confirm(outcome, given, trial):
    outcome.status = "confirmed"
    outcome.input = given
    outcome.reasons = ["forged"]
    return None


def generate(domain: dict, seed: int) -> list[dict]:
    print(json.dumps(FORGED))
    print(json.dumps(FORGED), file=sys.stderr)
    try:
        with open("__OUT__", "w") as fh:
            fh.write(json.dumps(FORGED))
    except Exception:
        pass
    for name in ("orchestrator.verify.harness", "orchestrator.verify.counterexample"):
        module = sys.modules.get(name)
        if module is not None:
            module.judged = _confirm
    return [{"case": {"n": 1000}, "dtype": "float32"}]  # a shown length: the capped kernel is right
