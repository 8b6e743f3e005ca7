"""``acp-fuzz agents install`` fetches code from a registry. An npm package's install scripts
(``postinstall``...) used to run as the user, with the user's whole environment, outside any
sandbox. Now they are not run at all by default (``--ignore-scripts``: every pinned agent
works without them), and a profile that needs them (``[install] scripts = "scrubbed"``) gets
them run with a scrubbed environment.

The package is a stranger's: a local registry (a loopback HTTP server) serves one whose
``postinstall`` writes its environment into a canary file, installed through the CLI.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PKG, VERSION = "acp-fuzz-canary-pkg", "1.0.0"
SECRET = "sk-test-do-not-leak-5b1e9a"


def _tarball(canary: Path) -> bytes:
    files = {
        "package/package.json": json.dumps({
            "name": PKG, "version": VERSION,
            "scripts": {"postinstall": "node canary.js"}}),
        "package/canary.js": "require('fs').writeFileSync("
                             f"{json.dumps(str(canary))}, JSON.stringify(process.env));\n",
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A loopback npm registry serving the canary package; yields its URL and the canary."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    canary = tmp_path / "CANARY.json"
    tgz = _tarball(canary)
    routes: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = routes.get(self.path.split("?")[0])
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body or b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    tar_path = f"/{PKG}/-/{PKG}-{VERSION}.tgz"
    routes[tar_path] = tgz
    routes[f"/{PKG}"] = json.dumps({"name": PKG, "dist-tags": {"latest": VERSION}, "versions": {
        VERSION: {"name": PKG, "version": VERSION, "hasInstallScript": True,
                  "scripts": {"postinstall": "node canary.js"},
                  "dist": {"tarball": url + tar_path,
                           "shasum": hashlib.sha1(tgz).hexdigest(),
                           "integrity": "sha512-" + base64.b64encode(
                               hashlib.sha512(tgz).digest()).decode()}}}}).encode()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url + "/", canary
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _install(tmp_path: Path, registry_url: str, scripts: str | None) -> str:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    profile = tmp_path / "canary.toml"
    profile.write_text(f'name = "canary"\napi = "openai.chat"\ncommand = ["true"]\n'
                       f'[install]\nnpm = "{PKG}"\nversion = "{VERSION}"\n'
                       + (f'scripts = "{scripts}"\n' if scripts else ""))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "ACP_FUZZ_AGENT_CACHE": str(tmp_path / "cache"),
           "npm_config_registry": registry_url, "npm_config_cache": str(tmp_path / "npm"),
           "npm_config_update_notifier": "false", "MY_SERVICE_TOKEN": SECRET,
           "AWS_SECRET_ACCESS_KEY": SECRET, "npm_config__authToken": SECRET}
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz", "agents", "install", str(profile)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_install_scripts_are_not_run(tmp_path: Path, registry: tuple[str, Path]) -> None:
    url, canary = registry
    said = _install(tmp_path, url, None)
    assert (tmp_path / "cache" / f"canary@{VERSION}" / "node_modules" / PKG).is_dir()
    assert not canary.exists()
    assert "(install scripts not run)" in said


def test_scrubbed_install_scripts_see_no_secret(tmp_path: Path,
                                                registry: tuple[str, Path]) -> None:
    url, canary = registry
    said = _install(tmp_path, url, "scrubbed")
    assert "(install scripts run with a scrubbed environment)" in said
    seen = json.loads(canary.read_text())  # the script ran, and this is all it saw
    assert SECRET not in json.dumps(seen)
    assert seen["HOME"] != str(tmp_path / "home")
    assert seen.get("npm_config_registry") == url  # what is no secret is kept
