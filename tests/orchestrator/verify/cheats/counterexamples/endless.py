"""Never returns: the harness must stop it at its timeout."""


def generate(domain: dict, seed: int) -> list[dict]:
    while True:
        pass
