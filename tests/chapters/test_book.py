"""The chapters' book (chapters/book.py): built in --fast mode for three chapters and opened in headless Chromium.

Chapters 04 (a figure and Eq. (3)), 05 (Eq. (1)) and 07 (a figure, Eq. (2)); every chapter has exercises. Each
page is loaded from the file system in Chromium, driven over the DevTools protocol on a pipe (no driver, no
extra package): every request the page makes is recorded and must stay on the machine (file: or data: URLs),
the equations must be laid out as MathML with a non-zero size, every figure must load (naturalWidth > 0), the
previous/next and table-of-contents links must point at pages that exist, CHECK cells must be marked passed and
the solutions folded. A screenshot of chapter 05 is written to the test's folder (and to $BOOK_SCREENSHOT when
set) for a person to look at. Without Chromium (Debian's `chromium` package) the browser test skips, saying so.

The build's refusals are checked without a browser: a chapter whose check fails stops the build with its name
and its error, and leaves the published book as it was; a folder the command did not build is never replaced.
"""
import base64
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOK_SCRIPT = ROOT / "chapters" / "book.py"
PAGES = {"04": "04_modules_adam_and_noam", "05": "05_scaled_dot_product_attention",
         "07": "07_feed_forward_embeddings_positions"}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--remote-debugging-pipe", "--window-size=1280,900"]
TIMEOUT_S = 900                                   # a hang guard: three --fast chapters take about a minute


def load_book_module():
    spec = importlib.util.spec_from_file_location("chapters_book", BOOK_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chromium_binary() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


class Browser:
    """Headless Chromium over the DevTools protocol on a pipe (fd 3: commands in, fd 4: replies out)."""

    def __init__(self, binary: str, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def child_fds():                          # in the child: the protocol's fixed descriptors 3 and 4
            high_r, high_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w))
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.process = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                        preexec_fn=child_fds, pass_fds=(3, 4),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._next_id, self.events = b"", 0, []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.send(f"{domain}.enable", session=self.session)

    def _read_message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        command = {"id": self._next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        os.write(self._to_browser, json.dumps(command).encode() + b"\0")
        while True:
            message = self._read_message()
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str) -> dict:
        while True:
            message = self._read_message()
            self.events.append(message)
            if message.get("method") == method:
                return message

    def open(self, url: str) -> None:
        self.send("Page.navigate", session=self.session, url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", session=self.session, expression=expression, returnByValue=True,
                           awaitPromise=True)
        assert "exceptionDetails" not in result, f"{expression[:60]}...: {result['exceptionDetails']}"
        return result["result"]["value"]

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)


PAGE_FACTS = """(() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  const math = [...document.querySelectorAll('math')];
  return {
    math: math.map(m => ({size: box(m), display: getComputedStyle(m).display, block: m.getAttribute('display')})),
    images: [...document.querySelectorAll('main img')].map(i => ({src: i.src, width: i.naturalWidth})),
    prev: [...document.querySelectorAll('a[rel=prev]')].map(a => a.href),
    next: [...document.querySelectorAll('a[rel=next]')].map(a => a.href),
    toc: [...document.querySelectorAll('nav.book-toc a')].map(a => a.href),
    source: [...document.querySelectorAll('a.book-source-link')].map(a => a.href),
    checks: document.querySelectorAll('.book-check-badge').length,
    solutions: [...document.querySelectorAll('details.book-solutions')].map(d => d.open),
    title: document.title,
  };
})()"""


def file_of(url: str) -> Path:
    parsed = urlparse(url)
    assert parsed.scheme == "file", f"{url} is not a file of the book"
    return Path(unquote(parsed.path))


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    pytest.importorskip("nbconvert", reason="the book needs the extra: pip install -e '.[book]'")
    pytest.importorskip("latex2mathml", reason="the book needs the extra: pip install -e '.[book]'")
    out = tmp_path_factory.mktemp("book") / "book"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, str(BOOK_SCRIPT), "--fast", "--only", ",".join(PAGES), "--out", str(out)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, f"the book did not build:\n{(result.stdout + result.stderr)[-4000:]}"
    return out


def test_book_pages_open_offline_with_math_figures_and_links(built_book, tmp_path):
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium to open the book in (Debian: apt-get install chromium)")
    for stem in PAGES.values():
        assert (built_book / f"{stem}.html").is_file(), f"{stem}.html was not built"
    pages = ["index.html", *(f"{stem}.html" for stem in PAGES.values()), "reproduction_notes.html"]
    browser = Browser(binary, Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)))
    try:
        for page in pages:
            browser.open((built_book / page).as_uri())
            facts = browser.evaluate(PAGE_FACTS)
            links = facts["prev"] + facts["next"] + facts["toc"] + facts["source"]
            for url in links:
                assert file_of(url).is_file(), f"{page}: the link {url} points at no page of the book"
            assert facts["toc"], f"{page}: no table of contents"
            assert facts["prev"] or facts["next"], f"{page}: no previous/next link"
            for image in facts["images"]:
                assert image["width"] > 0, f"{page}: the figure {image['src']} did not load"
            for math in facts["math"]:
                assert math["size"][0] > 0 and math["size"][1] > 0, f"{page}: an equation has no size: {math}"
                assert "math" in math["display"], f"{page}: <math> is not laid out as MathML: {math}"
            if page.startswith(("04_", "05_", "07_")):
                assert any(m["block"] == "block" for m in facts["math"]), f"{page}: no display equation"
                assert facts["checks"] > 0, f"{page}: no CHECK cell marked as passed"
                assert facts["solutions"] == [False], f"{page}: the solutions must be there, folded: {facts}"
                assert any("/src/transformer/" in u or "/src/minitensor/" in u for u in facts["source"]), \
                    f"{page}: no link to the library source it builds"
            if page.startswith(("04_", "07_")):
                assert facts["images"], f"{page}: the chapter's figure is missing"
            if page == "05_scaled_dot_product_attention.html":
                shot = base64.b64decode(browser.send("Page.captureScreenshot", session=browser.session,
                                                     format="png")["data"])
                (tmp_path / "book_page.png").write_bytes(shot)
                if os.environ.get("BOOK_SCREENSHOT"):
                    Path(os.environ["BOOK_SCREENSHOT"]).write_bytes(shot)
                assert shot[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG"
        requested = browser.requested_urls()
        assert requested, "the browser recorded no requests: the network log is not working"
        outside = [url for url in requested if not url.startswith(("file://", "data:"))]
        assert not outside, f"the book made requests that leave the machine: {outside[:5]}"
    finally:
        browser.close()


BROKEN_CHAPTER = '''# %% [markdown]
# # 01 · A chapter whose check fails

# %% CHECK
assert 1 + 1 == 3, "the check must fail"
print("chapter 01 OK")
'''


def test_a_failing_chapter_stops_the_build_and_publishes_nothing(tmp_path, monkeypatch):
    pytest.importorskip("nbclient")
    pytest.importorskip("jupytext")
    book = load_book_module()
    broken = tmp_path / "01_broken.py"
    broken.write_text(BROKEN_CHAPTER, encoding="utf-8")
    monkeypatch.setattr(book, "chapter_files", lambda: [broken])
    out = tmp_path / "book"
    out.mkdir()
    (out / book.MARKER).write_text("")
    (out / "index.html").write_text("the book as it was")
    with pytest.raises(book.BuildError, match=r"01_broken\.py: AssertionError: the check must fail"):
        book.build(out, fast=True, only=None)
    assert (out / "index.html").read_text() == "the book as it was", "a failed build changed the published book"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01_broken.py", "book"], "the failed build left files"


def test_a_folder_the_command_did_not_build_is_never_replaced(tmp_path):
    book = load_book_module()
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(book.BuildError, match="not a book this command built"):
        book.check_out_folder(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_an_equation_latex2mathml_cannot_typeset_fails_the_build():
    pytest.importorskip("latex2mathml")
    book = load_book_module()
    assert "<math" in book.typeset(r"\frac{QK^\top}{\sqrt{d_k}}", display=True)
    assert 'class="book-eqno">(1)<' in book.typeset(r"a = b \tag{1}", display=True)
    with pytest.raises(ValueError, match="cannot typeset"):
        book.typeset(r"\notacommand{x}", display=False)
    with pytest.raises(ValueError, match="cannot typeset"):
        book.typeset(r"\begin{aligned} a &= b \end{aligned}", display=True)
