from tokenmill.report.charts import bar_chart, line_chart


def test_charts_are_inline_svg_with_the_data():
    svg = line_chart({"loss": ([1, 2, 3], [3.0, 2.0, 1.5])}, title="Loss", xlabel="step", ylabel="nats")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and "<?xml" not in svg
    assert "Loss" in svg and "<path" in svg
    bars = bar_chart(["a", "b"], {"in": [3, 4], "out": [1, 2]}, title="Funnel", ylabel="docs")
    assert bars.startswith("<svg") and "Funnel" in bars


def test_downsample_keeps_spikes_and_line_breaks():
    import math

    from tokenmill.report.charts import downsample
    xs = list(range(10_000))
    ys = [1.0] * 10_000
    ys[4321] = 50.0
    ys[777] = -3.0
    ys[5000] = None
    dx, dy = downsample(xs, ys, max_points=400)
    assert len(dx) <= 400 and max(dy) == 50.0 and min(v for v in dy if not math.isnan(v)) == -3.0
    assert dx == sorted(dx) and dx[0] == 0 and dx[-1] == 9_999
    short = downsample([1, 2, 3], [1.0, None, 3.0])
    assert short[0] == [1.0, 2.0, 3.0] and math.isnan(short[1][1])
    broken = downsample([0, 1, math.nan] + list(range(2, 5000)), [1.0, 1.0, math.nan] + [2.0] * 4998, max_points=100)
    assert any(math.isnan(x) for x in broken[0])  # the break survives


def test_stacked_panels_share_x_and_tag_every_marker():
    import re

    from tokenmill.report.charts import Heatmap, Marker, MarkerStyle, Panel, stacked_panels
    panels = [Panel("loss", lines={"loss": ([1, 2, 3], [3.0, 2.0, 1.0])}),
              Panel("groups", heatmap=Heatmap(["a", "b"], [0.5, 1.5, 2.5, 3.5], [[1.0, 2.0, 3.0], [0.1, 0.2, 0.3]]))]
    svg = stacked_panels(panels, [Marker(2, "spike", "marker-spike-2", label="spike 2")],
                         {"spike": MarkerStyle("red", legend="loss spike")}, xlabel="step")
    assert svg.startswith("<svg") and len(re.findall(r'id="marker-spike-2-p\d"', svg)) == 2
    assert ">loss spike<" in svg and ">spike 2<" in svg and 'id="heatmap-rows-2"' in svg and "<image" in svg
    again = stacked_panels(panels, [Marker(2, "spike", "marker-spike-2")], {"spike": MarkerStyle("red")}, xlabel="step")
    assert again == stacked_panels(panels, [Marker(2, "spike", "marker-spike-2")], {"spike": MarkerStyle("red")},
                                   xlabel="step")  # deterministic bytes
