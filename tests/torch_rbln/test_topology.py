"""torch_rbln.topology: physical NPUs, logical-device mapping, errors and the summary table."""

from __future__ import annotations

import threading

import pytest
from envutil import isolate, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_rbln import config, topology
from torch_rbln.topology import LogicalDevice

SIZES = "1, 2, 4, 8, 16, 32"


@pytest.fixture
def env(monkeypatch):
    """Clean environment and caches; returns a setter that also forgets the topology."""
    isolate(monkeypatch)

    def set_(**variables: str) -> None:
        isolate(monkeypatch, **variables)

    yield set_
    topology.reset_for_tests()


def groups() -> list[list[int]]:
    return [list(d.npus) for d in topology.get_topology().devices]


def build_error() -> str:
    with pytest.raises(RuntimeError) as e:
        topology.get_topology()
    return str(e.value)


# ---------------------------------------------------------------- physical NPUs


def test_default_eight_simulated_npus_one_to_one(env):
    assert topology.physical_device_count() == 8
    assert topology.device_count() == 8
    assert groups() == [[i] for i in range(8)]
    assert topology.get_topology().unused == ()


@pytest.mark.parametrize("n", [1, 3, 12])
def test_sim_npus(env, n):
    env(TORCH_RBLN_SIM_NPUS=str(n))
    assert topology.physical_device_count() == n
    assert topology.device_count() == n


def test_sim_npus_invalid_is_an_error_at_first_use(env):
    env(TORCH_RBLN_SIM_NPUS="zero")
    with pytest.raises(config.ConfigError, match="Invalid TORCH_RBLN_SIM_NPUS 'zero'") as e:
        topology.device_count()
    assert isinstance(e.value, RuntimeError)


def test_rbln_devices_restricts_and_renumbers(env):
    env(RBLN_DEVICES="2,3")
    assert topology.physical_device_count() == 2
    assert groups() == [[0], [1]]


def test_rbln_devices_with_grouping(env):
    env(RBLN_DEVICES="7,1,4,5", RBLN_NPUS_PER_DEVICE="2")
    assert topology.physical_device_count() == 4
    assert groups() == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("8", "NPU 8 does not exist"),
        ("0,9", "NPU 9 does not exist"),
        ("1,1", "duplicate NPU id 1"),
        ("a", "'a' is not a non-negative integer"),
        ("-1", "'-1' is not a non-negative integer"),
    ],
)
def test_rbln_devices_errors_name_the_variable(env, value, phrase):
    env(RBLN_DEVICES=value)
    with pytest.raises(topology.DeviceConfigError) as e:
        topology.device_count()
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, config.ConfigError)
    assert f"Invalid RBLN_DEVICES '{value}'" in str(e.value)
    assert phrase in str(e.value)


def test_rbln_devices_nonexistent_respects_sim_npus(env):
    env(RBLN_DEVICES="3", TORCH_RBLN_SIM_NPUS="4")
    assert topology.physical_device_count() == 1
    env(RBLN_DEVICES="4", TORCH_RBLN_SIM_NPUS="4")
    with pytest.raises(ValueError, match=r"expected distinct ids in 0\.\.3"):
        topology.physical_device_count()


# ---------------------------------------------------------------- mapping


def test_upstream_four_npus_two_per_device(env):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2")
    assert topology.device_count() == 2
    assert groups() == [[0, 1], [2, 3]]
    assert topology.get_topology().unused == ()


def test_upstream_four_npus_full_aggregation(env):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="4")
    assert groups() == [[0, 1, 2, 3]]


def test_upstream_six_npus_four_per_device_leaves_two_unused(env, capsys):
    env(TORCH_RBLN_SIM_NPUS="6", RBLN_NPUS_PER_DEVICE="4")
    topo = topology.get_topology()
    assert groups() == [[0, 1, 2, 3]]
    assert topo.unused == (4, 5)
    err = capsys.readouterr().err
    assert (
        "[TORCH-RBLN][WARNING] 2 physical NPU(s) are unused due to grouping constraints: NPU(s) 4, 5." in err
    )


def test_upstream_device_map(env, capsys):
    env(TORCH_RBLN_SIM_NPUS="6", RBLN_DEVICE_MAP="[0,1],[2,3,4,5]")
    assert groups() == [[0, 1], [2, 3, 4, 5]]
    assert topology.get_topology().unused == ()
    assert "WARNING" not in capsys.readouterr().err


def test_device_map_order_non_contiguous_and_unused(env, capsys):
    env(RBLN_DEVICE_MAP="[3,1],[0],[6,2]")
    topo = topology.get_topology()
    assert groups() == [[3, 1], [0], [6, 2]]
    assert [d.root for d in topo.devices] == [3, 0, 6]
    assert [d.aggregated for d in topo.devices] == [True, False, True]
    assert topo.unused == (4, 5, 7)
    err = capsys.readouterr().err
    assert "3 physical NPU(s) are unused due to grouping constraints: NPU(s) 4, 5, 7." in err


def test_device_map_spaces_allowed_around_punctuation(env):
    env(RBLN_DEVICE_MAP=" [ 0 , 1 ] , [2,3] ")
    assert groups() == [[0, 1], [2, 3]]


def test_priority_map_wins_over_npus_per_device(env, capsys):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_DEVICE_MAP="[0,1,2,3]", RBLN_NPUS_PER_DEVICE="2")
    assert groups() == [[0, 1, 2, 3]]
    assert "RBLN_NPUS_PER_DEVICE=2 is ignored because RBLN_DEVICE_MAP is set" in capsys.readouterr().err


def test_priority_map_wins_even_over_invalid_npus_per_device(env):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_DEVICE_MAP="[0,1]", RBLN_NPUS_PER_DEVICE="3")
    assert groups() == [[0, 1]]


def test_empty_map_counts_as_unset(env):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_DEVICE_MAP="", RBLN_NPUS_PER_DEVICE="2")
    assert groups() == [[0, 1], [2, 3]]


def test_empty_npus_per_device_counts_as_unset(env):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_DEVICE_MAP="", RBLN_NPUS_PER_DEVICE="")
    assert groups() == [[0], [1], [2], [3]]


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16, 32])
def test_every_valid_size(env, k):
    env(TORCH_RBLN_SIM_NPUS="40", RBLN_NPUS_PER_DEVICE=str(k))
    assert topology.device_count() == 40 // k
    assert groups() == [list(range(i * k, i * k + k)) for i in range(40 // k)]
    assert topology.get_topology().unused == tuple(range(40 // k * k, 40))


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16, 32])
def test_every_valid_size_in_map(env, k):
    env(TORCH_RBLN_SIM_NPUS="32", RBLN_DEVICE_MAP="[" + ",".join(map(str, range(k))) + "]")
    assert groups() == [list(range(k))]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("k", [3, 5, 6, 12, 64])
def test_npus_per_device_invalid_size(env, k):
    env(RBLN_NPUS_PER_DEVICE=str(k))
    assert build_error() == (
        f"RBLN_NPUS_PER_DEVICE must be one of the valid sizes: {SIZES}. Got {k} which is invalid. "
        f"Env RBLN_DEVICE_MAP=-, RBLN_NPUS_PER_DEVICE={k}."
    )


@pytest.mark.parametrize("value", ["0", "-1", "-4", "2x", "two", "1.5", "+2", "0x2", " ", "2 2", "٢"])
def test_npus_per_device_not_a_positive_integer(env, value):
    env(RBLN_NPUS_PER_DEVICE=value)
    assert build_error() == (
        f"RBLN_NPUS_PER_DEVICE must be a positive integer (got '{value}'). "
        f"Env RBLN_DEVICE_MAP=-, RBLN_NPUS_PER_DEVICE={value}."
    )


def test_no_logical_device(env):
    env(TORCH_RBLN_SIM_NPUS="2", RBLN_NPUS_PER_DEVICE="4")
    assert build_error() == (
        "No logical device (this process has 2 physical NPU(s), need 4 per logical device). "
        "Env RBLN_DEVICE_MAP=-, RBLN_NPUS_PER_DEVICE=4."
    )


@pytest.mark.parametrize(("mapping", "size"), [("[0,1,2]", 3), ("[0],[1,2,3,4,5]", 5), ("[0,1],[]", 0)])
def test_map_invalid_group_size(env, mapping, size):
    env(RBLN_DEVICE_MAP=mapping)
    assert build_error() == (
        "Each logical device mapping in RBLN_DEVICE_MAP must contain a valid number of physical NPUs. "
        f"Valid sizes are: {SIZES}. Mapping with {size} physical NPU(s) is invalid. "
        f"Env RBLN_DEVICE_MAP={mapping}, RBLN_NPUS_PER_DEVICE=-."
    )


def test_map_size_checked_before_range(env):
    env(TORCH_RBLN_SIM_NPUS="2", RBLN_DEVICE_MAP="[0,1],[5,6,7]")
    assert "Mapping with 3 physical NPU(s) is invalid." in build_error()


def test_map_out_of_range_spec_text(env):
    env(TORCH_RBLN_SIM_NPUS="2", RBLN_DEVICE_MAP="[0,1],[2,3]")
    assert build_error() == (
        "Physical NPU 2 out of range (this process has 2 physical NPU(s), valid 0..1). "
        "Env RBLN_DEVICE_MAP=[0,1],[2,3], RBLN_NPUS_PER_DEVICE=-."
    )


def test_map_out_of_range_after_rbln_devices(env):
    env(RBLN_DEVICES="4,5", RBLN_DEVICE_MAP="[4,5]")
    assert build_error().startswith(
        "Physical NPU 4 out of range (this process has 2 physical NPU(s), valid 0..1)."
    )


def test_long_map_is_cut_to_80_characters(env):
    mapping = ",".join(f"[{2 * i},{2 * i + 1}]" for i in range(20)) + ",[100,101]"
    assert len(mapping) > 80
    env(TORCH_RBLN_SIM_NPUS="64", RBLN_DEVICE_MAP=mapping)
    msg = build_error()
    assert msg.startswith("Physical NPU 100 out of range (this process has 64 physical NPU(s), valid 0..63).")
    assert msg.endswith(f"Env RBLN_DEVICE_MAP={mapping[:77]}..., RBLN_NPUS_PER_DEVICE=-.")


@pytest.mark.parametrize(("length", "cut"), [(80, False), (81, True)])
def test_map_cut_boundary(env, length, cut):
    prefix = "[0],[1],"
    mapping = prefix + "[" + "9" * (length - len(prefix) - 2) + "]"
    assert len(mapping) == length
    env(RBLN_DEVICE_MAP=mapping)
    shown = mapping[:77] + "..." if cut else mapping
    assert build_error().endswith(f"Env RBLN_DEVICE_MAP={shown}, RBLN_NPUS_PER_DEVICE=-.")


@pytest.mark.parametrize(
    ("mapping", "npu"),
    [("[0,1],[1,2]", 1), ("[0,1],[2,3],[4,5],[3,6]", 3), ("[0,0]", 0)],
)
def test_map_already_assigned(env, mapping, npu):
    env(RBLN_DEVICE_MAP=mapping)
    msg = build_error()
    assert msg.startswith(f"Physical NPU {npu} is already assigned to another logical device")
    assert msg.endswith(f"Env RBLN_DEVICE_MAP={mapping}, RBLN_NPUS_PER_DEVICE=-.")


MALFORMED = [
    ("[0,1", 4, "',' or ']'", "end of text"),
    ("0,1", 0, "'['", "'0'"),
    ("[a]", 1, "a non-negative integer NPU id", "'a'"),
    ("[-1]", 1, "a non-negative integer NPU id", "'-'"),
    ("[0 1]", 3, "',' or ']'", "'1'"),
    ("[0,1],", 6, "'['", "end of text"),
    ("[0,]", 3, "a non-negative integer NPU id", "']'"),
    ("[0,1]x", 5, "',' or end of text", "'x'"),
    ("[0,1][2,3]", 5, "',' or end of text", "'['"),
    ("[[0]]", 1, "a non-negative integer NPU id", "'['"),
    ("(0,1)", 0, "'['", "'('"),
    ("[0;1]", 2, "',' or ']'", "';'"),
    ("[1.5]", 2, "',' or ']'", "'.'"),
]


@pytest.mark.parametrize(("mapping", "pos", "expected", "found"), MALFORMED)
def test_map_malformed(env, mapping, pos, expected, found):
    env(RBLN_DEVICE_MAP=mapping)
    assert build_error() == (
        f"Malformed RBLN_DEVICE_MAP at position {pos}: expected {expected}, found {found}. "
        f'Expected format: "[0,1],[2,3]". Env RBLN_DEVICE_MAP={mapping}, RBLN_NPUS_PER_DEVICE=-.'
    )


@pytest.mark.parametrize("mapping", ["[]", "[],[]", " [ ] ", "   "])
def test_map_without_mappings(env, mapping):
    env(RBLN_DEVICE_MAP=mapping)
    msg = build_error()
    assert msg.startswith("RBLN_DEVICE_MAP must contain at least one logical device mapping.")
    assert "Env RBLN_DEVICE_MAP=" in msg


def test_parse_device_map_directly():
    assert topology.parse_device_map("[0,1],[2,3]") == [[0, 1], [2, 3]]
    assert topology.parse_device_map("[10]") == [[10]]
    assert topology.parse_device_map("[]") == [[]]


def test_failed_build_is_not_cached(env, monkeypatch):
    env(RBLN_NPUS_PER_DEVICE="3")
    with pytest.raises(RuntimeError):
        topology.device_count()
    assert not topology.is_initialized()
    monkeypatch.setenv("RBLN_NPUS_PER_DEVICE", "2")
    assert topology.device_count() == 4


# ---------------------------------------------------------------- device index


def test_check_device_index_spec_text(env):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2")
    assert topology.check_device_index(1) == LogicalDevice(1, (2, 3))
    for index in (5, 2, -1):
        with pytest.raises(RuntimeError) as e:
            topology.check_device_index(index)
        assert str(e.value) == (
            f"Logical device rbln:{index} is not assigned (this process has 2 logical device(s)). "
            "Env RBLN_DEVICE_MAP=-, RBLN_NPUS_PER_DEVICE=2."
        )


def test_check_device_index_with_map(env):
    env(RBLN_DEVICE_MAP="[0,1]")
    with pytest.raises(RuntimeError, match=r"Env RBLN_DEVICE_MAP=\[0,1\], RBLN_NPUS_PER_DEVICE=-\.$"):
        topology.check_device_index(1)


def test_logical_device_properties():
    d = LogicalDevice(0, (4, 5))
    assert d.root == 4 and d.aggregated and d.size == 2
    s = LogicalDevice(1, (7,))
    assert s.root == 7 and not s.aggregated


# ---------------------------------------------------------------- laziness and caching


def test_lazy_cached_and_later_env_changes_ignored(env, monkeypatch):
    env(TORCH_RBLN_SIM_NPUS="4")
    assert not topology.is_initialized()
    topo = topology.get_topology()
    assert topology.is_initialized()
    assert topology.topology() is topo
    monkeypatch.setenv("TORCH_RBLN_SIM_NPUS", "2")
    monkeypatch.setenv("RBLN_NPUS_PER_DEVICE", "3")
    assert topology.device_count() == 4
    assert topology.get_topology() is topo
    topology.reset_for_tests()
    assert not topology.is_initialized()
    with pytest.raises(RuntimeError, match="valid sizes"):
        topology.get_topology()


def test_thread_safe_single_build(env, monkeypatch):
    calls = []
    real = topology._build

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(topology, "_build", counting)
    results = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        results.append(topology.get_topology())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert all(r is results[0] for r in results)


# ---------------------------------------------------------------- summary table

SPEC_TABLE = """\
[RBLN] Device Topology Initialized:
+----------------+------------------+---------------------+
| Logical Device | Physical NPU IDs | Status              |
+----------------+------------------+---------------------+
| rbln:0         | [ 0, 1, 2, 3 ]   | Active (Aggregated) |
| -              | [ 4 ]            | Unused              |
+----------------+------------------+---------------------+
[Warning] 1 physical NPU(s) are unused due to grouping constraints."""

TWO_BY_TWO = """\
[RBLN] Device Topology Initialized:
+----------------+------------------+---------------------+
| Logical Device | Physical NPU IDs | Status              |
+----------------+------------------+---------------------+
| rbln:0         | [ 0, 1 ]         | Active (Aggregated) |
| rbln:1         | [ 2, 3 ]         | Active (Aggregated) |
+----------------+------------------+---------------------+"""

ONE_TO_ONE = """\
[RBLN] Device Topology Initialized:
+----------------+------------------+--------+
| Logical Device | Physical NPU IDs | Status |
+----------------+------------------+--------+
| rbln:0         | [ 0 ]            | Active |
| rbln:1         | [ 1 ]            | Active |
+----------------+------------------+--------+"""

MIXED = """\
[RBLN] Device Topology Initialized:
+----------------+------------------------------------------+---------------------+
| Logical Device | Physical NPU IDs                         | Status              |
+----------------+------------------------------------------+---------------------+
| rbln:0         | [ 11 ]                                   | Active              |
| rbln:1         | [ 0, 1, 2, 3, 4, 5, 6, 7 ]               | Active (Aggregated) |
| -              | [ 8, 9, 10, 12, 13, 14, 15, 16, 17, 18 ] | Unused              |
+----------------+------------------------------------------+---------------------+
[Warning] 10 physical NPU(s) are unused due to grouping constraints."""


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"TORCH_RBLN_SIM_NPUS": "5", "RBLN_NPUS_PER_DEVICE": "4"}, SPEC_TABLE),
        ({"TORCH_RBLN_SIM_NPUS": "4", "RBLN_NPUS_PER_DEVICE": "2"}, TWO_BY_TWO),
        ({"TORCH_RBLN_SIM_NPUS": "4", "RBLN_DEVICE_MAP": "[0,1],[2,3]"}, TWO_BY_TWO),
        ({"TORCH_RBLN_SIM_NPUS": "2"}, ONE_TO_ONE),
        ({"TORCH_RBLN_SIM_NPUS": "19", "RBLN_DEVICE_MAP": "[11],[0,1,2,3,4,5,6,7]"}, MIXED),
    ],
)
def test_device_summary_exact(env, capsys, variables, expected):
    env(**variables)
    assert topology.device_summary() == expected
    assert capsys.readouterr().out == expected + "\n"


def test_device_summary_widths_grow_with_two_digit_indices(env, capsys):
    env(TORCH_RBLN_SIM_NPUS="12")
    text = topology.device_summary()
    lines = text.splitlines()
    assert lines[-2] == "| rbln:11        | [ 11 ]           | Active |"
    assert len({len(line) for line in lines[1:]}) == 1  # every table line has the same width
    assert "[Warning]" not in text


def test_format_summary_fits_long_labels():
    topo = topology.Topology(
        100, tuple(topology.LogicalDevice(i, (i,)) for i in range(100)), ()
    )
    lines = topology.format_summary(topo).splitlines()
    assert lines[-2] == "| rbln:99        | [ 99 ]           | Active |"


# ---------------------------------------------------------------- end to end


def test_subprocess_end_to_end_warning_and_summary():
    code = "from torch_rbln import topology; topology.device_summary()"
    r = run_python(code, TORCH_RBLN_SIM_NPUS="6", RBLN_NPUS_PER_DEVICE="4")
    assert r.returncode == 0, r.stderr
    assert "| -              | [ 4, 5 ]         | Unused              |" in r.stdout
    assert r.stdout.rstrip().endswith("[Warning] 2 physical NPU(s) are unused due to grouping constraints.")
    assert r.stderr == (
        "[TORCH-RBLN][WARNING] 2 physical NPU(s) are unused due to grouping constraints: NPU(s) 4, 5. "
        "Env RBLN_DEVICE_MAP=-, RBLN_NPUS_PER_DEVICE=4.\n"
    )


def test_subprocess_invalid_mapping_raises_runtime_error():
    code = (
        "from torch_rbln import topology\n"
        "try:\n    topology.device_count()\nexcept RuntimeError as e:\n    print(e)\n"
    )
    r = run_python(code, TORCH_RBLN_SIM_NPUS="2", RBLN_NPUS_PER_DEVICE="4")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "No logical device (this process has 2 physical NPU(s), need 4 per logical device). "
        "Env RBLN_DEVICE_MAP=-, RBLN_NPUS_PER_DEVICE=4."
    )


# ---------------------------------------------------------------- parser properties

SPACES = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), min_size=1, max_size=6), st.data())
def test_parser_round_trips_any_spacing(groups_, data):
    def sp() -> str:
        return data.draw(SPACES)

    text = sp() + ("," + sp()).join(
        "[" + sp() + (sp() + "," + sp()).join(map(str, g)) + sp() + "]" + sp() for g in groups_
    )
    assert topology.parse_device_map(text) == groups_


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="[],0123 -a", max_size=14))
def test_parser_never_crashes(text):
    try:
        parsed = topology.parse_device_map(text)
    except topology._MapSyntaxError as e:
        assert "Malformed RBLN_DEVICE_MAP at position" in str(e)
    else:
        assert all(isinstance(i, int) and i >= 0 for g in parsed for i in g)
        assert "-" not in text and "a" not in text
