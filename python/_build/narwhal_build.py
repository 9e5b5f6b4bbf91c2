"""A PEP 517 build backend in the standard library alone, so `pip install ./python` needs no
package index: nothing has to be fetched to build the wheel (setuptools would need `wheel`).

It packs the pure-Python `narwhal` package into a py3-none-any wheel (and an sdist), with the
name, version and summary from pyproject.toml. Editable installs add a .pth file.
"""

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "narwhal"


def _project():
    with open(ROOT / "pyproject.toml", "rb") as f:
        p = tomllib.load(f)["project"]
    dist = p["name"].replace("-", "_")
    return p, dist, f"{dist}-{p['version']}"


def _metadata(p) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}", f"Requires-Python: {p.get('requires-python', '>=3')}"]
    readme = ROOT / p.get("readme", "README.md")
    body = ""
    if readme.exists():
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + readme.read_text(encoding="utf-8")
    return "\n".join(lines) + "\n" + body


def _sources():
    """The package's files: its modules and the PEP 561 marker (py.typed) that tells type
    checkers the package's annotations are meant to be read."""
    for path in sorted((ROOT / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and (path.suffix == ".py" or path.name == "py.typed"):
            yield path.relative_to(ROOT).as_posix(), path.read_bytes()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, files) -> str:
    p, dist, base = _project()
    info = f"{base}.dist-info"
    files = list(files) + [
        (f"{info}/METADATA", _metadata(p).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: narwhal_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = "\n".join(_record_line(n, d) for n, d in files) + f"\n{info}/RECORD,,\n"
    name = f"{base}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            z.writestr(zipfile.ZipInfo(n, (2020, 1, 1, 0, 0, 0)), d)
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", (2020, 1, 1, 0, 0, 0)), record)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _sources())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(f"{PACKAGE}_editable.pth", (str(ROOT) + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p, _, base = _project()
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        def add(arc: str, data: bytes):
            ti = tarfile.TarInfo(f"{base}/{arc}")
            ti.size, ti.mtime, ti.mode = len(data), 1577836800, 0o644
            tar.addfile(ti, io.BytesIO(data))
        add("PKG-INFO", _metadata(p).encode())
        add("pyproject.toml", (ROOT / "pyproject.toml").read_bytes())
        add("_build/narwhal_build.py", Path(__file__).read_bytes())
        if (ROOT / "README.md").exists():
            add("README.md", (ROOT / "README.md").read_bytes())
        for n, d in _sources():
            add(n, d)
    return name
