"""A module a compiled function calls through a global (tests/integration/guards_driver.py)."""


def act(x):  # noqa: ANN001, ANN201
    return x + 1
