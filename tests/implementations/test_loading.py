"""Where a worker finds a user's module: it starts with no current folder on its import path
(python -P), so the folder the parent found the module under is put there when it is loaded."""
import sys

import pytest

from normdiff.implementations.loading import put_module_on_path


@pytest.mark.parametrize("module, source", [
    ("mynorm", "/work/a/mynorm.py"),
    ("pkg.norms", "/work/a/pkg/norms.py"),
    ("pkg", "/work/a/pkg/__init__.py"),
    ("pkg.sub", "/work/a/pkg/sub/__init__.py"),
], ids=["module", "submodule", "package", "subpackage"])
def test_the_folder_above_the_modules_root_goes_first(module, source, monkeypatch):
    monkeypatch.setattr(sys, "path", ["/site-packages"])
    put_module_on_path(module, source)
    assert sys.path == ["/work/a", "/site-packages"]


def test_a_folder_already_on_the_path_stays_where_it_is(monkeypatch):
    monkeypatch.setattr(sys, "path", ["/usr/lib/python3", "/site-packages"])
    put_module_on_path("keras.ops", "/site-packages/keras/ops/__init__.py")
    assert sys.path == ["/usr/lib/python3", "/site-packages"]
