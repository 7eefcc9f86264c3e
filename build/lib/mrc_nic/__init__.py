"""mrc-nic: emulated MRC NICs and multi-plane fabric."""

__version__ = "0.1.0"
