"""Issue 29's check that moving the README into this site lost nothing: every paragraph of the README as it was
(a git revision, default e21992f) must be found, word for word, in today's README, the pages under docs/ or
benchmarks/RESULTS.md. Text is compared as runs of N words (markup, link targets and line breaks ignored), so a
paragraph may be split between pages or get a heading; what is not found is printed for a reader to judge, and a
fragment left out on purpose is listed in EXPLAINED with the reason.

    python docs/check_readme_moved.py [REVISION]     # exit 1 when an unexplained fragment is missing
"""
import re
import subprocess
import sys
from pathlib import Path

N = 5
ROOT = Path(__file__).resolve().parents[1]
# fragments of the old README left out on purpose (normalized text, as printed), with the reason
EXPLAINED: dict[str, str] = {
    "and": "the [dev] row now lists mkdocs-material and mkdocstrings too",
    "notebooks in jupyterlab": "the heading is 'Notebooks' in the README, 'Notebooks and figures' in the guide",
    "the first screen": "a link to 'Your own run in three commands' instead",
    "tests/inspect_tasks/ arithmetic_agent.py": "the same path, no longer broken over two lines",
    "measured 2026-11-25": "the date is in benchmarks/RESULTS.md ('Action resampling on a real run')",
    "as before": "the Dask page no longer compares with an earlier version",
    "this idle 2-core": "'the idle 2-core reference machine'",
    "the sampling row of 2026-11-25": "the benchmarks' table has a 'measured' column",
    "the sidecar scanner what made the difference since session 10":
        "'What makes the difference'; session 10's figures are in benchmarks/RESULTS.md",
    "session 10 2.3× and 1.11×": "in benchmarks/RESULTS.md ('Before the compiled sidecar scanner (session 10)')",
    "a first measurement of this": "in benchmarks/RESULTS.md ('A first measurement of the one-sidecar-per-message row')",
}


def words(text: str) -> list[str]:
    text = re.sub(r"\]\([^)]*\)", "]", text)  # a link's target: the words of its text are what a reader reads
    text = re.sub(r"<!--.*?-->", " ", text)
    return [w.strip(".,;:") for w in re.findall(r"[^\s`*#|>\[\]()\"“”]+", text.lower()) if w.strip(".,;:")]


def paragraphs(markdown: str) -> list[str]:
    out, block, fence = [], [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and (not line.strip() or line.startswith("|")):
            if block:
                out.append("\n".join(block))
            block = [line] if line.startswith("|") else []
            if line.startswith("|"):
                out.append(line)
                block = []
            continue
        block.append(line)
    if block:
        out.append("\n".join(block))
    return [p for p in out if words(p) and not re.fullmatch(r"\|[\s|:-]*", p.strip())]


def ngrams(ws: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}


def main(revision: str = "e21992f") -> int:
    old = subprocess.run(["git", "show", f"{revision}:README.md"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    sources = [ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md", *sorted((ROOT / "docs").rglob("*.md"))]
    corpus_words = [w for path in sources for w in words(path.read_text()) + ["¶"]]
    found = ngrams(corpus_words, N)
    paras = paragraphs(old)
    unexplained = 0
    for para in paras:
        ws = words(para)
        if len(ws) < N:
            hit = any(tuple(ws) == tuple(corpus_words[i:i + len(ws)]) for i in range(len(corpus_words)))
            missing_spans = [] if hit else [" ".join(ws)]
        else:
            covered = [False] * len(ws)
            for i in range(len(ws) - N + 1):
                if tuple(ws[i:i + N]) in found:
                    covered[i:i + N] = [True] * N
            missing_spans, span = [], []
            for w, c in zip(ws, covered):
                if c and span:
                    missing_spans.append(" ".join(span))
                    span = []
                elif not c:
                    span.append(w)
            if span:
                missing_spans.append(" ".join(span))
        for frag in missing_spans:
            reason = EXPLAINED.get(frag)
            print(f"{'explained' if reason else 'MISSING':9} | {frag}" + (f"  ({reason})" if reason else "")
                  + f"\n          in: {para[:100]!r}")
            unexplained += reason is None
    print(f"{len(paras)} paragraphs of the README at {revision}; {unexplained} unexplained missing fragments")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
