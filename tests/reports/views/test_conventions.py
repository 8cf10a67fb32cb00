"""The conventions compared with each other on the same inputs."""
from normdiff.cases import suites
from normdiff.reports.views import conventions


def test_conventions_differ_where_the_catalogue_says():
    frame = conventions.divergence(suites.load("default").cases)
    l2 = frame[(frame["op"] == "l2_norm") & (frame["conventions_b"] == "torch")
               & frame["conventions_a"].str.contains("qwen3.5", regex=False)].set_index("regime")
    # F.normalize's clamp and Qwen3.5's eps-inside agree at ordinary norms, not at tiny ones
    assert l2.loc["normal", "max_rel_l2"] < 1e-6 and l2.loc["tiny_rms:1e-4", "max_rel_l2"] > 0.1
    qk = frame[(frame["op"] == "qk_norm") & frame["conventions_a"].str.split(", ").map(lambda names: "qwen3" in names)
               & (frame["conventions_b"] == "olmo2")]
    by_regime = qk.set_index("regime")["max_rel_l2"]
    assert by_regime["head_scales:logspace"] > 5 * by_regime["tiny_rms:1e-3"]  # per-head vs full: head scales
    # Qwen3 and OLMo2 differ only in rounding for rms_norm: one family, no row between them
    rms = frame[frame["op"] == "rms_norm"]
    assert not any("olmo2" in a and "qwen3" in b.split(", ") for a, b in zip(rms["conventions_a"], rms["conventions_b"]))
    assert any("qwen3" in a and "olmo2" in a for a in rms["conventions_a"])
    table = conventions.summary(frame)
    assert set(table.columns) >= {"op", "differ_in", "indistinguishable_in", "max_rel_l2"}


def test_the_comparison_is_in_report_html_and_conventions_csv_not_in_the_ci_summary(small_report):
    from normdiff.reports import html
    from normdiff.reports.markdown import summary_markdown

    assert not small_report.conventions.empty
    assert "How the conventions differ" not in summary_markdown(small_report)
    assert '<h2 id="conventions">How the conventions differ on the same inputs</h2>' in html.render_html(
        small_report, plots_on=False)
    assert "conventions.csv" in conventions.CONVENTIONS_VIEW.files(small_report, small_report.conventions)
