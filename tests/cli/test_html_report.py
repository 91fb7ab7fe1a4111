"""The HTML report (report/html.py, report/svg.py, templates/): content, self-containedness, escaping,
the roofline and memory sections, and never replacing a file without --force. The page in a real
browser: test_html_browser.py."""
import itertools
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from perflab.__main__ import main
from perflab.doctor import diagnose
from perflab.doctor.finding import EventRef, Finding, Report
from perflab.errors import PerflabError
from perflab.report import svg
from perflab.outputs import check_output, write_output
from perflab.report.html import TEMPLATES, memory_series, report_html

ROOT = Path(__file__).resolve().parents[2]
SLOW = ROOT / "src" / "perflab" / "catalog" / "03-pageable-copies" / "artifacts" / "slow.trace.json.gz"
SOLUTION = ROOT / "src" / "perflab" / "catalog" / "03-pageable-copies" / "artifacts" / "solution.trace.json.gz"
NCU = ROOT / "tests" / "data" / "ncu" / "v_gemv.csv"


class Page(HTMLParser):
    """What the page references and contains, as a browser would parse it."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: dict[str, int] = {}
        self.refs: list[str] = []
        self.ids: set[str] = set()
        self.findings: list[str] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        for key in ("src", "href", "xlink:href", "action", "poster", "data"):
            if a.get(key):
                self.refs.append(a[key])
        if "id" in a:
            self.ids.add(a["id"])
        if "data-finding" in a:
            self.findings.append(a["data-finding"])

    def handle_data(self, data):
        self.text.append(data)


def self_contained(text: str, page: Page) -> None:
    external = [r for r in page.refs if not r.startswith(("data:", "#"))]
    assert not external, external
    assert page.tags.get("link", 0) == 0 and "@import" not in text
    assert not re.search(r"url\((?!#)", text), "CSS url() other than a local #fragment"


@pytest.fixture(scope="module")
def slow_report():
    return diagnose(SLOW)


def test_kineto_report_has_verdict_findings_charts_and_kernels(slow_report):
    text = report_html(slow_report)
    page = Page(text)
    self_contained(text, page)
    assert "verdict" in page.ids
    body = " ".join(page.text)
    assert slow_report.verdict in body
    assert page.findings == [f.id for f in slow_report.findings]  # every finding, in the doctor's order
    for f in slow_report.findings:
        assert f.fix in body
    assert page.tags["svg"] >= 3  # step times, the stream lanes, kernel types (and idle causes)
    lanes = slow_report.analyses["timeline"]["lanes"]
    for lane in lanes:
        assert f"GPU {lane['device']} · stream {lane['stream']}" in text
    top = slow_report.analyses["kernels"]["by_name"][0]["name"]
    assert svg.escape(top) in text
    assert "<h2 id=\"roofline\"" not in text and "<h2 id=\"memory\"" not in text


def test_timeline_analysis_is_in_the_report(slow_report):
    """The stream lanes are an analysis of the report, consistent with the doctor's busy numbers."""
    t = slow_report.analyses["timeline"]
    busy = {(s["device"], s["stream"]): s["busy_pct"] for s in slow_report.analyses["busy"]["streams"]}
    assert {(lane["device"], lane["stream"]) for lane in t["lanes"]} == set(busy)
    for lane in t["lanes"]:
        assert lane["busy_pct"] == pytest.approx(busy[(lane["device"], lane["stream"])], rel=1e-6)
        assert len(lane["busy"]) == t["bins"] and all(0 <= b <= 1 for b in lane["busy"])
        # the binned shares add up to the busy time (every window lies inside the binned span)
        binned = sum(lane["busy"]) * t["bin_us"]
        assert binned >= lane["busy_pct"] / 100 * slow_report.analyses["busy"]["window_us"] * 0.98
    assert len(t["step_ms"]) == slow_report.analyses["summary"]["steps"]
    median = sorted(t["step_ms"])[len(t["step_ms"]) // 2 - 1: len(t["step_ms"]) // 2 + 1]
    assert sum(median) / 2 == pytest.approx(slow_report.analyses["summary"]["step_time_ms"])


def test_ncu_report_embeds_the_roofline():
    report = diagnose(NCU)
    text = report_html(report)
    page = Page(text)
    self_contained(text, page)
    assert '<h2 id="roofline"' in text
    png = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert png and len(png.group(1)) > 10_000
    assert report.analyses["kernels"][0]["name"] in text
    assert page.findings == report.ids()


def test_memory_section_only_with_memory_analyses():
    series = {"t_us": [0, 10, 20, 30], "allocated_bytes": [0, 3 << 20, 5 << 20, 1 << 20],
              "reserved_bytes": [0, 4 << 20, 8 << 20, 8 << 20]}
    report = Report(source={"path": "snap.json", "kind": "memory", "device": "NVIDIA H100 80GB HBM3"},
                    verdict="Reserved is 8× allocated.",
                    findings=[Finding("memory-capacity", "medium", 20.0, {"reserved_mib": 8.0}, "empty the cache")],
                    analyses={"memory": {"reserved_bytes": 8 << 20, "pools": {"private": 2}, "timeline": series}})
    text = report_html(report)
    assert '<h2 id="memory"' in text and "reserved_bytes" in text and "pools.private" in text
    assert "<polyline" in text and "MiB" in text  # the series, drawn in MiB
    xs, ys, x_unit, y_unit = memory_series(series)
    assert xs == [0, 10, 20, 30] and x_unit == "t_us" and y_unit == "MiB"
    assert dict(ys)["reserved_bytes"] == [0, 4, 8, 8]
    rows = [{"ts": i, "active": v} for i, v in enumerate((1, 2, 3))]
    assert memory_series(rows)[1] == [("active", [1.0, 2.0, 3.0])]


def test_memory_snapshot_report_renders_its_timeline(tmp_path):
    """A real (synthetic) snapshot through the memory doctor, when it is in this build."""
    pytest.importorskip("perflab.doctor.memory")
    mb = 1 << 20
    block = {"address": 0, "size": 16 * mb, "requested_size": 16 * mb, "state": "active_allocated",
             "frames": [{"filename": "model.py", "line": 10, "name": "forward"}]}
    segments = [{"device": 0, "address": 0, "total_size": 64 * mb, "stream": 0, "segment_type": "large",
                 "segment_pool_id": [0, 0],
                 "blocks": [block, {"address": 16 * mb, "size": 48 * mb, "state": "inactive"}]}]
    events = [{"action": "alloc", "addr": i, "size": mb, "stream": 0, "time_us": 10 * i} for i in range(30)]
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"segments": segments, "device_traces": [events]}))
    out = tmp_path / "m.html"
    assert main(["doctor", str(snap), "--html", str(out)]) == 0
    text = out.read_text()
    self_contained(text, Page(text))
    assert '<h2 id="memory"' in text and "<polyline" in text and "model.py" in text


def test_text_from_the_trace_is_escaped():
    evil = "<script>alert(1)</script>"
    report = Report(source={"path": f"/tmp/{evil}.json", "kind": "kineto", "device": evil},
                    verdict=f"verdict {evil}",
                    findings=[Finding("host-sync", "high", 50.0, {"kernel": evil, "nested": {"k": evil}}, f"fix {evil}",
                                      summary=evil, events=[EventRef(evil, 1.0, 2.0)])],
                    analyses={})
    text = report_html(report)
    assert evil not in text and "&lt;script&gt;" in text
    assert len(re.findall(r"<script>", text)) == 1  # only the page's own toggle script


def test_svg_helpers():
    ticks = svg.nice_ticks(0, 47)
    assert ticks[0] == 0 and ticks[-1] <= 47 and all(b > a for a, b in itertools.pairwise(ticks))
    s = svg.step_series([("a", [1.0, 2.0, 100.0])])
    assert "log scale" in s and s.count("<circle") == 3
    assert "log scale" not in svg.step_series([("a", [1.0, 2.0, 3.0])])
    bars = svg.hbars([("gemm", 3.0), ("<x>", 1.0)], unit="µs")
    assert bars.count("<rect") == 2 and "&lt;x&gt;" in bars
    timeline = {"bins": 4, "t0_us": 0.0, "span_us": 4000.0, "in_window": [1, 1, 0, 1],
                "lanes": [{"device": 0, "stream": 7, "busy_pct": 50.0, "top_type": "gemm", "busy": [1, 0, 0, 0.5]}]}
    lanes = svg.lanes(timeline)
    assert lanes.count("<title>") == 2  # one bar per busy slice
    assert re.search(r"fill='url\(#outside-\d+\)'", lanes)  # the slice outside the steps is hatched
    assert re.search(r"id='(outside-\d+)'", lanes).group(1) != re.search(r"id='(outside-\d+)'",
                                                                           svg.lanes(timeline)).group(1)


def test_output_files_are_never_replaced_without_force(tmp_path):
    out = tmp_path / "a" / "r.html"
    with pytest.raises(PerflabError, match="the folder .* does not exist"):
        write_output(out, "one")
    out.parent.mkdir()
    write_output(out, "one")
    assert out.read_text() == "one"
    with pytest.raises(PerflabError, match="exists: pass --force"):
        write_output(out, "two")
    assert out.read_text() == "one"
    write_output(out, "two", force=True)
    assert out.read_text() == "two"
    with pytest.raises(PerflabError, match="is a folder"):
        check_output(tmp_path)
    assert [p.name for p in out.parent.iterdir()] == ["r.html"]  # no temporary file left behind


def test_doctor_html_cli(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["doctor", str(SOLUTION), "--html", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert diagnose(SOLUTION).verdict in " ".join(Page(out.read_text()).text)
    assert main(["doctor", str(SLOW), "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists: pass --force" in err and err.count("\n") == 1
    assert main(["doctor", str(SLOW), "--json", "--html", str(out), "--force"]) == 0
    cap = capsys.readouterr()
    assert cap.out.lstrip().startswith("{") and f"wrote {out}" in cap.err
    assert diagnose(SLOW).verdict in " ".join(Page(out.read_text()).text)


def test_templates_ship_with_the_package():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    assert {p.name for p in TEMPLATES.iterdir()} >= {"base.html.j2", "report.html.j2", "diff.html.j2",
                                                       "macros.html.j2"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "src/perflab" in project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert any(d.startswith("jinja2") for d in project["project"]["dependencies"])


def test_a_cpu_only_report_shows_where_the_step_thread_goes(tmp_path):
    from perflab.trace.builders import synthetic

    b = synthetic.TraceBuilder()
    for n in range(3):
        with b.step(n):
            b.host("aten::mm", 300.0)
            b.python(700.0)
    html = report_html(diagnose(b.write(tmp_path / "cpu.json")))   # host work only: no GPU event
    assert "step thread: ops" in html and "step thread: python" in html and "GPU busy" not in html


def test_the_window_note_reaches_the_page():
    peer = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))
    path = peer / "triton_example__triton_example.json.gz"
    if not path.is_file():
        pytest.skip("peer traces not available")
    html = report_html(diagnose(path))
    assert 'id="window-note"' in html and "percentages are of the recorded part" in html
    assert 'id="window-note"' not in report_html(diagnose(Path(__file__).parents[1] / "data" / "kineto" / "h100_healthy_gemm.trace.json.gz"))
