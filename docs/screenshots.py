"""The README's and the site's pictures of what a user gets: ``report.html`` and ``explorer.html`` of a shared real run,
made by the commands themselves and photographed in Chromium - never drawn by hand.

    .venv/bin/python docs/screenshots.py            # → docs/images/report.png, docs/images/explorer.png

It runs ``agentuq-nb analyze`` (the default embeddings) and ``agentuq-nb explore`` on
``../shared/data/tau2/gpt-4.1_airline_1trial.json`` (``--results`` for another) in a temporary folder, opens the two
pages at 1,400 px in Debian's chromium through Playwright (as the browser tests do), and writes each picture 1,100 px
wide with a 256-colour palette (a few hundred KB). The explorer is shown on the failed trajectory the report ranks
riskiest, its "why this reward" panel open.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT.parent / "shared" / "data" / "tau2" / "gpt-4.1_airline_1trial.json"
OUT = ROOT / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
WIDTH, HEIGHT, SAVED_WIDTH = 1400, 1000, 1100


def command(*args) -> None:
    cli = Path(sys.executable).with_name("agentuq-nb")
    subprocess.run([str(cli) if cli.exists() else "agentuq-nb", *map(str, args)], check=True)


def optimized(png: Path, out: Path) -> Path:
    """``png`` resized to :data:`SAVED_WIDTH` px and quantized to 256 colours (text stays sharp: no dithering)."""
    from PIL import Image

    with Image.open(png) as image:
        image = image.convert("RGB")
        height = round(image.height * SAVED_WIDTH / image.width)
        image = image.resize((SAVED_WIDTH, height), Image.LANCZOS)
        image.quantize(256, dither=Image.Dither.NONE).save(out, optimize=True)
    return out


def riskiest_failure(run: Path) -> str:
    """The explorer key of the failed trajectory that the report lists first (its rows sorted by failure probability)."""
    from agentuq_nb.figures.explorer import trajectory_key
    from agentuq_nb.io.store.artifacts import read_estimator_table
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.analyze import trajectory_rows

    rows, _ = trajectory_rows(RunDir(run), read_estimator_table(run))
    first = rows[rows["outcome"] == "failed"].iloc[0]
    return trajectory_key(first["domain"], first["task_id"], first["trial"], first["seed"])


def photograph(run: Path, out: Path) -> list[Path]:
    from urllib.parse import quote

    from playwright.sync_api import sync_playwright

    shots = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto((run / "report.html").as_uri())
        raw = Path(tmp) / "report.png"
        page.screenshot(path=str(raw))
        shots.append(optimized(raw, out / "report.png"))
        key = riskiest_failure(run)
        page.goto((run / "explorer.html").as_uri() + "#trajectory=" + quote(key, safe=""))
        page.wait_for_selector(".agentuq-explorer .aq-item.aq-current", timeout=60_000)
        raw = Path(tmp) / "explorer.png"
        page.screenshot(path=str(raw))
        shots.append(optimized(raw, out / "explorer.png"))
        browser.close()
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file to analyze and photograph")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs go")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / args.results.stem
        command("analyze", args.results, "--out", run)
        command("explore", run)
        for path in photograph(run, args.out):
            print(f"{path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
