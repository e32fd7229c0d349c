// "UCX": the Net interface on UCX's UCP layer, loaded at run time (ucx_api.h).
//
// UCX chooses its transports itself: rc, dc or ud verbs on InfiniBand and RoCE, TCP
// sockets elsewhere, shared memory between processes of one host. UCX's own variables
// apply as UCX users expect them (UCX_TLS, UCX_NET_DEVICES, UCX_IB_GID_INDEX, ...), read
// by ucp_config_read. SNCCL_NET=UCX (or NCCL_NET=UCX) picks it; it comes after snccl's own
// nets, so it is never chosen without being asked for.
//
// Each connection end has its own UCP worker, so nothing is shared between comms that
// different threads drive. How the sender reaches the receiver is the receiver's choice
// (SNCCL_UCX_CONNECT), written in the Handle (any length, as net.h allows):
//  - address (default): listen() puts the receiver's worker address in the Handle;
//    connect() creates the sender's worker and an endpoint to that address, and sends a
//    HELLO active message carrying the sender's worker address and the handle's nonce;
//    accept() answers the HELLO with an endpoint back to the sender. UCX wires up its
//    transports itself; on RDMA devices its RC transport needs its UD transport for that;
//  - sockaddr: listen() opens a UCP listener on the IP address of SNCCL_SOCKET_IFNAME's
//    interface and puts that address in the Handle; connect() creates an endpoint to it
//    through UCX's connection manager (rdmacm on RDMA devices, TCP otherwise) and sends a
//    HELLO with the nonce; accept() makes the receiver's endpoint from the connection
//    request, closes the listener, and returns once the HELLO has arrived. One endpoint
//    per end carries both directions. This needs no UD, which does not connect on some
//    RoCE devices (Soft-RoCE with UCX 1.13).
// Data follows snccl's receiver-driven credit rule, which UCX's tag matching alone would
// not keep (an unexpected message is buffered by UCX):
//  - irecv posts a tagged receive for message number `seq`, then sends the sender a CTS
//    active message naming seq and the buffer's size;
//  - isend returns no request until the CTS for its next message has arrived, and then
//    sends one tagged message. Its 64-bit tag carries seq in the low 24 bits and the imm
//    in the 32 bits above them;
//  - messages complete in order.
// An end that waits on its peer (a request in flight, or a send waiting for its credit)
// sends a PROBE active message once a second when nothing else is in flight, and its
// proxy sleeps with a timer for it: on a cut link the PROBE fails (RC: after its retries)
// and fails the endpoint, where UCX's own keepalive comes every 20 s, and not on every
// transport.
// Closing sends a BYE active message with the abort code (0: in order) and, from a sender,
// how many messages it sent, so that a BYE overtaking data on another UCX lane fails no
// receive that data will still complete. A failed endpoint
// (UCX's peer error handling: a dead process, or a keepalive timeout on a cut link) fails
// every call on the comm.
#pragma once

#include "transport/net/net.h"

namespace snccl::net {

// The process's UCX Net (not yet initialised: defaultNet() does that).
Net* ucxNet();

}  // namespace snccl::net
