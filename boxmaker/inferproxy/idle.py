"""How long a proxied connection has carried no byte either way, asked of the kernel.

Counting bytes in the copy threads would put bookkeeping on the hot path (the copy loops run in
C without the GIL). The kernel already keeps what is needed for the upstream TCP socket: in
`struct tcp_info`, `tcpi_last_data_sent` and `tcpi_last_data_recv` are the milliseconds since data
last went out and came in. Every byte from the client goes out there and every byte for it comes
in there, so the smaller of the two is how long the connection has been quiet. The main thread
reads it once per connection when an idle deadline may have passed; the copy threads never see it.

A client that reads what it was sent slower than the upstream is willing to send stops the bytes
upstream too (the buffers between are full), so it counts as quiet as well.
"""

import socket
import struct

# The struct's layout is part of the kernel ABI (fields are only ever appended); these two have
# been there since Linux 2.6.
_LAST_DATA = struct.Struct(
    "=I4xI"
)  # tcpi_last_data_sent, (tcpi_last_ack_sent), tcpi_last_data_recv
_LAST_DATA_OFFSET = 44
_TCP_INFO_BYTES = 104


def tcp_quiet_ms(sock: socket.socket) -> int | None:
    """Milliseconds since `sock` (a TCP socket) last sent or received data; None if unknown.

    Raises:
        OSError: the socket cannot be asked (closed under us).
    """
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
    if len(raw) < _LAST_DATA_OFFSET + _LAST_DATA.size:
        return None
    sent_ms, received_ms = _LAST_DATA.unpack_from(raw, _LAST_DATA_OFFSET)
    return min(int(sent_ms), int(received_ms))
