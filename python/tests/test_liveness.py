"""The session's liveness watch (loadplan.transfer.liveness): a rank that
joined and whose process ended is found gone, by its connection or by its
listener, and stays gone; a live rank and one not joined yet are not; a
wait in the rendezvous store stops at once for a gone rank instead of
running its timeout."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

from loadplan.transfer import free_port
from loadplan.transfer.liveness import Liveness, PeerGone
from loadplan.transfer.rendezvous import Rendezvous

# A peer process: joins the session as rank 1, says so, and ends when told.
PEER = """
import datetime, os, sys
import torch.distributed as dist
from loadplan.transfer.liveness import Liveness
port = int(sys.argv[1])
store = dist.TCPStore("127.0.0.1", port, is_master=False,
                      timeout=datetime.timedelta(seconds=30))
watch = Liveness(store, "s", 1, 3, address="127.0.0.1", port=port)
print("joined", flush=True)
sys.stdin.readline()
os._exit(9)
"""


@pytest.fixture
def session():
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=30))
    watch = Liveness(store, "s", 0, 3, address="127.0.0.1", port=port)
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert peer.stdout.readline().strip() == "joined"
    yield store, watch, peer
    watch.close()
    peer.kill()
    peer.wait()


def test_a_live_peer_and_one_not_joined_are_not_gone(session):
    store, watch, peer = session
    watch.check()  # rank 1 alive, rank 2 never joined
    watch.check()  # connected now: still alive


@pytest.mark.parametrize("connected", [True, False])
def test_a_peer_whose_process_ended_is_gone(session, connected):
    store, watch, peer = session
    if connected:
        watch.check()
    peer.stdin.write("exit\n")
    peer.stdin.flush()
    peer.wait()
    with pytest.raises(PeerGone, match="rank 1 is gone: its process ended") as e:
        watch.check()
    how = "its connection closed" if connected else "nothing listens at 127.0.0.1:"
    assert how in str(e.value)
    with pytest.raises(PeerGone):  # and stays gone
        watch.check()


def test_a_wait_in_the_store_stops_for_a_gone_peer(session):
    store, watch, peer = session
    rv = Rendezvous(0, 3, group=None, store=store, init_method=None, name="t", host=None,
                    timeout=60, watch=watch)
    assert rv.store_get("nothing", 300) is None  # a timeout, the peer alive
    peer.stdin.write("exit\n")
    peer.stdin.flush()
    peer.wait()
    t0 = time.perf_counter()
    with pytest.raises(PeerGone):
        rv.store_get("nothing", 60_000)
    assert time.perf_counter() - t0 < 2.0
    assert "rank 1 is gone" in rv.store_error


# A rank waiting in the store with a watch, past several of the watch's
# slices, for a key that does not come.
QUIET_WAIT = """
import datetime, sys
import torch.distributed as dist
from loadplan.transfer import free_port
from loadplan.transfer.liveness import Liveness
from loadplan.transfer.rendezvous import Rendezvous
port = free_port()
store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=30))
watch = Liveness(store, "q", 0, 2, address="127.0.0.1", port=port)
rv = Rendezvous(0, 2, group=None, store=store, init_method=None, name="q", host=None,
                timeout=60, watch=watch)
store.set("late", b"1") if sys.argv[1] == "set" else None
print(rv.store_get("late", 900), flush=True)
"""


@pytest.mark.parametrize("comes", [False, True])
def test_a_watched_wait_in_the_store_logs_nothing(comes):
    # The watch looks at the peers between slices of the wait; a wait in
    # the store that times out makes torch's store client log a warning
    # ("waitForInput ... timed out"), once per slice, which users read as
    # an error. The watched wait polls instead.
    done = subprocess.run([sys.executable, "-c", QUIET_WAIT, "set" if comes else "-"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("b'1'" if comes else "None")
    assert "waitForInput" not in done.stderr and "timed out" not in done.stderr, done.stderr
