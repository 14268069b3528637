"""``kvbench-report``: one self-contained HTML file with every section, parsed here; a slow test
opens it in a real headless browser (Debian's chromium and chromium-driver, driven by selenium)."""
from __future__ import annotations

import base64
import shutil
from html.parser import HTMLParser

import pytest

from kvbench.tools.report import SECTIONS, main

DEMO = ["allocator=orca-max,paged", "workload.request_rate=2,8", "workload.num_requests=12",
        "workload.prompt_len=32", "workload.output_len=32", "engine.kv_cache_bytes=4000000000"]


class Page(HTMLParser):
    """Sections, tables, images and every external reference of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[str] = []
        self.tables = 0
        self.rows = 0
        self.scripts = 0
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs.get("id"))
        self.tables += tag == "table"
        self.rows += tag == "tr"
        self.scripts += tag in ("script", "iframe", "object", "embed")
        if tag == "img":
            self.images.append(attrs["src"])
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            if value and not value.startswith(("data:", "#")):
                self.external.append(value)
        if tag == "link":
            self.external.append(str(attrs))


def _sweep(root):
    """A tiny simulated sweep (2 allocators x 2 rates) in a sweep dir, run in-process as Hydra
    would run its jobs (the job's overrides and config choices recorded)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from kvbench.run.ids import new_run_id
    from kvbench.run.lifecycle import run
    from kvbench.config.errors import CONF_DIR

    sweep = root / "runs" / "adhoc" / new_run_id()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for allocator in ("orca-max", "paged"):
            for rate in (2, 8):
                overrides = [f"allocator={allocator}", f"workload.request_rate={rate}", *DEMO[2:],
                             f"results_dir={root}", "progress=false"]
                cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
                HydraConfig.instance().set_config(cfg)
                try:
                    run_id = new_run_id()
                    run(cfg, run_dir=sweep / run_id, run_id=run_id)
                finally:
                    HydraConfig.instance().cfg = None
    return sweep


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    sweep = _sweep(root / "results")
    out = root / "sweep.html"
    assert main([str(sweep), "--out", str(out), "--baseline", "orca-max"]) == 0
    return sweep, out


def test_every_section_is_there_and_nothing_is_fetched(report):
    _, out = report
    page = Page()
    text = out.read_text()
    page.feed(text)
    assert page.sections == [key for key, _ in SECTIONS]
    assert page.external == [] and page.scripts == 0
    assert len(page.images) >= 5  # 4 metrics against the rate, the breakdown, and runs over time
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.tables >= 5 and page.rows >= 4 + 1
    assert "request_rate=2" in text and "request_rate=8" in text  # the compare view per rate
    assert "orca-max" in text and "paged" in text and "allocator_label, against <b>orca-max</b>" in text
    assert "kvbench allocator=" in text and "report command" in text  # provenance: the runs' commands


def test_an_existing_target_is_refused_unless_force(report, capsys):
    sweep, out = report
    before = out.read_bytes()
    assert main([str(sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "exists" in err and "--force" in err
    assert out.read_bytes() == before


@pytest.mark.parametrize("args, message", [
    (["--baseline", "buddy"], "--baseline: no run has allocator_label=buddy"),
    (["--where", "request_rate>100"], "--where: no run matches"),
    (["--x", "reqest_rate"], "close: request_rate"),
    (["--metrics", "p99_ttft"], "no column 'p99_ttft'; close: p99_ttft_s, p99_ttft_ms"),
])
def test_bad_input_is_one_line_and_nothing_written(report, tmp_path, capsys, args, message):
    sweep, _ = report
    out = tmp_path / "r.html"
    assert main([str(sweep), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")  # module scope: it is set up (or skips) before the report is built
def browser():
    """A headless chromium through selenium, or a skip with one line saying what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (see README)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("no chromium and chromium-driver here (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"):  # no network
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver), options=options)
    yield driver
    driver.quit()


@pytest.mark.slow
def test_the_report_opens_in_a_headless_browser_every_figure_and_table_renders(browser, report):
    _, out = report
    browser.get(out.resolve().as_uri())
    images = browser.find_elements("tag name", "img")
    assert len(images) >= 5
    for image in images:
        loaded = browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image)
        assert loaded and loaded > 100
        assert image.size["height"] > 50
    tables = browser.find_elements("tag name", "table")
    assert len(tables) >= 5 and all(t.size["height"] > 10 and t.find_elements("tag name", "td") for t in tables)
    headings = [h.text for h in browser.find_elements("tag name", "h2")]
    assert headings == ["Settings", "Runs", "Compare", "Figures", "Memory breakdown", "Provenance"]
    entries = browser.execute_script("return performance.getEntriesByType('resource').length")
    assert entries == 0  # the page fetched nothing
