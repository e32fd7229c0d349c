// The compressing net: a Net that wraps the chosen plugin (Socket or IB) and compresses
// each message losslessly with LZ4 or zstd before it leaves the node, when the message
// compresses (SNCCL_NET_COMPRESS; docs/compression.md).
//
// Every message travels with a 16-byte header (WireHeader): how it is encoded and its
// size before encoding. The sender copies each message into a staging buffer of its
// connection: compressed when a cheap probe of a few samples says it is worth it
// (Coder::worthCompressing) and the result is smaller, raw otherwise. The receiver posts a
// staging buffer (the posted size plus the header) to the inner plugin for each receive
// and decodes into the caller's buffer when test() sees the message complete; it reports
// the original size, so the net transport above sees the messages it sent. Credits,
// ordering, imm and errors are the inner plugin's.
//
// Both ends must compress: the listen handle carries a trailer naming the receiver's
// codec, and a sender with another setting (or none) fails to connect with a message
// naming SNCCL_NET_COMPRESS; a message without the header fails the receive.
#pragma once

#include "transport/net/compress/codec.h"
#include "transport/net/net.h"

namespace snccl::net {

// A net that compresses over `inner` with `cfg` (not kRaw). It lives as long as the
// process, like the plugins it wraps.
Net* compressNet(Net* inner, const compress::CodecConfig& cfg);

}  // namespace snccl::net
