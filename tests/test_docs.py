"""The README is a guide of at most 250 lines: what it is, the two commands exactly as the Makefile has them, your own
run in three commands of the CLI, the notebook table with every notebook, the headline result with links to its
evidence, and links into the site that all lead somewhere (each relative link names a file that exists, each
#anchor a heading of its target, every page of the site linked). The site's navigation and its pages are in step,
and the measurement history (dates, clock-precise timings, sessions) stays out of the README and the guide: it
lives, dated, in benchmarks/RESULTS.md. The site itself is built by `mkdocs build --strict` (`make docs`, which
`make test` runs before these tests)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
# the pages whose job is the measurements themselves: the current benchmark table (with a "measured" column) and the
# site's view of benchmarks/RESULTS.md
MEASUREMENT_PAGES = {DOCS / "benchmarks.md", DOCS / "benchmark-history.md"}
MEASUREMENT_LOG = {
    "an ISO date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "a session number": re.compile(r"\bsession \d+", re.I),
    "a clock-precise timing": re.compile(r"\b\d+ min \d+(?:\.\d+)? s\b"),
}


def links(markdown: str) -> list[str]:
    """The targets of a Markdown text's inline links, code blocks left out."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return [target for _text, target in LINK.findall(prose)]


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings as GitHub and mkdocs' toc make them (lowercase, punctuation dropped,
    spaces as hyphens), code blocks left out."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    anchors = set()
    for title in re.findall(r"^#{1,6}\s+(.+?)\s*$", prose, flags=re.M):
        text = re.sub(r"[^\w\s-]", "", title.replace("`", "").lower())
        anchors.add(re.sub(r"\s+", "-", text.strip()))
    return anchors


def test_heading_anchors_are_made_as_github_makes_them():
    assert heading_anchors("# Your own run in three commands\n## The studies in `params/`\n```\n# not one\n```") == {
        "your-own-run-in-three-commands", "the-studies-in-params"}


def test_links_leave_out_code_blocks():
    assert links("[a](x.md) `c` [b](y.md#z)\n```\n[no](n.md)\n```") == ["x.md", "y.md#z"]


def test_the_readme_is_at_most_250_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines: move a section into docs/ (the site)"


def test_every_readme_link_resolves():
    readme = README.read_text()
    targets = [t for t in links(readme) if not re.match(r"[a-z]+:", t)]  # http(s), mailto: not checked here
    assert targets, "the README links to no page of the site"
    broken = []
    for target in targets:
        path, _, anchor = target.partition("#")
        file = (ROOT / path) if path else README
        if not file.is_file():
            broken.append(f"{target}: no file {file.relative_to(ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_every_page_of_the_site_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README.read_text()) if t.partition("#")[0]}
    pages = sorted(DOCS.rglob("*.md"))
    assert pages, "docs/ holds no page"
    unlinked = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked
                and p.name != "benchmark-history.md"]  # the site's view of benchmarks/RESULTS.md, linked as that
    assert not unlinked, f"pages of the site the README does not link: {unlinked}"


def section(markdown: str, heading: str) -> str:
    """The text under a level-2 heading of a Markdown file, up to the next level-2 heading."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", markdown, flags=re.M | re.S)
    assert match, f"no section '## {heading}'"
    return match.group(1)


def code_lines(markdown: str) -> list[str]:
    """The command lines of a text's ```bash blocks, comments and blank lines left out."""
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", markdown, flags=re.S)
    lines = [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


def test_section_and_code_lines_read_what_they_say():
    text = "## A\nx\n```bash\nmake test   # the tests\n\n# only a comment\n```\n## B\ny\n"
    assert code_lines(section(text, "A")) == ["make test"]
    assert section(text, "B").strip() == "y"
    with pytest.raises(AssertionError, match="no section"):
        section(text, "C")


@pytest.mark.parametrize("heading", ["Your own run in three commands", "The two commands", "Notebooks",
                                     "What it shows", "Documentation"])
def test_the_readme_has_its_sections(heading):
    assert section(README.read_text(), heading).strip()


def test_the_readme_says_what_it_is_before_its_first_section():
    intro = README.read_text().split("\n## ", 1)[0]
    assert "uncertainty" in intro.lower() and "agent" in intro.lower()
    assert len(re.sub(r"<!--.*?-->|\s+", " ", intro).split()) >= 40, "the README opens without saying what it is"


def test_the_two_commands_are_the_makefiles():
    makefile = (ROOT / "Makefile").read_text()
    announced = re.findall(r"^#\s+(make \w+)\s", makefile, flags=re.M)  # the Makefile's own header
    assert announced == ["make reproduce", "make test"]
    for command in announced:
        assert re.search(rf"^{command.split()[1]}:", makefile, flags=re.M), f"no target for {command}"
    assert code_lines(section(README.read_text(), "The two commands")) == announced
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")  # CI runs exactly the README's command


def test_make_test_builds_the_site_strictly_into_an_ignored_folder():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:.*\bdocs\b", makefile, flags=re.M), "make test does not build the site"
    recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", makefile, flags=re.M).group(1)
    assert "mkdocs build --strict" in recipe
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    site_dir = config.get("site_dir", "site")
    assert f"{site_dir}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_your_own_run_is_three_commands_of_the_cli():
    import typer.main

    from agentuq_nb.cli import app

    commands = set(typer.main.get_command(app).commands)
    lines = code_lines(section(README.read_text(), "Your own run in three commands"))
    assert len(lines) == 3, lines
    ours = [line.split()[1] for line in lines if line.startswith("agentuq-nb ")]
    assert ours[:2] == ["analyze", "explore"], lines
    assert set(ours) <= commands, f"not commands of agentuq-nb: {set(ours) - commands}"


def test_every_notebook_is_in_the_readme_table_and_no_other():
    table = section(README.read_text(), "Notebooks")
    listed = re.findall(r"^\| `(\d\d_\w+)` \|", table, flags=re.M)
    on_disk = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert on_disk, "no notebooks/NN_*.ipynb"
    assert listed == on_disk


def test_the_headline_links_to_its_evidence():
    shows = section(README.read_text(), "What it shows")
    assert re.search(r"AUROC [01]\.\d+ \[|AUROC of [01]\.\d+ \[", shows), "no measured result with its interval"
    evidence = [t for t in links(shows) if t.startswith("docs/")]
    assert len(evidence) >= 2, "the headline points to no page with its evidence"
    assert all((ROOT / t.partition("#")[0]).is_file() for t in evidence)


def nav_pages(nav) -> list[str]:
    """Every page file named in an mkdocs nav (nested sections flattened), external links left out."""
    if isinstance(nav, str):
        return [] if re.match(r"[a-z]+://", nav) else [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]


def test_nav_pages_reads_nested_sections():
    assert nav_pages([{"Home": "index.md"}, {"Guide": [{"A": "g/a.md"}, "g/b.md"]}, {"x": "https://e.org"}]) == [
        "index.md", "g/a.md", "g/b.md"]


def test_the_navigation_and_the_pages_are_in_step():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs_dir = ROOT / config.get("docs_dir", "docs")
    in_nav = nav_pages(config["nav"])
    assert len(in_nav) == len(set(in_nav)), "a page is twice in the navigation"
    missing = [page for page in in_nav if not (docs_dir / page).is_file()]
    assert not missing, f"in mkdocs.yml's nav but no such page: {missing}"
    pages = {str(p.relative_to(docs_dir)) for p in docs_dir.rglob("*.md")}
    assert not pages - set(in_nav), f"pages left out of mkdocs.yml's nav: {sorted(pages - set(in_nav))}"


SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"\s*$', flags=re.M)


def expanded(page: Path) -> str:
    """A page as the site shows it: each pymdownx.snippets line (`--8<-- "FILE"` or `--8<-- "FILE:SECTION"`, paths
    from the project root as mkdocs.yml's base_path) replaced by what it includes."""
    def include(match: re.Match) -> str:
        path, name = match.groups()
        text = (ROOT / path).read_text()
        if name:
            start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
            assert start in text and end in text, f"{page.name}: no section {name} in {path}"
            text = text.split(start, 1)[1].split(end, 1)[0]
        return text
    return SNIPPET.sub(include, page.read_text())


def test_expanded_includes_files_and_named_sections(tmp_path):
    page = tmp_path / "p.md"
    page.write_text('# P\n--8<-- "README.md:notebooks"\n--8<-- "benchmarks/RESULTS.md"\n')
    text = expanded(page)
    assert "`13_real_runs`" in text and "# Measurement history" in text and "--8<--" not in text


def test_no_page_is_empty():
    empty = [str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md")
             if len(re.sub(r"^#.*$", "", expanded(p), flags=re.M).split()) < 20]
    assert not empty, f"pages with a title and next to nothing: {empty}"


def test_every_included_readme_section_exists():
    includes = [p for p in DOCS.rglob("*.md") if re.search(r'--8<-- "README\.md:\w+"', p.read_text())]
    assert includes, "no page includes a section of the README"
    for page in includes:
        assert "--8<--" not in expanded(page)  # expanded() fails on a section the README no longer has


def measurement_log(text: str) -> list[str]:
    return [f"{what}: {m.group(0)!r}" for what, pattern in MEASUREMENT_LOG.items() for m in pattern.finditer(text)]


def test_measurement_log_finds_dates_sessions_and_precise_timings():
    assert measurement_log("measured 2026-11-25 in session 10: 11 min 16 s") == [
        "an ISO date: '2026-11-25'", "a session number: 'session 10'", "a clock-precise timing: '11 min 16 s'"]
    assert measurement_log("about 12 minutes on 2 cores; 0.690 [0.53, 0.87]; seed 300; 3 min") == []


def test_no_measurement_history_in_the_readme_or_the_guide():
    pages = [README, *(p for p in sorted(DOCS.rglob("*.md")) if p not in MEASUREMENT_PAGES)]
    found = [f"{p.relative_to(ROOT)}: {hit}" for p in pages for hit in measurement_log(p.read_text())]
    assert not found, "dated measurements belong in benchmarks/RESULTS.md:\n" + "\n".join(found)


def test_the_measurement_history_is_dated():
    history = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    dates = re.findall(r"^## (20\d\d-[01]\d-[0-3]\d)\s*$", history, flags=re.M)
    assert dates, "benchmarks/RESULTS.md has no dated section"
    assert dates == sorted(dates, reverse=True), "benchmarks/RESULTS.md is not newest first"


def cli_page() -> str:
    """The command line page as the site shows it: its synopsis filled in by the build's hook."""
    from agentuq_nb.cli_synopsis import fill_synopsis

    return fill_synopsis((DOCS / "guide" / "cli.md").read_text())


def cli_synopsis() -> dict[str, str]:
    """The command line page's synopsis: each `agentuq-nb COMMAND` with the text that follows it up to the next."""
    block = re.search(r"```\n(agentuq-nb .*?)```", cli_page(), flags=re.S).group(1)
    parts = re.split(r"^agentuq-nb ([\w-]+)", block, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_command_line_page_names_every_command_with_its_real_options_and_defaults():
    import typer.main

    from agentuq_nb.cli import app

    commands = typer.main.get_command(app).commands
    synopsis = cli_synopsis()
    # calibrate has its own page; every other command is in the synopsis
    assert set(commands) - set(synopsis) <= {"calibrate"}, f"commands missing: {set(commands) - set(synopsis)}"
    assert set(synopsis) <= set(commands), f"not commands: {set(synopsis) - set(commands)}"
    wrong = []
    for name, text in synopsis.items():
        options = {opt: param for param in commands[name].params if param.param_type_name == "option"
                   for opt in param.opts + param.secondary_opts}
        prose = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
        for option, value in re.findall(r"\[(--[\w-]+)(?: ([\w.]+))?\]", prose):
            if option not in options:
                wrong.append(f"{name} {option}: no such option")
            elif re.fullmatch(r"\d+(\.\d+)?", value or "") and float(value) != float(options[option].default):
                wrong.append(f"{name} {option} {value}: its default is {options[option].default}")
        for option in re.findall(r"(?<![\w\[])(--[\w-]+)", prose):
            if option not in options:
                wrong.append(f"{name} {option}: no such option")
    assert not wrong, "\n".join(wrong)


def test_the_command_line_synopsis_is_made_from_the_commands_when_the_site_is_built():
    """docs/guide/cli.md holds the marker, no hand-written synopsis; the site's build fills it in (the hook that
    mkdocs.yml names) with what the commands themselves give (their configs and COMMAND)."""
    import importlib.util

    import yaml

    from agentuq_nb.cli import app
    from agentuq_nb.cli_synopsis import MARKER, synopsis

    page = (DOCS / "guide" / "cli.md").read_text()
    assert page.count(MARKER) == 1 and "\nagentuq-nb aggregate" not in page
    hooks = yaml.safe_load((ROOT / "mkdocs.yml").read_text().split("\nplugins:")[0])["hooks"]
    spec = importlib.util.spec_from_file_location("cli_synopsis_hook", ROOT / hooks[0])
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    built = hook.on_page_markdown(page, page=None, config=None, files=None)
    assert f"```\n{synopsis(app)}```" in built and MARKER not in built
    assert hook.on_page_markdown("# other page", page=None) == "# other page"


#: a number as the README writes one (a sign, digits, a decimal part); names such as gpt-4.1 hold numbers too
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text.replace("−", "-"))


def readme_section(name: str) -> str:
    text = README.read_text()
    start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
    return text.split(start, 1)[1].split(end, 1)[0]


def readme_section_quoting(name: str, findings: str) -> tuple[dict, str]:
    """The study record committed at ``findings`` and the README section ``name``, after checking that every number
    of the section is one the record holds."""
    import json

    record = json.loads((ROOT / findings).read_text())
    held = set(numbers(json.dumps(record, ensure_ascii=False)))
    section = readme_section(name)
    missing = [n for n in numbers(section) if n not in held]
    assert not missing, f"README numbers not in {findings}: {missing}"
    return record, section


def test_the_real_runs_headline_states_only_numbers_the_study_wrote_and_names_its_runs():
    """Every number of the README's real-runs paragraph (which the site's pages include) is in the study's findings
    as notebook 13 wrote them (committed as docs/findings/real_runs.json, with the runs they were measured on): a
    claim that is not in the study's output fails here, so a new run of the study shows which sentences changed."""
    from agentuq_nb.pipeline.real_runs import COMMITTED_FINDINGS

    record, section = readme_section_quoting("real-runs", COMMITTED_FINDINGS)
    # the runs it is about: how many, how many trajectories, and each run's agent and domain
    assert f"{record['n_runs']} real runs" in section or f"{record['n_runs']} runs" in section
    assert f"{record['n_trajectories']} trajectories" in section
    assert f"({COMMITTED_FINDINGS})" in section  # the paragraph links the file with each run's agent and domain
    assert "tuned in-sample" in section and "these runs" in section  # the TRACER claims say which runs


def test_the_quickstart_paragraph_states_only_numbers_the_study_wrote():
    """Every number of the README's quickstart paragraph is in the study record notebook 11 wrote on the quickstart
    run (committed as docs/findings/quickstart.json): a rerun that moves a number shows which sentence changed."""
    from agentuq_nb.pipeline.findings import COMMITTED_QUICKSTART

    record, section = readme_section_quoting("quickstart", COMMITTED_QUICKSTART)
    assert f"{record['n_trajectories']} trajectories" in section and f"({COMMITTED_QUICKSTART})" in section
    assert f"{record['n_estimators']} estimators" in section


def test_numbers_are_read_as_the_readme_writes_them():
    assert numbers("0.645 [0.567, 0.714], +0.153 [−0.016, 0.312], q = 0.10; gpt-4.1") == [
        "0.645", "0.567", "0.714", "0.153", "0.016", "0.312", "0.10", "4.1"]


def test_the_estimator_families_table_names_only_declared_families():
    """The guide's families table names the families as they declare themselves (``estimators.base.Family``): none
    that is not declared (today every declared one has its row; a new family's row is welcome, not required, so that
    a new family stays three files)."""
    from agentuq_nb.estimators.base import declared_families

    page = (DOCS / "guide" / "estimators.md").read_text()
    table = page.split("## The families", 1)[1].split("\n\n")[2]
    rows = {line.split("|")[1].strip() for line in table.splitlines()[2:] if line.startswith("|")}
    assert rows and rows <= set(declared_families()), rows - set(declared_families())


def test_make_docs_needs_no_llama_cpp_build():
    """issue 49: `make docs` installs the core package with the [docs] extra, not `make setup`'s environment (which
    compiles llama.cpp): its prerequisites name neither setup nor llama, its install neither [local] nor [all]."""
    import tomllib

    makefile = (ROOT / "Makefile").read_text()
    prerequisites = re.search(r"^docs:(.*)$", makefile, flags=re.M).group(1).split()
    assert prerequisites == ["$(DOCS_STAMP)"], prerequisites
    rule = re.search(r"^\$\(DOCS_STAMP\):(.*)\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert rule and '-e ".[docs]"' in rule.group(2), rule
    assert not re.search(r"\bsetup\b(?!\.py)|llama|\$\(STAMP\)|\$\(TORCH\)|\[all|\[local", rule.group(0)), \
        rule.group(0)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any("llama" in d or "torch" in d or "agentuq_nb[" in d for d in extras["docs"]), extras["docs"]


def test_the_site_searches_offline_with_its_own_worker_shim():
    """The search index is bundled (Material's offline plugin) and the Web Worker shim it needs on file:// is the
    site's own copy, not a CDN's: the plugin appends unpkg's unless a polyfill names iframe-worker."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert "search" in plugins and "offline" in plugins
    polyfills = config["extra"]["polyfills"]
    assert any("iframe-worker" in p for p in polyfills) and not any("://" in p for p in polyfills)
    assert all((DOCS / p).is_file() for p in polyfills)


def test_the_built_site_searches_from_the_disk():
    """`make docs` (which `make test` runs before the tests) leaves site/: opened from the disk in Chromium, with no
    network, its search finds a page."""
    from test_explorer import CHROMIUM_FLAGS, chromium_session

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    index = ROOT / config.get("site_dir", "site") / "index.html"
    if not index.is_file():
        pytest.skip("no site/ built: `make docs` builds it (make test does, before the tests)")
    assert "unpkg.com" not in index.read_text()
    requests, errors = [], []
    with chromium_session() as p:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("request", lambda req: requests.append(req.url))
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(index.as_uri())
        box = page.locator("input.md-search__input")
        for _attempt in range(6):  # the worker starts in its iframe: a query typed before it listens is typed again
            box.fill("")
            box.press_sequentially("reliability", delay=40)
            try:
                page.wait_for_selector(".md-search-result__item", timeout=10_000)
                break
            except PlaywrightTimeout:
                continue
        assert "matching document" in page.inner_text(".md-search-result__meta")
        browser.close()
    assert errors == [] and all(url.startswith(("file:", "data:", "blob:", "about:")) for url in requests), requests
