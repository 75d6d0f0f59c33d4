"""Lab tier: the SSH transport and the pct layer against a real sshd and real LXC containers."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote import config
from remote.ops import files
from remote.errors import (AuthenticationError, CommandError, CommandTimeout, ConnectError, ContainerCommandNotFound,
                           ContainerNotFound, ContainerNotRunning, HostKeyError)
from remote.transport.pct import pct_argv
from remote.transport.session import Session, inventory
from remote.transport import SshTransport

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def agent_session(lab_hosts):
    with Session(config.load(str(lab_hosts)), agent=True) as s:
        yield s


@pytest.fixture(scope="module")
def plain_session(lab_hosts):
    with Session(config.load(str(lab_hosts))) as s:
        yield s


@pytest.fixture(params=["pct-exec", "agent"])
def ct(request, plain_session, agent_session):
    """Each container-level test runs both ways: a `pct exec` per command, and through the agent."""
    if request.param == "agent":
        c = agent_session.container(200)
        assert agent_session._agent_for(agent_session.config.container(200)) is not None
        return c
    return plain_session.container(200)

# Everything a shell would treat specially, plus plain text; ASCII because pct decodes argv with
# the host's locale (non-ASCII data goes through stdin, tested below).
ARG = st.text(alphabet=st.sampled_from(list("ab Z09'\"$`\\\n\t;&|<>()*?[]{}~#!-=%^,.:/@+")), max_size=12)


@pytest.mark.fault("10,000 fuzzed argv", promise="quoted exactly once: the host shell hands pct exactly the argv")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(ARG, max_size=6))
def test_argv_round_trips_byte_exact(ct, args):
    result = ct.run(["printf", "%s\\0", "START", *args])
    assert result.stdout.split(b"\0")[:-1] == [b"START", *(a.encode() for a in args)]


def test_leading_dash_and_empty_arguments(ct):
    out = ct.run(["printf", "[%s]", "-la", "", "--", "--keep-env"]).out
    assert out == "[-la][][--][--keep-env]"


def test_stdin_binary_and_non_ascii_round_trip(ct):
    data = os.urandom(1 << 20) + "héllo wörld ✓".encode()
    assert ct.run(["cat"], stdin=data).stdout == data


def test_stdout_and_stderr_drained_together(ct):
    r = ct.run(["bash", "-c", "head -c 3000000 /dev/zero | tr '\\0' o; head -c 3000000 /dev/zero | tr '\\0' e >&2"])
    assert len(r.stdout) == 3_000_000 and len(r.stderr) == 3_000_000


def test_streaming_callback_sees_output_before_exit(ct):
    seen = []
    ct.run(["bash", "-c", "echo one; echo two >&2"], on_output=lambda k, b: seen.append((k, b)))
    assert (b"".join(b for k, b in seen if k == "stdout"), b"".join(b for k, b in seen if k == "stderr")) == (
        b"one\n", b"two\n")


def test_environment_is_explicit(ct):
    r = ct.run(["bash", "-c", 'echo "$HOME|$PWD|$PATH|${SSL_CERT_FILE-unset}|$X"'], cwd="/tmp", env={"X": "y z"})
    home, pwd, path, ssl, x = r.out.strip().split("|")
    assert (home, pwd, ssl, x) == ("/root", "/tmp", "unset", "y z")
    assert path.startswith("/root/venv/bin:") and "/usr/local/bin" in path


def test_exit_codes_are_the_commands_own(ct):
    assert ct.run(["bash", "-c", "exit 42"], check=False).exit_code == 42
    assert ct.run(["bash", "-c", "exit 255"], check=False).exit_code == 255  # not mistaken for pct's 255
    assert ct.run(["bash", "-c", "kill -9 $$"], check=False).exit_code == 137
    with pytest.raises(CommandError) as e:
        ct.run(["bash", "-c", "echo bad >&2; exit 3"])
    assert e.value.command_status == 3 and e.value.stderr_tail == "bad"


@pytest.mark.fault("Command past its timeout", promise="killed inside the container, CommandTimeout")
def test_timeout_kills_the_process_inside_the_container(ct):
    with pytest.raises(CommandTimeout):
        ct.run(["sleep", "4321"], timeout=1)
    left = ct.run(["pgrep", "-f", "sleep 4321"], check=False)
    assert left.exit_code == 1, f"process left behind: {left.out}"


@pytest.mark.fault("Missing container or program", promise="a typed error saying what to do")
def test_pct_failures_are_typed(lab_session):
    with pytest.raises(ContainerNotFound, match="containers.999"):
        lab_session.container(999).run(["true"])
    with pytest.raises(ContainerCommandNotFound, match="no-such-program"):
        lab_session.container(200).run(["no-such-program"])


@pytest.mark.fault("Container stopped", promise="ContainerNotRunning naming `pct start`")
def test_stopped_container_and_lifecycle(lab_session):
    ct = lab_session.container(201)
    ct.stop()
    try:
        assert ct.status() == "stopped"
        with pytest.raises(ContainerNotRunning, match="pct start 201"):
            ct.run(["true"])
        assert {s.host: s.containers for s in inventory(lab_session)}["lab"] == {
            200: "running", 201: "stopped", 999: "missing"}
    finally:
        ct.start()
        ct.wait_running(timeout=20)
    assert ct.run(["true"]).ok


def test_files_push_pull_and_trees(ct, tmp_path):
    data = os.urandom(300_000)
    files.push_bytes(ct, data, "/root/t/deep/new/dir/blob.bin", mode=0o600)
    assert files.pull_bytes(ct, "/root/t/deep/new/dir/blob.bin") == data
    assert ct.run(["stat", "-c", "%a", "/root/t/deep/new/dir/blob.bin"]).out.strip() == "600"
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "x.txt").write_text("x")
    (src / "top with space.bin").write_bytes(os.urandom(1000))
    assert files.push_tree(ct, src, "/root/t/tree") == 2
    assert files.pull_tree(ct, "/root/t/tree", tmp_path / "back") == 2
    assert (tmp_path / "back" / "a" / "b" / "x.txt").read_text() == "x"
    with pytest.raises(CommandError):
        files.pull_bytes(ct, "/root/t/missing")


def test_pct_double_follows_the_spec(lab_session):
    t = lab_session.transport(lab_session.config.hosts["lab"])
    r = t.run(pct_argv("pct", "exec", "200", "ls", "-la"))
    assert (r.exit_code, r.err.splitlines()[:2]) == (255, ["Unknown option: la", "400 unable to parse option"])
    r = t.run(pct_argv("pct", "exec", "200", "--keep-env", "ls"))
    assert r.exit_code == 255 and "keep-env: type check ('boolean') failed - got 'ls'" in r.err
    r = t.run(pct_argv("pct", "exec", "20", "--", "true"))
    assert "vmid: invalid format - value does not look like a valid VM ID" in r.err
    r = t.run(pct_argv("pct", "ex", "200", "--", "sh", "-c", "echo $PATH"))  # unique prefix, keep-env default
    assert r.out.strip() == "/sbin:/bin:/usr/sbin:/usr/bin"
    r = t.run(pct_argv("pct", "frobnicate"))
    assert r.exit_code == 255 and r.err.startswith("ERROR: unknown command 'pct frobnicate'")
    # push: no parent directories, error printed, exit status 0 -- the reason every transfer is verified.
    r = t.run(pct_argv("pct", "push", "200", "/etc/hostname", "/root/no/such/dir/f"))
    assert r.exit_code == 0 and "failed to create file: /root/no/such/dir/f" in r.err
    r = t.run(pct_argv("pct", "status", "200"))
    assert r.out == "status: running\n"


def test_one_connection_is_reused(lab_session):
    t = lab_session.transport(lab_session.config.hosts["lab"])
    ports = {t.run(["sh", "-c", "echo $SSH_CLIENT"]).out.split()[1] for _ in range(5)}
    assert len(ports) == 1


def _host(lab, **over):
    data = dict(name="lab", address="127.0.0.1", port=lab.port, user="root", key_file=str(lab.key_file),
                known_hosts=str(lab.known_hosts), connect_timeout=5.0)
    data.update(over)
    return config.Host(**data)


@pytest.mark.fault("Unknown host key", promise="refused, never learned, not retried; the message says how to add it")
def test_unknown_host_key_is_refused_not_added(lab, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    sleeps = []
    t = SshTransport(_host(lab, known_hosts=str(kh)), sleep=sleeps.append)
    with pytest.raises(HostKeyError, match="ssh-keyscan -p"):
        t.run(["true"])
    assert kh.read_text() == "" and sleeps == []  # not learned, not retried


@pytest.mark.fault("Changed host key", promise="refused; the message prints the ssh-keygen -R fix")
def test_changed_host_key_is_refused(lab, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{lab.port} " + " ".join(Path(f"{other}.pub").read_text().split()[:2]) + "\n")
    with pytest.raises(HostKeyError, match="CHANGED.*\n.*\n.*ssh-keygen -R"):
        SshTransport(_host(lab, known_hosts=str(kh)), sleep=lambda s: None).run(["true"])


def _lab_key_line(lab) -> str:
    return " ".join(lab.known_hosts.read_text().split()[1:3])


@pytest.mark.fault("@cert-authority line in known_hosts", promise="skipped with one note that host certificates "
                   "are not supported; the host's plain key still connects")
def test_a_cert_authority_line_is_skipped_with_one_note(lab, tmp_path, caplog):
    kh = tmp_path / "known_hosts"
    kh.write_text(f"@cert-authority *.example.com {_lab_key_line(lab)}\n" + lab.known_hosts.read_text())
    with caplog.at_level("WARNING", logger="remote.transport"):
        for _ in range(2):
            t = SshTransport(_host(lab, known_hosts=str(kh)), sleep=lambda s: None)
            assert t.run(["true"]).ok
            t.close()
    notes = [r.getMessage() for r in caplog.records if "@cert-authority" in r.getMessage()]
    assert len(notes) == 1 and "host certificates are not supported" in notes[0] and str(kh) in notes[0]


@pytest.mark.fault("@revoked host key in known_hosts", promise="refused, the message names the file and line")
def test_a_revoked_host_key_is_refused_naming_the_file_and_line(lab, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(lab.known_hosts.read_text() + f"# revoked below\n@revoked * {_lab_key_line(lab)}\n")
    sleeps = []
    with pytest.raises(HostKeyError, match=f"REVOKED by {kh} line 3: refused"):
        SshTransport(_host(lab, known_hosts=str(kh)), sleep=sleeps.append).run(["true"])
    assert sleeps == []  # not retried


@pytest.mark.fault("Key refused by the host", promise="AuthenticationError, not retried")
def test_wrong_key_is_an_auth_error_not_retried(lab, tmp_path):
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    sleeps = []
    with pytest.raises(AuthenticationError, match=r"key_file .*/id: refused"):
        SshTransport(_host(lab, key_file=str(key)), sleep=sleeps.append).run(["true"])
    assert sleeps == []


@pytest.mark.fault("Host refuses connections", promise="retried with backoff, then ConnectError")
def test_connection_refused_is_retried_with_backoff(lab):
    from support import free_port

    sleeps = []
    t = SshTransport(_host(lab, port=free_port()), attempts=3, sleep=sleeps.append)
    with pytest.raises(ConnectError, match="cannot connect"):
        t.run(["true"])
    assert len(sleeps) == 2 and all(s > 0 for s in sleeps)


def test_cli_exec_streams_and_exits_with_status(lab_hosts):
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(lab_hosts), "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-c", "from remote.cli import program; program.run()"]
    r = subprocess.run([*run, "exec", "--container", "200", "--command", "echo out; echo err >&2; exit 7"],
                       capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")
    r = subprocess.run([*run, "exec", "--container", "201", "--dry", "--command", "rm -rf /x"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith("ssh -p ") and "'pct exec 201 --keep-env 0 --" in r.stdout
    r = subprocess.run([*run, "status", "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and '"201": "running"' in r.stdout and '"999": "missing"' in r.stdout


@pytest.mark.fault("Output consumer gone (`| head`)", promise="its error is raised, not mistaken for a lost connection")
def test_an_output_callback_error_is_not_a_lost_connection(ct):
    def broken(kind, chunk):
        raise BrokenPipeError("stdout closed")  # e.g. `invoke ... | head -1`

    with pytest.raises(BrokenPipeError):
        ct.run(["bash", "-c", "echo one; sleep 0.2; echo two"], on_output=broken)
    assert ct.run(["true"]).ok  # the connection is still fine


def test_agent_runs_commands_from_many_threads_at_once(agent_session):
    import threading

    ct = agent_session.container(200)
    results = {}

    def work(n):
        results[n] = ct.run(["bash", "-c", f"sleep 0.3; echo {n}"]).out.strip()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    start = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == {n: str(n) for n in range(8)}
    assert time.monotonic() - start < 2.0  # concurrent, not 8 x 0.3 s in a row


@pytest.mark.fault("SSH dropped mid-command",
                   promise="the command's processes are killed in the container; the next command reconnects")
def test_agent_is_restarted_after_the_connection_dies(agent_session, lab):
    ct = agent_session.container(200)
    first = agent_session._agent_for(agent_session.config.container(200))
    subprocess.run(["pkill", "-KILL", "-P", (lab.dir / "sshd.pid").read_text().strip()])
    for _ in range(50):
        if first.dead:
            break
        time.sleep(0.1)
    assert first.dead
    assert ct.run(["echo", "back"]).out == "back\n"
    assert agent_session._agent_for(agent_session.config.container(200)) is not first


def test_agent_falls_back_to_pct_exec_where_it_cannot_start(agent_session):
    with pytest.raises(ContainerNotFound):
        agent_session.container(999).run(["true"])
