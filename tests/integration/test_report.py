"""dltrace report and dltrace export --chrome-trace on real recordings: a NaN job, a crash job
and a 2-rank job. The page is rendered by a real browser (Debian's chromium, headless): the DOM
it built holds the figures, the console stays silent (the page's Content-Security-Policy
forbids every fetch and script, so anything the page tried to load would be reported there),
and the screenshot shows the plots (their colours, inside the plot area)."""
import json
import os
import re
import subprocess
import unittest

from PIL import Image

from harness import EXAMPLES, PY, TraceTestCase, dataset, run, tool
from test_dist import NO_TORCHRUN, torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
CHROMIUM = "/usr/bin/chromium"  # scripts/setup.sh installs it
CORRUPT_INDEX = 1365            # examples/prepare_data.py: the sample with +inf pixels

BLUE = (31, 119, 180)     # the loss series
RED = (214, 39, 40)       # the failure mark
MAGENTA = (255, 0, 255)   # non-finite cells and pixels
ORANGE = (255, 127, 14)   # collectives
PLOT_BG = (250, 250, 250)


class ReportTest(TraceTestCase):
    def record(self, argv, name="t.trace", extra=()):
        trace = self.trace_path(name)
        p = run([tool("dlrecord"), *extra, "-o", trace, "--"] + argv, timeout=300)
        self.assertIn("dlrecord: trace", p.stderr, p.stderr)
        return trace

    def report(self, trace):
        html = os.path.join(self.tmp, "report.html")
        p = run([tool("dltrace"), "report", trace, "-o", html])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(html) as f:
            text = f.read()
        # Self-contained: nothing to fetch, nothing to run.
        self.assertNotIn("<script", text)
        self.assertIsNone(re.search(r"\b(src|href)=", text))
        return html, text

    def browse(self, html, height=3200):
        """(DOM, screenshot) of the page in headless chromium; fails on any console message."""
        if os.environ.get("DLRR_TEST_CHROOT") and not os.path.exists(CHROMIUM):
            self.skipTest("scripts/torch2.sh's chroot has no chromium: pages are rendered on the main platform")
        profile = os.path.join(self.tmp, "chromium-profile")
        common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0"]
        dom = subprocess.run(common + ["--dump-dom", "file://" + html], capture_output=True, text=True, timeout=180)
        self.assertEqual(dom.returncode, 0, dom.stderr)
        console = [l for l in dom.stderr.splitlines() if "CONSOLE" in l]
        self.assertEqual(console, [], "the page logged to the console")
        png = os.path.join(self.tmp, "report.png")
        shot = subprocess.run(common + ["--window-size=1000,%d" % height, "--screenshot=" + png, "file://" + html],
                              capture_output=True, text=True, timeout=180)
        self.assertEqual(shot.returncode, 0, shot.stderr)
        self.assertEqual([l for l in shot.stderr.splitlines() if "CONSOLE" in l], [])
        return dom.stdout, Image.open(png).convert("RGB")

    @staticmethod
    def count(img, colour):
        return sum(1 for p in img.getdata() if p == colour)

    def assert_plot(self, img):
        """The loss chart: its background box holds the blue series and the red failure mark."""
        w, h = img.size
        px = img.load()
        rows = [y for y in range(h) if sum(1 for x in range(0, w, 4) if px[x, y] == PLOT_BG) > 100]
        self.assertTrue(rows, "no plot area in the screenshot")
        # The first run of such rows (grid lines and the curve cross it: gaps of a few rows).
        top = bottom = rows[0]
        for y in rows[1:]:
            if y - bottom > 4:
                break
            bottom = y
        self.assertGreater(bottom - top, 100, "the first plot area is too small")
        inside = [px[x, y] for y in range(top, bottom) for x in range(w)]
        self.assertGreater(sum(1 for p in inside if p == BLUE), 20, "no loss curve inside the plot area")
        # The failure mark: a dashed red vertical line across the plot area.
        dashed = [x for x in range(w) if sum(1 for y in range(top, bottom) if px[x, y] == RED) > (bottom - top) * 0.4]
        self.assertTrue(dashed, "no failure mark inside the plot area")

    def export(self, trace):
        out = os.path.join(self.tmp, "t.json")
        p = run([tool("dltrace"), "export", trace, "--chrome-trace", "-o", out])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            doc = json.load(f)
        events = doc["traceEvents"]
        for e in events:
            self.assertIn(e["ph"], ("M", "X", "i"))
            if e["ph"] != "M":
                self.assertGreaterEqual(e["ts"], 0)
        return events

    def assert_steps(self, trace, events):
        """One step span per step the trace holds, the completed ones with their duration."""
        doc = json.loads(run([tool("dltrace"), "steps", trace, "--json"], check=True).stdout)
        spans = {e["name"]: e for e in events if e["ph"] == "X" and e["cat"] == "step"}
        for s in doc["steps"]:
            self.assertIn("step %d" % s["step"], spans)
            self.assertGreater(spans["step %d" % s["step"]]["dur"], 0)
        self.assertLessEqual(len(spans) - len(doc["steps"]), 1)  # at most the step that failed unfinished

    def test_nan_job(self):
        data = dataset()
        trace = self.record([PY, os.path.join(EXAMPLES, "train.py"), "--data", data, "--seed", "8", "--epochs", "1"])
        info = json.loads(run([tool("dltrace"), "info", trace, "--json"], check=True).stdout)
        step = info["failure"]["step"]
        html, text = self.report(trace)
        self.assertIn("--until nan --debug pdb", text)
        dom, img = self.browse(html)
        for cls in ("loss-chart", "heatmap gradients", "heatmap activations", "step-time-chart", "sample-image",
                    "timeline"):
            self.assertIn('<svg class="%s"' % cls, dom)
        self.assertIn("failure-mark", dom)
        self.assertIn("dataset index</th><td>%d<" % CORRUPT_INDEX, dom)  # the corrupt sample, named
        self.assertIn("nonfinite at step %d" % step, dom)
        self.assert_plot(img)
        # Magenta: the non-finite heat-map cells of the failing step and the sample's +inf pixels.
        self.assertGreater(self.count(img, MAGENTA), 500)
        events = self.export(trace)
        self.assert_steps(trace, events)
        self.assertTrue(any(e["ph"] == "i" and e["cat"] == "failure" for e in events))
        self.assertTrue(any(e["ph"] == "X" and e["name"] == "epoch 0" for e in events))

    def test_crash_job(self):
        trace = self.record([PY, os.path.join(HERE, "jobs", "tiny_train.py"), "--steps", "12", "--raise-at", "7"])
        html, text = self.report(trace)
        self.assertIn("--until crash --debug pdb", text)
        dom, img = self.browse(html)
        self.assertIn("KeyError", dom)
        self.assertIn("exception at step 7", dom)
        self.assertIn('<svg class="loss-chart"', dom)
        self.assertIn('class="tokens sample-values"', dom)  # the sample's values: no image in this batch
        self.assert_plot(img)
        events = self.export(trace)
        self.assert_steps(trace, events)
        failures = [e for e in events if e.get("cat") == "failure"]
        self.assertEqual(len([e for e in failures if "KeyError" in e["args"]["detail"]]), 1)

    @unittest.skipIf(NO_TORCHRUN, NO_TORCHRUN)
    def test_two_rank_job(self):
        job = torchrun(2, os.path.join(self.tmp, "logs")) + [os.path.join(EXAMPLES, "collectives_train.py"), "--steps",
                                                             "8", "--nan-rank", "1", "--nan-step", "5"]
        trace = self.record(job, extra=("--collectives", "full"))
        info = json.loads(run([tool("dltrace"), "info", trace, "--json"], check=True).stdout)
        html, text = self.report(trace)
        self.assertIn("--until nan --rank 1 --debug pdb", text)
        dom, img = self.browse(html)
        self.assertIn("rank0 (rank 0)", dom)
        self.assertIn("rank1 (rank 1)", dom)
        self.assertGreater(dom.count('class="collective"'), 50)
        self.assert_plot(img)
        self.assertGreater(self.count(img, ORANGE), 50)  # the collectives, visible
        events = self.export(trace)
        names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        for r in info["distributed"]["ranks"]:
            self.assertIn("(rank %d)" % r["rank"], names[r["pid"]])
            mine = [e for e in events if e.get("pid") == r["pid"]]
            self.assertEqual(sum(1 for e in mine if e["ph"] == "X" and e["cat"] == "step"), r["steps"])
            self.assertEqual(sum(1 for e in mine if e["ph"] == "i" and e["cat"] == "collective"), r["collectives"])

    def test_bad_arguments(self):
        p = run([tool("dltrace"), "report", self.tmp])
        self.assertEqual(p.returncode, 2)
        self.assertIn("needs -o", p.stderr)
        p = run([tool("dltrace"), "export", self.tmp, "-o", os.path.join(self.tmp, "x.json")])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--chrome-trace", p.stderr)
        p = run([tool("dltrace"), "report", self.tmp, "-o", os.path.join(self.tmp, "r.html")])
        self.assertEqual(p.returncode, 4)  # not a trace
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "r.html")))


if __name__ == "__main__":
    unittest.main()
