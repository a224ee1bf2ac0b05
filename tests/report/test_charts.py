from tokenmill.report.charts import bar_chart, line_chart


def test_charts_are_inline_svg_with_the_data():
    svg = line_chart({"loss": ([1, 2, 3], [3.0, 2.0, 1.5])}, title="Loss", xlabel="step", ylabel="nats")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and "<?xml" not in svg
    assert "Loss" in svg and "<path" in svg
    bars = bar_chart(["a", "b"], {"in": [3, 4], "out": [1, 2]}, title="Funnel", ylabel="docs")
    assert bars.startswith("<svg") and "Funnel" in bars
