"""The README and docs/ as a newcomer reads them: short, links that lead somewhere, an index of every page
by reader (docs/README.md), a reference that names every public name, and CI running the README's own
test command."""

from __future__ import annotations

import inspect
import re

from support import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
SHELVES = ("guide", "reference", "internals", "evidence")  # the four readers: docs/README.md



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


def test_the_docs_are_on_four_shelves_and_the_index_links_every_page():
    """docs/ holds the index and four folders by reader; docs/README.md links every page and record folder,
    and the README links the index."""
    loose = sorted(p.name for p in DOCS.iterdir() if p.name != "README.md" and p.name not in SHELVES)
    assert loose == [], f"docs/ pages outside guide/, reference/, internals/, evidence/: {loose}"
    index = (DOCS / "README.md").read_text()
    linked = {(DOCS / t.partition("#")[0]).resolve() for t in re.findall(r"\]\(([^)\s]+)\)", index)}
    unlinked = [str(p.relative_to(DOCS)) for shelf in SHELVES for p in sorted((DOCS / shelf).iterdir())
                if p.resolve() not in linked]
    assert unlinked == [], f"pages or record folders docs/README.md does not link: {unlinked}"
    assert "](docs/README.md)" in README.read_text()


def test_the_reference_names_every_public_name_and_member():
    """docs/reference/library.md names each name of remote.__all__ and each public method, property and
    field of its classes (checked against the code, so a new name cannot go undocumented)."""
    import remote

    text = (DOCS / "reference" / "library.md").read_text()
    missing = []
    for name in remote.__all__:
        obj = getattr(remote, name)
        members = []
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            namespace = {}
            for klass in reversed(obj.__mro__):  # remote.api.Fleet's methods are partly FleetBase's
                if klass is obj or klass.__module__.startswith("remote"):
                    namespace.update(vars(klass))
            members = [a for a, v in namespace.items() if not a.startswith("_")
                       and (isinstance(v, property) or inspect.isfunction(v))]
            members += [f for f in getattr(obj, "__dataclass_fields__", {}) if not f.startswith("_")]
        for word in [name, *members]:
            if not re.search(rf"\b{re.escape(word)}\b", text):
                missing.append(name if word == name else f"{name}.{word}")
    assert missing == [], f"public names docs/reference/library.md does not mention: {sorted(set(missing))}"


def test_the_name_check_sees_an_undocumented_method(monkeypatch):
    import remote

    class Extra:
        def brand_new_method_nobody_documented(self):
            pass

    monkeypatch.setattr(remote, "__all__", [*remote.__all__, "Extra"])
    monkeypatch.setattr(remote, "Extra", Extra, raising=False)
    try:
        test_the_reference_names_every_public_name_and_member()
    except AssertionError as e:
        assert "Extra" in str(e) and "brand_new_method_nobody_documented" in str(e)
    else:
        raise AssertionError("an undocumented public name went unseen")


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
