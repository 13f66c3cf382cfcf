"""`triton.testing` for the DSL: `do_bench`, `perf_report` / `Benchmark`, `assert_close`.

Same signatures and return conventions as Triton's, so tutorials' benchmark and check code runs after
changing only its imports.  Timing is wall-clock on the host (DSL kernels run synchronously), with the
driver's cache-flush buffer zeroed before every timed run, as Triton's `do_bench` does on the GPU.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

__all__ = ["do_bench", "Benchmark", "Mark", "perf_report", "assert_close"]

_log = logging.getLogger("torch_rbln.dsl.testing")
_RETURN_MODES = ("min", "max", "mean", "median", "all")


def _summarize(times: list[float], quantiles, return_mode: str):
    import torch

    t = torch.tensor(times, dtype=torch.float64)
    if quantiles is not None:
        out = torch.quantile(t, torch.tensor(list(quantiles), dtype=torch.float64)).tolist()
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return t.tolist()
    return getattr(torch, return_mode)(t).item()


def do_bench(fn: Callable, warmup: float = 25, rep: float = 100, grad_to_none=None, quantiles=None,
             return_mode: str = "mean"):
    """Milliseconds `fn()` takes: about `warmup` ms of warm-up runs, then about `rep` ms of timed runs
    (at least one of each).  Returns `return_mode` ("min", "max", "mean", "median" or "all") of the
    samples, or the list of `quantiles` of them (a single number for one quantile).  `grad_to_none`:
    tensors whose `.grad` is reset before each run (backward benchmarks)."""
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode must be one of {_RETURN_MODES}, got {return_mode!r}")
    from .driver import driver

    drv = driver.active
    fn()
    cache = drv.get_empty_cache_for_benchmark()
    clock = time.perf_counter
    t0 = clock()
    for _ in range(5):
        drv.clear_cache(cache)
        fn()
    estimate_ms = max((clock() - t0) * 1e3 / 5, 1e-6)
    n_warmup = max(1, int(warmup / estimate_ms))
    n_repeat = max(1, int(rep / estimate_ms))
    for _ in range(n_warmup):
        fn()
    times = []
    for _ in range(n_repeat):
        if grad_to_none is not None:
            for x in grad_to_none:
                x.grad = None
        drv.clear_cache(cache)
        start = clock()
        fn()
        times.append((clock() - start) * 1e3)
    return _summarize(times, quantiles, return_mode)


class Benchmark:
    """One plot of a `perf_report`: `fn(**{x_name: x}, **{line_arg: line}, **args)` for each x value of
    `x_vals` and each line value of `line_vals`."""

    def __init__(self, x_names: Sequence[str], x_vals: Sequence, line_arg: str, line_vals: Sequence,
                 line_names: Sequence[str], plot_name: str, args: dict, xlabel: str = "", ylabel: str = "",
                 x_log: bool = False, y_log: bool = False, styles=None, color=None):
        self.x_names = list(x_names)
        self.x_vals = list(x_vals)
        self.line_arg = line_arg
        self.line_vals = list(line_vals)
        self.line_names = list(line_names)
        self.plot_name = plot_name
        self.args = dict(args)
        self.xlabel = xlabel
        self.ylabel = ylabel
        self.x_log = x_log
        self.y_log = y_log
        self.styles = styles


class _Table:
    """The result of one benchmark when pandas is not installed: named columns of rows."""

    def __init__(self, columns: list[str], rows: list[list]):
        self.columns = columns
        self.rows = rows

    def __getitem__(self, names):
        idx = [self.columns.index(n) for n in names]
        return _Table(list(names), [[r[i] for i in idx] for r in self.rows])

    def to_string(self) -> str:
        cells = [self.columns] + [[_fmt(v) for v in r] for r in self.rows]
        widths = [max(len(str(c[i])) for c in cells) for i in range(len(self.columns))]
        lines = ["  ".join(str(c[i]).rjust(widths[i]) for i in range(len(widths))) for c in cells]
        return "\n".join(lines)

    def to_csv(self, path: str, index: bool = False) -> None:
        import csv

        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.columns)
            w.writerows(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _make_table(columns, rows):
    try:
        import pandas as pd
    except ImportError:
        return _Table(columns, rows)
    return pd.DataFrame(rows, columns=columns)


class Mark:
    """A function decorated with `perf_report`: call it as before, or `.run(...)` its benchmarks."""

    def __init__(self, fn: Callable, benchmarks):
        self.fn = fn
        self.benchmarks = benchmarks

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def _run(self, bench: Benchmark, save_path: str, show_plots: bool, print_data: bool, diff_col=False,
             save_precision: int = 6, **kwargs):
        columns = list(bench.x_names)
        for name in bench.line_names:
            columns += [name, f"{name}-min", f"{name}-max"]
        rows = []
        for x in bench.x_vals:
            if not isinstance(x, (list, tuple)):
                x = [x] * len(bench.x_names)
            if len(x) != len(bench.x_names):
                raise ValueError(f"x value {x} does not match x_names {bench.x_names}")
            x_args = dict(zip(bench.x_names, x, strict=True))
            row = list(x)
            for y in bench.line_vals:
                ret = self.fn(**x_args, **{bench.line_arg: y}, **bench.args, **kwargs)
                try:
                    mean, lo, hi = ret
                except TypeError:
                    mean, lo, hi = ret, None, None
                row += [mean, lo, hi]
            rows.append(row)
        table = _make_table(columns, rows)
        if bench.plot_name and (show_plots or save_path):
            self._plot(bench, table, columns, rows, show_plots, save_path)
        shown = bench.x_names + bench.line_names
        if print_data:
            print(bench.plot_name + ":")
            print(table[shown].to_string())
        if save_path:
            table[shown].to_csv(os.path.join(save_path, f"{bench.plot_name}.csv"), index=False)
        return table

    def _plot(self, bench, table, columns, rows, show_plots, save_path):
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            _log.warning("perf_report: matplotlib is not installed; '%s' is not plotted", bench.plot_name)
            return
        fig = plt.figure()
        ax = plt.subplot()
        xs = [r[0] for r in rows]
        for i, name in enumerate(bench.line_names):
            col = columns.index(name)
            style = bench.styles[i] if bench.styles and i < len(bench.styles) else None
            kw = {"color": style[0], "ls": style[1]} if style else {}
            ax.plot(xs, [r[col] for r in rows], label=name, **kw)
        ax.legend()
        ax.set_xlabel(bench.xlabel or bench.x_names[0])
        ax.set_ylabel(bench.ylabel)
        if bench.x_log:
            ax.set_xscale("log")
        if bench.y_log:
            ax.set_yscale("log")
        if show_plots:
            plt.show()
        if save_path:
            fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
        plt.close(fig)

    def run(self, show_plots: bool = False, print_data: bool = False, save_path: str = "",
            return_df: bool = False, **kwargs):
        """Run every benchmark; print its table (`print_data`), plot it (`show_plots`, needs
        matplotlib), write `<plot_name>.csv` (and `.png`) under `save_path`; return the tables when
        `return_df` (one, or a list for several benchmarks)."""
        benchmarks = [self.benchmarks] if isinstance(self.benchmarks, Benchmark) else self.benchmarks
        if save_path:
            os.makedirs(save_path, exist_ok=True)
        tables = [self._run(b, save_path, show_plots, print_data, **kwargs) for b in benchmarks]
        if return_df:
            return tables[0] if len(tables) == 1 else tables
        return None


def perf_report(benchmarks):
    """Decorator: mark a function as the measurement of `benchmarks` (a `Benchmark` or a list)."""
    return lambda fn: Mark(fn, benchmarks)


def assert_close(x, y, atol=None, rtol=None, err_msg: str = "") -> None:
    """Triton's check: `|x - y| <= atol + rtol * |y|` elementwise (NaNs equal), default atol 1e-2 and
    rtol 0; `atol` / `rtol` may be callables of x's dtype.  Works on tensors of any device and on
    Python numbers."""
    import numpy as np
    import torch

    if not isinstance(x, torch.Tensor):
        x = torch.tensor(x)
    if not isinstance(y, torch.Tensor):
        y = torch.tensor(y)
    atol = 1e-2 if atol is None else atol
    rtol = 0.0 if rtol is None else rtol
    atol = atol(x.dtype) if callable(atol) else atol
    rtol = rtol(x.dtype) if callable(rtol) else rtol

    def host(t):
        t = t.detach().cpu()
        if t.dtype in (torch.bfloat16,) or not t.dtype.is_floating_point and t.dtype != torch.bool:
            return t.numpy() if t.dtype != torch.bfloat16 else t.float().numpy()
        if t.dtype.itemsize == 1:  # fp8
            return t.float().numpy()
        return t.numpy()

    xa, ya = host(x), host(y)
    if xa.size > 1 or ya.size > 1:
        np.testing.assert_allclose(xa, ya, atol=atol, rtol=rtol, equal_nan=True, err_msg=err_msg)
        return
    if not np.allclose(xa, ya, atol=atol, rtol=rtol, equal_nan=True):
        raise AssertionError(f"{err_msg} {xa} is not close to {ya} (atol={atol}, rtol={rtol})")
