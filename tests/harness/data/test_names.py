"""harness/data/names.py: a name typed with another case or separator is the name; a near miss is a
usage error that suggests the nearest few, never the whole of a long catalogue."""
import pytest

from normdiff.harness.data import names
from normdiff.harness.data.errors import UsageError

CONVENTIONS = ["llama", "gemma3", "qwen3", "qwen3.5"]


@pytest.mark.parametrize("typed", ["qwen3", "Qwen3", "QWEN3", "qwen-3", "qwen_3", "qwen 3"])
def test_a_case_or_separator_difference_is_the_name(typed):
    assert names.resolve("convention", typed, CONVENTIONS) == "qwen3"


def test_separators_between_words_are_read_alike():
    assert names.resolve("bug", "eps_outside_sqrt", ["eps-outside-sqrt", "gamma-plus-one"]) == "eps-outside-sqrt"


def test_a_near_miss_suggests_the_nearest():
    with pytest.raises(UsageError, match=r"unknown convention 'gema3'.*did you mean 'gemma3'\?"):
        names.resolve("convention", "gema3", CONVENTIONS)


@pytest.mark.parametrize("typed", ["", "  "])
def test_an_empty_name_is_called_empty(typed):
    with pytest.raises(UsageError, match=rf"^an empty convention name \({typed!r}\); known: gemma3, llama"):
        names.resolve("convention", typed, CONVENTIONS)


def test_a_long_catalogue_is_pointed_at_not_listed():
    known = [f"impl{i:02d}" for i in range(85)] + ["numpy"]
    with pytest.raises(UsageError) as caught:
        names.resolve("implementation", "nmupy", known, "normdiff list implementations")
    message = str(caught.value)
    assert "did you mean 'numpy'?" in message and "impl00" not in message
    assert "86 known: normdiff list implementations" in message


def test_two_names_of_one_normal_form_are_not_guessed_between():
    with pytest.raises(UsageError, match="did you mean"):
        names.resolve("op", "ab", ["a-b", "a_b"])
