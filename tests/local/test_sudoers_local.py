"""`remote init --sudoers USER --hosts FILE`: one drop-in per `sudo: true` host, with that host's containers
only, and never naming a program that anyone but root could replace (asked of the host itself: here, local
hosts, so rootchain.sh runs on this machine as it would on a Proxmox host)."""

from __future__ import annotations

import os

import pytest
from support import needs

from remote import sudo
from remote.cli import run as cli_run


def write(tmp_path, text: str):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text)
    return hosts


@pytest.mark.fault("init --sudoers", promise="`remote init --sudoers USER --hosts FILE` refuses a host whose pct (or "
                   "pvesh/pvesm beside it) lies under a folder that anyone but root can write, naming the host and "
                   "the path: such a rule would be a root grant")
def test_a_pct_in_a_folder_others_can_write_is_refused_naming_host_and_path(tmp_path, capsys):
    open_folder = tmp_path / "bin"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    hosts = write(tmp_path, f"hosts:\n  lab: {{local: true, sudo: true, pct: {open_folder}/pct}}\n"
                            "containers:\n  200: {host: lab}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing a user could pipe into /etc/sudoers.d/
    assert "hosts.lab.pct" in err and "on lab," in err and "writable by others" in err
    assert str(open_folder) in err and "Traceback" not in err


@pytest.mark.fault("init --sudoers", promise="the drop-in is built only from `sudo: true` hosts, one per host, each "
                   "allowing only the containers the file places on that host")
def test_one_drop_in_per_sudo_host_with_only_its_containers(tmp_path, capsys):
    hosts = write(tmp_path, "hosts:\n"
                            "  pve1: {local: true, sudo: true, pct: /usr/sbin/pct}\n"
                            "  pve2: {local: true, sudo: true, pct: /usr/sbin/pct}\n"
                            f"  lab: {{local: true, pct: {tmp_path}/pct}}\n"  # root login, a writable folder: not named
                            "containers:\n  200: {host: pve1}\n  300: {host: pve2}\n  400: {host: lab}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    err = capsys.readouterr().err
    assert "name the host" in err and "pve1, pve2" in err
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts), "--host", "pve1"]) == 0
    out = capsys.readouterr().out
    assert out == sudo.sudoers("trainer", ["/usr/sbin/pct"], [200], host="pve1")
    rule = sudo.rule_of(out, "trainer")
    assert rule[0] == "/usr/sbin/pct ^exec (200) --keep-env 0 -- .+$"
    assert not any(str(tmp_path) in r for r in rule)
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts), "--host", "lab"]) == 2
    assert "hosts.lab.sudo" in capsys.readouterr().err


def test_a_file_without_a_sudo_host_gets_no_drop_in(tmp_path, capsys):
    hosts = write(tmp_path, "hosts:\n  pve1: {local: true}\ncontainers:\n  200: {host: pve1}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "no host has `sudo: true`" in err


@pytest.mark.fault("init --sudoers", promise="a `sudo: true` host the file places no container on gets no drop-in "
                   "(one with no ids would allow every container of the host), in one line, exit 2")
def test_a_sudo_host_without_containers_gets_no_drop_in(tmp_path, capsys):
    hosts = write(tmp_path, "hosts:\n  pve1: {local: true, sudo: true, pct: /usr/sbin/pct}\n  pve2: {local: true}\n"
                            "containers:\n  300: {host: pve2}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "none is on host pve1" in err and "Traceback" not in err


# -- what the check walks and reads (issue 45 items 1-3): real links, interpreters and environments here ----------

@pytest.fixture
def root_dir():
    """A folder only root can write, under folders only root can write (tmp_path lies below the sticky /tmp,
    which the check rightly refuses): where a program a rule may name can live."""
    import shutil
    import tempfile

    needs(os.geteuid() == 0, "root (the check wants folders owned by uid 0)", "run the tests as root, as .ci/run does")
    path = tempfile.mkdtemp(prefix="remote-test-rootchain-", dir="/var/lib")
    os.chmod(path, 0o755)
    try:
        yield __import__("pathlib").Path(path)
    finally:
        shutil.rmtree(path)


def open_folder(root_dir):
    folder = root_dir / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    return folder


def refusal(tmp_path, capsys, pct) -> str:
    """What `remote init --sudoers trainer --hosts FILE` says of a sudo host whose pct is `pct` (it must refuse)."""
    hosts = write(tmp_path, f"hosts:\n  lab: {{local: true, sudo: true, pct: {pct}}}\ncontainers:\n  200: {{host: lab}}\n")
    code = cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code == 2 and out == "", out  # nothing a user could pipe into /etc/sudoers.d/
    return err


@pytest.mark.fault("init --sudoers", promise="a pct reached through links is followed one hop at a time, every folder "
                   "of every hop walked: a link part-way that sits in a folder anyone can write (absolute or relative, "
                   "however safe the end) is refused, naming that folder")
@pytest.mark.parametrize("relative", [False, True])
def test_a_link_part_way_in_a_folder_others_can_write_is_refused(root_dir, tmp_path, capsys, relative):
    folder = open_folder(root_dir)
    # root_dir/pct -> open/pct -> /usr/bin/true: the first and last hops are safe, the middle one is anyone's
    (folder / "pct").symlink_to("../../../../usr/bin/true" if relative else "/usr/bin/true")
    (root_dir / "pct").symlink_to("open/pct" if relative else folder / "pct")
    assert os.path.realpath(root_dir / "pct") == os.path.realpath("/usr/bin/true")
    err = refusal(tmp_path, capsys, root_dir / "pct")
    assert f"{folder} is writable by others" in err


def test_a_safe_link_chain_to_a_binary_is_allowed(root_dir, tmp_path, capsys):
    (root_dir / "bin").mkdir()
    (root_dir / "bin" / "real").symlink_to("/usr/bin/true")
    (root_dir / "pct").symlink_to("bin/real")
    hosts = write(tmp_path, f"hosts:\n  lab: {{local: true, sudo: true, pct: {root_dir}/pct}}\n"
                            "containers:\n  200: {host: lab}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 0, capsys.readouterr().err
    assert sudo.rule_of(capsys.readouterr().out, "trainer")[0].startswith(f"{root_dir}/pct ^exec (200) ")


@pytest.mark.fault("init --sudoers", promise="a pct that is a script is checked inside: its `#!` interpreter's chain "
                   "(a link to python3 in a folder anyone can write is refused), a shell script that sources a file, "
                   "and a file beside a script (which Python imports first) that others can write, each named")
@pytest.mark.parametrize("case", ["interpreter", "sources", "beside"])
def test_a_script_whose_interpreter_or_loaded_files_others_can_change_is_refused(root_dir, tmp_path, capsys, case):
    pct = root_dir / "pct"
    if case == "interpreter":
        folder = open_folder(root_dir)
        (folder / "python3").symlink_to("/usr/bin/python3")
        pct.write_text(f"#!{folder}/python3\nprint('pct')\n")
        why = f"its interpreter's chain: {folder} is writable by others"
    elif case == "sources":
        pct.write_text("#!/bin/bash\n. /etc/default/remote-pct\nexec true\n")
        why = "is a shell script that runs other files as root (line 2:. /etc/default/remote-pct)"
    else:
        pct.write_text("#!/usr/bin/python3\nimport pct_helper\n")
        (root_dir / "pct_helper.py").write_text("")
        os.chmod(root_dir / "pct_helper.py", 0o666)
        why = f"{root_dir}/pct_helper.py is writable by others"
    pct.chmod(0o755)
    err = refusal(tmp_path, capsys, pct)
    assert why in err, err


def test_the_labs_own_pct_double_passes_the_check(root_dir, tmp_path, capsys):
    """The lab's double as the lab installs it (<lab>/bin/pct, `#!/usr/bin/python3`, its halves beside it, all
    root's, mode 0644/0755): the sudo lab's rule names it, so it must pass honestly, not by an exception."""
    from remote.lab import Lab

    (root_dir / "bin").mkdir()
    Lab(dir=root_dir, port=2)._pct_double()  # the files only: nothing is started
    assert (root_dir / "bin" / "pct").read_text().startswith("#!/usr/bin/python3\n")
    hosts = write(tmp_path, f"hosts:\n  lab: {{local: true, sudo: true, pct: {root_dir}/bin/pct}}\n"
                            "containers:\n  200: {host: lab}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 0, capsys.readouterr().err
    assert sudo.rule_of(capsys.readouterr().out, "trainer")[0].startswith(f"{root_dir}/bin/pct ^exec (200) ")
    (root_dir / "bin" / "pct_make.py").chmod(0o664)  # and a half of it that its group could change does not
    err = refusal(tmp_path, capsys, root_dir / "bin" / "pct")
    assert f"{root_dir}/bin/pct_make.py is writable by its group" in err


@pytest.mark.fault("init --sudoers", promise="the check does not run through the fenced account's environment: an "
                   "exported BASH_FUNC_stat%% function or a stat earlier on PATH that answers 'root, 0755' for "
                   "everything does not make a pct in a folder anyone can write pass")
@pytest.mark.parametrize("how", ["exported function", "PATH"])
def test_a_lying_stat_in_the_login_environment_does_not_answer_for_the_check(root_dir, tmp_path, capsys, monkeypatch,
                                                                            how):
    folder = open_folder(root_dir)
    (folder / "pct").symlink_to("/usr/bin/true")
    # the true answer with every owner made root and every mode 755: the walk's shape stays right, only it lies
    lie = "/usr/bin/stat \"$@\" | /usr/bin/sed 's/^[0-9]* [0-7]* /0 755 /'"
    if how == "exported function":
        monkeypatch.setenv("BASH_FUNC_stat%%", f"() {{ {lie}; }}")
    else:
        liar = tmp_path / "liar"
        liar.mkdir()
        (liar / "stat").write_text(f"#!/bin/sh\n{lie}\n")
        (liar / "stat").chmod(0o755)
        monkeypatch.setenv("PATH", f"{liar}:{os.environ['PATH']}")
    err = refusal(tmp_path, capsys, folder / "pct")
    assert f"{folder} is writable by others" in err


@pytest.mark.fault("init --sudoers", promise="a name the login user cannot see (its folder cannot be searched by a "
                   "`sudo: true` login) is refused as unknown, not taken for a missing name only root could make: a "
                   "link hidden there may lead into /tmp")
def test_a_name_in_a_folder_the_login_cannot_search_is_refused_not_taken_as_missing(root_dir):
    import shutil
    import subprocess

    needs(shutil.which("runuser") is not None, "runuser (the check runs as a login that is not root)",
          "apt-get install util-linux")
    hidden = root_dir / "hidden"
    hidden.mkdir()
    os.chmod(hidden, 0o700)  # root's, unsearchable for the login; inside, a link into the sticky /tmp
    (hidden / "pct").symlink_to("/tmp/remote-test-nobody-made-this/pct")
    pct = str(hidden / "pct")
    r = subprocess.run(["runuser", "-u", "nobody", "--", *sudo.chain_argv([pct])], capture_output=True, text=True,
                       timeout=30)
    assert f"{pct}\t@end\tdone" in r.stdout, r.stderr  # the answer is whole: it is the reading that must refuse
    why = sudo.unsafe(r.stdout, [pct])
    assert pct in why and "cannot look inside" in why[pct], (r.stdout, why)


@pytest.mark.fault("init --sudoers", promise="every file beside a script that is not Proxmox's own is checked at any "
                   "depth: a package's module three folders down that others can write (Python imports it as root) "
                   "is refused, naming it")
def test_a_module_deep_beside_a_script_that_others_can_write_is_refused(root_dir, tmp_path, capsys):
    pct = root_dir / "pct"
    pct.write_text("#!/usr/bin/python3\nimport pkg.sub.mod\n")
    pct.chmod(0o755)
    deep = root_dir / "pkg" / "sub"
    deep.mkdir(parents=True)
    for f in (root_dir / "pkg" / "__init__.py", deep / "__init__.py", deep / "mod.py"):
        f.write_text("")
    os.chmod(deep / "mod.py", 0o666)
    err = refusal(tmp_path, capsys, pct)
    assert f"{deep}/mod.py is writable by others" in err, err


def test_a_folder_beside_a_script_that_the_login_cannot_read_is_refused(root_dir):
    import shutil
    import subprocess

    needs(shutil.which("runuser") is not None, "runuser (the check runs as a login that is not root)",
          "apt-get install util-linux")
    pct = root_dir / "pct"
    pct.write_text("#!/usr/bin/python3\nimport secretpkg\n")
    pct.chmod(0o755)
    (root_dir / "secretpkg").mkdir()
    (root_dir / "secretpkg" / "__init__.py").write_text("")
    os.chmod(root_dir / "secretpkg", 0o700)  # root's: the login cannot list what Python will import from it
    r = subprocess.run(["runuser", "-u", "nobody", "--", *sudo.chain_argv([str(pct)])], capture_output=True,
                       text=True, timeout=30)
    why = sudo.unsafe(r.stdout, [str(pct)])
    assert str(pct) in why and "unreadable" in why[str(pct)], (r.stdout, why)


@pytest.mark.fault("init --sudoers", promise="a real `#!` script whose line gives its interpreter an option that may "
                   "load code (perl -I, python -X, bash --rcfile, env -S) is refused naming the option; "
                   "`#!/usr/bin/perl -T` (Proxmox's own pct) and `#!/usr/bin/env python3` found on sudo's PATH pass")
@pytest.mark.parametrize("line, why", [
    ("#!/usr/bin/perl -I/tmp/x", "gives /usr/bin/perl the option '-I/tmp/x'"),
    ("#!/usr/bin/python3 -X importtime", "the option '-X importtime'"),
    ("#!/bin/bash --rcfile /tmp/x", "the option '--rcfile /tmp/x'"),
    ("#!/usr/bin/env -S perl -I/tmp/x", "only `env NAME`"),
    ("#!/usr/bin/perl -T", None),
    ("#!/usr/bin/env python3", None),
])
def test_a_shebang_with_options_that_may_load_code_is_refused(root_dir, tmp_path, capsys, line, why):
    pct = root_dir / "pct"
    pct.write_text(f"{line}\nexit 0;\n")
    pct.chmod(0o755)
    if why is not None:
        assert why in refusal(tmp_path, capsys, pct)
        return
    hosts = write(tmp_path, f"hosts:\n  lab: {{local: true, sudo: true, pct: {pct}}}\ncontainers:\n  200: {{host: lab}}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 0, capsys.readouterr().err
    assert sudo.rule_of(capsys.readouterr().out, "trainer")[0].startswith(f"{pct} ^exec (200) ")


@pytest.mark.fault("init --sudoers", promise="`#!/usr/bin/env NAME` is checked as env runs it: the first EXECUTABLE "
                   "file NAME on sudo's PATH, not a non-executable one of the same name in a folder before it")
def test_an_env_shebang_finds_the_first_executable_not_the_first_file(root_dir, tmp_path):
    import shutil
    import subprocess

    name = f"remote-test-env-{os.getpid()}"
    early, late = f"/usr/local/sbin/{name}", f"/usr/local/bin/{name}"  # both on sudo's PATH, sbin first
    try:
        shutil.copy("/usr/bin/true", early)
        os.chmod(early, 0o644)  # root's, an ELF, but not executable: env skips it
        shutil.copy("/usr/bin/true", late)
        os.chmod(late, 0o755)
        pct = root_dir / "pct"
        pct.write_text(f"#!/usr/bin/env {name}\n")
        pct.chmod(0o755)
        r = subprocess.run(sudo.chain_argv([str(pct)]), capture_output=True, text=True, timeout=30)
        finds = [line.split("\t")[2] for line in r.stdout.splitlines() if "\t@env-finds\t" in line]
        assert finds and finds[0].endswith(late), r.stdout
    finally:
        for path in (early, late):
            if os.path.lexists(path):
                os.unlink(path)
