"""`ran(report, name)`: the rows of one implementation that ran (not `unsupported`), as the runtime
tests read a report."""
import pytest


def _ran(report, name: str):
    rows = report.results
    return rows[(rows["implementation"] == name) & (rows["outcome"] != "unsupported")]


@pytest.fixture(scope="session")
def ran():
    return _ran
