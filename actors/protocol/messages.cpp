#include "actors/protocol/messages.hpp"

#include "actors/protocol/wire_codec.hpp"
#include "actors/protocol/wire_tensor.hpp"
#include "schema/server.capnp.h"

namespace corolla {
namespace {

using wire_codec::fill_root;
using wire_codec::parse;

template <class Builder>
void put_tensor(Builder b, const Tensor& t, capnp::Orphanage o) {
  try {
    write_tensor(b, t, o);
  } catch (const std::exception&) {
    // A device tensor here is a bug on the sending side; the receiver sees an empty tensor and says so.
  }
}

void put_positions(capnp::List<int32_t>::Builder b, const std::vector<int32_t>& p) {
  for (unsigned i = 0; i < p.size(); ++i) b.set(i, p[i]);
}

std::vector<int32_t> get_positions(capnp::List<int32_t>::Reader r) {
  std::vector<int32_t> out;
  out.reserve(r.size());
  for (int32_t p : r) out.push_back(p);
  return out;
}

}  // namespace

void fill(const info_request&, capnp::MessageBuilder& mb) {
  fill_root<wire::InfoRequest>(mb, [](auto, auto) {});
}
void decode(std::shared_ptr<std::vector<char>> bytes, info_request& x) {
  parse<wire::InfoRequest>(std::move(bytes), x.wire_error, [](auto, auto&) {});
}

void fill(const server_info& x, capnp::MessageBuilder& mb) {
  fill_root<wire::ServerInfo>(mb, [&](wire::ServerInfo::Builder b, auto) {
    b.setVersion(x.version);
    b.setModel(x.model);
    b.setPublicName(x.public_name);
    b.setAddress(x.address);
    b.setFirstBlock(x.first_block);
    b.setLastBlock(x.last_block);
    b.setTotalBlocks(x.total_blocks);
    b.setDtype(x.dtype);
    b.setDevice(x.device);
    b.setKvDtype(x.kv_dtype);
    b.setCacheTokensLeft(x.cache_tokens_left);
    b.setThroughput(x.throughput);
    b.setHiddenSize(x.hidden_size);
    b.setSessions(x.sessions);
    b.setState(x.state);
    auto pings = b.initPings(static_cast<unsigned>(x.pings.size()));
    for (unsigned i = 0; i < x.pings.size(); ++i) {
      pings[i].setAddress(x.pings[i].first);
      pings[i].setRttMs(x.pings[i].second);
    }
    auto adapters = b.initAdapters(static_cast<unsigned>(x.adapters.size()));
    for (unsigned i = 0; i < x.adapters.size(); ++i) adapters.set(i, x.adapters[i]);
    b.setInferenceRps(x.inference_rps);
    b.setForwardRps(x.forward_rps);
    b.setNetworkRps(x.network_rps);
    b.setOwner(x.owner);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, server_info& x) {
  parse<wire::ServerInfo>(std::move(bytes), x.wire_error, [&](wire::ServerInfo::Reader r, auto&) {
    x.version = r.getVersion();
    x.model = r.getModel();
    x.public_name = r.getPublicName();
    x.address = r.getAddress();
    x.first_block = r.getFirstBlock();
    x.last_block = r.getLastBlock();
    x.total_blocks = r.getTotalBlocks();
    x.dtype = r.getDtype();
    x.device = r.getDevice();
    x.kv_dtype = r.getKvDtype();
    x.cache_tokens_left = r.getCacheTokensLeft();
    x.throughput = r.getThroughput();
    x.hidden_size = r.getHiddenSize();
    x.sessions = r.getSessions();
    x.state = r.getState();
    for (auto p : r.getPings()) x.pings.emplace_back(p.getAddress(), p.getRttMs());
    for (auto a : r.getAdapters()) x.adapters.emplace_back(a);
    x.inference_rps = r.getInferenceRps();
    x.forward_rps = r.getForwardRps();
    x.network_rps = r.getNetworkRps();
    x.owner = r.getOwner();
  });
}

void fill(const open_session& x, capnp::MessageBuilder& mb) {
  fill_root<wire::OpenSession>(mb, [&](wire::OpenSession::Builder b, capnp::Orphanage o) {
    b.setMaxLength(x.max_length);
    b.setBatch(x.batch);
    b.setFirstBlock(x.first_block);
    b.setLastBlock(x.last_block);
    b.setAdapter(x.adapter);
    if (x.prompts.defined() && x.prompts.numel() > 0) put_tensor(b.initPrompts(), x.prompts, o);
    b.setChallenge(kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.challenge.data()), x.challenge.size()));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, open_session& x) {
  parse<wire::OpenSession>(std::move(bytes), x.wire_error, [&](wire::OpenSession::Reader r, auto& keep) {
    x.max_length = r.getMaxLength();
    x.batch = r.getBatch();
    x.first_block = r.getFirstBlock();
    x.last_block = r.getLastBlock();
    x.adapter = r.getAdapter();
    if (r.hasPrompts()) x.wire_error = read_tensor(r.getPrompts(), keep, "prompts", x.prompts);
    const auto challenge = r.getChallenge();
    x.challenge.assign(reinterpret_cast<const char*>(challenge.begin()), challenge.size());
  });
}

void fill(const session_opened& x, capnp::MessageBuilder& mb) {
  fill_root<wire::SessionOpened>(mb, [&](wire::SessionOpened::Builder b, auto) {
    b.setSessionId(x.session_id);
    b.setCacheTokensLeft(x.cache_tokens_left);
    b.setOwner(x.owner);
    b.setProof(kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.proof.data()), x.proof.size()));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, session_opened& x) {
  parse<wire::SessionOpened>(std::move(bytes), x.wire_error, [&](wire::SessionOpened::Reader r, auto&) {
    x.session_id = r.getSessionId();
    x.cache_tokens_left = r.getCacheTokensLeft();
    x.owner = r.getOwner();
    const auto proof = r.getProof();
    x.proof.assign(reinterpret_cast<const char*>(proof.begin()), proof.size());
  });
}

void fill(const step_request& x, capnp::MessageBuilder& mb) {
  fill_root<wire::StepRequest>(mb, [&](wire::StepRequest::Builder b, capnp::Orphanage o) {
    b.setSessionId(x.session_id);
    b.setStepId(x.step_id);
    put_tensor(b.initHidden(), x.hidden, o);
    put_positions(b.initPositions(static_cast<unsigned>(x.positions.size())), x.positions);
    auto next = b.initNext(static_cast<unsigned>(x.next.size()));
    for (unsigned i = 0; i < x.next.size(); ++i) {
      next[i].setAddress(x.next[i].address);
      next[i].setSessionId(x.next[i].session_id);
    }
    put_positions(b.initHypoIds(static_cast<unsigned>(x.hypo_ids.size())), x.hypo_ids);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, step_request& x) {
  parse<wire::StepRequest>(std::move(bytes), x.wire_error, [&](wire::StepRequest::Reader r, auto& keep) {
    x.session_id = r.getSessionId();
    x.step_id = r.getStepId();
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
    x.positions = get_positions(r.getPositions());
    for (auto hop : r.getNext()) x.next.push_back({hop.getAddress(), hop.getSessionId()});
    x.hypo_ids = get_positions(r.getHypoIds());
  });
}

void fill(const step_reply& x, capnp::MessageBuilder& mb) {
  fill_root<wire::StepReply>(mb, [&](wire::StepReply::Builder b, capnp::Orphanage o) {
    b.setSessionId(x.session_id);
    b.setStepId(x.step_id);
    put_tensor(b.initHidden(), x.hidden, o);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, step_reply& x) {
  parse<wire::StepReply>(std::move(bytes), x.wire_error, [&](wire::StepReply::Reader r, auto& keep) {
    x.session_id = r.getSessionId();
    x.step_id = r.getStepId();
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
  });
}

void fill(const forward_request& x, capnp::MessageBuilder& mb) {
  fill_root<wire::ForwardRequest>(mb, [&](wire::ForwardRequest::Builder b, capnp::Orphanage o) {
    put_tensor(b.initHidden(), x.hidden, o);
    put_positions(b.initPositions(static_cast<unsigned>(x.positions.size())), x.positions);
    if (x.prompts.defined() && x.prompts.numel() > 0) put_tensor(b.initPrompts(), x.prompts, o);
    b.setFirstBlock(x.first_block);
    b.setLastBlock(x.last_block);
    b.setAdapter(x.adapter);
    b.setStream(x.stream);
    b.setChallenge(kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.challenge.data()), x.challenge.size()));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, forward_request& x) {
  parse<wire::ForwardRequest>(std::move(bytes), x.wire_error, [&](wire::ForwardRequest::Reader r, auto& keep) {
    x.stream = r.getStream();
    if (x.stream != 0) return;  // the content is in the stream's chunks
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
    x.positions = get_positions(r.getPositions());
    if (x.wire_error.empty() && r.hasPrompts()) x.wire_error = read_tensor(r.getPrompts(), keep, "prompts", x.prompts);
    x.first_block = r.getFirstBlock();
    x.last_block = r.getLastBlock();
    x.adapter = r.getAdapter();
    const auto challenge = r.getChallenge();
    x.challenge.assign(reinterpret_cast<const char*>(challenge.begin()), challenge.size());
  });
}

void fill(const forward_reply& x, capnp::MessageBuilder& mb) {
  fill_root<wire::ForwardReply>(mb, [&](wire::ForwardReply::Builder b, capnp::Orphanage o) {
    put_tensor(b.initHidden(), x.hidden, o);
    b.setStream(x.stream);
    b.setOwner(x.owner);
    b.setProof(kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.proof.data()), x.proof.size()));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, forward_reply& x) {
  parse<wire::ForwardReply>(std::move(bytes), x.wire_error, [&](wire::ForwardReply::Reader r, auto& keep) {
    x.stream = r.getStream();
    if (x.stream != 0) return;  // the content is in the stream's chunks
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
    x.owner = r.getOwner();
    const auto proof = r.getProof();
    x.proof.assign(reinterpret_cast<const char*>(proof.begin()), proof.size());
  });
}

void fill(const backward_request& x, capnp::MessageBuilder& mb) {
  fill_root<wire::BackwardRequest>(mb, [&](wire::BackwardRequest::Builder b, capnp::Orphanage o) {
    put_tensor(b.initHidden(), x.hidden, o);
    put_tensor(b.initGradOutput(), x.grad_output, o);
    put_positions(b.initPositions(static_cast<unsigned>(x.positions.size())), x.positions);
    if (x.prompts.defined() && x.prompts.numel() > 0) put_tensor(b.initPrompts(), x.prompts, o);
    b.setFirstBlock(x.first_block);
    b.setLastBlock(x.last_block);
    b.setAdapter(x.adapter);
    b.setStream(x.stream);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, backward_request& x) {
  parse<wire::BackwardRequest>(std::move(bytes), x.wire_error, [&](wire::BackwardRequest::Reader r, auto& keep) {
    x.stream = r.getStream();
    if (x.stream != 0) return;
    x.wire_error = read_tensor(r.getHidden(), keep, "hidden", x.hidden);
    if (x.wire_error.empty()) x.wire_error = read_tensor(r.getGradOutput(), keep, "grad_output", x.grad_output);
    x.positions = get_positions(r.getPositions());
    if (x.wire_error.empty() && r.hasPrompts()) x.wire_error = read_tensor(r.getPrompts(), keep, "prompts", x.prompts);
    x.first_block = r.getFirstBlock();
    x.last_block = r.getLastBlock();
    x.adapter = r.getAdapter();
  });
}

void fill(const backward_reply& x, capnp::MessageBuilder& mb) {
  fill_root<wire::BackwardReply>(mb, [&](wire::BackwardReply::Builder b, capnp::Orphanage o) {
    put_tensor(b.initGradInput(), x.grad_input, o);
    if (x.grad_prompts.defined() && x.grad_prompts.numel() > 0) put_tensor(b.initGradPrompts(), x.grad_prompts, o);
    b.setStream(x.stream);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, backward_reply& x) {
  parse<wire::BackwardReply>(std::move(bytes), x.wire_error, [&](wire::BackwardReply::Reader r, auto& keep) {
    x.stream = r.getStream();
    if (x.stream != 0) return;
    x.wire_error = read_tensor(r.getGradInput(), keep, "grad_input", x.grad_input);
    if (x.wire_error.empty() && r.hasGradPrompts())
      x.wire_error = read_tensor(r.getGradPrompts(), keep, "grad_prompts", x.grad_prompts);
  });
}

void fill(const close_session& x, capnp::MessageBuilder& mb) {
  fill_root<wire::CloseSession>(mb, [&](wire::CloseSession::Builder b, auto) { b.setSessionId(x.session_id); });
}
void decode(std::shared_ptr<std::vector<char>> bytes, close_session& x) {
  parse<wire::CloseSession>(std::move(bytes), x.wire_error,
                            [&](wire::CloseSession::Reader r, auto&) { x.session_id = r.getSessionId(); });
}

void fill(const ack&, capnp::MessageBuilder& mb) {
  fill_root<wire::Ack>(mb, [](auto, auto) {});
}
void decode(std::shared_ptr<std::vector<char>> bytes, ack& x) {
  parse<wire::Ack>(std::move(bytes), x.wire_error, [](auto, auto&) {});
}

void fill(const bandwidth_probe& x, capnp::MessageBuilder& mb) {
  fill_root<wire::BandwidthProbe>(mb, [&](wire::BandwidthProbe::Builder b, capnp::Orphanage o) {
    // Referenced, not copied into the builder (as tensors are).
    b.adoptPayload(o.referenceExternalData(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(x.payload.data()), x.payload.size())));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, bandwidth_probe& x) {
  // The receiver only needs to know the bytes arrived: they are checked, not copied out.
  parse<wire::BandwidthProbe>(std::move(bytes), x.wire_error,
                              [&](wire::BandwidthProbe::Reader r, auto&) { x.received = r.getPayload().size(); });
}

void fill(const wire_chunk& x, capnp::MessageBuilder& mb) {
  fill_root<wire::StreamChunk>(mb, [&](wire::StreamChunk::Builder b, capnp::Orphanage o) {
    b.setStream(x.stream);
    b.setOffset(x.offset);
    b.setTotal(x.total);
    // Referenced, not copied into the builder: the bytes go from the message's own memory into CAF's serializer.
    b.adoptData(o.referenceExternalData(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(x.data), x.size)));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, wire_chunk& x) {
  parse<wire::StreamChunk>(std::move(bytes), x.wire_error, [&](wire::StreamChunk::Reader r, auto& keep) {
    x.stream = r.getStream();
    x.offset = r.getOffset();
    x.total = r.getTotal();
    auto data = r.getData();
    x.data = reinterpret_cast<const char*>(data.begin());
    x.size = data.size();
    x.keep = keep;
  });
}

COROLLA_WIRE_CODEC(info_request)
COROLLA_WIRE_CODEC(server_info)
COROLLA_WIRE_CODEC(open_session)
COROLLA_WIRE_CODEC(session_opened)
COROLLA_WIRE_CODEC(step_request)
COROLLA_WIRE_CODEC(step_reply)
COROLLA_WIRE_CODEC(forward_request)
COROLLA_WIRE_CODEC(forward_reply)
COROLLA_WIRE_CODEC(backward_request)
COROLLA_WIRE_CODEC(backward_reply)
COROLLA_WIRE_CODEC(close_session)
COROLLA_WIRE_CODEC(ack)
COROLLA_WIRE_CODEC(bandwidth_probe)
COROLLA_WIRE_CODEC(wire_chunk)

}  // namespace corolla
