"""Download benchmark: `inferd pull` (Puller: HEAD + ranged GET through huggingface_hub's
http_get, sha256 verification of every file, atomic install) against huggingface_hub's own
`hf_hub_download(local_dir=...)` (HEAD + GET, no checksum; and again followed by the same
sha256 check inferd makes) fetching the same files from the
same local fake Hub (tests/fake_hub.py, in its own process, over loopback). Not a test;
numbers depend on the machine and its load.

usage: python bench/pull.py [--mib 256] [--shards 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
REPO = "bench/big-GGUF"


def _hub(mib: int, shards: int, q: mp.Queue) -> None:
    from tests.fake_hub import FakeHub

    h = FakeHub()
    per = mib * (1 << 20) // shards
    files = {f"Q4_K_M/big-Q4_K_M-{i:05d}-of-{shards:05d}.gguf": os.urandom(per) for i in range(1, shards + 1)}
    h.add_repo(REPO, files)
    q.put(h.url)
    time.sleep(10**6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    q: mp.Queue = mp.Queue()
    proc = mp.Process(target=_hub, args=(a.mib, a.shards, q), daemon=True)
    proc.start()
    url = q.get(timeout=120)
    os.environ["HF_ENDPOINT"] = url
    import huggingface_hub.constants as C
    from huggingface_hub import HfApi, hf_hub_download

    C.HF_HUB_OFFLINE = False
    from inferd.registry.pull.hub import Hub
    from inferd.registry.pull.puller import Puller
    from inferd.registry.pull.transfer import file_sha256

    names = [s.rfilename for s in HfApi(endpoint=url).model_info(REPO, files_metadata=True).siblings]
    size = a.mib * (1 << 20) // a.shards * a.shards
    peer, peer_sha, ours = [], [], []
    sums = {s.rfilename: s.lfs.sha256 for s in HfApi(endpoint=url).model_info(REPO, files_metadata=True).siblings}
    def run_peer(d: Path) -> None:  # lists the repo too, as a pull must to find a quantization's files
        t0 = time.perf_counter()
        HfApi(endpoint=url).model_info(REPO, files_metadata=True)
        for n in names:
            hf_hub_download(REPO, n, local_dir=d / "peer", endpoint=url)
        peer.append(time.perf_counter() - t0)

    def run_peer_sha(d: Path) -> None:  # the peer plus the check inferd makes: sha256 of each file
        t0 = time.perf_counter()
        HfApi(endpoint=url).model_info(REPO, files_metadata=True)
        for n in names:
            p = hf_hub_download(REPO, n, local_dir=d / "peer_sha", endpoint=url)
            assert file_sha256(Path(p)) == sums[n]
        peer_sha.append(time.perf_counter() - t0)

    def run_ours(d: Path) -> None:
        t0 = time.perf_counter()
        Puller(d / "models", hub=Hub(endpoint=url)).pull(f"{REPO}:Q4_K_M")
        ours.append(time.perf_counter() - t0)

    for i in range(a.repeat):  # interleaved, alternating which goes first
        d = Path(tempfile.mkdtemp())
        for run in ((run_peer, run_peer_sha, run_ours) if i % 2 == 0 else (run_ours, run_peer_sha, run_peer)):
            run(d)
        shutil.rmtree(d)
    mibs = lambda t: size / (1 << 20) / t  # noqa: E731
    print(f"{a.shards} files, {size >> 20} MiB, best of {a.repeat}:")
    print(f"  huggingface_hub hf_hub_download (no checksum): {min(peer):.2f} s  {mibs(min(peer)):.0f} MiB/s  1.00x")
    print(f"  huggingface_hub + sha256 of each file:         {min(peer_sha):.2f} s  {mibs(min(peer_sha)):.0f} MiB/s  "
          f"{min(peer) / min(peer_sha):.2f}x")
    print(f"  inferd pull (sha256 verified, atomic install):  {min(ours):.2f} s  {mibs(min(ours)):.0f} MiB/s  "
          f"{min(peer) / min(ours):.2f}x  ({min(peer_sha) / min(ours):.2f}x of the checked peer)")
    proc.terminate()


if __name__ == "__main__":
    main()
