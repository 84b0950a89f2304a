"""Every table's provenance names the CPU's instruction set and the thread count: numbers are
bit-identical on one machine, but another CPU (other SIMD kernels) or thread count may change the
last bits, so a reader must be able to tell which machine a table came from."""

from __future__ import annotations

import pandas as pd

from groupsparse.io import files as io

AVX2_ONLY = """processor\t: 0
model name\t: Some CPU @ 2.0GHz
flags\t\t: fpu sse4_2 avx avx2 fma
processor\t: 1
model name\t: Some CPU @ 2.0GHz
flags\t\t: fpu sse4_2 avx avx2 fma
"""


def test_the_instruction_set_is_read_from_cpuinfo(tmp_path):
    (tmp_path / "cpuinfo").write_text(AVX2_ONLY)
    cpu = io.cpu_info(tmp_path / "cpuinfo")
    assert cpu["model"] == "Some CPU @ 2.0GHz"
    assert cpu["isa"] == ["sse4_2", "avx", "avx2", "fma"]  # no avx512f on this one
    assert cpu["logical_cpus"] >= 1
    assert io.cpu_info(tmp_path / "missing")["isa"] == []  # no /proc (macOS): empty, not an error


def test_every_table_carries_cpu_and_threads_and_aggregates_name_every_machine(tmp_path):
    import torch

    torch.set_num_threads(1)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    io.write_parquet(pd.DataFrame({"x": [1]}), a, io.provenance("h"))
    prov = io.read_provenance(a)
    assert prov["cpu"]["isa"] == io.cpu_info()["isa"] and prov["threads"]["torch_threads"] == 1
    other = io.provenance("h") | {"host": "elsewhere", "cpu": {"isa": ["avx2"]}}
    io.write_parquet(pd.DataFrame({"x": [2]}), b, other)
    machines = io.machines_of([a, a, b])
    assert [m["host"] for m in machines] == [prov["host"], "elsewhere"]
    assert machines[1]["cpu"] == {"isa": ["avx2"]} and machines[0]["threads"]["torch_threads"] == 1
