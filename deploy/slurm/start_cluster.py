#!/usr/bin/env python
"""Start a TLS Dask cluster on SLURM (dask-jobqueue) and keep it up until interrupted.

    python deploy/slurm/start_cluster.py --tls-dir deploy/tls/certs --workers 4 \\
        --address-file ~/.dhash-scheduler

The scheduler runs in this process (on the login node or inside a batch job); each worker is
a SLURM job submitted with sbatch, configured by deploy/slurm/jobqueue.yaml. Every connection
is mutual TLS with the certificates of deploy/tls/make-certs.sh, on a shared filesystem the
compute nodes can read. The scheduler address (tls://host:port) is printed on stdout and
written to --address-file; pass it on:

    export DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True
    export DASK_DISTRIBUTED__COMM__TLS__CA_FILE=$TLS/ca.pem
    export DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=$TLS/client.pem
    export DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY=$TLS/client-key.pem
    dhash run jobs/configs/nightly.toml --scheduler "$(cat ~/.dhash-scheduler)"

dask-jobqueue is not a dependency of dhash: `pip install dask-jobqueue` where this runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_CONFIG = HERE / "jobqueue.yaml"
WORKER_CONFIG = REPO / "deploy" / "dask-worker.yaml"
ROLES = ("scheduler", "worker", "client")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="Dask workers to start (SLURM jobs x processes; default 2)")
    p.add_argument(
        "--tls-dir",
        required=True,
        type=Path,
        help="directory with ca.pem and {scheduler,worker,client}[-key].pem (deploy/tls/make-certs.sh)",
    )
    p.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="dask-jobqueue YAML (default: jobqueue.yaml here)"
    )
    p.add_argument(
        "--host", help="scheduler listen host/IP (default: the jobqueue interface, else this host's address)"
    )
    p.add_argument("--port", type=int, default=8786, help="scheduler port (default 8786; 0 = any free port)")
    p.add_argument("--dashboard-address", help="scheduler dashboard (default from the config: 127.0.0.1:8787)")
    p.add_argument("--interface", help="network interface for workers and scheduler (overrides the config)")
    p.add_argument("--queue", help="SLURM partition (overrides the config)")
    p.add_argument("--account", help="SLURM account (overrides the config)")
    p.add_argument("--log-directory", help="directory for the workers' SLURM logs")
    p.add_argument("--address-file", type=Path, help="also write the scheduler address to this file (mode 600)")
    p.add_argument("--print-job-script", action="store_true", help="print the sbatch script of one worker job and exit")
    return p.parse_args(argv)


def load_jobqueue_config(path: Path) -> None:
    """Merge the jobqueue YAML into dask's configuration (like a file in ~/.config/dask)."""
    import dask
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f) or {}
    dask.config.update(dask.config.config, data, priority="new")


def make_security(tls_dir: Path):
    """Mutual-TLS Security from make-certs.sh's files; plaintext refused."""
    from distributed.security import Security

    tls_dir = Path(tls_dir).resolve()
    files = {"tls_ca_file": tls_dir / "ca.pem"}
    for role in ROLES:
        files[f"tls_{role}_cert"] = tls_dir / f"{role}.pem"
        files[f"tls_{role}_key"] = tls_dir / f"{role}-key.pem"
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        raise SystemExit(f"start_cluster.py: missing TLS files {missing}; run deploy/tls/make-certs.sh {tls_dir}")
    return Security(require_encryption=True, **{k: str(v) for k, v in files.items()})


def make_cluster(args: argparse.Namespace):
    """The SLURMCluster (scheduler started here, no worker jobs submitted yet)."""
    import dask
    from dask_jobqueue import SLURMCluster

    load_jobqueue_config(args.config)
    prologue = list(dask.config.get("jobqueue.slurm.job-script-prologue", None) or [])
    prologue.append(f"export DASK_CONFIG={WORKER_CONFIG}")
    kwargs = {"job_script_prologue": prologue}
    for name in ("interface", "queue", "account", "log_directory"):
        if getattr(args, name):
            kwargs[name] = getattr(args, name)
    scheduler_options = dict(dask.config.get("jobqueue.slurm.scheduler-options", None) or {})
    scheduler_options["port"] = args.port
    if args.host:
        scheduler_options["host"] = args.host
    if args.dashboard_address:
        scheduler_options["dashboard_address"] = args.dashboard_address
    return SLURMCluster(
        protocol="tls://", security=make_security(args.tls_dir), scheduler_options=scheduler_options, **kwargs
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    cluster = make_cluster(args)
    try:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        address = cluster.scheduler_address
        if not address.startswith("tls://"):
            raise SystemExit(f"start_cluster.py: scheduler came up on {address}, not tls://")
        if args.address_file:  # atomically: a batch script may be polling for it
            tmp = args.address_file.with_name(args.address_file.name + ".tmp")
            tmp.write_text(address + "\n")
            os.chmod(tmp, 0o600)
            os.replace(tmp, args.address_file)
        cluster.scale(args.workers)
        print(address, flush=True)
        print(
            f"dashboard: {cluster.dashboard_link} (loopback of this host); {args.workers} workers requested; "
            "Ctrl-C / SIGTERM stops the cluster and cancels the worker jobs",
            file=sys.stderr,
            flush=True,
        )
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(1.0):
            pass
        return 0
    finally:
        cluster.close()
        if args.address_file and args.address_file.exists():
            args.address_file.unlink()


if __name__ == "__main__":
    sys.exit(main())
