"""The names of blocking waits (perflab.analysis.idle.waits): Python frames, operators and native frames in which a
thread sleeps until something else happens. Pure names, no trace: the step finder reads them too."""
from __future__ import annotations

import re

_WAIT = re.compile(
    # builtins, by the object they are called on: a dict's get or a str's join is no wait
    r"<built-in (method|function) (poll|select|epoll|control)\b.*\bselect\.|"
    r"<built-in function (select|poll|sleep|waitpid|wait|epoll_wait)>|"
    r"<built-in method (acquire|acquire_lock|wait) of _?thread\.\w*lock object|"
    r"<built-in method (get|get_nowait) of _queue\.|"
    r"<built-in method (recv|recv_into|recvfrom|accept) of .*socket|"
    r"<built-in method wait of torch\._C\.Future|"
    # Python frames (with_stack): the standard library's and ZeroMQ's waiting functions
    r"\b(select|selectors)\.py\(\d+\): (select|poll)\b|"
    r"multiprocessing/(connection|queues|synchronize|popen_\w+|pool)\.py\(\d+\): "
    r"(wait|_poll|poll|_recv|_recv_bytes|recv|recv_bytes|get|acquire|join)\b|"
    r"(^|/)(threading|queue|asyncio/queues|asyncio/locks|asyncio/tasks)\.py\(\d+\): (wait|get|join|acquire|sleep)\b|"
    r"concurrent/futures/_base\.py\(\d+\): (result|wait)\b|"
    r"zmq/.*\.py\(\d+\): (poll|recv|recv_multipart|recv_pyobj|recv_string|recv_json)\b|"
    # native frames (py-spy --native, perf) and bare names
    r"^(time\.sleep|futex|pthread_cond_(timed)?wait|sem_(timed)?wait|epoll_wait|poll|select|nanosleep)$",
    re.I)


def is_wait(name: str) -> bool:
    return _WAIT.search(name.strip()) is not None
