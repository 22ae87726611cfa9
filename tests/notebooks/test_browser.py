"""A real browser: JupyterLab in headless Chromium runs lesson 04, and its interactive views work.

The test starts JupyterLab from the course's environment on a free localhost port, on a
temporary copy of notebooks/ (JupyterLab saves notebooks; the real ones stay untouched),
opens lesson 04 in Debian's Chromium through Python playwright, and checks: as committed
(untrusted) the interactive outputs show their static picture; after running all cells
(JupyterLab's "Run All Cells" command) there is no error output, the interactive head view
rendered (its script ran in the notebook's output) and its lines react to hovering and
clicking, and the model view opens a head on click. Screenshots go to artifacts/ (git-ignored).

Chromium comes from `make browser` (apt-get). Without it the test is skipped, unless
COURSE_BROWSER_REQUIRED=1 (CI), where a missing browser is a failure.
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
LESSON = "04_visualising_attention.ipynb"
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # a container's /dev/shm (64 MB by default) is too small for Chromium
]
# Settings for this JupyterLab only: every cell in the DOM (no windowing). The news prompt is switched
# off by the course's own settings (jupyter/overrides.json, installed by `make install`), not here.
USER_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _unavailable(reason):
    message = f"{reason}; install it with `make browser` (Debian's chromium) to run the real-browser test"
    if os.environ.get("COURSE_BROWSER_REQUIRED") == "1":
        pytest.fail(message + " (COURSE_BROWSER_REQUIRED=1)")
    pytest.skip(message)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:  # localhost only
        return response.status, response.read()


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on a copy of notebooks/; yields (base_url, token, root folder)."""
    root = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    config = tmp_path / "jupyter-config"
    for name, values in USER_SETTINGS.items():
        path = config / "lab" / "user-settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    command = [
        sys.executable, "-m", "jupyter", "lab",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}", "--LabApp.extension_manager=readonly",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run JupyterLab's own commands
    ]  # fmt: skip
    if os.getuid() == 0:
        command.append("--allow-root")
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        # its own notebook-signature database: saving here must not make the lesson "trusted" elsewhere
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
    }
    log = open(tmp_path / "jupyterlab.log", "w")
    # its own process group, so the kernel it starts can be cleaned up with it
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"JupyterLab exited:\n{(tmp_path / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                if _get(f"{base}/api/status?token={token}")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not start within 60 s")
            time.sleep(0.3)
        yield base, token, root
    finally:
        try:  # a clean shutdown also stops the kernel
            request = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST")
            urllib.request.urlopen(request, timeout=5).close()
            server.wait(timeout=15)
        except Exception:
            pass
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        log.close()


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the Python package playwright is not installed")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


KERNEL_READY = """async () => {
    const panel = window.jupyterapp.shell.currentWidget;
    await panel.context.ready;
    await panel.sessionContext.ready;
    const kernel = panel.sessionContext.session.kernel;
    for (let i = 0; i < 600 && kernel.status !== 'idle'; i++) await new Promise(r => setTimeout(r, 100));
    return kernel.status;
}"""
STORED_VIEWS = """() => Array.from(document.querySelectorAll('.cu-attn')).map(root => {
    const img = root.querySelector('img.cu-fallback');
    return {ready: root.hasAttribute('data-cu-ready'),
            picture: !!img && img.complete && img.naturalWidth > 100 && getComputedStyle(img).display !== 'none'};
})"""
ALL_RAN = """() => {
    const prompts = Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'));
    return prompts.length === CODE_CELLS && prompts.every(p => /\\[\\d+\\]/.test(p.textContent))
        && document.querySelectorAll(".cu-attn[data-cu-ready='1']").length === 2
        && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle';
}"""
VISIBLE_LINES = """root => Array.from(root.querySelectorAll('.cu-live line.cu-line'))
    .filter(line => line.style.display !== 'none').length"""
NUMBERS = """(root, side) => Array.from(root.querySelectorAll(`.cu-live text.cu-num[data-side='${side}']`))
    .map(t => t.textContent)"""


# WCAG's contrast ratio of each label of the views against the colour behind it (4.5: readable text)
CONTRASTS = """root => {
    const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => [r, g, b].map(c => c / 255)
        .map(c => c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4)
        .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
    const behind = node => {
        for (let e = node; e; e = e.parentElement) {
            const c = rgb(getComputedStyle(e).backgroundColor);
            if (c.length >= 3 && (c.length === 3 || c[3] > 0)) return c.slice(0, 3);
        }
        return [255, 255, 255];
    };
    const labels = root.querySelectorAll('.cu-grid td, .cu-controls, .cu-hover, text.cu-tok');
    return Array.from(labels).filter(e => e.textContent.trim()).map(e => {
        const style = getComputedStyle(e);
        const ink = rgb(e instanceof SVGElement ? style.fill : style.color).slice(0, 3);
        const [a, b] = [lum(ink), lum(behind(e))].sort((x, y) => y - x);
        return [e.textContent.trim(), Math.round(100 * (a + 0.05) / (b + 0.05)) / 100];
    });
}"""


def test_lesson_04_runs_in_jupyterlab_and_its_views_react(browser, jupyterlab):
    base, token, root = jupyterlab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")) else problems.append(f"network request to {r.url}"))  # fmt: skip

    page.goto(f"{base}/lab/tree/{LESSON}?token={token}&reset", wait_until="domcontentloaded")
    code_cells = len([c for c in nbformat.read(root / LESSON, as_version=4).cells if c.cell_type == "code"])
    try:
        page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=60_000)
        status = page.evaluate(KERNEL_READY)
        assert status == "idle", f"the kernel is {status}"
        # no "notified about official Jupyter news?" prompt over the outputs (the course's settings)
        page.wait_for_timeout(3000)
        news = page.locator(".jp-toast-message, .Toastify__toast").all_inner_texts()
        assert not [t for t in news if "news" in t.lower()], f"JupyterLab asks about news: {news}"
        # as committed, the notebook is not trusted here: its scripts do not run and the
        # static picture inside each interactive output is what the learner sees
        stored = page.evaluate(STORED_VIEWS)
        assert stored == [{"ready": False, "picture": True}] * 2, f"stored interactive outputs: {stored}"
        # the copied notebook shows its stored outputs: clear them, so what we check is this run's
        page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        page.wait_for_function("document.querySelectorAll('.cu-attn').length === 0")
        # Run > Run All Cells, through JupyterLab's command (what the menu item calls)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        # done when every code cell shows an execution count and the two views are initialised
        page.wait_for_function(ALL_RAN.replace("CODE_CELLS", str(code_cells)), timeout=120_000)
    except Exception as error:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "lesson04_failure.png"), full_page=True)
        prompts = page.eval_on_selector_all(".jp-CodeCell .jp-InputArea-prompt", "ns => ns.map(n => n.textContent)")
        raise AssertionError(
            f"lesson 04 did not run in JupyterLab; prompts {prompts}; see artifacts/lesson04_failure.png"
        ) from error

    # no error output (stderr warnings are allowed; tracebacks are not)
    errors = page.eval_on_selector_all(
        ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
        "nodes => nodes.map(n => n.textContent).filter(t => /Traceback|Error:/.test(t))",
    )
    assert errors == [], f"error output in the browser: {errors[:1]}"

    # the interactive views: their inline scripts ran (outputs made in the session are trusted)
    views = page.locator(".cu-attn[data-cu-ready='1']")
    assert views.count() == 2, "expected the head view and the model view to be initialised by their scripts"
    head_view = views.nth(0)
    assert head_view.locator(".cu-fallback").is_hidden(), "the static fallback should give way to the live view"
    head_view.scroll_into_view_if_needed()
    all_lines = head_view.evaluate(VISIBLE_LINES)
    assert all_lines > 20, f"the head view drew {all_lines} lines"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "lesson04_head_view.png"))

    # hover the query "cat": only its lines stay visible
    head_view.locator("text.cu-tok[data-side='q'][data-i='2']").hover()
    cat_lines = head_view.evaluate(VISIBLE_LINES)
    expected = head_view.evaluate("root => root.querySelectorAll(\".cu-live line.cu-line[data-q='2']\").length")
    assert 0 < cat_lines == expected < all_lines
    head_view.screenshot(path=str(ARTIFACTS / "lesson04_head_view_hover.png"))

    # click head 0's colour box: its lines disappear, the others stay
    page.mouse.move(0, 0)
    head_view.locator(".cu-head[data-head='0']").click()
    assert head_view.evaluate("root => root.querySelectorAll(\".cu-live line.cu-line[data-head='0']\").length") == 0
    assert 0 < head_view.evaluate(VISIBLE_LINES) < all_lines

    # double-click head 1: only its lines, no text selected; hovering a key writes the weight each query gives it
    head_view.locator(".cu-head[data-head='1']").dblclick()
    assert page.evaluate("() => window.getSelection().toString()") == ""
    head_view.locator("text.cu-tok[data-side='k'][data-i='2']").hover()
    weights = head_view.evaluate(NUMBERS, "q")
    assert len(weights) > 0 and all(re.fullmatch(r"\d\.\d\d", x) for x in weights), weights
    page.mouse.move(0, 0)

    # the model view: clicking a square opens that head's lines below the table
    model_view = views.nth(1)
    model_view.scroll_into_view_if_needed()
    thumbs = model_view.locator("canvas.cu-thumb")
    assert thumbs.count() == 8  # 2 layers x 4 heads
    assert model_view.locator(".cu-colorbar").count() == 1
    thumbs.nth(6).hover()  # layer 1, head 2: the label names the query and key under the mouse
    assert re.fullmatch(
        r"layer 1, head 2: query “.+” → key “.+” = \d\.\d{3}", model_view.locator(".cu-hover").inner_text()
    )
    thumbs.nth(6).click()
    assert "layer 1, head 2" in model_view.locator(".cu-detail").inner_text()
    assert model_view.locator(".cu-detail line.cu-line").count() > 0
    model_view.screenshot(path=str(ARTIFACTS / "lesson04_model_view.png"))

    # JupyterLab's dark theme: every label of both views still readable (the views draw their own colours)
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
    page.wait_for_timeout(500)
    for view in (head_view, model_view):
        contrasts = view.evaluate(CONTRASTS)
        assert contrasts and all(ratio >= 4.5 for _, ratio in contrasts), f"unreadable in the dark theme: {contrasts}"
    labels = [text for text, _ in model_view.evaluate(CONTRASTS)]
    assert "layer 0" in labels and "head 0" in labels, labels
    model_view.screenshot(path=str(ARTIFACTS / "lesson04_model_view_dark.png"))
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")

    # what the kernel produced, as JupyterLab saves it: every cell ran once, in order, without errors
    page.keyboard.press("Control+s")
    page.wait_for_function("!document.querySelector('.jp-mod-dirty')", timeout=10_000)
    saved = nbformat.read(root / LESSON, as_version=4)
    cells = [c for c in saved.cells if c.cell_type == "code"]
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert problems == [], problems
    page.close()


# ---------------------------------------------------------------- the views on their own, in a saved page

ASYMMETRIC = [  # 3 queries x 4 keys; rows sum to 1
    [0.10, 0.20, 0.30, 0.40],
    [0.70, 0.10, 0.10, 0.10],
    [0.00, 0.05, 0.90, 0.05],
]
QUERIES, KEYS = ["la", "voiture", "bleue"], ["the", "blue", "car", "."]
LINES = """root => Array.from(root.querySelectorAll('.cu-live line.cu-line'))
    .filter(line => line.style.display !== 'none')
    .map(line => [+line.dataset.q, +line.dataset.k, +line.dataset.head, +line.getAttribute('stroke-opacity')])"""


def _open_saved(browser, view, path):
    view.save_html(path)
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    problems = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else problems.append(r.url))
    page.goto(path.as_uri())
    root = page.locator(".cu-attn[data-cu-ready='1']")
    assert root.count() == 1, f"the view's script did not run: {problems}"
    return page, root, problems


def test_saved_head_view_draws_query_i_to_key_j_and_shows_weights_on_hover(browser, tmp_path):
    from course_utils import viz

    w = [[ASYMMETRIC, ASYMMETRIC[::-1]]]  # [layers, heads, q, k]; head 1: the rows in another order
    page, root, problems = _open_saved(browser, viz.head_view(w, (QUERIES, KEYS), heads=[0]), tmp_path / "head.html")
    lines = root.evaluate(LINES)
    expected = [[i, j, 0, ASYMMETRIC[i][j]] for i in range(3) for j in range(4) if ASYMMETRIC[i][j] >= 0.01]
    assert sorted(lines) == expected  # the script reads the weights as query i -> key j, not transposed

    # hovering the query "voiture" keeps its lines and writes its weights next to the keys
    root.locator("text.cu-tok[data-side='q'][data-i='1']").hover()
    assert sorted((q, k) for q, k, _, _ in root.evaluate(LINES)) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert root.evaluate(NUMBERS, "k") == ["0.70", "0.10", "0.10", "0.10"]
    # hovering the key "car" writes the weight each query gives it next to the queries
    root.locator("text.cu-tok[data-side='k'][data-i='2']").hover()
    assert sorted((q, k) for q, k, _, _ in root.evaluate(LINES)) == [(0, 2), (1, 2), (2, 2)]
    assert root.evaluate(NUMBERS, "q") == ["0.30", "0.10", "0.90"]
    assert root.evaluate(NUMBERS, "k") == ["", "", "", ""]

    # double-clicking a head's box selects no text
    assert root.locator(".cu-controls").evaluate("e => getComputedStyle(e).userSelect") == "none"
    root.locator(".cu-head[data-head='0']").dblclick()
    assert page.evaluate("() => window.getSelection().toString()") == ""
    assert problems == [], problems
    page.close()


def test_saved_model_view_has_a_colour_bar_and_names_the_cell_under_the_mouse(browser, tmp_path):
    from course_utils import viz

    w = [[ASYMMETRIC, ASYMMETRIC[::-1]]]
    page, root, problems = _open_saved(browser, viz.model_view(w, (QUERIES, KEYS)), tmp_path / "model.html")
    bar = root.locator(".cu-colorbar")
    assert bar.count() == 1 and bar.get_attribute("data-vmax") == "0.900"  # 0 .. the largest weight shown
    assert "linear-gradient" in bar.inner_html()
    thumb = root.locator("canvas.cu-thumb[data-layer='0'][data-head='1']")
    box = thumb.bounding_box()
    # head 1's row 0 is ASYMMETRIC's row 2; the cell of query "la" (row 0) and key "car" (column 2)
    page.mouse.move(box["x"] + box["width"] * 2.5 / 4, box["y"] + box["height"] * 0.5 / 3)
    assert (
        root.locator(".cu-hover").inner_text()
        == "layer 0, head 1: query \u201cla\u201d \u2192 key \u201ccar\u201d = 0.900"
    )
    page.mouse.move(box["x"] + box["width"] * 0.5 / 4, box["y"] + box["height"] * 1.5 / 3)
    assert (
        root.locator(".cu-hover").inner_text().endswith("query \u201cvoiture\u201d \u2192 key \u201cthe\u201d = 0.700")
    )
    assert problems == [], problems
    page.close()


def test_the_static_picture_says_it_is_static_and_how_to_get_the_live_view(browser, tmp_path):
    from course_utils import viz

    view = viz.model_view([[ASYMMETRIC, ASYMMETRIC[::-1]]], (QUERIES, KEYS))
    view.save_html(tmp_path / "model.html")
    # where scripts do not run (a notebook opened from disk, not yet run): the picture and its caption
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto((tmp_path / "model.html").as_uri())
    caption = page.locator(".cu-attn .cu-static")
    assert page.locator(".cu-attn img.cu-fallback").is_visible() and caption.is_visible()
    assert "static picture" in caption.inner_text() and "run this cell" in caption.inner_text()
    context.close()
    # where the script runs, the live view replaces both
    page, root, problems = _open_saved(browser, view, tmp_path / "model.html")
    assert root.locator(".cu-static").is_hidden() and root.locator(".cu-fallback").is_hidden()
    assert problems == [], problems
    page.close()
