"""The README and docs/ as a newcomer reads them: short, links that lead somewhere, and CI running the
README's own test command."""

from __future__ import annotations

import re
from pathlib import Path

from support import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_stays_short():
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md":
                slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                         for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
                if anchor not in slugs:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_ci_runs_the_readmes_test_command_exactly():
    block = README.read_text().split("## The lab and the two commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, commands
    ci = (ROOT / ".ci" / "run").read_text()
    # ... under the environment a fresh machine has: env -i, HOME, root's default PATH, nothing more of ours
    assert re.search(r"^plain=\(env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
                     r"CI=true\)$", ci, re.M), ci
    assert re.search(rf"^\"\$\{{plain\[@\]\}}\" bash -c '{re.escape(commands[1])}' \|\| status=\$\?$", ci, re.M), \
        (commands[1], ci)
    # what it passes through beside them reaches the package registries, and nothing else
    passed = re.search(r"case \$name in\n(.*?)\)\n", ci, re.S).group(1)
    names = {n.strip() for n in passed.replace("\\\n", " ").split("|")}
    assert names and all(re.fullmatch(r"(?i)(https?|no|all)_proxy|PIP_\*|UV_\*|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|"
                                      r"CURL_CA_BUNDLE", n) for n in names), names


def test_the_docs_tell_users_to_run_remote_not_invoke():
    """`invoke TASK` works only inside a checkout: the pages show `remote TASK` (invoke only in a paragraph
    about the checkout, or in the benchmark note on how earlier figures were taken)."""
    found = []
    for page in PAGES:
        for paragraph in re.split(r"\n\s*\n", page.read_text()):
            if re.search(r"`invoke [a-z]", paragraph) and "checkout" not in paragraph and "were taken with" not in paragraph:
                found.append(f"{page.relative_to(ROOT)}: {paragraph.strip()[:200]}")
    assert found == []
