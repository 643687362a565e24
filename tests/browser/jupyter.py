"""Drive JupyterLab in a Chromium (browser/chromium.py finds it) the way a learner does: open a
notebook, run all, use its controls. The server runs on 127.0.0.1 with a free port, a token and
a temporary home folder."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
# A lesson's run-all takes about a minute at CI size on a quiet machine; with both cores busy
# (two test workers, each with its kernel and the browser) it has taken ten.
RUN_ALL_LIMIT_MS = 1_200_000
# A run-all that started makes the kernel busy within a second or two, even with both cores busy.
RUN_START_LIMIT_MS = 30_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env(home: Path) -> dict:
    env = dict(os.environ)
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
               JUPYTER_DATA_DIR=str(home / "jupyter-data"),
               JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"), IPYTHONDIR=str(home / "ipython"),
               MPLCONFIGDIR=str(home / "matplotlib"), HF_HUB_OFFLINE="1")
    # The course model lives in the developer's cache; a learner's fresh home would fetch it again.
    from minillm.files import cache_dir

    env["MINILLM_CACHE"] = str(cache_dir())
    env.pop("MPLBACKEND", None)
    # No "get notified about Jupyter news?" toast over the controls, and no request for the news.
    settings = home / "lab-settings" / "@jupyterlab"
    (settings / "apputils-extension").mkdir(parents=True, exist_ok=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false"}')
    # The tests run the course's own notebooks: never save their outputs into the repository.
    (settings / "docmanager-extension").mkdir(parents=True, exist_ok=True)
    (settings / "docmanager-extension" / "plugin.jupyterlab-settings").write_text(
        '{"autosave": false}')
    # Every cell in the page, also those scrolled far away, so tests can find any widget.
    (settings / "notebook-extension").mkdir(parents=True, exist_ok=True)
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}')
    env["JUPYTERLAB_SETTINGS_DIR"] = str(home / "lab-settings")
    return env


def server_args(port: int, token: str) -> list[str]:
    return ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
            "--LabApp.expose_app_in_browser=True", "--ServerApp.disable_check_xsrf=True"]


def wait_until_up(base: str, token: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited early with status {process.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer at {base} within {timeout:.0f} s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def plain_lab(args: list[str]) -> list[str]:
    root = ["--allow-root"] if os.geteuid() == 0 else []
    return [sys.executable, "-m", "jupyter", "lab", *root, *args]


@contextmanager
def jupyterlab(home: Path, build_command=plain_lab):
    """Start JupyterLab with `build_command(server_args)` and yield (base_url, token); the server
    is stopped afterwards, also when the test fails."""
    port, token = free_port(), secrets.token_hex(16)
    log = open(home / "jupyter.log", "w")
    process = subprocess.Popen(build_command(server_args(port, token)), cwd=ROOT,
                               env=isolated_env(home), stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_up(base, token, process)
        yield base, token
    finally:
        stop(process)
        log.close()


def api(base: str, token: str, path: str) -> dict:
    with urllib.request.urlopen(f"{base}{path}?token={token}", timeout=30) as r:
        return json.loads(r.read())


def shutdown_kernels(base: str, token: str) -> None:
    """Stop every kernel the server runs, so notebooks opened one after another do not pile up."""
    for kernel in api(base, token, "/api/kernels"):
        request = urllib.request.Request(f"{base}/api/kernels/{kernel['id']}?token={token}",
                                         method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


# --- the page side -------------------------------------------------------------------------------

KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}"""

# The kernel has answered every request the page sent it: each shell message the page sent (a
# cell, a widget's comm message) has had its idle status back, and the kernel connection has
# handled what came (its status reads idle only after that). Idle alone is not enough: a change
# the page has sent but the kernel has not yet received leaves it idle. The connection reports
# every message it sends or receives (`anyMessage`); the requests still unanswered are kept on
# the kernel object from the first call on (that call says 'not watched' yet), and forgotten
# when the kernel restarts or dies, which drops them.
KERNEL_ANSWERED = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  if (!k) return 'no kernel';
  if (!k.minillmUnanswered) {
    const unanswered = k.minillmUnanswered = new Map();
    k.anyMessage.connect((_, {msg, direction}) => {
      if (direction === 'send' && msg.channel === 'shell')
        unanswered.set(msg.header.msg_id, msg.header.msg_type);
      else if (direction === 'recv' && msg.header.msg_type === 'status'
               && msg.content.execution_state === 'idle' && msg.parent_header)
        unanswered.delete(msg.parent_header.msg_id);
    });
    k.statusChanged.connect((_, status) => {
      if (['restarting', 'autorestarting', 'dead'].includes(status)) unanswered.clear();
    });
    return 'not watched';
  }
  const waiting = [...k.minillmUnanswered.values()];
  if (waiting.length) return `${k.status}, ${waiting.length} unanswered (${waiting.join(', ')})`;
  return k.status === 'idle' ? 'answered' : k.status;
}"""
# How long the kernel stays answered before a change counts as finished: long enough for the
# page to send what an answer sets off (a widget's own reply to an update).
SETTLED_S = 0.3

# Run-all has ended: every code cell ran, or a cell raised (JupyterLab skips the cells after it),
# or the kernel died or restarted (the cells after it never run). Anything else is still going.
RUN_STATE = """() => {
  const w = window.jupyterapp.shell.currentWidget, ctx = w.sessionContext;
  const kernel = ctx.session && ctx.session.kernel;
  if (ctx.minillmTrouble) return 'the kernel was ' + ctx.minillmTrouble;
  if (!kernel || kernel.status !== 'idle') return false;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  if (cells.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'))) return 'error';
  return cells.every(c => c.model.executionCount !== null) ? 'ran' : false;
}"""

# A run has started: the kernel left idle, a cell has run, or the kernel is in trouble.
RUN_STARTED = """() => {
  const w = window.jupyterapp.shell.currentWidget, ctx = w.sessionContext;
  const kernel = ctx.session && ctx.session.kernel;
  if (ctx.minillmTrouble || !kernel || kernel.status !== 'idle') return true;
  return w.content.widgets.some(c => c.model.type === 'code' && c.model.executionCount !== null);
}"""

# The notebook on show is ready for commands: its file loaded, every cell drawn, one active.
NOTEBOOK_READY = """() => {
  const w = window.jupyterapp.shell.currentWidget, notebook = w && w.content;
  return !!(notebook && notebook.model && w.context && w.context.isReady && notebook.activeCell
            && notebook.widgets.length === notebook.model.cells.length);
}"""

# Kernel trouble is remembered from the moment the notebook opened: a restart is over in a second.
WATCH_KERNEL = """() => {
  const ctx = window.jupyterapp.shell.currentWidget.sessionContext;
  if (ctx.minillmWatched) return;
  ctx.minillmWatched = true;
  ctx.statusChanged.connect((_, status) => {
    if (['restarting', 'autorestarting', 'dead'].includes(status)) ctx.minillmTrouble = status;
  });
}"""

# Where a run stands: the first code cell that has not run, and the kernel's status.
PROGRESS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  const waiting = cells.findIndex(c => c.model.executionCount === null);
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  return {cells: cells.length, ran: cells.filter(c => c.model.executionCount !== null).length,
          waiting: waiting < 0 ? null : cells[waiting].model.sharedModel.getSource().slice(0, 300),
          kernel: kernel ? kernel.status : 'none'};
}"""

ERROR_OUTPUTS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const errors = [];
  w.content.widgets.forEach((c, i) => {
    if (c.model.type !== 'code') return;
    for (const o of c.model.outputs.toJSON()) {
      if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
    }
  });
  return errors;
}"""


def open_notebook(page, base: str, token: str, path: str, timeout_ms: int = 120_000) -> None:
    page.goto(f"{base}/lab/tree/{path}?token={token}")
    page.wait_for_function("() => !!window.jupyterapp", timeout=timeout_ms)
    page.wait_for_function(KERNEL_IDLE, timeout=timeout_ms)
    page.wait_for_function(NOTEBOOK_READY, timeout=timeout_ms)
    page.evaluate(WATCH_KERNEL)
    page.evaluate(KERNEL_ANSWERED)  # from now on, the requests the page sends are followed


def run_all(page, timeout_ms: int = RUN_ALL_LIMIT_MS, tries: int = 3) -> None:
    """Run every cell and wait for the end. JupyterLab's run-all does nothing, and says nothing,
    while the notebook has no active cell yet; so the command is given again when no cell has
    started after RUN_START_LIMIT_MS (a run that started makes the kernel busy or numbers a
    cell, and is never started twice)."""
    for _ in range(tries):
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        try:
            page.wait_for_function(RUN_STARTED, timeout=RUN_START_LIMIT_MS, polling=200)
            break
        except PlaywrightTimeout:
            continue
    else:
        raise AssertionError(f"run-all started no cell in {tries} tries of "
                             f"{RUN_START_LIMIT_MS / 1000:.0f} s: {page.evaluate(PROGRESS)}")
    wait_until_ran(page, timeout_ms)


def run_new_cell(page, code: str) -> None:
    """Add a code cell at the end of the notebook on show and run it, as a learner who types a
    cell of their own (the tests never save the notebook)."""
    page.evaluate("""async code => {
      const app = window.jupyterapp, notebook = app.shell.currentWidget.content;
      notebook.activeCellIndex = notebook.widgets.length - 1;
      await app.commands.execute('notebook:insert-cell-below');
      notebook.activeCell.model.sharedModel.setSource(code);
      await app.commands.execute('notebook:run-cell');
    }""", code)
    wait_until_ran(page, RUN_ALL_LIMIT_MS)


def wait_until_ran(page, timeout_ms: int) -> None:
    """Return when every code cell has run; fail as soon as a cell raises or the kernel dies,
    saying where, and on a timeout say which cell it was still waiting for."""
    try:
        state = page.wait_for_function(RUN_STATE, timeout=timeout_ms, polling=1000).json_value()
    except PlaywrightTimeout:
        raise AssertionError(f"the notebook had not run after {timeout_ms / 1000:.0f} s: "
                             f"{page.evaluate(PROGRESS)}") from None
    if state == "error":
        raise AssertionError(f"a cell raised: {error_outputs(page)}")
    if state != "ran":
        raise AssertionError(f"{state} before every cell ran: {page.evaluate(PROGRESS)}")


def error_outputs(page) -> list[str]:
    return page.evaluate(ERROR_OUTPUTS)


def current_notebook(page):
    """The notebook on show: JupyterLab keeps the tabs of notebooks opened before, hidden."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first


def settle(page, timeout_s: float) -> None:
    """Wait until the kernel has answered everything the page sent it and stayed so for
    SETTLED_S: whatever a control's change set off (an observer, a button's callback, a message
    ipywidgets held back while another was in flight) has finished and reached the page."""
    settled_since, deadline, state = None, time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        page.wait_for_timeout(50)
        state = page.evaluate(KERNEL_ANSWERED)
        if state != "answered":
            settled_since = None
        elif settled_since is None:
            settled_since = time.monotonic()
        elif time.monotonic() - settled_since >= SETTLED_S:
            return
    raise AssertionError(f"the kernel had not answered the page after {timeout_s:.0f} s: {state}")


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    return path


def element_screenshot(locator, name: str) -> Path:
    """A picture of one element (a widget with its chart), scrolled into view."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(path))
    return path
