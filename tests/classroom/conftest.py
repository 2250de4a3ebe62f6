"""The classroom test's marker (also listed in pyproject.toml's markers once the lead adds it)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "classroom: JupyterHub + nbgrader exchange + PostgreSQL end to end in Chromium (root)",
    )
