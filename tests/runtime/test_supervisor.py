"""The pool supervisor's footing: the django-q2 it was written for, and its lock-free hand-off.
(The supervisor at work, with real pools and real kills, is in tests/processes/test_self_healing.py.)"""

import importlib.metadata
import inspect
import multiprocessing
import os
import signal

from django_q.cluster import Sentinel
from django_q.monitor import monitor
from django_q.pusher import pusher
from django_q.worker import worker

from workers.runtime.supervisor.handoff import Handoff


def test_the_supervisor_was_written_for_this_django_q2():
    # workers/runtime/supervisor/sentinel.py replaces Sentinel's spawning, guard loop and stop, and calls django-q2's
    # worker, pusher and monitor with these arguments. Re-read them before moving this pin.
    assert importlib.metadata.version("django-q2") == "1.11.1"
    assert list(inspect.signature(worker).parameters) == ["task_queue", "result_queue", "timer", "timeout"]
    assert list(inspect.signature(pusher).parameters) == ["task_queue", "event", "broker"]
    assert list(inspect.signature(monitor).parameters) == ["result_queue", "broker"]
    assert list(inspect.signature(Sentinel.__init__).parameters) == [
        "self",
        "stop_event",
        "start_event",
        "cluster_id",
        "broker",
        "timeout",
        "start",
    ]
    assert all(hasattr(Sentinel, name) for name in ("spawn_cluster", "guard", "stop", "status"))


def _take_one(handoff):
    handoff.put(handoff.get())


def test_a_worker_killed_while_waiting_on_its_hand_off_blocks_no_other():
    # The defect it replaces: a reader killed inside multiprocessing.Queue.get() keeps the queue's
    # lock, and every other reader blocks for good. Hand-offs share nothing between workers.
    context = multiprocessing.get_context("fork")
    first, second = Handoff(), Handoff()
    waiting = context.Process(target=_take_one, args=(first,))
    waiting.start()
    first.worker_end.close()
    os.kill(waiting.pid, signal.SIGKILL)
    waiting.join(5)
    taker = context.Process(target=_take_one, args=(second,))
    taker.start()
    second.worker_end.close()
    second.sentinel_end.send({"task": 1})
    assert second.sentinel_end.poll(5) and second.sentinel_end.recv() == {"task": 1}
    taker.join(5)
    assert taker.exitcode == 0
