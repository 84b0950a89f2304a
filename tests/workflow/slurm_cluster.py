"""A throwaway single-node Slurm on loopback, for the Slurm integration test.

Installs nothing: it needs Debian's ``slurmctld slurmd slurm-client munge`` already present
(``.ci/slurm-setup.sh``) and root. It starts a private munged (own key and socket under a scratch
folder), slurmctld and slurmd in the foreground as children of this process, writes
/etc/slurm/slurm.conf (the only place the jobstep plugin's inner ``srun`` finds it; an existing file
is backed up and restored), waits for the node to be idle, and on stop cancels what is left and
stops the three daemons by their PIDs.

``slurm_cluster`` is the pytest fixture; it skips with the reason when Slurm cannot be started,
and fails instead when the ``CI`` environment variable is set. Nothing here runs unless asked
(:data:`OPT_IN`): it starts daemons and rewrites /etc/slurm/slurm.conf.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SLURM_CONF = Path("/etc/slurm/slurm.conf")
MACHINE_LOCK = Path(tempfile.gettempdir()) / "groupsparse-slurm-cluster.lock"


def in_ci() -> bool:
    """CI=true (or any value but empty/0/false): the Slurm tests are mandatory there."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def slurm_tests_enabled() -> bool:
    """The Slurm tests run only when asked: GROUPSPARSE_SLURM_TEST=1, or in CI."""
    return os.environ.get("GROUPSPARSE_SLURM_TEST", "").strip() == "1" or in_ci()


# For a module's pytestmark: skipped, with how to enable them, unless asked.
OPT_IN = pytest.mark.skipif(
    not slurm_tests_enabled(),
    reason="starts a real Slurm and rewrites /etc/slurm/slurm.conf: run with GROUPSPARSE_SLURM_TEST=1 "
    "(after `bash .ci/slurm-setup.sh`); mandatory when CI=true",
)
BACKUP_SUFFIX = ".groupsparse-test-backup"
MARKER = "# Written by groupsparse tests/slurm_cluster.py for a test run; restored afterwards."
PARTITION = "test"
REQUIRED_PROGRAMS = (
    "munged",
    "munge",
    "unmunge",
    "slurmctld",
    "slurmd",
    "sinfo",
    "squeue",
    "sbatch",
    "srun",
    "scancel",
    "scontrol",
)


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be started here; the message says why."""


def unavailable_reason() -> str | None:
    """Why a private Slurm cannot be started on this machine, or None if it can be tried."""
    if os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their submitter and the config lives in /etc/slurm)"
    missing = [p for p in REQUIRED_PROGRAMS if shutil.which(p, path=_sbin_path()) is None]
    if missing:
        return (
            f"Slurm/munge programs not installed: {', '.join(missing)} "
            "(run .ci/slurm-setup.sh: apt-get install slurmctld slurmd slurm-client munge)"
        )
    try:
        import pwd

        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (the munge package creates it)"
    for daemon in ("slurmctld", "slurmd"):
        # Another Slurm on this machine would fight over the node name and /etc/slurm.
        pids = running(daemon)
        if pids:
            return f"a {daemon} is already running here (PIDs {pids}); not touching it"
    return None


def running(command: str) -> list[int]:
    """PIDs of live processes whose command name is ``command`` (read from /proc)."""
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == command and pid_alive(int(comm.parent.name)):
                pids.append(int(comm.parent.name))
    return pids


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _program(name: str) -> str:
    path = shutil.which(name, path=_sbin_path())
    if path is None:
        raise SlurmUnavailable(f"{name} not found")
    return path


def _free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports free right now (held together so none repeats)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def node_line() -> str:
    """This machine's NodeName line as slurmd detects it, bound to loopback."""
    detected = subprocess.run([_program("slurmd"), "-C"], capture_output=True, text=True, check=True, timeout=30).stdout
    line = next((l for l in detected.splitlines() if l.startswith("NodeName=")), None)
    if line is None:
        raise SlurmUnavailable(f"`slurmd -C` printed no NodeName line: {detected!r}")
    return f"{line.strip()} NodeAddr=127.0.0.1 State=UNKNOWN"


@dataclass
class SlurmCluster:
    """One munged + slurmctld + slurmd, all children of this process, configured under ``scratch``."""

    scratch: Path
    start_timeout_s: float = 60.0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _backup: Path | None = None
    _wrote_conf: bool = False
    _machine_lock: object = None  # the open lock file while this cluster holds the machine

    @property
    def munge_socket(self) -> Path:
        return self.scratch / "munge" / "munge.socket"

    @property
    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.processes.items()}

    def log(self, name: str) -> Path:
        return self.scratch / "log" / f"{name}.log"

    # -- start -------------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        # One cluster at a time on a machine: a second pytest-xdist worker waits here for the first's
        # cluster to stop, instead of finding its slurmctld running (the lock goes with the process).
        self._machine_lock = open(MACHINE_LOCK, "w")  # noqa: SIM115  (held until stop())
        fcntl.flock(self._machine_lock, fcntl.LOCK_EX)
        reason = unavailable_reason()
        if reason:
            raise SlurmUnavailable(reason)
        try:
            (self.scratch / "log").mkdir(parents=True, exist_ok=True)
            self._start_munge()
            self._write_conf()
            self._spawn("slurmctld", [_program("slurmctld"), "-D", "-c", "-i"])
            self._spawn("slurmd", [_program("slurmd"), "-D"])
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str], **popen) -> None:
        out = open(self.log(f"{name}.stdout"), "wb")
        try:
            self.processes[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, **popen
            )
        finally:
            out.close()

    def _start_munge(self) -> None:
        # A private munged (own key and socket) leaves any system munge alone.
        munge_dir = self.munge_socket.parent
        munge_dir.mkdir(mode=0o755)  # clients must reach the socket
        key = munge_dir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)  # never readable by others
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(1024))
        for path in (munge_dir, key):
            shutil.chown(path, "munge", "munge")
        self._spawn(
            "munged",
            [
                _program("munged"),
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={munge_dir / 'munged.pid'}",
                f"--seed-file={munge_dir / 'munged.seed'}",
                f"--log-file={munge_dir / 'munged.log'}",
            ],
            user="munge",
            group="munge",
        )
        self._wait(lambda: self._munge_roundtrip(), "munged to answer on its socket")

    def _munge_roundtrip(self) -> bool:
        if not self.munge_socket.exists():
            return False
        cred = subprocess.run(
            [_program("munge"), "-n", f"--socket={self.munge_socket}"], capture_output=True, timeout=10
        )
        if cred.returncode != 0:
            return False
        back = subprocess.run(
            [_program("unmunge"), f"--socket={self.munge_socket}"], input=cred.stdout, capture_output=True, timeout=10
        )
        return back.returncode == 0

    def slurm_conf_text(self) -> str:
        s = self.scratch
        for sub in ("state", "spool"):
            (s / sub).mkdir(exist_ok=True)
        host = socket.gethostname().split(".")[0]
        ctld_port, slurmd_port = _free_ports(2)
        return "\n".join(
            [
                MARKER,
                "ClusterName=groupsparse-test",
                f"SlurmctldHost={host}(127.0.0.1)",  # loopback everywhere: no DNS lookup
                f"SlurmctldPort={ctld_port}",  # free ports: no clash with anything else listening
                f"SlurmdPort={slurmd_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={self.munge_socket}",
                "ProctrackType=proctrack/linuxproc",  # no cgroups needed in a container
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",  # no slurmdbd: sacct is off, use squeue
                "JobCompType=jobcomp/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "DefMemPerCPU=1000",  # a job that names no memory must not take the whole node
                "ReturnToService=2",
                "MinJobAge=300",  # finished jobs stay visible to squeue long after the first status poll
                "KillWait=5",
                "InactiveLimit=0",
                "MailProg=/bin/true",
                f"StateSaveLocation={s / 'state'}",
                f"SlurmdSpoolDir={s / 'spool'}",
                f"SlurmctldPidFile={s / 'slurmctld.pid'}",
                f"SlurmdPidFile={s / 'slurmd.pid'}",
                f"SlurmctldLogFile={self.log('slurmctld')}",
                f"SlurmdLogFile={self.log('slurmd')}",
                node_line(),
                f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    def _write_conf(self) -> None:
        text = self.slurm_conf_text()
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        backup = SLURM_CONF.with_name(SLURM_CONF.name + BACKUP_SUFFIX)
        if SLURM_CONF.exists() or SLURM_CONF.is_symlink():
            stale = SLURM_CONF.is_file() and SLURM_CONF.read_text(errors="replace").startswith(MARKER)
            if stale:
                # Left by a run that was killed: the real backup, if any, is already in place.
                SLURM_CONF.unlink()
            else:
                if backup.exists():
                    raise SlurmUnavailable(f"{backup} exists from an earlier run; restore it by hand")
                os.replace(SLURM_CONF, backup)
        if backup.exists():
            self._backup = backup
        tmp = SLURM_CONF.with_name(SLURM_CONF.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, SLURM_CONF)
        self._wrote_conf = True

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise SlurmUnavailable(
                        f"{name} exited with {proc.returncode} while waiting for {what}; "
                        f"log tail:\n{self.log_tail(name)}"
                    )
            if ready():
                return
            time.sleep(0.3)
        raise SlurmUnavailable(
            f"timed out after {self.start_timeout_s:.0f} s waiting for {what}; "
            f"logs in {self.scratch / 'log'}:\n{self.log_tail()}"
        )

    def node_state(self) -> str:
        out = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False)
        return out.stdout.strip()

    def _wait_idle(self) -> None:
        self._wait(lambda: self.node_state() == "idle", "the node to be idle in sinfo")

    # -- use ---------------------------------------------------------------------------------

    def run(self, argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(
            [_program(argv[0]), *argv[1:]], capture_output=True, text=True, check=check, timeout=timeout
        )

    def job_ids(self) -> set[str]:
        """Ids of all jobs slurmctld still remembers (finished ones for MinJobAge seconds)."""
        out = self.run(["squeue", "-h", "-t", "all", "-o", "%i"], check=False).stdout
        return {line.strip() for line in out.splitlines() if line.strip()}

    def job_table(self) -> dict[str, dict[str, str]]:
        """``scontrol show job`` for every remembered job: id -> {JobName, JobState, ExitCode, ...}."""
        out = self.run(["scontrol", "-o", "show", "job"], check=False).stdout
        jobs = {}
        for line in out.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if "JobId" in fields:
                jobs[fields["JobId"]] = fields
        return jobs

    def log_tail(self, name: str | None = None, lines: int = 15) -> str:
        names = [name] if name else ["munged.stdout", "slurmctld", "slurmd"]
        chunks = []
        for n in names:
            for path in (self.log(n), self.log(f"{n}.stdout")):
                if path.exists():
                    tail = path.read_text(errors="replace").splitlines()[-lines:]
                    chunks.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(chunks)

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel leftover jobs, stop the daemons by PID, restore /etc/slurm/slurm.conf. Idempotent."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                ids = sorted(self.job_ids())
                if ids:
                    self.run(["scancel", *ids], check=False, timeout=15)
        # Reverse start order: slurmd, slurmctld, then munged which both need until the end.
        for name in reversed(list(self.processes)):
            self._stop_process(name, self.processes[name])
        if self._wrote_conf:
            with contextlib.suppress(FileNotFoundError):
                SLURM_CONF.unlink()
            self._wrote_conf = False
        if self._backup is not None and self._backup.exists():
            os.replace(self._backup, SLURM_CONF)
            self._backup = None
        if self._machine_lock is not None:
            self._machine_lock.close()  # releases the flock
            self._machine_lock = None

    @staticmethod
    def _stop_process(name: str, proc: subprocess.Popen, grace_s: float = 15) -> None:
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace_s)

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (zombies of reaped children count as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(FileNotFoundError):
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    return False


def make_scratch() -> Path:
    """A fresh folder for one cluster's state, logs and munge socket."""
    scratch = Path(tempfile.mkdtemp(prefix="groupsparse-slurm-"))
    scratch.chmod(0o755)  # the munge user must reach its own folder inside
    return scratch


@pytest.fixture(scope="module")
def slurm_cluster():
    """A running single-node Slurm for the tests of one module; stopped by PID afterwards."""
    scratch = make_scratch()
    cluster = SlurmCluster(scratch)
    try:
        cluster.start()
    except SlurmUnavailable as err:
        shutil.rmtree(scratch, ignore_errors=True)
        if in_ci():
            pytest.fail(f"CI is set, so Slurm must be available: {err}")
        pytest.skip(f"Slurm unavailable: {err}")
    try:
        yield cluster
    finally:
        cluster.stop()
        leftover = {n: p for n, p in cluster.pids.items() if pid_alive(p)}
        if leftover:
            raise RuntimeError(f"Slurm daemons still running after stop: {leftover}")
        shutil.rmtree(scratch, ignore_errors=True)
