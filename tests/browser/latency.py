"""Widget latency in the browser: from a user's change to the last update it causes on the page.

:func:`measure` installs, in the page, capture listeners for the user's input (``input``, ``change``, ``keydown``,
``click``: the first one after the install is t0) and a ``MutationObserver`` on the current notebook's cell outputs (JupyterLab's own
chrome, cell focus classes and scrolling, is not counted), then
runs the Python ``action`` (a Playwright click, key press or ``select_option``), and waits until the kernel is idle
and nothing on the notebook changed for :data:`QUIET_MS`. It returns, in milliseconds after t0:

``view``
    the last mutation outside the memory view's debounced whole-mesh table, its title and its best-ranked
    pick (:data:`DEBOUNCED`: recomputed a quarter second after the controls stop moving, by design): when every view that follows the
    change (planner, memory bars, time bars, RL phases, export text, the curves' image) shows its new state;
``table``
    the last mutation inside those, or ``None`` when the change did not touch them;
``mutations``
    how many mutations the change caused (0 means nothing on the page answered it);
``where``
    the ``mlite-`` classes of the element the last ``view`` mutation was in (which view answered last).

Timestamps are the page's ``performance.now()``: the kernel round trip (comm message, Python handler, state
back, re-render) is inside, Playwright's polling is not. ``QUIET_MS`` only decides when to stop waiting; it is not
part of the figure.
"""

from __future__ import annotations

QUIET_MS = 700
"""Nothing changed on the notebook for this long (and the kernel is idle): the change is over."""
DEBOUNCED = ".mlite-memory-table, .mlite-memory-table-title, .mlite-memory-cheapest"
"""Views updated on a timer after the controls stop moving; their time is reported apart (``table``)."""

_INSTALL = """(debounced) => {
  const w = window.jupyterapp.shell.currentWidget;
  const st = {t0: null, view: null, table: null, n: 0, last: performance.now(), where: null};
  const mark = (e) => { if (st.t0 === null) st.t0 = performance.now(); };
  for (const ev of ['input', 'change', 'keydown', 'click']) document.addEventListener(ev, mark, true);
  const obs = new MutationObserver((records) => {
    const now = performance.now();
    if (st.t0 === null) return;
    for (const r of records) {
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      if (!el || !el.closest('.jp-OutputArea-output')) continue;  // JupyterLab's own chrome: focus, scrolling
      if (el && el.closest(debounced)) { st.table = now; continue; }
      st.view = now;
      const owner = el && el.closest('[class*="mlite-"]');
      st.where = owner ? [...owner.classList].filter((c) => c.startsWith('mlite-')).join(' ')
                        : (el ? `${el.tagName.toLowerCase()}.${[...el.classList].join('.')} ${r.type} ${r.attributeName || ''}` : null);
      st.n += 1;
    }
    st.last = now;
  });
  obs.observe(w.content.node, {subtree: true, childList: true, characterData: true, attributes: true});
  st.stop = () => { obs.disconnect(); for (const ev of ['input', 'change', 'keydown', 'click'])
                    document.removeEventListener(ev, mark, true); };
  window.__mliteLatency = st;
}"""

_DONE = """(quiet) => {
  const st = window.__mliteLatency;
  if (!st || st.t0 === null) return false;
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  if (!k || k.status !== 'idle') { st.last = performance.now(); return false; }
  return performance.now() - st.last > quiet;
}"""

_READ = """() => {
  const st = window.__mliteLatency; st.stop(); window.__mliteLatency = null;
  return {view: st.view === null ? null : st.view - st.t0, table: st.table === null ? null : st.table - st.t0,
          mutations: st.n, where: st.where};
}"""


def measure(page, action, timeout_ms: int = 120_000) -> dict:
    """``{"view": ms, "table": ms | None, "mutations": n, "where": classes}`` of one change made by ``action()`` (see the module)."""
    page.evaluate(_INSTALL, DEBOUNCED)
    action()
    page.wait_for_function(_DONE, arg=QUIET_MS, timeout=timeout_ms, polling=50)
    return page.evaluate(_READ)
