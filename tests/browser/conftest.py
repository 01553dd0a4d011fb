"""Real-browser harness: one JupyterLab server per test session, driven by Debian Chromium through Playwright.

Fixtures (use them from any ``tests/browser/test_*.py``; every test in this folder is marked ``browser`` here):

``lab`` (session)
    A :class:`Lab`: ``.venv/bin/jupyter lab`` on 127.0.0.1, a free port, a random token, serving a COPY of
    ``notebooks/`` in a temporary folder (the browser autosaves; the repository's notebooks are never touched),
    with ``--LabApp.expose_app_in_browser=True`` so tests reach ``window.jupyterapp`` (its command registry).
    Its Jupyter config, runtime, settings and workspace folders are temporary too (no user settings leak in;
    news and update checks are off). Attributes: ``url``, ``token``, ``root`` (the copied notebooks folder),
    ``log`` (the server log file). Torn down at the end: kernels shut down through the REST API, then the
    server's process group is terminated (killed if it lingers).
``browser_context`` (session)
    A Playwright persistent context of ``/usr/bin/chromium`` (headless, fresh user-data folder, 1400x1000).
    A missing chromium FAILS the run with a message pointing at ``make setup`` (no skip).
``page`` (function)
    A new tab, logged in to ``lab`` and waiting until JupyterLab has started and restored its layout.
    On teardown the tab closes and every kernel is shut down, so tests do not share kernels.

Helpers (``tests/browser`` is a package, so its conftest never shadows ``tests/conftest.py``; import them with
``from .conftest import open_notebook, run_all_cells, wait_kernel_idle, cell_errors, shot``):

``open_notebook(page, name)``
    Open ``name`` (relative to the copied ``notebooks/``) in the notebook editor; returns once its kernel is
    ready and idle.
``run_all_cells(page)``
    Run every cell of the current notebook (``notebook:run-all-cells``), wait for the kernel to go idle and
    for no cell to show ``[*]``; fails with the cells' error outputs if any cell raised.
``wait_kernel_idle(page)``
    Wait until the current notebook's kernel is idle and no cell is queued or running.
``cell_errors(page)``
    ``[(cell_index, "ename: evalue"), ...]`` of the current notebook's error outputs.
``shot(page, name, locator=None)``
    Save ``artifacts/screenshots/<name>.png`` (the whole page, or one element) and return its path.

Selectors: widget views carry CSS classes ``mlite-...`` (see the ``widgets`` modules); find them with
``page.locator(".mlite-model-total")`` and Playwright's auto-waiting ``expect(...)``, never with sleeps.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
CHROMIUM = "/usr/bin/chromium"
PNG_DIGEST = """async (img) => {
  const src = img.src;  // read once: the poller may swap the image while this runs
  const buf = new Uint8Array(await (await fetch(src)).arrayBuffer());
  let h = 2166136261;
  for (let i = 0; i < buf.length; i++) { h ^= buf[i]; h = Math.imul(h, 16777619) >>> 0; }
  const png = buf.length > 8 && buf[1] === 0x50 && buf[2] === 0x4e && buf[3] === 0x47;
  return `${png}:${buf.length}:${h} ${src}`;
}"""
"""``locator.evaluate(PNG_DIGEST)`` on an ``<img>``: ``"<is png>:<bytes>:<FNV-1a hash> <src>"`` of what the browser
shows, with the ``src`` it fetched (so a caller can wait for a *different* image than the one it hashed)."""


def png_digest(img) -> tuple[str, str]:
    """``(digest, src)`` of the image an ``<img>`` locator shows, read in one step (see :data:`PNG_DIGEST`)."""
    digest, _, src = img.evaluate(PNG_DIGEST).partition(" ")
    return digest, src


VIEWPORT = {"width": 1400, "height": 1000}
"""The browser window of every test."""
SCREENSHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_TIMEOUT_S = 180
"""JupyterLab start-up on a busy 2-core machine."""
OPEN_TIMEOUT_MS = 180_000
"""Opening a notebook: loading it and starting its kernel."""
RUN_TIMEOUT_MS = 420_000
"""Running every cell of a notebook."""
UI_TIMEOUT_MS = 60_000
"""Default for Playwright actions and ``expect`` (widgets re-render after a kernel round trip)."""


# ---------------------------------------------------------------------------------------------- server
@dataclass
class Lab:
    """A running JupyterLab server (see the module docstring)."""

    url: str
    token: str
    root: Path
    log: Path
    proc: subprocess.Popen

    def api(self, method: str, path: str):
        req = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        for k in self.api("GET", "/api/kernels") or []:
            try:
                self.api("DELETE", f"/api/kernels/{k['id']}")
            except Exception:  # noqa: BLE001 - already gone
                pass

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no server log)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_lab_settings(settings_dir: Path) -> None:
    """No news prompt, no update check: nothing pops over the notebook. Every cell stays rendered (JupyterLab's
    default ``contentVisibility`` windowing stops rendering off-screen cells, so their text would read empty)."""
    f = settings_dir / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    nb = settings_dir / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    nb.parent.mkdir(parents=True, exist_ok=True)
    nb.write_text(json.dumps({"windowingMode": "none"}))


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Lab:
    jupyter = VENV_BIN / "jupyter"
    if not jupyter.exists():
        pytest.fail(f"{jupyter} is missing: run `make setup` (it creates .venv with JupyterLab)", pytrace=False)
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    shutil.copytree(REPO / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for d in ("config", "runtime", "settings", "workspaces"):
        (base / d).mkdir()
    _write_lab_settings(base / "settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONWARNINGS="ignore",
        MPLBACKEND="Agg",
    )
    env.pop("JUPYTER_PLATFORM_DIRS", None)
    cmd = [
        str(jupyter),
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.user_settings_dir={base / 'settings'}",
        f"--LabApp.workspaces_dir={base / 'workspaces'}",
        # the venv's python runs the kernel even where `make kernel` was not run
        "--KernelSpecManager.ensure_native_kernel=True",
        "--LabApp.extension_manager=readonly",
    ]
    if os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    log = base / "jupyter.log"
    with open(log, "w") as logf:
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = Lab(url=f"http://127.0.0.1:{port}", token=token, root=root, log=log, proc=proc)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"jupyter lab exited with {proc.returncode} during start-up:\n{server.log_tail()}", pytrace=False
                )
            try:
                server.api("GET", "/api/status")
                break
            except Exception:  # noqa: BLE001 - the server is not up yet (connection refused, 5xx)
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"jupyter lab did not answer within {START_TIMEOUT_S}s:\n{server.log_tail()}", pytrace=False
                    )
                time.sleep(0.5)
        yield server
    finally:
        try:
            if proc.poll() is None:
                server.shutdown_kernels()
        except Exception:  # noqa: BLE001 - best-effort cleanup; the process group is stopped next
            pass
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


# ---------------------------------------------------------------------------------------------- browser
@pytest.fixture(scope="session")
def browser_context(tmp_path_factory):
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"{CHROMIUM} not found: the browser tests drive Debian's Chromium; `make setup` installs it "
            "(apt-get install chromium)",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright (python) is not installed: run `make setup`", pytrace=False)
    pw = sync_playwright().start()
    try:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )
    except Exception as e:  # noqa: BLE001 - any launch failure is reported as one test failure
        pw.stop()
        pytest.fail(f"could not launch {CHROMIUM} through Playwright: {e}", pytrace=False)
    ctx.set_default_timeout(UI_TIMEOUT_MS)
    try:
        yield ctx
    finally:
        ctx.close()
        pw.stop()


@pytest.fixture
def page(browser_context, lab):
    from playwright.sync_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    pg = browser_context.new_page()
    pg.goto(f"{lab.url}/lab?token={lab.token}", timeout=OPEN_TIMEOUT_MS)
    pg.wait_for_function("() => window.jupyterapp !== undefined", timeout=OPEN_TIMEOUT_MS)
    pg.evaluate("async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }")
    try:
        yield pg
    finally:
        pg.close()
        try:
            lab.shutdown_kernels()
        except Exception:  # noqa: BLE001 - best-effort cleanup at teardown
            pass


# ---------------------------------------------------------------------------------------------- helpers
_CURRENT = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return (w && w.content && w.sessionContext) ? w : null;
}"""

_IDLE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.sessionContext) return false;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  if (!k || k.status !== 'idle') return false;
  const cells = w.content.model ? w.content.model.cells : null;  // the model: cells off screen count too
  if (cells) for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type === 'code' && c.executionState === 'running') return false;
  }
  for (const p of w.node.querySelectorAll('.jp-InputPrompt')) { if (p.textContent.includes('*')) return false; }
  return true;
}"""


def open_notebook(page, name: str) -> None:
    """Open ``name`` in the notebook editor and wait until its kernel is ready and idle."""
    page.evaluate(
        """async (name) => {
      const app = window.jupyterapp;
      const w = await app.commands.execute('docmanager:open', {path: name, factory: 'Notebook'});
      await w.context.ready;
      await w.sessionContext.ready;
      app.shell.activateById(w.id);
      await w.revealed;
    }""",
        name,
    )
    page.wait_for_function(
        """(name) => { const w = window.jupyterapp.shell.currentWidget;
                       return w && w.context && w.context.path === name; }""",
        arg=name,
        timeout=OPEN_TIMEOUT_MS,
    )
    wait_kernel_idle(page, timeout_ms=OPEN_TIMEOUT_MS)


def wait_kernel_idle(page, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """Wait until the current notebook's kernel is idle and no cell shows ``[*]``."""
    page.wait_for_function(_IDLE, timeout=timeout_ms, polling=250)


def cell_errors(page) -> list[tuple[int, str]]:
    """Error outputs of the current notebook: ``[(cell_index, "ename: evalue"), ...]``."""
    return [
        tuple(e)
        for e in page.evaluate("""() => {
      const w = window.jupyterapp.shell.currentWidget; const out = [];
      const cells = w.content.model.cells;
      for (let i = 0; i < cells.length; i++) {
        const c = cells.get(i);
        if (c.type !== 'code') continue;
        for (let j = 0; j < c.outputs.length; j++) {
          const o = c.outputs.get(j).toJSON();
          if (o.output_type === 'error') out.push([i, `${o.ename}: ${o.evalue}`]);
        }
      }
      return out;
    }""")
    ]


def run_all_cells(page) -> None:
    """Run every cell of the current notebook; fail with the error outputs if a cell raised."""
    page.evaluate(
        f"async () => {{ const w = ({_CURRENT})(); if (!w) throw new Error('no notebook is open'); "
        "await window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
    )
    wait_kernel_idle(page)
    errors = cell_errors(page)
    if errors:
        pytest.fail(f"cells raised in the browser: {errors}", pytrace=False)


def shot(page, name: str, locator=None) -> Path:
    """Save ``artifacts/screenshots/<name>.png`` (whole page, or just ``locator``) and return the path. For an
    element the window first grows to its height (JupyterLab scrolls the notebook inside the page, so an element
    taller than the window would be cut at the window's edge), and is put back after."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if locator is None:
        page.screenshot(path=str(path))
        return path
    height = locator.evaluate("e => e.getBoundingClientRect().height")
    page.set_viewport_size(
        {"width": VIEWPORT["width"], "height": int(min(max(VIEWPORT["height"], height + 240), 4000))}
    )
    try:
        locator.scroll_into_view_if_needed()
        locator.screenshot(path=str(path))
    finally:
        page.set_viewport_size(VIEWPORT)
    return path


def pytest_collection_modifyitems(config, items):
    """Every test under tests/browser is a browser test, marked or not (``-m "not browser"`` skips them all)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.browser)
