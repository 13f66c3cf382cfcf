"""torch_rbln: the rbln PyTorch device (work in progress)."""

__version__ = "0.1.0"


def _autoload() -> None:
    """Entry point for torch's `torch.backends` autoload group."""
