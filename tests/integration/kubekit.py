"""A real kube-apiserver (v1.20.2) with its etcd, as a child of the test:
tests/data/k8s/apiserver.sh (a byte copy of the shared k8s kit, kept by ``make sync-shared``;
its header says what it makes: TLS, RBAC, the admin and reporter kubeconfigs, the tokens).
Built once per machine into ``$K8S_BUILD_DIR`` (default /tmp/k8s-apiserver-build, outside the
clone; ``.ci/run`` builds it), run in the foreground (``apiserver.sh run PORT DIR``) as this
process's child and stopped by its pid (SIGTERM: the script stops the API server, then etcd).

:class:`ApiServer` also gives the admin's plain HTTPS calls (httpx with the admin's client
certificate) the tests use to create Nodes and read what the server stored.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.runkit import BOUND_S

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "data" / "k8s" / "apiserver.sh"
#: Seconds the first build may take (about 6 minutes on 2 cores; a no-op once built).
BUILD_S = 1800
READY_S = 120


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports() -> int:
    """A PORT whose PORT+1 and PORT+2 (etcd's) are free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < 65000 and _free(port + 1) and _free(port + 2):
            return port
    raise AssertionError("no three free ports in a row on 127.0.0.1")


def build() -> None:
    """Build the binaries when missing (``apiserver.sh build``)."""
    out = subprocess.run(["bash", str(SCRIPT), "build"], capture_output=True, text=True,
                         timeout=BUILD_S, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"apiserver.sh build failed:\n{out.stderr[-4000:]}"


class ApiServer:
    """``apiserver.sh run PORT DIR`` as a child; :meth:`start`, :meth:`stop` (by pid), and
    again :meth:`start` on the same directory (its certificates, tokens and etcd data)."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.dir = directory
        self.port = port or free_ports()
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def start(self) -> ApiServer:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "ready").unlink(missing_ok=True)
        log = open(self.dir / "run.log", "ab")  # noqa: SIM115 - the child's, closed by it
        self.proc = subprocess.Popen(["bash", str(SCRIPT), "run", str(self.port), str(self.dir)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + READY_S
        while not (self.dir / "ready").exists():
            if self.proc.poll() is not None:
                raise AssertionError("apiserver.sh run ended: " +
                                     (self.dir / "run.log").read_text()[-4000:])
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"kube-apiserver not ready after {READY_S} s")
            time.sleep(0.1)
        self.env = dict(line.split("=", 1) for line in
                        (self.dir / "env").read_text().splitlines() if "=" in line)
        return self

    def stop(self) -> None:
        """SIGTERM to the script (it stops kube-apiserver, then etcd), then wait for it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    @property
    def reporter_kubeconfig(self) -> Path:
        return self.dir / "reporter.kubeconfig"

    def apiserver_pid(self) -> int:
        return int(self.env["APISERVER_PID"])

    # ------------------------------------------------------------ the admin's plain calls

    def _admin(self) -> httpx.Client:
        kc = yaml.safe_load(self.admin_kubeconfig.read_text())
        user = kc["users"][0]["user"]
        cert, key = self.dir / "admin-cert.pem", self.dir / "admin-key.pem"
        if not cert.exists():
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]) if
                             "client-certificate-data" in user else
                             Path(user["client-certificate"]).read_bytes())
            key.write_bytes(base64.b64decode(user["client-key-data"]) if
                            "client-key-data" in user else Path(user["client-key"]).read_bytes())
        ctx = ssl.create_default_context(cafile=self.env["CA_FILE"])
        ctx.load_cert_chain(str(cert), str(key))
        return httpx.Client(base_url=self.server, verify=ctx, timeout=10)

    def request(self, method: str, path: str, body: Any = None, token: str | None = None,
                content_type: str = "application/json") -> httpx.Response:
        """One call as the admin, or as the bearer of ``token``."""
        if token is None:
            with self._admin() as c:
                return c.request(method, path, json=body,
                                 headers={"Content-Type": content_type})
        ctx = ssl.create_default_context(cafile=self.env["CA_FILE"])
        with httpx.Client(base_url=self.server, verify=ctx, timeout=10) as c:
            return c.request(method, path, json=body, headers={
                "Authorization": f"Bearer {token}", "Content-Type": content_type})

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        r = self.request(method, path, body, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text[:2000]}"
        out: dict[str, Any] = r.json()
        return out

    def create_node(self, name: str, labels: dict[str, str] | None = None,
                    taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
        self.request("DELETE", f"/api/v1/nodes/{name}")
        return self.ok("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints or []}})

    def node(self, name: str) -> dict[str, Any]:
        return self.ok("GET", f"/api/v1/nodes/{name}")

    def events(self, node: str) -> list[dict[str, Any]]:
        items = self.ok("GET", "/api/v1/namespaces/default/events?fieldSelector="
                        f"involvedObject.name={node}")["items"]
        return list(items)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the kube-apiserver process used so far."""
        fields = Path(f"/proc/{self.apiserver_pid()}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def condition(node: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The stored condition ``kind`` of a Node object, or None."""
    for c in node.get("status", {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def wait_node(api: ApiServer, name: str, done: Any, what: str,
              bound: float = BOUND_S) -> dict[str, Any]:
    """Poll the stored Node until ``done(node)``; fails naming ``what`` and the last one."""
    deadline = time.monotonic() + bound
    while True:
        node = api.node(name)
        if done(node):
            return node
        if time.monotonic() > deadline:
            raise AssertionError(f"node {name}: still not {what} after {bound} s: "
                                 f"{node.get('status', {}).get('conditions')} "
                                 f"{node['metadata'].get('labels')} {node['spec']}")
        time.sleep(0.05)
