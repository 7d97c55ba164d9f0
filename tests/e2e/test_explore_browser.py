"""Explore by clicking, in a real browser: a click on a device of the mesh picture focuses it; a
click on a block of a shard map lights up its copies. Screenshots in artifacts/screenshots/."""

import time

from tests.support import SHOTS, poll


def click_point(tab, chart: int, customdata) -> None:
    """Click the click-target point whose customdata is ``customdata`` in chart number ``chart``."""
    tab.wait_for_function(
        "([n, want]) => { const p = document.querySelectorAll('.js-plotly-plot')[n]; "
        "return p && p._fullData && p._fullData.some(t => t.meta && t.meta.targets && "
        "t.customdata.some(c => JSON.stringify(c) === JSON.stringify(want))); }",
        arg=[chart, customdata],
        timeout=60_000,
    )  # drawn, and by this page's latest run
    found = tab.evaluate(
        """([n, want]) => {
        const plot = document.querySelectorAll('.js-plotly-plot')[n];
        for (let c = 0; c < plot._fullData.length; c++) {
            const t = plot._fullData[c];
            if (!t.meta || !t.meta.targets) continue;
            for (let i = 0; i < t.x.length; i++)
                if (JSON.stringify(t.customdata[i]) === JSON.stringify(want)) {
                    const xa = plot._fullLayout[t.xaxis.replace('x', 'xaxis')];
                    const ya = plot._fullLayout[t.yaxis.replace('y', 'yaxis')];
                    const r = plot.getBoundingClientRect();
                    return [r.left + xa._offset + xa.l2p(t.x[i]), r.top + ya._offset + ya.l2p(t.y[i])];
                }
        }
        return null;
    }""",
        [chart, customdata],
    )
    assert found is not None, f"no click target {customdata!r} in chart {chart}"
    tab.mouse.click(found[0], found[1])


def chart_index(tab, title_start: str) -> int:
    """The index of the (drawn) chart whose title starts with ``title_start``."""
    find = """(start) => [...document.querySelectorAll('.js-plotly-plot')]
        .findIndex(p => p._fullLayout && ((p._fullLayout.title || {}).text || '').includes(start))"""
    tab.wait_for_function(f"(start) => ({find})(start) >= 0", arg=title_start, timeout=30_000)
    return tab.evaluate(find, title_start)


# The devices drawn bright on the mesh picture (chart 0), in order.
BRIGHT = """() => {
    const plot = document.querySelectorAll('.js-plotly-plot')[0];
    return plot._fullData.filter(t => t.meta && t.meta.device !== undefined && t.opacity > 0.5)
        .map(t => t.meta.device).sort((a, b) => a - b);
}"""


def test_clicking_a_device_focuses_it_and_a_block_lights_its_copies(page):
    tab = page
    click_point(tab, 0, 5)  # chart 0 is the mesh picture
    tab.wait_for_selector("text=What device 5 holds", timeout=30_000)
    time.sleep(1)
    tab.screenshot(path=str(SHOTS / "09-focus-device-5.png"), full_page=True)
    assert poll(lambda: tab.evaluate(BRIGHT), [5]) == [5]
    # Follow a block: batch/x rows 0:16 live on the devices with data=0 (0, 1, 2, 3).
    tab.get_by_test_id("stRadio").filter(has_text="Optimizer state").get_by_text("Batch (2)").click()
    time.sleep(1)
    n = chart_index(tab, "batch/x")
    click_point(tab, n, ["batch/x", "0,1,2,3", "0:16, 0:1"])
    tab.wait_for_selector("text=4 copies", timeout=30_000)
    time.sleep(1)
    assert poll(lambda: tab.evaluate(BRIGHT), [0, 1, 2, 3]) == [0, 1, 2, 3]
    tab.screenshot(path=str(SHOTS / "10-follow-block.png"), full_page=True)
