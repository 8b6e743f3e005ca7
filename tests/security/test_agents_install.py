"""``acp-fuzz agents install`` fetches code from a registry. An npm package's install scripts
(``postinstall``...) used to run as the user, with the user's whole environment, outside any
sandbox. Now they are not run at all by default (``--ignore-scripts``: every pinned agent
works without them), and a profile that needs them (``[install] scripts = "scrubbed"``) gets
them run with a scrubbed environment.

The package is a stranger's: a local registry (a loopback HTTP server) serves one whose
``postinstall`` writes its environment into a canary file, installed through the CLI. A PyPI
agent's counterpart is a source distribution's build code: pip takes wheels only by default,
and builds with the scrubbed environment under ``scripts = "scrubbed"`` (a folder of links
serves a wheel, and an sdist whose build backend writes the canary).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import inspect
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


# -- PyPI: a source distribution's build code is pip's install script ---------------------

PY_PKG = "acp-fuzz-canary"


def write_wheel(directory: str, name: str, version: str) -> str:
    """A wheel of one module and one console script, by hand (no setuptools here). The sdist's
    build backend below is this function's source too."""
    import base64
    import hashlib
    import os
    import zipfile

    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}.py": "def main():\n    print('canary ok')\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: canary\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{name} = {dist}:main\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    filename = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return filename


def _sdist(folder: Path, canary: Path) -> None:
    """An sdist whose build backend (in the tree: no setuptools, no index) writes its whole
    environment into ``canary``, then builds the wheel."""
    dist = PY_PKG.replace("-", "_")
    backend = inspect.getsource(write_wheel) + f'''

def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    import json
    import json
    import os
    with open({str(canary)!r}, "w") as f:
        json.dump(dict(os.environ), f)
    return write_wheel(wheel_directory, {PY_PKG!r}, {VERSION!r})
'''
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "canary_backend"\n'
                          'backend-path = ["."]\n',
        "canary_backend.py": backend,
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {PY_PKG}\nVersion: {VERSION}\n",
    }
    with tarfile.open(folder / f"{dist}-{VERSION}.tar.gz", "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{dist}-{VERSION}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def _pip_install(tmp_path: Path, links: Path,
                 scripts: str | None) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    profile = tmp_path / "canary.toml"
    profile.write_text(f'name = "canary"\napi = "openai.chat"\n'
                       f'command = ["${{agent_dir}}/venv/bin/{PY_PKG}"]\n'
                       f'[install]\npypi = "{PY_PKG}"\nversion = "{VERSION}"\n'
                       + (f'scripts = "{scripts}"\n' if scripts else ""))
    # Only the folder of links: no index, no pip.conf of this machine's.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "ACP_FUZZ_AGENT_CACHE": str(tmp_path / "cache"), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(links), "PIP_CONFIG_FILE": os.devnull,
           "MY_SERVICE_TOKEN": SECRET, "PIP_INDEX_PASSWORD": SECRET}
    return subprocess.run([sys.executable, "-m", "acp_fuzz", "agents", "install", str(profile)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # a venv of its own: about 20 s each
def test_a_pypi_wheel_is_installed_into_a_venv_of_its_own(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    write_wheel(str(links), PY_PKG, VERSION)
    proc = _pip_install(tmp_path, links, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(wheels only: no build code run)" in proc.stdout
    where = tmp_path / "cache" / f"canary@{VERSION}"
    marker = json.loads((where / ".acp-fuzz-install.json").read_text())
    assert marker["registry"] == "pypi" and marker["scripts"] == "ignore"
    ran = subprocess.run([str(where / "venv" / "bin" / PY_PKG)], capture_output=True, text=True,
                         timeout=60)
    assert ran.stdout.strip() == "canary ok"
    again = _pip_install(tmp_path, links, None)
    assert "already installed" in again.stdout and "wheels only" in again.stdout


@pytest.mark.slow  # a venv of its own: about 20 s each
def test_a_pypi_sdist_is_not_built_by_default(tmp_path: Path) -> None:
    links, canary = tmp_path / "links", tmp_path / "CANARY.json"
    links.mkdir()
    _sdist(links, canary)
    proc = _pip_install(tmp_path, links, None)
    assert proc.returncode == 1
    assert "pip install acp-fuzz-canary==1.0.0 failed" in proc.stderr
    assert not canary.exists()  # its build code never ran
    assert not (tmp_path / "cache" / f"canary@{VERSION}").exists()


@pytest.mark.slow  # a venv of its own: about 20 s each
def test_a_scrubbed_pypi_build_sees_no_secret(tmp_path: Path) -> None:
    links, canary = tmp_path / "links", tmp_path / "CANARY.json"
    links.mkdir()
    _sdist(links, canary)
    proc = _pip_install(tmp_path, links, "scrubbed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(build code run with a scrubbed environment)" in proc.stdout
    seen = json.loads(canary.read_text())  # the backend ran, and this is all it saw
    assert SECRET not in json.dumps(seen)
    assert seen["HOME"] != str(tmp_path / "home")
    assert seen.get("PIP_FIND_LINKS") == str(links)  # what is no secret is kept
