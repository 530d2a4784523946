"""Sans-I/O duplex session engine: plain state machines fed with commands, model decisions and `now`.

No sockets, tasks or sleeps live here; the server's session runner and the tests drive the same objects.
"""

from duplexkit.engine.decisions import Decision, FunctionCall, Interrupt, Listen, Speak, Transcribed
from duplexkit.engine.fence import Fence
from duplexkit.engine.session import EngineSession, Step
from duplexkit.engine.settings import EngineConfig
from duplexkit.engine.tools import FunctionOutput
from duplexkit.engine.units import Unit

__all__ = [
    "Decision",
    "EngineConfig",
    "EngineSession",
    "Fence",
    "FunctionCall",
    "FunctionOutput",
    "Interrupt",
    "Listen",
    "Speak",
    "Step",
    "Transcribed",
    "Unit",
]
