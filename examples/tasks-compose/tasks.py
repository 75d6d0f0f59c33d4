"""A project's own tasks.py that adds remote's tasks under `gpu`: `invoke gpu.deploy -c 200`,
`invoke gpu.exec -c 200 --command 'nvidia-smi'`, `invoke gpu.logs -f`, beside its own tasks.

The hosts file comes from invoke.yaml (`remote: {hosts: ...}`), unless --hosts is given."""

from invoke import Collection, task

from remote.cli import collection


@task
def smoke(c, container=None):
    """The project's own task, driving a container through the library: one command, its exit status."""
    import remote

    with remote.open(c.config.remote.hosts) as fleet:
        r = fleet.container(container or c.config.remote.container).exec(["python3", "-c", "print('ok')"])
    print(f"smoke: exit {r.exit_code}, said {r.text.strip()!r}")


ns = Collection(smoke)
ns.add_collection(collection(), "gpu")
