"""The wheels verl's SFT trainer needs on the GPU machine (Python 3.12, its own torch/transformers), ready to carry.

    python3 bench/gpu_verl_wheels.py --out /work/main/.gl/verlgpu     # downloads with pip; writes the folders below

The device image lacks verl and what ``import verl.trainer.sft_trainer`` + ``mlite.verl_engine`` import; this is the
set found by importing both (and running ``mlite run --trainer verl-sft`` on CPU) with nothing else installed than the
image's packages: :data:`WHEELS`. Not needed on that path (verl guards them): megatron-core, wandb, transfer-queue,
pyzmq and ray's ``default`` extras. All cp312 / py3 wheels, ``pip download --no-deps --only-binary=:all:``, except
antlr4-python3-runtime 4.9.3 (hydra's pin), which PyPI has as an sdist only: built here with ``pip wheel``.

One call carries at most 64 MiB, and ray's wheel is 79 MB (a 31 MB Java jar and the raylet / GCS server daemons in
it). Layouts written, each folder with ``SHA256SUMS``, and ``MANIFEST.md`` at the top:

* ``one/``: every wheel, ray's repacked without ``ray/jars/ray_dist.jar``, ``ray/core/src/ray/raylet/raylet`` and
  ``ray/core/src/ray/gcs/gcs_server`` (its RECORD without them): the Java worker and the cluster daemons, which only
  ``ray.init()`` starts; verl's SFT trainer under torchrun imports ray but never starts it. One device call.
* ``a/`` + ``b/``: ray's wheel as published, split with ``split -b`` (``a/``: the first part; ``b/``: the rest and every
  other wheel). Two calls on one warm machine.
* ``one/kit/``, ``b/kit/`` (``--kit``): ``git archive HEAD`` of this checkout's mlite/, bench/, data/ and
  pyproject.toml: the code the row runs (bench/gpu_verl_sft_device.sh, bench/gpu_verl_sft.py, mlite).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = (
    "verl==0.9.1",
    "ray==2.60.0",
    "tensordict==0.10.0",
    "pyvers==0.1.0",
    "hydra-core==1.3.8",
    "omegaconf==2.3.1",
    "torchdata==0.11.0",
    "datasets==5.2.0",
    "multiprocess==0.70.19",
    "dill==0.4.1",
    "codetiming==1.4.0",
    "orjson==3.13.0",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "typing-inspection==0.4.5",
    "annotated-types==0.8.0",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "opentelemetry-api==1.45.2",
    "typing-extensions==4.16.0",
)
"""Downloaded as wheels (one version each; the image has every other package they import on this path).
typing-extensions is in the image too, but pydantic 2.14 needs >= 4.16 and the image's version is not known here:
carried, it shadows the image's for the row's processes only (it is backward compatible)."""
SDIST_BUILT = ("antlr4-python3-runtime==4.9.3",)
"""Built from the sdist here (pure Python)."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")  # fmt: skip
RAY_DROP = ("ray/jars/ray_dist.jar", "ray/core/src/ray/raylet/raylet", "ray/core/src/ray/gcs/gcs_server")
"""Left out of the repacked ray wheel (``one/``): the Java worker jar and the daemons ``ray.init()`` starts."""
PART_BYTES = 54 * 2**20
"""Size of ``a/``'s part of the ray wheel."""


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def download(dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    plat = [x for p in PLATFORMS for x in ("--platform", p)]
    _pip("download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
         *plat, "-d", str(dest), *WHEELS)  # fmt: skip
    _pip("wheel", "-q", "--no-deps", "--no-binary", ":all:", "-w", str(dest), *SDIST_BUILT)
    return sorted(dest.glob("*.whl"))


def repack_ray(src: Path, dst: Path) -> None:
    """``src`` without :data:`RAY_DROP` (and their RECORD lines)."""
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zo:
        names = {i.filename for i in zi.infolist()}
        missing = [n for n in RAY_DROP if n not in names]
        if missing:
            raise SystemExit(f"gpu_verl_wheels: {src.name} has no {', '.join(missing)}; update RAY_DROP")
        for info in zi.infolist():
            if info.filename in RAY_DROP:
                continue
            data = zi.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(ln for ln in lines if ln.split(",")[0] not in RAY_DROP).encode()
            zo.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_sums(folder: Path, extra: dict[str, str] | None = None) -> None:
    lines = [f"{sha256(p)}  {p.name}" for p in sorted(folder.iterdir()) if p.is_file() and p.name != "SHA256SUMS"]
    lines += [f"{h}  {n}" for n, h in (extra or {}).items()]
    (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def fresh(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def build(out: Path, kit: bool, download_dir: Path) -> None:
    wheels = download(download_dir)
    ray = next(p for p in wheels if p.name.startswith("ray-"))
    rest = [p for p in wheels if p is not ray]
    one = fresh(out / "one")
    for p in rest:
        shutil.copy2(p, one / p.name)
    repack_ray(ray, one / ray.name)
    write_sums(one)
    a, b = fresh(out / "a"), fresh(out / "b")
    data = ray.read_bytes()
    (a / f"{ray.name}.part-aa").write_bytes(data[:PART_BYTES])
    (b / f"{ray.name}.part-ab").write_bytes(data[PART_BYTES:])
    for p in rest:
        shutil.copy2(p, b / p.name)
    write_sums(a)
    write_sums(b, {ray.name: sha256(ray)})  # checked after ``cat part-aa part-ab``
    if kit:  # inside one/ and b/: each call carries one folder
        tar = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", "mlite", "bench", "data", "pyproject.toml"],
                             check=True, capture_output=True).stdout  # fmt: skip
        for folder in (one, b):
            subprocess.run(["tar", "-x", "-C", str(fresh(folder / "kit"))], input=tar, check=True)
    manifest(out, ray, rest)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def manifest(out: Path, ray: Path, rest: list[Path]) -> None:
    rows = ["| wheel | bytes | sha256 |", "| --- | ---: | --- |"]
    for p in [ray, *rest]:
        rows.append(f"| {p.name} | {p.stat().st_size} | {sha256(p)} |")
    one_ray = out / "one" / ray.name
    rows.append(f"| {ray.name} (one/: repacked, without {', '.join(RAY_DROP)}) | {one_ray.stat().st_size} | "
                f"{sha256(one_ray)} |")  # fmt: skip
    sizes = [f"| {d} | {_size(out / d)} |" for d in ("one", "a", "b", "one/kit") if (out / d).is_dir()]
    text = "\n".join(
        [
            "# Wheels for verl SFT (engine=lite) on the GPU machine (written by bench/gpu_verl_wheels.py)",
            "",
            "Python 3.12 (cp312, manylinux x86_64) wheels, --no-deps; torch, transformers, pandas, pyarrow, ... are the "
            "image's. antlr4-python3-runtime is built from its sdist (PyPI has no wheel).",
            "",
            *rows,
            "",
            "| folder | bytes |",
            "| --- | ---: |",
            *sizes,
            "",
        ]
    )
    (out / "MANIFEST.md").write_text(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder to write (e.g. /work/main/.gl/verlgpu)")
    p.add_argument("--kit", action="store_true", help="also write kit/: git archive HEAD of mlite, bench, data")
    p.add_argument(
        "--download-dir",
        default="/tmp/gpu_verl_wheels_download",
        help="where pip saves the wheels as published (outside --out: nothing there should travel by mistake)",
    )
    a = p.parse_args(argv)
    build(Path(a.out).resolve(), a.kit, Path(a.download_dir).resolve())
    print((Path(a.out) / "MANIFEST.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
