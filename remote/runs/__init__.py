"""What reads runs: the known-good record (remote.runs.knowngood) and a run's report page
(remote.runs.report). Above both layers: they read facts (remote.facts) and runs' files through the
operations (remote.ops); nothing below imports them.
"""
