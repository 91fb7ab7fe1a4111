"""Damaged Nsight Systems exports (built here with sqlite3, then broken): the reader checks the columns and
types it reads, counts what it cannot use, names a table it cannot read, and no verdict rests on zeroed
values (wrong columns, text in start/end)."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import cli_run
from nsys_exports import ExportBuilder
from perflab.errors import UnreadableInput
from perflab.trace import nsys
from perflab.trace.model import KERNEL, RUNTIME, USER_ANNOTATION

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def _export(tmp_path: Path, damage: str, name: str = "d.sqlite") -> Path:
    b = ExportBuilder()
    for step in range(3):
        with b.range(f"step {step}"):
            b.memcpy("HtoD", "pageable", "device", 4 << 20, 400_000)
            for _ in range(4):
                b.kernel("void gemm_kernel<128>(float*, float const*)", 50_000, grid=(264, 1, 1), block=(256, 1, 1))
            b.synchronize()
            b.host(100_000)
            b.os_call("read", 20_000)
    path = b.write(tmp_path / name)
    if damage:
        con = sqlite3.connect(path)
        con.executescript(damage)
        con.commit()
        con.close()
    return path


def _refused(capsys, path: Path, *want: str) -> None:
    for cmd in (["doctor", path], ["stats", path], ["doctor", path, "--json"]):
        rc, out, err = cli_run(capsys, *cmd)
        assert rc == 2 and not out and err.count("\n") == 1, (cmd, err)
        assert all(w in err for w in want), err


def test_a_kernel_table_with_the_wrong_columns_is_named_not_taken_for_no_gpu_work(tmp_path, capsys):
    path = _export(tmp_path, f'ALTER TABLE {KERNELS} RENAME COLUMN "start" TO "begin"')
    with pytest.raises(UnreadableInput, match=f"table {KERNELS} cannot be read: no column 'start' .*begin"):
        nsys.load(path)
    _refused(capsys, path, KERNELS, "no column 'start'", "none of its 12 rows")
    named = _export(tmp_path, f'ALTER TABLE {KERNELS} RENAME COLUMN "demangledName" TO "a";'
                              f'ALTER TABLE {KERNELS} RENAME COLUMN "shortName" TO "b"', "names.sqlite")
    _refused(capsys, named, KERNELS, "no column 'demangledName' or 'shortName'")


def test_text_in_start_and_end_is_never_a_healthy_zero(tmp_path, capsys):
    path = _export(tmp_path, f"""UPDATE {KERNELS} SET start = 'abc', "end" = 'xyz'""")
    _refused(capsys, path, KERNELS, "12 start is not a number")
    ends = _export(tmp_path, f"""UPDATE {KERNELS} SET "end" = 'later'""", "ends.sqlite")
    _refused(capsys, ends, "12 end is not a number")
    backwards = _export(tmp_path, f"""UPDATE {KERNELS} SET "end" = start - 5""", "back.sqlite")
    _refused(capsys, backwards, "12 ends before it starts")


def test_a_few_unusable_rows_are_counted_and_said_in_every_output(tmp_path, capsys):
    path = _export(tmp_path, f"""UPDATE {KERNELS} SET start = 'x' WHERE rowid = 3;
        UPDATE {KERNELS} SET streamId = 'seven' WHERE rowid = 5;
        UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = 'q' WHERE rowid < 3;
        UPDATE NVTX_EVENTS SET start = 'z' WHERE rowid = 1""")
    t = nsys.load(path)
    assert int((t.kind == KERNEL).sum()) == 11 and int((t.kind == USER_ANNOTATION).sum()) == 2
    unusable = t.meta["capture"]["unusable"]
    assert unusable[KERNELS] == {"rows": 12, "dropped": 1, "reasons": {"start is not a number": 1},
                                 "wrong_type_rows": 1}
    assert unusable["CUPTI_ACTIVITY_KIND_RUNTIME"]["reasons"] == {"end is not a number": 2}
    assert unusable["CUPTI_ACTIVITY_KIND_RUNTIME"]["rows"] == int((t.kind == RUNTIME).sum()) + 2
    assert unusable["NVTX_EVENTS"] == {"rows": 3, "dropped": 1, "reasons": {"start is not a number": 1},
                                       "wrong_type_rows": 0}
    assert t.meta["dropped_events"] == 4
    rc, out, _ = cli_run(capsys, "doctor", path, "--json")
    notes = json.loads(out)["source"]["notes"]
    assert rc == 0 and any(f"table {KERNELS}: 1 of its 12 rows dropped (1 start is not a number)" in n for n in notes)
    assert any("1 row holds text where a number belongs" in n for n in notes)
    rc, out, _ = cli_run(capsys, "stats", path, "--json")
    assert rc == 0 and any(f"CUPTI_ACTIVITY_KIND_RUNTIME: 2 of its {int((t.kind == RUNTIME).sum()) + 2} rows dropped" in n for n in json.loads(out)["notes"])


def test_a_host_table_without_its_name_column_is_named_and_the_rest_is_read(tmp_path, capsys):
    path = _export(tmp_path, 'ALTER TABLE OSRT_API RENAME COLUMN "nameId" TO "what"')
    t = nsys.load(path)
    info = t.meta["capture"]["unusable"]["OSRT_API"]
    assert info["reasons"] == {next(iter(info["reasons"])): info["rows"]} and info["rows"] > 0
    assert next(iter(info["reasons"])).startswith("no column 'nameId' (it has start, end")
    assert int((t.kind == KERNEL).sum()) == 12


def test_an_intact_export_has_nothing_to_say(tmp_path):
    t = nsys.load(_export(tmp_path, ""))
    assert t.meta["capture"]["unusable"] == {} and t.meta["dropped_events"] == 0
