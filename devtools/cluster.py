"""A small cluster of hosts on one machine (issue 19): network namespaces joined by a bridge, one for
PostgreSQL, one for PgBouncer and three worker hosts, each with its own address and host name.

    manage.py cluster up [--hosts 3] [--workers 2]   build it and start the processes (as root)
    manage.py cluster status                         hosts, processes, leader, connections
    manage.py cluster down                           stop everything and remove the namespaces

PostgreSQL runs from the embedded wheel's binaries with its own ``postgresql.conf`` and
``pg_hba.conf``: it listens on the bridge at 10.77.0.2 with scram-sha-256 password authentication
(and a Unix socket in /tmp/leitstand-cluster-socket, trusted, to set it up). PgBouncer (Debian's) listens
at 10.77.0.3:6432 in transaction mode. Each worker host ``hN`` (10.77.0.1N) runs a ``runpool crawl``
and the first two a ``runpool control``, all with ``LEITSTAND_HOST_NAME=hN`` through PgBouncer
(``LEITSTAND_PGBOUNCER=transaction``), without any capability. The machine itself keeps 10.77.0.1 on the bridge, so
commands and tests reach both servers. Everything lives in ``var/cluster`` (``state.json`` holds
the passwords and process IDs, readable by root only).

Faults between hosts are made here too: ``partition`` (a host's link down), ``heal``, ``kill_host``
(kill -9 of every process of a host), ``pgbouncer_restart`` and ``postgres_restart`` (immediate).

This module must not import Django: it starts processes that do.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from config.db_roles import APPLICATION, MAINTENANCE, OWNER
from devtools import faults, pgbouncer

BASE_DIR = Path(__file__).resolve().parent.parent
CLUSTER_DIR = BASE_DIR / "var" / "cluster"
STATE = CLUSTER_DIR / "state.json"
# The server's setup socket: short and fixed (a Unix socket's path has at most 107 bytes, and a
# checkout may live deep); one cluster per machine, as its bridge is.
SOCKET_DIR = Path("/tmp/leitstand-cluster-socket")
BRIDGE = "lsbr0"
NET = "10.77.0"
MACHINE = f"{NET}.1"
DB_HOST, DB_PORT = f"{NET}.2", 5432
BOUNCER_HOST, BOUNCER_PORT = f"{NET}.3", 6432
DATABASE = "leitstand"
SYSTEM_USER = "pgserver"  # the embedded server's own user when run by root (PostgreSQL refuses root)
# The hosts' processes keep root's user ID (the interpreter may live in root's private home, as on
# these machines) but no capability (setpriv): they cannot change the network, enter another
# namespace, or read the server's files, which belong to SYSTEM_USER.
WITHOUT_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
POOL_SIZE = 8  # PgBouncer's server connections per user and database
# What runs on host hN: a crawl pool everywhere, the control process on two hosts, the console on one.
HOST_PROCESSES = {1: ["control", "crawl", "web"], 2: ["control", "crawl"]}

# Leases short enough that a drill sees rescues in seconds, with the timing invariants kept.
HOST_TIMING = {
    "LEITSTAND_SYNTHETIC_LEASE_SECONDS": "4",
    "LEITSTAND_SYNTHETIC_HEARTBEAT_SECONDS": "1",
    "LEITSTAND_SYNTHETIC_TIMEOUT_SECONDS": "5",
    "LEITSTAND_LEASE_GRACE_SECONDS": "2",
    "LEITSTAND_CONTROL_INTERVAL_SECONDS": "0.5",
    "LEITSTAND_CONTROL_LEADER_LEASE_SECONDS": "6",
}


class ClusterError(Exception):
    pass


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    pools: list[str]
    pids: dict[str, int] = field(default_factory=dict)


@dataclass
class Cluster:
    passwords: dict[str, str]
    secret_key: str
    hosts: list[Host]
    workers: int = 2  # per crawl pool
    pids: dict[str, int] = field(default_factory=dict)  # pgbouncer

    # --- addresses ---------------------------------------------------------------------------

    def url(self, user: str, *, direct: bool = False) -> str:
        host, port = (DB_HOST, DB_PORT) if direct else (BOUNCER_HOST, BOUNCER_PORT)
        return f"postgresql://{user}:{self.passwords[user]}@{host}:{port}/{DATABASE}"

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise ClusterError(f"no host {name!r} (hosts: {', '.join(h.name for h in self.hosts)})")

    def host_env(self, host: Host) -> dict[str, str]:
        return {
            **os.environ,
            **HOST_TIMING,
            "LEITSTAND_CRAWL_WORKERS": str(self.workers),
            "LEITSTAND_SECRET_KEY": self.secret_key,
            "LEITSTAND_DEBUG": "false",
            "DATABASE_URL": self.url(APPLICATION),
            "LEITSTAND_DATABASE_MAINTENANCE_URL": self.url(MAINTENANCE),
            "LEITSTAND_DATABASE_OWNER_URL": "",
            "LEITSTAND_PGBOUNCER": "transaction",
            "LEITSTAND_HOST_NAME": host.name,
            "LEITSTAND_RUN_DIR": str(CLUSTER_DIR / host.name),
            "LEITSTAND_ARCHIVE_DIR": str(CLUSTER_DIR / "archive"),  # the hosts' shared archive storage
            "LEITSTAND_DB_APPLICATION_NAME": f"leitstand-{host.name}",
            "LEITSTAND_ALLOWED_HOSTS": ",".join(h.address for h in self.hosts),
            "LEITSTAND_SSL_REDIRECT": "false",
            "LEITSTAND_SECURE_COOKIES": "false",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONPATH": str(BASE_DIR),
        }

    def save(self) -> None:
        STATE.touch(mode=0o600)  # passwords: root's alone from the start
        STATE.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls) -> Cluster:
        if not STATE.exists():
            raise ClusterError("no cluster is up (manage.py cluster up)")
        data = json.loads(STATE.read_text())
        return cls(**{**data, "hosts": [Host(**h) for h in data["hosts"]]})


# --- building it -----------------------------------------------------------------------------


def require_root() -> None:
    if os.geteuid() != 0:
        raise ClusterError("the cluster needs root (network namespaces, a bridge): run it as root, as CI does")
    missing = [program for program in ("ip", "runuser") if shutil.which(program) is None]
    missing += [] if pgbouncer.program() else ["pgbouncer"]
    if missing:
        raise ClusterError(f"the cluster needs {', '.join(missing)} (apt-get install iproute2 util-linux pgbouncer)")


def _run(*command: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if check and done.returncode != 0:
        raise ClusterError(
            f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    return done


def _netns(namespace: str, *command: str) -> list[str]:
    return ["ip", "netns", "exec", namespace, *command]


def network_up(names: list[tuple[str, str]]) -> None:
    """The bridge with the machine's address, and one namespace per (namespace, address) on it."""
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{MACHINE}/24", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    for namespace, address in names:
        outside, inside = f"v-{namespace}", "eth0"
        _run("ip", "netns", "add", namespace)
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", namespace)
        _run("ip", "link", "set", outside, "master", BRIDGE, "up")
        _run(*_netns(namespace, "ip", "addr", "add", f"{address}/24", "dev", inside))
        _run(*_netns(namespace, "ip", "link", "set", inside, "up"))
        _run(*_netns(namespace, "ip", "link", "set", "lo", "up"))


def network_down() -> None:
    for namespace in _run("ip", "netns", "list", check=False).stdout.split("\n"):
        name = namespace.split(" ")[0]
        if re.fullmatch(r"ls-(db|pgb|h\d)", name):
            _run("ip", "netns", "delete", name, check=False)
    _run("ip", "link", "delete", BRIDGE, check=False)


def _bin(name: str) -> str:
    from devtools.embedded_db import client_program

    return client_program(name)


def _system_user_exists() -> None:
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        _run("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER)


def postgres_up(cluster: Cluster) -> None:
    """A fresh server in ``ls-db``: scram over the bridge, trust on its own socket only."""
    data = CLUSTER_DIR / "pg"
    data.mkdir(parents=True)
    shutil.rmtree(SOCKET_DIR, ignore_errors=True)
    SOCKET_DIR.mkdir(mode=0o700)
    pgbouncer.give_to(SOCKET_DIR, SYSTEM_USER)
    pgbouncer.give_to(data, SYSTEM_USER)  # the data directory: the server's user's
    _run(
        "runuser",
        "-u",
        SYSTEM_USER,
        "--",
        _bin("initdb"),
        "-D",
        str(data),
        "-U",
        "postgres",
        "--auth-local=trust",
        "--auth-host=scram-sha-256",
        "-E",
        "UTF8",
        "--locale=C.UTF-8",
    )
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(
            f"\nlisten_addresses = '{DB_HOST}'\nport = {DB_PORT}\nunix_socket_directories = '{SOCKET_DIR}'\n"
            "password_encryption = 'scram-sha-256'\nmax_connections = 100\nshared_buffers = '256MB'\n"
        )
    (data / "pg_hba.conf").write_text(
        "# Leitstand's cluster: setup over the socket, everything else with a password over the bridge\n"
        "local all all trust\n"
        f"host all all {NET}.0/24 scram-sha-256\n"
    )
    postgres_start()

    def socket_url(database: str) -> str:
        return f"postgresql://postgres@{str(SOCKET_DIR).replace('/', '%2F')}:{DB_PORT}/{database}"

    import psycopg
    from psycopg import sql

    with psycopg.connect(socket_url("postgres"), autocommit=True) as conn:
        for role in (OWNER, APPLICATION, MAINTENANCE):
            create = sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}")
            conn.execute(create.format(sql.Identifier(role), sql.Literal(cluster.passwords[role])))
        conn.execute(f'CREATE DATABASE "{DATABASE}" OWNER {OWNER}')
        conn.execute(f"GRANT pg_read_all_stats TO {OWNER}")  # the status and the drill count connections
    # The schema's CREATE is the owner's alone (config/db_roles.py revokes it from PUBLIC).
    with psycopg.connect(socket_url(DATABASE), autocommit=True) as conn:
        conn.execute(f"ALTER SCHEMA public OWNER TO {OWNER}")


def _pg_ctl(*args: str) -> None:
    """``pg_ctl`` on the cluster's server, in its namespace, as the server's user."""
    data = CLUSTER_DIR / "pg"
    pg_ctl = [_bin("pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-w", *args]
    _run(*_netns("ls-db", "runuser", "-u", SYSTEM_USER, "--", *pg_ctl))


def postgres_start() -> None:
    _pg_ctl("start")


def postgres_restart(mode: str = "immediate") -> None:
    _pg_ctl("-m", mode, "restart")


def postgres_stop() -> None:
    data = CLUSTER_DIR / "pg"
    if (data / "postmaster.pid").exists():
        _run(
            "runuser", "-u", SYSTEM_USER, "--", _bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop", check=False
        )


def pgbouncer_start(cluster: Cluster) -> None:
    """PgBouncer in ``ls-pgb``, transaction pooling, scram to its clients and to the server."""
    directory = CLUSTER_DIR / "pgbouncer"
    directory.mkdir(exist_ok=True)
    ini = pgbouncer.configure(
        directory,
        database=DATABASE,
        server=DB_HOST,
        server_port=DB_PORT,
        listen=BOUNCER_HOST,
        port=BOUNCER_PORT,
        users={role: cluster.passwords[role] for role in (OWNER, APPLICATION, MAINTENANCE)},
        auth_type="scram-sha-256",
        pool_size=POOL_SIZE,
    )
    pgbouncer.give_to(directory, SYSTEM_USER)
    process = subprocess.Popen(
        _netns("ls-pgb", *pgbouncer.command(ini, user=SYSTEM_USER)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    cluster.pids["pgbouncer"] = process.pid
    cluster.save()  # a failing start is still stopped by ``down``
    pgbouncer.wait_listening(BOUNCER_HOST, BOUNCER_PORT, process, directory / "pgbouncer.log")


def pgbouncer_restart(cluster: Cluster) -> None:
    pid = cluster.pids.pop("pgbouncer", None)
    _kill_group(pid, signal.SIGTERM)
    _wait_gone(pid, timeout=10)  # its port free again
    pgbouncer_start(cluster)


def manage(cluster: Cluster, *args: str, direct: bool = False, **extra: str) -> subprocess.CompletedProcess:
    """A management command from the machine, as the first host would run it (``direct``: as the
    owner, straight to PostgreSQL, for migrations)."""
    env = {**cluster.host_env(cluster.hosts[0]), **extra}
    if direct:
        env.update(DATABASE_URL=cluster.url(OWNER, direct=True), LEITSTAND_PGBOUNCER="")
    return _run(sys.executable, str(BASE_DIR / "manage.py"), *args, cwd=BASE_DIR, env=env)


def migrate(cluster: Cluster) -> None:
    """Migrations as the owner, straight to PostgreSQL (not through PgBouncer); the grants follow."""
    manage(cluster, "migrate", "--no-input", direct=True)
    manage(cluster, "db", "grants", direct=True)
    manage(
        cluster,
        "shell",
        "-c",
        OPERATOR_SCRIPT,
        direct=True,
        LEITSTAND_CLUSTER_OPERATOR_PASSWORD=cluster.passwords["operator"],
    )


# The console's operator of the cluster (its password in state.json, shown by ``cluster status``).
OPERATOR_SCRIPT = """
import os
from django.contrib.auth import get_user_model
from dashboard.roles import OPERATORS, roles_ensure
user, _ = get_user_model().objects.get_or_create(username="operator", defaults={"is_staff": True})
user.set_password(os.environ["LEITSTAND_CLUSTER_OPERATOR_PASSWORD"])
user.save()
user.groups.add(roles_ensure()[OPERATORS])
"""
WEB_PORT = 8000


def host_start(cluster: Cluster, host: Host) -> None:
    """The host's processes, in its namespace, each in a process group of its own, without capabilities."""
    run_dir = CLUSTER_DIR / host.name
    run_dir.mkdir(exist_ok=True)
    env = cluster.host_env(host)
    for pool in host.pools:
        log = open(run_dir / f"{pool}.log", "ab")
        # The console on a plain-HTTP private network (runserver: a drill, not production's WSGI server).
        command = (
            ["runserver", f"{host.address}:{WEB_PORT}", "--noreload", "--insecure"]
            if pool == "web"
            else ["runpool", pool]
        )
        process = subprocess.Popen(
            _netns(host.namespace, *WITHOUT_CAPABILITIES, sys.executable, str(BASE_DIR / "manage.py"), *command),
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()  # the process has its own
        host.pids[pool] = process.pid
        cluster.save()  # a failing start is still stopped by ``down``


def _kill_group(pid: int | None, sig: int) -> None:
    if pid:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pid: int | None, *, timeout: float) -> None:
    """Until ``pid`` has ended, at most ``timeout`` seconds; then its group is killed."""
    deadline = time.monotonic() + timeout
    while pid and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _kill_group(pid, signal.SIGKILL)


def host_stop(cluster: Cluster, host: Host, *, sig: int = signal.SIGTERM, timeout: float = 90) -> None:
    for pid in host.pids.values():
        _kill_group(pid, sig)
    deadline = time.monotonic() + timeout
    for pid in host.pids.values():
        _wait_gone(pid, timeout=max(0.0, deadline - time.monotonic()))
    host.pids.clear()
    cluster.save()


def kill_host(cluster: Cluster, name: str) -> None:
    """kill -9 of every process of the host at once (its power cord)."""
    host_stop(cluster, cluster.host(name), sig=signal.SIGKILL, timeout=5)


def partition(name: str) -> None:
    """The host's link down: its processes run on, but reach nobody and nobody reaches them."""
    _run("ip", "link", "set", f"v-ls-{name}", "down")


def heal(name: str) -> None:
    _run("ip", "link", "set", f"v-ls-{name}", "up")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our own child, not reaped yet) counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def up(*, hosts: int = 3, workers: int = 2) -> Cluster:
    require_root()
    if STATE.exists() or BRIDGE in _run("ip", "link", "show", check=False).stdout:
        raise ClusterError("a cluster is up already (manage.py cluster down first)")
    shutil.rmtree(CLUSTER_DIR, ignore_errors=True)
    CLUSTER_DIR.mkdir(parents=True)
    CLUSTER_DIR.chmod(0o755)
    _system_user_exists()
    cluster = Cluster(
        passwords={role: secrets.token_urlsafe(18) for role in (OWNER, APPLICATION, MAINTENANCE, "operator")},
        secret_key=secrets.token_urlsafe(50),
        workers=workers,
        hosts=[
            Host(f"h{n}", f"ls-h{n}", f"{NET}.{10 + n}", HOST_PROCESSES.get(n, ["crawl"])) for n in range(1, hosts + 1)
        ],
    )
    cluster.save()
    try:
        network_up([("ls-db", DB_HOST), ("ls-pgb", BOUNCER_HOST)] + [(h.namespace, h.address) for h in cluster.hosts])
        postgres_up(cluster)
        migrate(cluster)
        pgbouncer_start(cluster)
        cluster.save()
        for host in cluster.hosts:
            host_start(cluster, host)
    except BaseException:
        down()
        raise
    return cluster


def down() -> None:
    """Stop every process, the servers, and remove the namespaces and the bridge (also after a
    half-built ``up``)."""
    require_root()
    if STATE.exists():
        cluster = Cluster.load()
        for host in cluster.hosts:
            host_stop(cluster, host, timeout=90)
        _kill_group(cluster.pids.get("pgbouncer"), signal.SIGTERM)
        _wait_gone(cluster.pids.get("pgbouncer"), timeout=10)
    postgres_stop()
    network_down()
    shutil.rmtree(SOCKET_DIR, ignore_errors=True)
    STATE.unlink(missing_ok=True)


# --- looking at it -----------------------------------------------------------------------------


def query(cluster: Cluster, statement: str, parameters=()) -> list[tuple]:
    """A query as the owner, straight to PostgreSQL (what the drill and the status read)."""
    import psycopg

    with psycopg.connect(cluster.url(OWNER, direct=True), autocommit=True, connect_timeout=5) as conn:
        return conn.execute(statement, parameters).fetchall()


def connections(cluster: Cluster) -> tuple[int, int]:
    """(client connections at PgBouncer, server connections PostgreSQL has from PgBouncer)."""
    established = _run(*_netns("ls-pgb", "ss", "-Htn", "state", "established", f"( sport = :{BOUNCER_PORT} )"))
    clients = len([line for line in established.stdout.splitlines() if line.strip()])
    (servers,) = query(
        cluster,
        "SELECT count(*) FROM pg_stat_activity WHERE client_addr = %s AND datname = %s",
        [BOUNCER_HOST, DATABASE],
    )[0]
    return clients, servers


def status_text(cluster: Cluster) -> str:
    lines = [
        f"PostgreSQL {DB_HOST}:{DB_PORT} (ls-db), PgBouncer {BOUNCER_HOST}:{BOUNCER_PORT} (ls-pgb, transaction mode)",
        f"console http://{cluster.hosts[0].address}:{WEB_PORT}/admin/ (operator / {cluster.passwords['operator']})",
    ]
    for host in cluster.hosts:
        processes = ", ".join(f"{pool} {pid} {'runs' if _alive(pid) else 'GONE'}" for pool, pid in host.pids.items())
        lines.append(f"host {host.name} {host.address} ({host.namespace}): {processes or 'no processes'}")
    try:
        leader = query(
            cluster, "SELECT holder, term, expires_at > clock_timestamp() FROM jobs_leaderlease WHERE name = 'control'"
        )
        registry = query(
            cluster,
            "SELECT host, count(*) FROM workers_workerprocess WHERE last_seen_at > clock_timestamp() - interval '30 seconds' "
            "GROUP BY host ORDER BY host",
        )
        clients, servers = connections(cluster)
    except Exception as failed:  # a drill may have PostgreSQL down right now
        lines.append(f"database not reachable: {failed}")
        return "\n".join(lines)
    if leader:
        holder, term, valid = leader[0]
        lines.append(f"control leader: {holder}, term {term}{'' if valid else ' (lease expired)'}")
    lines.append("worker processes seen by the registry: " + (", ".join(f"{h} {n}" for h, n in registry) or "none"))
    lines.append(
        f"connections: {clients} clients at PgBouncer, {servers} server connections at PostgreSQL "
        f"(pool size {POOL_SIZE} per user)"
    )
    return "\n".join(lines)


# --- the drill -----------------------------------------------------------------------------------

DRILL_JOB = {"pool": "crawl", "duration_ms": 3000, "effect": True, "steps": ["fetch", "store"]}


def submit(cluster: Cluster, count: int, payload: dict = DRILL_JOB) -> str:
    """``count`` synthetic jobs with one correlation ID; returns it."""
    correlation = f"drill-{secrets.token_hex(4)}"
    manage(
        cluster,
        "enqueue",
        "synthetic",
        "--count",
        str(count),
        "--payload",
        json.dumps(payload),
        "--correlation-id",
        correlation,
    )
    return correlation


def wait_until(condition, *, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:  # the database may be restarting
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def running_on(cluster: Cluster, host: str, correlation: str) -> list[str]:
    rows = query(
        cluster,
        "SELECT j.id::text FROM jobs_job j JOIN jobs_attempt a ON a.job_id = j.id AND a.lease_version = j.lease_version "
        "WHERE j.correlation_id = %s AND j.state = 'running' AND a.worker_host = %s",
        [correlation, host],
    )
    return [row[0] for row in rows]


def database_now(cluster: Cluster):
    return query(cluster, "SELECT clock_timestamp()")[0][0]


def rescued(cluster: Cluster, job_ids: list[str], host: str, since) -> bool:
    """Every job of ``job_ids`` was claimed again on another host after ``since`` (database time)."""
    (count,) = query(
        cluster,
        "SELECT count(DISTINCT job_id) FROM jobs_attempt "
        "WHERE job_id = ANY(%s::uuid[]) AND worker_host <> %s AND claimed_at > %s",
        [job_ids, host, since],
    )[0]
    return count == len(job_ids)


def settled(cluster: Cluster, correlations: list[str]) -> bool:
    (open_jobs,) = query(
        cluster,
        "SELECT count(*) FROM jobs_job WHERE correlation_id = ANY(%s) AND NOT state = ANY(%s)",
        [correlations, list(faults.TERMINAL_STATES)],
    )[0]
    return open_jobs == 0


def leader(cluster: Cluster) -> tuple[str, int] | None:
    rows = query(
        cluster, "SELECT holder, term FROM jobs_leaderlease WHERE name = 'control' AND expires_at > clock_timestamp()"
    )
    return rows[0] if rows else None


def _host_holding(cluster: Cluster, correlation: str, hosts: list[str]) -> tuple[str, list[str]]:
    def holding():
        for name in hosts:
            if jobs := running_on(cluster, name, correlation):
                return name, jobs
        return None

    return wait_until(holding, timeout=30, what="a host running drill jobs")


def drill(cluster: Cluster, *, jobs_per_fault: int = 12, out=print) -> dict:
    """Faults between hosts, one after the other, each with a fresh set of jobs; then the totals."""
    wait_until(lambda: leader(cluster), timeout=30, what="a control leader")
    results, correlations, began = {}, [], database_now(cluster)
    lease = float(HOST_TIMING["LEITSTAND_SYNTHETIC_LEASE_SECONDS"])

    # 1. a worker host cut off for longer than the lease while it holds jobs
    correlation = submit(cluster, jobs_per_fault)
    correlations.append(correlation)
    workers_only = [h.name for h in cluster.hosts if "control" not in h.pools] or [cluster.hosts[-1].name]
    victim, held = _host_holding(cluster, correlation, workers_only + [h.name for h in cluster.hosts])
    cut = database_now(cluster)
    partition(victim)
    started = time.monotonic()
    try:
        wait_until(lambda: rescued(cluster, held, victim, cut), timeout=60, what=f"the jobs of {victim} rescued")
        results[faults.PARTITION_WORKER_HOST] = time.monotonic() - started
        time.sleep(lease)  # its workers run on, cut off, well past their leases
    finally:
        heal(victim)
    out(f"partition {victim} ({len(held)} jobs held): rescued in {results[faults.PARTITION_WORKER_HOST]:.1f} s")
    # The healed host's processes find their broken connections on their next round; the leader fault
    # below measures a takeover by a healthy standby, so they get a lease's time to reconnect first
    # (without it, the healed host as the standby once took 11.4 s against the 11 s bound).
    time.sleep(lease)

    # 2. the leading control process's host cut off
    holder, term = wait_until(lambda: leader(cluster), timeout=30, what="a control leader")
    old_host = holder.split(":")[0]
    partition(old_host)
    started = time.monotonic()
    try:
        new = wait_until(lambda: (now := leader(cluster)) and now[1] > term and now, timeout=60, what="a new leader")
        results[faults.PARTITION_LEADER_HOST] = time.monotonic() - started
        time.sleep(2)
    finally:
        heal(old_host)
    out(
        f"partition {old_host} (leader, term {term}): {new[0].split(':')[0]} leads in term {new[1]} after "
        f"{results[faults.PARTITION_LEADER_HOST]:.1f} s"
    )
    time.sleep(lease * 2)  # the healed one wakes up; it must not act
    now = leader(cluster)
    results["old leader acted"] = bool(now and (now[0] == holder or now[1] != new[1]))
    (results["old leader refused"],) = query(
        cluster, "SELECT count(*) FROM jobs_deposedwrite WHERE holder = %s AND term = %s", [holder, term]
    )[0]

    # 3. every process of one host killed at once
    correlation = submit(cluster, jobs_per_fault)
    correlations.append(correlation)
    victim, held = _host_holding(cluster, correlation, [h.name for h in cluster.hosts])
    cut = database_now(cluster)
    kill_host(cluster, victim)
    started = time.monotonic()
    wait_until(lambda: rescued(cluster, held, victim, cut), timeout=60, what=f"the jobs of {victim} rescued")
    results[faults.KILL_HOST] = time.monotonic() - started
    out(f"kill -9 every process of {victim} ({len(held)} jobs held): rescued in {results[faults.KILL_HOST]:.1f} s")
    host_start(cluster, cluster.host(victim))

    # 4. PgBouncer restarted, 5. PostgreSQL restarted immediately, each under load
    for name, fault in (
        (faults.PGBOUNCER_RESTART, lambda: pgbouncer_restart(cluster)),
        (faults.POSTGRES_RESTART, lambda: postgres_restart("immediate")),
    ):
        correlation = submit(cluster, jobs_per_fault)
        correlations.append(correlation)
        _host_holding(cluster, correlation, [h.name for h in cluster.hosts])
        started = time.monotonic()
        fault()
        wait_until(lambda c=correlation: settled(cluster, [c]), timeout=120, what=f"the jobs after: {name}")
        results[name] = time.monotonic() - started
        out(f"{name}: its jobs all ended {results[name]:.1f} s after the fault")

    wait_until(lambda: settled(cluster, correlations), timeout=120, what="every drill job to end")
    verdict = faults.verdict(
        lambda statement, parameters: query(cluster, statement, parameters),
        correlations=correlations,
        submitted=jobs_per_fault * len(correlations),
    )
    (deposed,) = query(cluster, "SELECT count(*) FROM jobs_deposedwrite WHERE at >= %s", [began])[0]
    results.update(verdict=verdict, deposed_writes_refused=deposed)
    clients, servers = connections(cluster)
    results.update(clients=clients, server_connections=servers)
    out(
        f"jobs {verdict.jobs}, lost {verdict.lost}, not completed {verdict.not_completed}; effects {verdict.effects} "
        f"(jobs with none {verdict.effects_missing}, with more than one {verdict.effects_duplicated}, reported by "
        f"another attempt than applied it {verdict.effects_misreported}); stale writes refused "
        f"{verdict.stale_writes_refused}, deposed leader writes refused {deposed}, "
        f"old leader acted: {results['old leader acted']} (its refused writes {results['old leader refused']}); "
        f"connections: {clients} clients at PgBouncer, {servers} at PostgreSQL"
    )
    return results


def drill_failures(results: dict) -> list[str]:
    """What the drill's totals show went wrong (none: it held). Every drill job completes: none may
    end dead or cancelled, and a deposed leader must not take its lease back."""
    verdict = results["verdict"]
    failures = verdict.failures()
    if verdict.not_completed:
        failures.append(f"jobs did not complete ({verdict.not_completed})")
    if results["old leader acted"]:
        failures.append("the healed leader took its lease back")
    return failures
