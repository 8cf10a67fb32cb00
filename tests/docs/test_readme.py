"""The README is a front page: what normdiff is, the two commands, a quickstart per user and links
into docs/; the rest of the documentation lives in docs/ (issue 32)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES = 250


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= MOST_LINES, f"README.md has {len(lines)} lines; at most {MOST_LINES}: move sections into docs/"


def test_every_docs_page_the_readme_links_exists():
    text = (ROOT / "README.md").read_text()
    import re

    links = set(re.findall(r"\]\((docs/[^)#]+)", text))
    assert links and not [link for link in links if not (ROOT / link).exists()]
