"""MkDocs hooks: the plots bench/ draws, served beside the page that includes bench/README.md.

bench/README.md is included into docs/benchmarks.md (pymdownx.snippets), so its
image links (`soak.png`) resolve against docs/; the plots stay in bench/, one copy.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

BENCH = Path(__file__).resolve().parent.parent / "bench"


def on_files(files: Files, config) -> Files:
    for plot in sorted(BENCH.glob("*.png")):
        files.append(
            File(
                plot.name,
                src_dir=str(BENCH),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
