"""actloop: the trainer's client of actloop's HTTP trainer API, on the standard library.

    from actloop import Client
    c = Client("http://127.0.0.1:8084", token="…")  # or ACTLOOP_GATEWAY_URL / ACTLOOP_API_TOKEN
    c.submit([{"id": "p0-0", "group_id": "p0", "group_index": 0, "group_size": 2, "task": "…",
               "env": {"backend": "sim"}}])
    for r in c.collect(on_progress=lambda done, total: print(f"{done}/{total}")):
        print(r.traj_id, r.status, r.reward, len(r.tokens))

Each Client works for a run of its own (Client.run, new by default): ids go
to the gateway as "<run>.<id>" and come back as given, and it reads only
its run's results. AsyncClient is the same for asyncio; serve_reward serves
a reward endpoint from a function; actloop.datasets turns SWE-bench and
chat-format rows into samples.
"""

from .client import (RUN_PATTERN, TOKEN_ENV, TRAINABLE, URL_ENV, ActloopError, AsyncClient, Client,
                     GatewayUnreachable, GroupDone, LineError, Result, SubmitError, new_run)
from .datasets import chat_sample, chat_samples, rollouts, swebench_sample, swebench_samples
from .reward import RewardServer, serve_reward

__version__ = "0.2.0"

__all__ = ["RUN_PATTERN", "TOKEN_ENV", "TRAINABLE", "URL_ENV", "ActloopError", "AsyncClient", "Client",
           "GatewayUnreachable", "GroupDone", "LineError", "Result", "RewardServer", "SubmitError", "chat_sample",
           "chat_samples", "new_run", "rollouts", "serve_reward", "swebench_sample", "swebench_samples"]
