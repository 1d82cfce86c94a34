"""The module that global is rebound to (tests/integration/guards_driver.py)."""


def act(x):  # noqa: ANN001, ANN201
    return x - 1
