@0xd1f0a6c28b3e5947;
# Requests and replies between clients and servers. Each CAF message that crosses processes is one of these
# structs, written once and read in place on arrival; tensors inside them are views into the received bytes.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("corolla::wire");

using import "tensor.capnp".Tensor;

struct InfoRequest {}

struct ServerInfo {
  version @0 :Text;
  model @1 :Text;          # model name (from its metadata or directory)
  publicName @2 :Text;
  address @3 :Text;        # HOST:PORT where the server's gate is published
  firstBlock @4 :Int64;    # hosted span [firstBlock, lastBlock)
  lastBlock @5 :Int64;
  totalBlocks @6 :Int64;
  dtype @7 :Text;
  device @8 :Text;
  cacheTokensLeft @9 :Int64;  # KV-cache tokens per hosted block still free
  throughput @10 :Float64;    # tokens/s per hosted block the server offers the swarm (what balancing sums)
  hiddenSize @11 :Int64;
  sessions @12 :Int64;
  state @13 :Text;            # "joining", "online" or "offline" (as announced in the DHT)
  pings @14 :List(Ping);      # measured round trips to servers of the next blocks (routing input)
  inferenceRps @15 :Float64;  # measured tokens/s of one block in single-token steps with a KV cache; 0 = unknown
  forwardRps @16 :Float64;    # measured tokens/s of one block on 1024-token batches without a cache; 0 = unknown
  networkRps @17 :Float64;    # tokens/s of hidden states the network carries (measured bandwidth); 0 = unknown
  adapters @18 :List(Text);   # LoRA adapters loaded (requests name one to apply it)
  owner @19 :Text;            # the server's Ed25519 public key, hex (in a DHT record: the key that signed it)
  kvDtype @20 :Text;          # its KV caches' dtype: "f32" or "f16" ("" from servers that do not say: f32)
}

struct Ping {
  address @0 :Text;
  rttMs @1 :Float64;          # smoothed (EWMA) round-trip time of an info request, milliseconds
}

struct OpenSession {
  maxLength @0 :Int64;
  batch @1 :Int64;
  # The blocks of the server's span this session runs, [firstBlock, lastBlock); both 0 = the whole span.
  firstBlock @2 :Int64;
  lastBlock @3 :Int64;
  adapter @4 :Text;               # LoRA adapter applied to every step ("" = none)
  # Deep prompts for these blocks, [blocks, batch, promptLen, hidden] (absent: none): before each block, a token
  # at position p < promptLen gets prompts[block, sequence, p] added (Petals' deep prompt tuning at inference).
  prompts @5 :Tensor;
  # Random bytes (at most 64) the server signs with its identity key in the reply: the client learns that the
  # server at this address holds the key its DHT records name.
  challenge @6 :Data;
}

struct SessionOpened {
  sessionId @0 :UInt64;
  cacheTokensLeft @1 :Int64;
  owner @2 :Text;                  # the server's Ed25519 public key, hex ("" for a server without one)
  proof @3 :Data;                  # its signature of the challenge (actors/trust/identity_proof.hpp)
}

# One further server of a server-to-server (push) route.
struct RouteHop {
  address @0 :Text;
  sessionId @1 :UInt64;
}

struct StepRequest {
  sessionId @0 :UInt64;
  stepId @1 :UInt64;
  hidden @2 :Tensor;              # [batch, tokens, hidden]
  positions @3 :List(Int32);      # one per token, batch-major
  next @4 :List(RouteHop);        # push mode: where the output goes next; empty = reply to the requester
  hypoIds @5 :List(Int32);        # beam search: sequence b continues sequence hypoIds[b]; empty = each its own
}

struct StepReply {
  sessionId @0 :UInt64;
  stepId @1 :UInt64;
  hidden @2 :Tensor;
}

# The stateless forward (training, Petals' rpc_forward): no session, no cache; each sequence attends to its own
# tokens. Optional deep prompts [blocks, batch, promptLen, hidden] are added to the first promptLen positions
# before each block.
struct ForwardRequest {
  hidden @0 :Tensor;
  positions @1 :List(Int32);
  prompts @2 :Tensor;             # absent: none
  firstBlock @3 :Int64;           # the blocks to run, [firstBlock, lastBlock); both 0 = the whole span
  lastBlock @4 :Int64;
  adapter @5 :Text;               # LoRA adapter to apply ("" = none)
  stream @6 :UInt64;              # nonzero: the content came as the StreamChunks of this stream (see there)
  challenge @7 :Data;             # random bytes the server signs in its reply (as in OpenSession; empty: none)
}

struct ForwardReply {
  hidden @0 :Tensor;
  stream @1 :UInt64;
  owner @2 :Text;                 # the server's public key (hex), with a proof when the request had a challenge
  proof @3 :Data;
}

# The stateless backward (Petals' rpc_backward): the server recomputes the forward from `hidden` (the blocks'
# input the client kept), then returns the gradients of that input and of the prompts.
struct BackwardRequest {
  hidden @0 :Tensor;              # [batch, tokens, hidden]: the input of the first block
  gradOutput @1 :Tensor;          # gradient of the last block's output, same shape
  positions @2 :List(Int32);
  prompts @3 :Tensor;             # absent: none
  firstBlock @4 :Int64;
  lastBlock @5 :Int64;
  adapter @6 :Text;
  stream @7 :UInt64;
}

struct BackwardReply {
  gradInput @0 :Tensor;
  gradPrompts @1 :Tensor;         # absent when the request had no prompts
  stream @2 :UInt64;
}

# A large message (a forward or backward request or reply above the streaming threshold) crosses processes as a
# stream: its flat Cap'n Proto bytes cut into StreamChunks sent in order, then the message itself, empty but for
# `stream` naming them, which the receiver replaces by the message the chunks reassemble. Streams are numbered
# by their sender; `total` (the whole message's bytes) is the same in every chunk.
struct StreamChunk {
  stream @0 :UInt64;
  offset @1 :UInt64;              # where this chunk's bytes start in the message
  total @2 :UInt64;
  data @3 :Data;
}

struct CloseSession {
  sessionId @0 :UInt64;
}

struct Ack {}

# A payload sent to a peer to measure the bandwidth between them; answered with an Ack once it has arrived.
struct BandwidthProbe {
  payload @0 :Data;
}
