"""What the GPU's clock, power and temperature did while a measurement ran, sampled through NVML (none
where NVML is not there)."""

from __future__ import annotations

import threading
import time

import numpy as np


class PowerSampler:
    """Samples SM clock, power and temperature through NVML in a thread while timing runs."""

    def __init__(self, pci_bus_id: str, period_s: float = 0.01) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.why = ""
        """Why there are no samples, or why they stopped: said in the summary."""
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
        except Exception as exc:  # NVML is optional (pynvml missing, no driver library): the summary says so
            self.nvml = None
            self.why = f"NVML: {type(exc).__name__}: {exc}"

    def _run(self) -> None:
        n = self.nvml
        while not self._stop.is_set():
            try:
                self.samples.append((
                    n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM),
                    n.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
                    n.nvmlDeviceGetTemperature(self.handle, n.NVML_TEMPERATURE_GPU),
                ))
            except Exception as exc:  # the samples so far stand; the summary says why there are no more
                self.why = f"NVML stopped answering: {type(exc).__name__}: {exc}"
                return
            time.sleep(self.period_s)

    def __enter__(self) -> PowerSampler:
        if self.nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def summary(self) -> dict:
        """Clock, power and temperature while the measurement ran; where there were none, why."""
        if not self.samples:
            return {"unavailable": self.why or "no sample: the measurement ended before the first"}
        a = np.array(self.samples)
        return ({"stopped": self.why} if self.why else {}) | {
            "sm_clock_mhz": {"mean": float(a[:, 0].mean()), "min": float(a[:, 0].min()), "max": float(a[:, 0].max())},
            "power_w": {"mean": float(a[:, 1].mean()), "max": float(a[:, 1].max())},
            "temperature_c": float(a[:, 2].max()),
            "samples": len(a),
        }
