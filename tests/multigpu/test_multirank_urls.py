"""A folder of ranks given as an fsspec URL (what s3:// and gs:// go through with s3fs / gcsfs installed): the
same report as the local folder. fsspec's in-memory filesystem stands in for the object store's bytes only; the
reading, caching and merging code is the real one."""
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

JOB = Path(__file__).parents[1] / "data" / "multigpu" / "h200x2" / "straggler"


def test_a_url_folder_gives_the_local_folders_report(tmp_path, monkeypatch):
    from perflab.multirank import diagnose_folder

    monkeypatch.setenv("PERFLAB_WORKERS", "0")  # this process: the memory filesystem lives here
    fs = fsspec.filesystem("memory")
    for f in sorted(JOB.iterdir()):
        fs.pipe(f"/job-{tmp_path.name}/{f.name}", f.read_bytes())
    local = diagnose_folder(str(JOB)).to_dict()
    remote = diagnose_folder(f"memory://job-{tmp_path.name}").to_dict()
    assert remote["findings"] and [f["id"] for f in remote["findings"]] == [f["id"] for f in local["findings"]]
    assert remote["verdict"] == local["verdict"]
    assert remote["analyses"]["multigpu"]["per_rank"] == local["analyses"]["multigpu"]["per_rank"]


def test_a_url_without_its_filesystem_is_one_clear_error():
    from perflab.errors import PerflabError
    from perflab.multirank import diagnose_folder

    with pytest.raises(PerflabError, match="Protocol not known|fsspec"):
        diagnose_folder("nosuchproto://bucket/job")
