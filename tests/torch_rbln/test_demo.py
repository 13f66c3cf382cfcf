"""The demo's model choice: transformers' GPT-2 when it imports, the torch.nn stand-in otherwise, and a
WARNING that says why when an installed transformers fails to import (a silent stand-in once hid a
broken environment in CI)."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from torch_rbln import demo

SIZES = dict(vocab=32, width=16, layers=1, heads=2, positions=16)


def test_build_uses_transformers_gpt2_when_it_imports(caplog):
    pytest.importorskip("transformers")
    with caplog.at_level(logging.WARNING, logger="torch_rbln.demo"):
        make, label = demo._build(**SIZES)
    assert label.startswith("transformers GPT2LMHeadModel"), caplog.text
    assert type(make()).__name__ == "GPT2LMHeadModel"
    assert not caplog.records


def test_build_without_transformers_uses_the_stand_in_quietly(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` -> ModuleNotFoundError
    with caplog.at_level(logging.WARNING, logger="torch_rbln.demo"):
        make, label = demo._build(**SIZES)
    assert label == "GPT-2 block (torch.nn)"
    assert isinstance(make(), demo.TinyTransformerBlock)
    assert not caplog.records


def test_build_with_a_broken_transformers_warns_with_the_reason(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))  # no GPT2 classes
    with caplog.at_level(logging.WARNING, logger="torch_rbln.demo"):
        _, label = demo._build(**SIZES)
    assert label == "GPT-2 block (torch.nn)"
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "GPT2Config" in record.getMessage() and "pip install" in record.getMessage()


def test_the_warning_names_the_error_transformers_hides_behind_its_lazy_import(monkeypatch, caplog):
    lazy = types.ModuleType("transformers")

    def __getattr__(name: str):  # as transformers' _LazyModule re-raises a failed model import
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            raise RuntimeError("the real reason")
        except RuntimeError as error:
            raise ModuleNotFoundError(f"Could not import module {name!r}.") from error

    lazy.__getattr__ = __getattr__
    monkeypatch.setitem(sys.modules, "transformers", lazy)
    with caplog.at_level(logging.WARNING, logger="torch_rbln.demo"):
        demo._build(**SIZES)
    (record,) = caplog.records
    assert "Could not import module 'GPT2Config'" in record.getMessage()
    assert "RuntimeError: the real reason" in record.getMessage()
