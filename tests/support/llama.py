"""Start and stop a REAL llama-server for tests and for scripts/record.py.

`ensure_built()` runs scripts/build_llama_server.sh (idempotent, cached per machine under
~/.cache/boxmaker) and returns the binary, the model and llama.cpp's template folder.
`LlamaServer` runs one server on 127.0.0.1 on a free port, in one of two modes:

- "single": `-m <gguf> --alias <model id>`; the model is loaded when /health answers 200;
- "router": `--models-dir <dir>` (the model file linked into a temporary folder) and no `-m`; the
  router answers at once, the model is `unloaded` until the first request for it (or `load()`).

Either way `.model_id` is the id that `/models` (router) or `/v1/models` (single) lists, the same
string in both modes. The server's output goes to `<workdir>/llama-server.log`; a failure to start
raises with the tail of that log, and leaving the `with` block on an exception prints the tail.

    with LlamaServer(mode="router", slots=2) as srv:
        rawhttp.call(srv.host, srv.port, "GET", srv.path("/slots"))
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from boxmaker.verify.stack import free_port
from tests.support import model_group, rawhttp

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build_llama_server.sh"
TEMPLATES = REPO / "conf" / "templates"
# ChatML with tools as one <tool_call>[...]</tool_call> section, and <think> when thinking is on.
DEFAULT_TEMPLATE = TEMPLATES / "chatml-tools.jinja"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The id the router derives from the file name; single mode is given the same id with --alias.
MODEL_ID = MODEL_FILE.removesuffix(".gguf")

# The first build takes about 5 minutes on 2 cores; the bound leaves room for a slow download.
BUILD_TIMEOUT = 1800.0
# Measured: ready in ~1.2 s with -t 1 on a busy 2-core machine; the bound is for a loaded CI box.
READY_TIMEOUT = 60.0
POLL_INTERVAL = 0.05
STOP_TIMEOUT = 15.0

Mode = Literal["single", "router"]


class LlamaServerError(RuntimeError):
    """The server could not be built, started, or made ready; the message says why."""


@dataclass(frozen=True)
class Built:
    binary: Path
    model: Path
    home: Path  # the version's cache folder: bin/, templates/, server-README.md

    @property
    def templates(self) -> Path:
        """llama.cpp's models/templates, copied by the build script."""
        return self.home / "templates"


_built: Built | None = None
# The first failure to build or to start the binary at all, in one line. Every later test that
# needs the server fails at once with a pointer to it instead of repeating the build or the log.
_unavailable: str | None = None


def _remember(exc: LlamaServerError) -> LlamaServerError:
    global _unavailable
    _unavailable = str(exc).splitlines()[0]
    return exc


def _check_available() -> None:
    if _unavailable is not None:
        raise LlamaServerError(
            f"llama-server is unavailable, as the first test that needed it reported in full: "
            f"{_unavailable}"
        )


def ensure_built(timeout: float = BUILD_TIMEOUT) -> Built:
    """Builds llama-server and fetches the model if this machine has not yet; returns the paths.

    Raises:
        LlamaServerError: the build or its smoke test failed; in full the first time, as a
            one-line pointer to that first failure after it.
    """
    global _built
    model_group.require()
    if _built is not None:
        return _built
    _check_available()
    try:
        _built = _build(timeout)
    except LlamaServerError as exc:
        raise _remember(exc) from exc.__cause__
    return _built


def _build(timeout: float) -> Built:
    env = dict(os.environ)
    env.setdefault("PYTHON", sys.executable)
    try:
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LlamaServerError(f"{BUILD_SCRIPT} did not finish within {timeout:.0f} s") from exc
    if done.returncode != 0:
        # The script's last lines name the cause (the smoke test's finding, or the compiler's).
        cause = _last_finding(done.stderr)
        raise LlamaServerError(
            f"{BUILD_SCRIPT} failed (exit code {done.returncode}): {cause}\n{done.stderr[-4000:]}"
        )
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise LlamaServerError(f"{BUILD_SCRIPT} printed no cache folder")
    home = Path(lines[-1])
    cache = Path(os.environ.get("BOXMAKER_CACHE", Path.home() / ".cache" / "boxmaker"))
    built = Built(
        binary=home / "bin" / "llama-server", model=cache / "models" / MODEL_FILE, home=home
    )
    for path in (built.binary, built.model):
        if not path.is_file():
            raise LlamaServerError(f"{BUILD_SCRIPT} succeeded but {path} does not exist")
    return built


TOOL_MODEL_SCRIPT = REPO / "scripts" / "fetch_tool_model.sh"


def ensure_tool_model(timeout: float = BUILD_TIMEOUT) -> Path:
    """The tool model (qwen-coder profile), fetched and smoke-tested once per machine by
    scripts/fetch_tool_model.sh (which builds llama-server first if it must); its path.

    Raises:
        LlamaServerError: the fetch or its smoke test failed (the script's line says why).
    """
    ensure_built(timeout)
    env = dict(os.environ)
    env.setdefault("PYTHON", sys.executable)
    try:
        done = subprocess.run(
            ["bash", str(TOOL_MODEL_SCRIPT)], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise LlamaServerError(
            f"{TOOL_MODEL_SCRIPT} did not finish within {timeout:.0f} s"
        ) from exc
    if done.returncode != 0 or not done.stdout.strip():
        raise LlamaServerError(f"{TOOL_MODEL_SCRIPT} failed: {_last_finding(done.stderr)}")
    return Path(done.stdout.strip().splitlines()[-1])


def _last_finding(stderr: str) -> str:
    """The line that says why: the smoke test's, else the last line that is not a log tail."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("smoke test failed:"):
            return line
    plain = [line for line in lines if not line.startswith("  | ")]
    return plain[-1] if plain else "no output"


def describe_exit(code: int) -> str:
    """'exited with code N', or the signal and what it means (SIGILL: the CPU)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"died of signal {-code}"
    if -code == signal.SIGILL:
        return f"died of {name}: the binary uses an instruction this CPU cannot run"
    return f"died of {name}"


class LlamaServer:
    """One real llama-server process on 127.0.0.1. Use as a context manager or start()/stop()."""

    host = "127.0.0.1"

    def __init__(
        self,
        mode: Mode = "single",
        *,
        template: Path | None = DEFAULT_TEMPLATE,
        ctx: int = 2048,
        slots: int = 2,
        reasoning_format: str | None = "deepseek",
        threads: int = 1,
        batch: int | None = None,
        extra_args: tuple[str, ...] = (),
        workdir: Path | None = None,
        ready_timeout: float = READY_TIMEOUT,
        built: Built | None = None,
    ) -> None:
        """
        Args:
            mode: "single" (`-m`) or "router" (`--models-dir`, model loaded on demand).
            template: a Jinja chat template file (`--jinja --chat-template-file`); None keeps the
                model's own template.
            ctx: context per slot, in tokens (the server gets `-c ctx*slots`, so a prompt longer
                than `ctx` answers HTTP 400).
            slots: `-np`, the number of slots.
            reasoning_format: `--reasoning-format` ("deepseek" puts thinking in reasoning_content).
            threads: `-t`. One thread is measured faster than two on a shared 2-core machine.
            batch: `-b` and `-ub` both; small values give more prompt_progress events.
            extra_args: appended to the command line as they are.
            workdir: where the log (and the router's models folder) go; a temporary folder,
                removed by stop(), when None.
        """
        if mode not in ("single", "router"):
            raise ValueError(f"mode must be 'single' or 'router', not {mode!r}")
        self.mode: Mode = mode
        self.template = template
        self.ctx = ctx
        self.slots = slots
        self.reasoning_format = reasoning_format
        self.threads = threads
        self.batch = batch
        self.extra_args = extra_args
        self.ready_timeout = ready_timeout
        self._built = built
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.port = 0
        self.model_id = MODEL_ID
        self.argv: list[str] = []
        self.startup_seconds = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    # ----- paths and requests -----

    @property
    def log_path(self) -> Path:
        if self.workdir is None:
            raise LlamaServerError("the server has not been started")
        return self.workdir / "llama-server.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def path(self, path: str) -> str:
        """`path` plus `?model=<id>` in router mode, where GETs need it (single mode ignores it)."""
        if self.mode != "router":
            return path
        joiner = "&" if "?" in path else "?"
        return f"{path}{joiner}model={self.model_id}"

    def call(
        self, method: str, path: str, obj: object = None, timeout: float = 60.0
    ) -> rawhttp.Response:
        return rawhttp.call(self.host, self.port, method, path, obj, timeout)

    # ----- life cycle -----

    def command(self, port: int) -> list[str]:
        built = self._built or ensure_built()
        argv = [str(built.binary), "--host", self.host, "--port", str(port)]
        if self.mode == "single":
            argv += ["-m", str(built.model), "--alias", MODEL_ID]
        else:
            argv += ["--models-dir", str(self._models_dir(built))]
        if self.template is not None:
            argv += ["--jinja", "--chat-template-file", str(self.template)]
        if self.reasoning_format is not None:
            argv += ["--reasoning-format", self.reasoning_format]
        argv += ["-c", str(self.ctx * self.slots), "-np", str(self.slots), "-t", str(self.threads)]
        if self.batch is not None:
            argv += ["-b", str(self.batch), "-ub", str(self.batch)]
        # No colours in the log, and never a download from a test.
        argv += ["--log-colors", "off", "--offline", *self.extra_args]
        return argv

    def _models_dir(self, built: Built) -> Path:
        assert self.workdir is not None
        models = self.workdir / "models"
        models.mkdir(exist_ok=True)
        link = models / MODEL_FILE
        if not link.exists():
            link.symlink_to(built.model)
        return models

    def start(self) -> LlamaServer:
        if self._proc is not None:
            raise LlamaServerError("the server is already started")
        _check_available()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="llama-server-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        # LLAMA_ARG_* variables would silently change the flags; a test server gets exactly argv.
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
        started = time.monotonic()
        for attempt in range(3):
            port = free_port()
            self.argv = self.command(port)
            log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process's life
            log.write(f"--- start {attempt + 1}: {' '.join(self.argv)}\n".encode())
            log.flush()
            # Its own process group, so kill() also reaches the router's child servers.
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
                start_new_session=True,
            )
            self._log_file = log
            self.port = port
            try:
                self._wait_ready(started)
            except _PortTaken:
                self._reap()
                continue
            except BaseException:
                self.kill()  # the error carries the log's tail; the temporary folder goes
                self.cleanup()
                raise
            self.startup_seconds = time.monotonic() - started
            return self
        tail = self.log_tail()
        self.cleanup()
        raise LlamaServerError(f"could not bind a free port in 3 tries; log tail:\n{tail}")

    def _wait_ready(self, started: float) -> None:
        assert self._proc is not None
        deadline = started + self.ready_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                tail = self.log_tail()
                this_start = tail.rsplit("--- start ", 1)[-1]
                if "couldn't bind HTTP server socket" in this_start:
                    raise _PortTaken
                error = LlamaServerError(
                    f"llama-server {describe_exit(code)} before it was ready (log: "
                    f"{self.log_path}); log tail:\n{tail}"
                )
                # Killed by a signal before serving: the binary, not this test's flags.
                raise _remember(error) if code < 0 else error
            try:
                # Short: whoever else holds the port may accept and never answer.
                res = self.call("GET", "/health", timeout=1.0)
                if res.status == 200:
                    self._after_ready()
                    return
                last = f"/health answered {res.status}: {res.content()[:200]!r}"
            except (OSError, ValueError) as exc:
                last = f"/health: {exc}"
            time.sleep(POLL_INTERVAL)
        raise LlamaServerError(
            f"llama-server not ready within {self.ready_timeout:.0f} s ({last}); log tail:\n"
            f"{self.log_tail()}"
        )

    def _after_ready(self) -> None:
        """Checks that the server lists the model under the id the tests send."""
        listing = "/models" if self.mode == "router" else "/v1/models"
        ids = [m["id"] for m in self.call("GET", listing).json()["data"]]
        if self.model_id not in ids:
            raise LlamaServerError(f"{listing} lists {ids}, not {self.model_id!r}")

    def model_status(self) -> str:
        """Router mode: the model's status in /models (unloaded, loading, loaded, ...)."""
        for model in self.call("GET", "/models").json()["data"]:
            if model["id"] == self.model_id:
                return str(model["status"]["value"])
        raise LlamaServerError(f"/models does not list {self.model_id!r}")

    def load(self, timeout: float = READY_TIMEOUT) -> float:
        """Router mode: loads the model now and waits until it is `loaded`; returns the seconds."""
        if self.mode != "router":
            raise LlamaServerError("load() is for router mode; a single server loads at start")
        started = time.monotonic()
        if self.model_status() == "unloaded":
            res = self.call("POST", "/models/load", {"model": self.model_id})
            if res.status != 200:
                raise LlamaServerError(f"/models/load answered {res.status}: {res.content()!r}")
        deadline = started + timeout
        while (status := self.model_status()) != "loaded":
            if status == "unloaded" and time.monotonic() - started > 1.0:
                raise LlamaServerError(f"{self.model_id} went back to unloaded\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise LlamaServerError(f"{self.model_id} still {status} after {timeout:.0f} s")
            time.sleep(POLL_INTERVAL)
        return time.monotonic() - started

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code (None if never started)."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout)
        return self._reap()

    def kill(self) -> int | None:
        """SIGKILL to the server's whole process group (the router's children too)."""
        if self._proc is None:
            return None
        return self._reap()

    def _reap(self) -> int | None:
        assert self._proc is not None
        proc = self._proc
        # Anything left in the group we created (a router's child servers) goes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
        self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def cleanup(self) -> None:
        """Removes the temporary workdir (only one this object created)."""
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, LlamaServerError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.stop()
            if exc_type is not None:
                print(
                    f"--- llama-server log tail ({self.log_path}) ---\n{self.log_tail()}",
                    file=sys.stderr,
                )
        finally:
            self.cleanup()

    def describe(self) -> dict[str, object]:
        """What a recording or a report needs to say about this server."""
        return {"mode": self.mode, "model_id": self.model_id, "argv": self.argv}

    def __repr__(self) -> str:
        return f"LlamaServer(mode={self.mode!r}, port={self.port}, pid={self.pid})"


class _PortTaken(Exception):
    """The free port was taken between free_port() and the server's bind: try another."""
