"""The catalogue's naming rules, as data."""
from normdiff.harness.data.bugs import BUGS, LIBRARY_EPS, constant_eps_bug


def test_a_constant_eps_is_named_by_its_provenance():
    # a library's default, whatever the model's eps
    assert all(constant_eps_bug(v, 1e-6).id == "eps-library-default" for v in LIBRARY_EPS)
    # the family's own config value used for every model: the argument is ignored
    assert constant_eps_bug(1e-5, 1e-5).id == "eps-hardcoded"
    assert constant_eps_bug(1e-6, 1e-6).id == "eps-hardcoded"
    # another family's value: the bug filed for that constant
    assert constant_eps_bug(1e-5, 1e-6).id == "eps-wrong-value"
    assert constant_eps_bug(1e-6, 1e-5).id == "eps-hardcoded"
    assert constant_eps_bug(3e-4, 1e-6) is None


def test_every_catalogued_eps_constant_names_itself_where_it_was_filed():
    # the mutants keep their names: each constant-eps bug's own change, under its own convention
    from normdiff.harness.data.conventions import get_contract

    for bug in BUGS.values():
        if bug.changes.keys() == {"eps"}:
            assert constant_eps_bug(bug.changes["eps"], get_contract(bug.op, bug.convention).eps) is bug
