"""actloop: the trainer's client of actloop's HTTP trainer API, on the standard library.

    from actloop import Client
    c = Client("http://127.0.0.1:8084", token="…")
    c.submit([{"id": "p0-0", "group_id": "p0", "group_index": 0, "group_size": 2, "task": "…",
               "env": {"backend": "sim"}}])
    for r in c.results("trainer", until_idle=True):
        print(r.traj_id, r.status, r.reward, len(r.tokens))
"""

from .client import TRAINABLE, ActloopError, Client, GroupDone, LineError, Result, SubmitError

__all__ = ["TRAINABLE", "ActloopError", "Client", "GroupDone", "LineError", "Result", "SubmitError"]
