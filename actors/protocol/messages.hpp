// Messages between clients and servers. In one process they travel as these C++ values inside CAF's
// copy-on-write messages (tensors share storage: nothing is copied). Across processes each is written as its
// Cap'n Proto struct (schema/server.capnp) and read in place: a received tensor is a view into the received
// bytes, which the tensor keeps alive.
//
// A malformed message never fails deserialization (that would drop it silently); it arrives with `wire_error`
// set, and the receiver answers bad_request naming the problem.
#pragma once

#include <utility>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/protocol/wire_message.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

struct info_request {
  std::string wire_error;
};

struct server_info {
  std::string version, model, public_name, address, dtype, device;
  int64_t first_block = 0, last_block = 0, total_blocks = 0;
  int64_t cache_tokens_left = 0, hidden_size = 0, sessions = 0;
  std::string state = "online";                       // joining, online, offline
  std::vector<std::pair<std::string, double>> pings;  // next servers' address -> smoothed RTT in ms
  std::vector<std::string> adapters;                  // LoRA adapters loaded
  double throughput = 0;     // tokens/s per hosted block offered to the swarm (what balancing sums)
  double inference_rps = 0;  // measured per block: single-token steps with a KV cache; 0 = unknown
  double forward_rps = 0;    // measured per block: 1024-token batches without a cache; 0 = unknown
  double network_rps = 0;    // tokens/s of f32 hidden states the measured bandwidth carries; 0 = unknown
  std::string owner;         // the server's Ed25519 public key, hex; a DHT reader sets the key that signed the record
  std::string kv_dtype;      // its KV caches' dtype: "f32" or "f16" ("": f32); spot checks allow for an f16 cache
  std::string wire_error;
};

struct open_session {
  int64_t max_length = 0;
  int64_t batch = 1;
  int64_t first_block = 0;  // the blocks of the server's span to run, [first, last); 0, 0 = all of them
  int64_t last_block = 0;
  std::string adapter;  // LoRA adapter applied to every step ("" = none)
  // Deep prompts for these blocks [blocks, batch, prompt_len, hidden] (undefined: none): before each block a token
  // at position p < prompt_len gets prompts[block, sequence, p] added, in every step (so in a replay too).
  Tensor prompts;
  std::string challenge;  // random bytes the server signs in its reply (at most 64; "" = no proof asked)
  std::string wire_error;
};

struct session_opened {
  uint64_t session_id = 0;
  int64_t cache_tokens_left = 0;
  std::string owner;  // the server's public key, hex
  std::string proof;  // its signature of the challenge (actors/trust/identity_proof.hpp)
  std::string wire_error;
};

struct route_hop {
  std::string address;
  uint64_t session_id = 0;
};

struct step_request {
  uint64_t session_id = 0;
  uint64_t step_id = 0;
  Tensor hidden;                   // [batch, tokens, hidden], f32, host
  std::vector<int32_t> positions;  // one per token
  std::vector<route_hop> next;     // push mode: the servers after this one
  std::string wire_error;
  // Beam search (Petals' hypo_ids): before this step, sequence b of the session continues what sequence
  // hypo_ids[b] held (its cache; sequences continuing the same one share its pages until they write). Empty: each
  // continues its own.
  std::vector<int32_t> hypo_ids = {};
};

struct step_reply {
  uint64_t session_id = 0;
  uint64_t step_id = 0;
  Tensor hidden;
  std::string wire_error;
};

// The stateless forward and backward (training). Blocks [first_block, last_block) of the server's span (0, 0:
// all of it); prompts [blocks, batch, prompt_len, hidden] or undefined for none; adapter "" for none.
struct forward_request {
  Tensor hidden;
  std::vector<int32_t> positions;
  Tensor prompts;
  int64_t first_block = 0, last_block = 0;
  std::string adapter;
  uint64_t stream = 0;  // nonzero: the content came as this stream's chunks (wire_stream.hpp)
  std::string wire_error;
  std::string challenge;  // random bytes the server signs in its reply (at most 64; "" = no proof asked)
};

struct forward_reply {
  Tensor hidden;
  uint64_t stream = 0;
  std::string wire_error;
  std::string owner;  // the server's public key (hex)
  std::string proof;  // its signature of the request's challenge (actors/trust/identity_proof.hpp)
};

struct backward_request {
  Tensor hidden;       // the input of the first block, as the client sent it to the forward
  Tensor grad_output;  // gradient of the last block's output
  std::vector<int32_t> positions;
  Tensor prompts;
  int64_t first_block = 0, last_block = 0;
  std::string adapter;
  uint64_t stream = 0;
  std::string wire_error;
};

struct backward_reply {
  Tensor grad_input;
  Tensor grad_prompts;  // undefined when the request had no prompts
  uint64_t stream = 0;
  std::string wire_error;
};

// A piece of a large message crossing processes as a stream (actors/protocol/wire_stream.hpp): bytes
// [offset, offset + size) of the message's `total` flat bytes. On the sending side `data` points into the message
// (its tensors, its Cap'n Proto segments), kept alive by `keep`; on arrival into the received buffer.
struct wire_chunk {
  uint64_t stream = 0;
  uint64_t offset = 0;
  uint64_t total = 0;
  const char* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> keep;
  std::string wire_error;
};

struct close_session {
  uint64_t session_id = 0;
  std::string wire_error;
};

struct ack {
  std::string wire_error;
};

// Bytes sent to a peer to measure the bandwidth to it (answered with an ack once they have arrived). The
// receiver does not keep them: across processes it learns only how many arrived.
struct bandwidth_probe {
  std::vector<char> payload;  // what the sender sends
  size_t received = 0;        // on arrival over the wire: the payload's size
  std::string wire_error;
};

// Cap'n Proto encoding of each message (messages.cpp): encode() to bytes, write() straight into CAF's
// serializer, decode() in place. Neither encode nor write throws: a tensor that cannot be written (not on the
// host) is written empty and the receiver reports it.
COROLLA_WIRE_MESSAGE(info_request)
COROLLA_WIRE_MESSAGE(server_info)
COROLLA_WIRE_MESSAGE(open_session)
COROLLA_WIRE_MESSAGE(session_opened)
COROLLA_WIRE_MESSAGE(step_request)
COROLLA_WIRE_MESSAGE(step_reply)
COROLLA_WIRE_MESSAGE(forward_request)
COROLLA_WIRE_MESSAGE(forward_reply)
COROLLA_WIRE_MESSAGE(backward_request)
COROLLA_WIRE_MESSAGE(backward_reply)
COROLLA_WIRE_MESSAGE(close_session)
COROLLA_WIRE_MESSAGE(ack)
COROLLA_WIRE_MESSAGE(bandwidth_probe)
COROLLA_WIRE_MESSAGE(wire_chunk)

}  // namespace corolla
