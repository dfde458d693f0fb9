"""Reads a file outside its sandbox (another agent's, or the task's) and smuggles it out in a seed."""


def generate(domain: dict, seed: int) -> list[dict]:
    with open("__PATH__", "rb") as fh:
        data = fh.read()
    return [{"case": {"n": 500}, "dtype": "float32", "seed": int.from_bytes(data[:7], "big")}]
