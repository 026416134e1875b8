"""Client for fdod, the feedback-directed optimization daemon.

Standard library only; numpy arrays are accepted as buffers when numpy is
installed. See docs/runtimes.md and docs/fdod-protocol.md.
"""
from .client import (
    PROTOCOL_MAJOR,
    PROTOCOL_MINOR,
    Client,
    ExecResult,
    FdoError,
    Program,
    RpcError,
    TransportError,
    connect,
    default_socket_path,
)

__all__ = [
    "PROTOCOL_MAJOR", "PROTOCOL_MINOR", "Client", "ExecResult", "FdoError", "Program",
    "RpcError", "TransportError", "connect", "default_socket_path",
]
__version__ = "0.1.0"
