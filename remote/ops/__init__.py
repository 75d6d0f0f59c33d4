"""Operations: what changes a container (deploy, warmup, jobs, transfers, fleets), each read through
remote.facts and carried out over remote.transport under the container's operation lease."""
