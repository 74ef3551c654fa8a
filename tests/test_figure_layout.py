"""Every registered figure is readable: no two texts overlap, none falls outside the figure,
and the axes take at least half of it.

Drawn from the SYNTHETIC TEST FIXTURES (tests/report_fixtures.py): the full fixture run, a
CPU and a GPU run merged, and a needle_4m-shaped run (7 lengths to 4M, long cells skipped,
a partial cell). The texts checked are the ones matplotlib actually draws (Text.draw is
watched during a real draw), measured with the renderer's window extents.
"""

from __future__ import annotations

import io
import itertools

import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from attnbench.report import style
from attnbench.report.figures import cost_figures  # noqa: F401  registers every figure (style.FIGURES is filled on import)
from attnbench.report.frame import load

from report_fixtures import needle_run, write_run

TOLERANCE_PX = 1.0  # antialiasing: boxes that touch within a pixel do not overlap
MIN_AXES_SHARE = 0.5


@pytest.fixture(scope="module")
def fixture_tables(tmp_path_factory):
    base = tmp_path_factory.mktemp("layout")
    one = load([write_run(base / "cpu")]).records
    merged = load([write_run(base / "cpu"), write_run(base / "gpu", device="cuda", seed=1)]).records
    needle = load([needle_run(base / "needle")]).records
    return {"fixture": one, "cpu+gpu": merged, "needle_4m-shaped": needle}


def drawn_texts(fig: Figure) -> tuple[list[tuple[Text, Bbox]], Bbox]:
    """Draw the figure as render() saves it; each text matplotlib drew with its box, measured by
    the renderer at that draw, and the figure's box at the same resolution."""
    seen: dict[int, tuple[Text, Bbox]] = {}
    page: list[Bbox] = []
    draw = Text.draw

    def watched(self, renderer):
        out = draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            seen[id(self)] = (self, self.get_window_extent(renderer))
            page[:] = [Bbox.from_bounds(0, 0, *self.get_figure(root=True).bbox.size)]
        return out

    FigureCanvasAgg(fig)
    Text.draw = watched  # type: ignore[method-assign]
    try:
        fig.savefig(io.BytesIO(), format="png")
    finally:
        Text.draw = draw  # type: ignore[method-assign]
    return list(seen.values()), page[0] if page else fig.bbox


def problems(fig: Figure) -> list[str]:
    texts, box = drawn_texts(fig)
    out = []
    for t, bb in texts:
        if bb.x0 < box.x0 - TOLERANCE_PX or bb.y0 < box.y0 - TOLERANCE_PX or bb.x1 > box.x1 + TOLERANCE_PX or bb.y1 > box.y1 + TOLERANCE_PX:
            out.append(f"outside the figure: {t.get_text()!r}")
    for (a, ba), (b, bb) in itertools.combinations(texts, 2):
        w = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
        h = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
        if w > TOLERANCE_PX and h > TOLERANCE_PX:
            out.append(f"overlap: {a.get_text()!r} and {b.get_text()!r}")
    plots = [ax for ax in fig.axes if ax.get_visible() and ax.axison]  # an axes without axis lines only holds a key
    share = sum(ax.get_position().width * ax.get_position().height for ax in plots)
    if share < MIN_AXES_SHARE:
        out.append(f"the axes take {share:.0%} of the figure")
    return out


@pytest.mark.parametrize("spec", style.FIGURES, ids=[s.id for s in style.FIGURES])
@pytest.mark.parametrize("case", ["fixture", "cpu+gpu", "needle_4m-shaped"])
def test_figure_is_readable(spec, case, fixture_tables):
    with matplotlib.style.context(style.STYLE):
        fig = spec.fn(fixture_tables[case])
        if fig is None:
            pytest.skip(f"no records for {spec.id} in the {case} fixture")
        found = problems(fig)
    assert not found, f"{spec.id} ({case}): " + "; ".join(found[:8]) + (f" (+{len(found) - 8} more)" if len(found) > 8 else "")


def test_the_check_sees_overlaps_clipping_and_small_axes():
    """The check itself can fail: two texts on one spot, a text off the page, a small axes."""
    with matplotlib.style.context(style.STYLE):
        fig = Figure(figsize=(4, 3), layout="constrained")
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "skipped")
        ax.text(0.52, 0.5, "skipped")
        ax.annotate("far off", (1.4, 0.5), xycoords="axes fraction", annotation_clip=False)
        found = problems(fig)
        assert any(p.startswith("overlap: 'skipped'") for p in found)
        assert any(p.startswith("outside the figure: 'far off'") for p in found)
        small = Figure(figsize=(4, 3))
        small.add_axes((0.1, 0.1, 0.3, 0.3))
        assert problems(small) == ["the axes take 9% of the figure"]


@pytest.mark.slow
def test_every_figure_of_the_recorded_experiments_is_readable():
    """The same checks on the records the repository ships (every experiments/<name>/ merged, as
    the decision report draws them): real runs have more series, crossovers and lengths than
    the fixtures (the latency figure's crossover labels once piled up over its series)."""
    from pathlib import Path

    from attnbench.report.build import experiment_dirs

    root = Path(__file__).resolve().parents[1]
    dirs = experiment_dirs(root)
    if not dirs:
        pytest.skip("no recorded experiments beside this checkout")
    df = load(dirs).records
    found = []
    with matplotlib.style.context(style.STYLE):
        for spec in style.FIGURES:
            fig = spec.fn(df)
            if fig is not None:
                found += [f"{spec.id}: {p}" for p in problems(fig)[:4]]
    assert not found, "; ".join(found)


def test_error_bars_never_go_negative_when_an_interval_misses_its_point_by_a_rounding_error():
    """Wilson's upper end for 300/300 can come out at 1 - 1e-16: matplotlib refuses a negative yerr."""
    from attnbench.report.style import error_bars

    assert error_bars(1.0, 0.99, 1.0 - 1e-16) == [[pytest.approx(0.01)], [0.0]]
    assert error_bars([0.5, 0.2], [0.4, 0.1], [0.7, 0.25]) == [
        [pytest.approx(0.1), pytest.approx(0.1)],
        [pytest.approx(0.2), pytest.approx(0.05)],
    ]
