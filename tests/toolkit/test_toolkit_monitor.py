"""GPUMonitor, energy() and `perflab monitor` against a fake NVML (no GPU here), and without NVML."""
import json
import sys
import types

import pytest

from perflab.__main__ import main
from perflab.errors import NeedsGPU, PerflabError
from perflab.toolkit import monitor as mon_mod
from perflab.toolkit.monitor import NVML_MISSING, GPUMonitor, decode_throttle, integrate


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class FakeNVML(types.ModuleType):
    """Power P(t) = 100 + 50 t W; the energy counter is its exact integral, in mJ."""

    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    def __init__(self, clock, instant=True):
        super().__init__("pynvml")
        self.clock, self.instant, self.inits = clock, instant, 0

    def _t(self):
        return self.clock() - 100.0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.inits -= 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("gpu", uuid)

    def nvmlDeviceGetName(self, h):
        return b"Fake H100"

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=int((1000 + 100 * self._t()) * 2**20))

    def nvmlDeviceGetFieldValues(self, h, ids):
        if not self.instant:
            raise self.NVMLError("not supported")
        mw = int(round((100 + 50 * self._t()) * 1000))
        return [types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=mw))]

    def nvmlDeviceGetPowerUsage(self, h):
        return 42_000  # the 1 s average: constant, so tests can tell which source was used

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 50 + int(self._t())

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 | 0x20 if self._t() >= 1.0 else 0

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        t = self._t()
        return 5_000_000 + (100 * t + 25 * t * t) * 1000


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def fake_nvml(monkeypatch, clock):
    nv = FakeNVML(clock)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return nv


def sampled(clock, times, **kw):
    mon = GPUMonitor(interval=0.01, clock=clock, **kw)
    mon.open()
    for t in times:
        clock.t = 100.0 + t
        mon.sample()
    return mon


def test_summary_energy_two_ways_agree_and_math(fake_nvml, clock):
    mon = sampled(clock, [0.0, 0.5, 1.0, 1.5, 2.0])
    s = mon.summary()
    exact = 100 * 2 + 25 * 4  # ∫0^2 (100 + 50 t) dt
    assert s["energy_j_counter"] == pytest.approx(exact)
    assert s["energy_j_integrated"] == pytest.approx(exact)  # trapezoid is exact on a line
    assert s["mean_power_w"] == pytest.approx(exact / 2.0)
    assert s["max_power_w"] == pytest.approx(200.0)
    assert s["duration_s"] == pytest.approx(2.0) and s["samples"] == 5
    assert s["mean_gpu_util_pct"] == 90 and s["mean_mem_util_pct"] == 40
    assert s["peak_mem_used_mib"] == pytest.approx(1200.0)
    assert s["max_temp_c"] == 52 and s["min_sm_clock_mhz"] == 1980
    assert s["power_source"] == "instant" and s["device"] == "Fake H100"
    assert s["throttle"] == {"sw_power_cap": pytest.approx(0.6), "sw_thermal": pytest.approx(0.6)}


def test_uneven_samples_are_time_weighted(fake_nvml, clock):
    mon = sampled(clock, [0.0, 0.1, 2.0])
    s = mon.summary()
    assert s["energy_j_integrated"] == pytest.approx(integrate([0.0, 0.1, 2.0], [100.0, 105.0, 200.0]))
    assert s["mean_power_w"] == pytest.approx(s["energy_j_integrated"] / 2.0)


def test_falls_back_to_average_power_and_old_throttle_call(fake_nvml, clock, monkeypatch):
    fake_nvml.instant = False
    monkeypatch.setattr(FakeNVML, "nvmlDeviceGetCurrentClocksThrottleReasons",
                        FakeNVML.nvmlDeviceGetCurrentClocksEventReasons, raising=False)
    monkeypatch.delattr(FakeNVML, "nvmlDeviceGetCurrentClocksEventReasons")  # an old binding
    s = sampled(clock, [0.0, 1.0]).summary()
    assert s["power_source"] == "1 s average" and s["max_power_w"] == 42.0
    assert s["throttle"] == {"sw_power_cap": 0.5, "sw_thermal": 0.5}


def test_throttle_decoding():
    assert decode_throttle(0) == [] and decode_throttle(None) == []
    assert decode_throttle(0x1 | 0x4 | 0x40 | 0x80) == ["gpu_idle", "sw_power_cap", "hw_thermal", "hw_power_brake"]


def test_exports_json_csv_pandas_plot(fake_nvml, clock, tmp_path):
    mon = sampled(clock, [0.0, 0.5, 1.0, 1.5])
    doc = json.loads(mon.to_json(tmp_path / "m.json").read_text())
    assert doc["schema"] == "perflab.monitor/1" and len(doc["samples"]) == 4
    assert doc["samples"][-1]["throttle"] == "sw_power_cap|sw_thermal"
    assert doc["summary"]["energy_j_counter"] == pytest.approx(100 * 1.5 + 25 * 1.5**2)
    df = mon.to_pandas()
    assert list(df.columns) == list(mon_mod.FIELDS) and len(df) == 4
    assert df["power_w"].tolist() == pytest.approx([100, 125, 150, 175])
    lines = mon.to_csv(tmp_path / "m.csv").read_text().splitlines()
    assert lines[0].startswith("t,gpu_util_pct") and len(lines) == 5
    pytest.importorskip("matplotlib")
    assert mon.plot(tmp_path / "m.png").stat().st_size > 1000


def test_thread_samples_and_nvml_refcount(fake_nvml):
    with GPUMonitor(interval=0.005) as mon:
        import time

        time.sleep(0.1)
    assert len(mon.samples) >= 5
    assert fake_nvml.inits == 0  # shut down what it initialized


def test_cuda_visible_devices_maps_to_nvml(fake_nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-abc")
    assert mon_mod.nvml_handle(fake_nvml, 0) == ("gpu", 3)
    assert mon_mod.nvml_handle(fake_nvml, 1) == ("gpu", b"GPU-abc")
    with pytest.raises(PerflabError, match="no CUDA device 2"):
        mon_mod.nvml_handle(fake_nvml, 2)


def test_without_pynvml_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(PerflabError) as err:
        GPUMonitor().start()
    assert str(err.value) == NVML_MISSING
    from perflab import energy

    with pytest.raises(PerflabError, match="NVML not available"):
        energy(lambda: None)


def test_nvml_init_failure_clear_error(monkeypatch, clock):
    nv = FakeNVML(clock)

    def broken():
        raise nv.NVMLError("Driver Not Loaded")

    nv.nvmlInit = broken
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with pytest.raises(PerflabError) as err:
        GPUMonitor().start()
    assert str(err.value) == NVML_MISSING


def test_energy_needs_cuda(fake_nvml):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test is for machines without CUDA")
    from perflab import energy

    with pytest.raises(NeedsGPU, match="needs a CUDA GPU"):
        energy(lambda: None)
    assert fake_nvml.inits == 0


def test_cli_monitor_without_nvml_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert main(["monitor", "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"perflab: error: {NVML_MISSING}"


def test_cli_monitor_runs_command_summary_csv_exit_code(fake_nvml, capsys, tmp_path):
    rc = main(["monitor", "--interval", "0.01", "--csv", str(tmp_path / "s.csv"), "--",
               sys.executable, "-c", "import time, sys; time.sleep(0.2); sys.exit(3)"])
    assert rc == 3
    out = capsys.readouterr().out
    assert "GPU summary" in out and "energy" in out and "Fake H100" in out
    assert len((tmp_path / "s.csv").read_text().splitlines()) > 5


def test_cli_monitor_live_view_passes_output_through(fake_nvml):
    import io

    from rich.console import Console

    from perflab.cli.toolkit import _run_live

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    mon = GPUMonitor(interval=0.01).start()
    try:
        rc = _run_live([sys.executable, "-c", "print('hello from the command')"], mon, console)
    finally:
        mon.stop()
    assert rc == 0
    text = buf.getvalue()
    assert "hello from the command" in text and "GPU util" in text and "Fake H100" in text
